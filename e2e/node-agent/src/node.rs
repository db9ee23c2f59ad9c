//! The Node object of this agent: registration, the Ready condition and its heartbeat
//! (node status and a Lease in `kube-node-lease`, as the kubelet does).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use tokio_util::sync::CancellationToken;

use crate::ctx::Ctx;

const FIELD_MANAGER: &str = "tracehouse-node-agent";
const HEARTBEAT: Duration = Duration::from_secs(10);
const LEASE_SECONDS: i32 = 40;
/// Taints the API server puts on a new node until a node controller sees it Ready; there is no
/// node lifecycle controller here, so the agent, which knows the node is ready, removes them.
const STARTUP_TAINTS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// Whether the node is registered and its last heartbeat went through (`/readyz`).
#[derive(Debug, Default)]
pub struct NodeHealth(AtomicBool);

impl NodeHealth {
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }
}

/// Creates the Node if needed, clears the startup taints and reports it Ready.
pub async fn register(ctx: &Ctx) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let labels = labels(&ctx.node_name);
    match nodes.get_opt(&ctx.node_name).await? {
        None => {
            let node = Node {
                metadata: ObjectMeta {
                    name: Some(ctx.node_name.clone()),
                    labels: Some(labels),
                    ..Default::default()
                },
                ..Default::default()
            };
            match nodes.create(&PostParams::default(), &node).await {
                Ok(_) => tracing::info!(node = %ctx.node_name, "node registered"),
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        Some(_) => {
            let patch = serde_json::json!({ "metadata": { "labels": labels } });
            nodes
                .patch(
                    &ctx.node_name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
        }
    }
    let node = nodes.get(&ctx.node_name).await?;
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    if taints
        .iter()
        .any(|t| STARTUP_TAINTS.contains(&t.key.as_str()))
    {
        let kept: Vec<_> = taints
            .into_iter()
            .filter(|t| !STARTUP_TAINTS.contains(&t.key.as_str()))
            .collect();
        let patch = serde_json::json!({ "spec": { "taints": kept } });
        nodes
            .patch(
                &ctx.node_name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    report(
        ctx,
        true,
        "KubeletReady",
        "tracehouse-node-agent is posting ready status",
    )
    .await
}

/// Renews the Lease and the node status every [`HEARTBEAT`] until `shutdown`.
pub async fn heartbeat(ctx: Arc<Ctx>, health: Arc<NodeHealth>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(HEARTBEAT);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let result = async {
            renew_lease(&ctx).await?;
            report(
                &ctx,
                true,
                "KubeletReady",
                "tracehouse-node-agent is posting ready status",
            )
            .await
        }
        .await;
        match result {
            Ok(()) => health.set(true),
            Err(e) => {
                tracing::warn!(error = %e, "node heartbeat failed");
                health.set(false);
            }
        }
    }
}

/// Reports the node NotReady (the agent stops; its pods no longer run).
pub async fn mark_not_ready(ctx: &Ctx) {
    if let Err(e) = report(
        ctx,
        false,
        "NodeAgentStopped",
        "tracehouse-node-agent stopped",
    )
    .await
    {
        tracing::warn!(error = %e, "cannot mark the node NotReady");
    }
}

async fn renew_lease(ctx: &Ctx) -> Result<(), kube::Error> {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let node = nodes.get(&ctx.node_name).await?;
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: ctx.node_name.clone(),
        uid: node.meta().uid.clone().unwrap_or_default(),
        ..Default::default()
    };
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(ctx.node_name.clone()),
            namespace: Some("kube-node-lease".into()),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(ctx.node_name.clone()),
            lease_duration_seconds: Some(LEASE_SECONDS),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..Default::default()
        }),
    };
    leases
        .patch(
            &ctx.node_name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&lease),
        )
        .await?;
    Ok(())
}

async fn report(ctx: &Ctx, ready: bool, reason: &str, message: &str) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let previous = nodes.get_status(&ctx.node_name).await?.status;
    let status = node_status(
        ctx,
        ready,
        reason,
        message,
        previous.as_ref(),
        Timestamp::now(),
    );
    let patch = serde_json::json!({ "status": status });
    nodes
        .patch_status(
            &ctx.node_name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

pub fn labels(node: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), node.to_owned()),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), arch().to_owned()),
        ("tracehouse.dev/node-agent".to_owned(), "true".to_owned()),
    ])
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn node_status(
    ctx: &Ctx,
    ready: bool,
    reason: &str,
    message: &str,
    previous: Option<&NodeStatus>,
    now: Timestamp,
) -> NodeStatus {
    let condition = |type_: &str, status: bool, reason: &str, message: &str| {
        let status = if status { "True" } else { "False" }.to_owned();
        let transition = previous
            .and_then(|p| p.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
            .filter(|c| c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or(Time(now));
        NodeCondition {
            type_: type_.to_owned(),
            status,
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            last_heartbeat_time: Some(Time(now)),
            last_transition_time: Some(transition),
        }
    };
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let memory_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    let resources = BTreeMap::from([
        ("cpu".to_owned(), Quantity(cpus.to_string())),
        ("memory".to_owned(), Quantity(format!("{memory_kib}Ki"))),
        ("pods".to_owned(), Quantity(ctx.pod_capacity.to_string())),
    ]);
    let os_image = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_owned())
        })
        .unwrap_or_else(|| "Linux".to_owned());
    NodeStatus {
        conditions: Some(vec![
            condition(
                "MemoryPressure",
                false,
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            condition(
                "DiskPressure",
                false,
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            condition(
                "PIDPressure",
                false,
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            condition("Ready", ready, reason, message),
        ]),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: ctx.host_ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: ctx.node_name.clone(),
            },
        ]),
        daemon_endpoints: ctx.kubelet_port.map(|port| NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i32::from(port),
            }),
        }),
        capacity: Some(resources.clone()),
        allocatable: Some(resources),
        node_info: Some(NodeSystemInfo {
            architecture: arch().to_owned(),
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
            container_runtime_version: format!(
                "tracehouse-process://{}",
                env!("CARGO_PKG_VERSION")
            ),
            kernel_version: read_trimmed("/proc/sys/kernel/osrelease"),
            kube_proxy_version: String::new(),
            kubelet_version: ctx.kubelet_version.clone(),
            machine_id: read_trimmed("/etc/machine-id"),
            operating_system: "linux".to_owned(),
            os_image,
            system_uuid: read_trimmed("/etc/machine-id"),
            swap: None,
        }),
        ..Default::default()
    }
}
