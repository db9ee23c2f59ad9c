//! `kubectl port-forward` to a collector pod's metrics, end to end: the real kubectl, the real
//! kube-apiserver (which authenticates to the node agent's kubelet port with its kubelet client
//! certificate and proxies the upgrade), and the node agent's SPDY/3.1 port-forward server,
//! which connects to the pod's IP.
//!
//! Needs `e2e/stack up && eval "$(e2e/stack env)"` (KUBECONFIG, TRACEHOUSE_COLLECTOR_IMAGE,
//! KAFKA_BROKERS, CLICKHOUSE_*) and `kubectl` on the PATH. The namespace is deleted at the end,
//! pass or fail; the pod consumes a topic nobody writes and waits for a table that is never made.
#![cfg(feature = "stack-tests")]

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tracehouse_e2e::k8s::{client, collector_image, http_get, pod_ready, wait_for, with_namespace};
use tracehouse_e2e::{stack_var, unique_name};

const METRICS_PORT: u16 = 8888;
/// A port the collector does not listen on.
const CLOSED_PORT: u16 = 9999;

/// A plain Pod of the collector image serving its metrics on `$POD_IP:8888` (pods share the
/// host network here, each on its own loopback IP), ready once that port accepts connections.
fn collector_pod(name: &str) -> Pod {
    let unique = unique_name("pf");
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "collector",
                "image": collector_image(),
                "args": [
                    "run",
                    format!("--metrics-addr=$(POD_IP):{METRICS_PORT}"),
                    format!("--topic={unique}"),
                    format!("--group-id={unique}"),
                    format!("--table={unique}"),
                ],
                "env": [
                    { "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } },
                    { "name": "KAFKA_BROKERS", "value": stack_var("KAFKA_BROKERS") },
                    { "name": "CLICKHOUSE_URL", "value": stack_var("CLICKHOUSE_URL") },
                    { "name": "CLICKHOUSE_USER", "value": stack_var("CLICKHOUSE_USER") },
                    { "name": "CLICKHOUSE_PASSWORD", "value": stack_var("CLICKHOUSE_PASSWORD") },
                ],
                "ports": [{ "name": "metrics", "containerPort": METRICS_PORT }],
                "readinessProbe": { "tcpSocket": { "port": METRICS_PORT }, "periodSeconds": 1 }
            }]
        }
    }))
    .unwrap()
}

/// Appends everything `from` yields to `into`, line by line.
fn collect(from: impl AsyncRead + Unpin + Send + 'static, into: Arc<Mutex<String>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(from).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut s = into.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
}

/// A running `kubectl port-forward` with a local port of kubectl's choosing.
struct PortForward {
    child: Child,
    local_port: u16,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl PortForward {
    /// Starts `kubectl port-forward --address ADDRESS pod/POD :REMOTE` and waits for its
    /// `Forwarding from ADDRESS:PORT -> REMOTE` line. `websockets: false` makes kubectl speak
    /// SPDY to the API server instead of tunnelling it through a WebSocket (its default).
    async fn start(ns: &str, pod: &str, address: &str, remote: u16, websockets: bool) -> Self {
        let mut child = Command::new("kubectl")
            .args([
                "--kubeconfig",
                &stack_var("KUBECONFIG"),
                "-n",
                ns,
                "port-forward",
            ])
            .args([
                "--address",
                address,
                &format!("pod/{pod}"),
                &format!(":{remote}"),
            ])
            .env(
                "KUBECTL_PORT_FORWARD_WEBSOCKETS",
                if websockets { "true" } else { "false" },
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("kubectl must be on the PATH (the stack's scripts use it too)");
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        collect(child.stdout.take().unwrap(), stdout.clone());
        collect(child.stderr.take().unwrap(), stderr.clone());
        let shown = if address.contains(':') {
            format!("[{address}]")
        } else {
            address.to_owned()
        };
        let prefix = format!("Forwarding from {shown}:");
        let local_port = wait_for(
            &format!("kubectl port-forward to {pod}:{remote} on {address}"),
            Duration::from_secs(20),
            || {
                let out = stdout.lock().unwrap().clone();
                let port = out
                    .lines()
                    .find_map(|l| l.strip_prefix(&prefix)?.split_once(" -> ")?.0.parse().ok());
                let found = port
                    .ok_or_else(|| format!("stdout {out:?}, stderr {:?}", stderr.lock().unwrap()));
                async move { found }
            },
        )
        .await;
        Self {
            child,
            local_port,
            stdout,
            stderr,
        }
    }

    fn output(&self) -> String {
        format!(
            "stdout:\n{}stderr:\n{}",
            self.stdout.lock().unwrap(),
            self.stderr.lock().unwrap()
        )
    }
}

/// `GET /metrics` through a forward on `address`, which must answer with the collector's
/// metric families.
async fn metrics_through(ns: &str, address: &str, websockets: bool) {
    let pf = PortForward::start(ns, "collector", address, METRICS_PORT, websockets).await;
    let (code, body) = http_get(address, pf.local_port, "/metrics")
        .await
        .unwrap_or_else(|e| panic!("GET /metrics through {address}: {e}\n{}", pf.output()));
    assert_eq!(code, 200, "{body}\n{}", pf.output());
    for family in [
        "# TYPE tracehouse_records_skipped counter",
        "# TYPE tracehouse_process_resident_memory_bytes gauge",
    ] {
        assert!(body.contains(family), "no {family:?} in:\n{body}");
    }
}

#[tokio::test]
async fn kubectl_port_forward_reaches_a_collector_pods_metrics() {
    let start = Instant::now();
    with_namespace(client().await, "pf", |client, ns| async move {
        let pods: Api<Pod> = Api::namespaced(client, &ns);
        pods.create(&PostParams::default(), &collector_pod("collector"))
            .await
            .expect("creating the collector pod");
        let pod = wait_for("the collector pod to be Ready", Duration::from_secs(60), || {
            let pods = pods.clone();
            async move {
                let pod = pods.get("collector").await.map_err(|e| e.to_string())?;
                if pod_ready(&pod) {
                    Ok(pod)
                } else {
                    Err(format!("{:?}", pod.status))
                }
            }
        })
        .await;
        let uid = pod.metadata.uid.clone().unwrap();
        let pod_ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();

        // kubectl's WebSocket transport (the API server translates it to SPDY for the node),
        // on an IPv4 and an IPv6 local address, then its SPDY fallback.
        metrics_through(&ns, "127.0.0.1", true).await;
        metrics_through(&ns, "::1", true).await;
        metrics_through(&ns, "127.0.0.1", false).await;

        // Nothing listens on the pod's CLOSED_PORT: the node agent says so on the error stream,
        // in the kubelet's words; kubectl reports it and gives up the connection.
        let mut pf = PortForward::start(&ns, "collector", "127.0.0.1", CLOSED_PORT, true).await;
        let answer = http_get("127.0.0.1", pf.local_port, "/").await;
        assert!(answer.is_err(), "a closed port answered {answer:?}");
        let status = tokio::time::timeout(Duration::from_secs(20), pf.child.wait())
            .await
            .unwrap_or_else(|_| panic!("kubectl kept running after the error:\n{}", pf.output()))
            .unwrap();
        let want = format!(
            "an error occurred forwarding {} -> {CLOSED_PORT}: error forwarding port {CLOSED_PORT} to pod collector_{ns}, uid {uid}: failed to connect to {pod_ip}:{CLOSED_PORT}",
            pf.local_port
        );
        // kubectl's stderr may still be draining after it exited.
        wait_for("kubectl's error output", Duration::from_secs(5), || {
            let out = pf.output();
            let ok = out.contains(&want) && out.contains("Connection refused");
            async move { if ok { Ok(()) } else { Err(out) } }
        })
        .await;
        assert!(!status.success(), "kubectl exits non-zero: {}", pf.output());
        eprintln!("kubectl, forwarding to a closed port:\n{}", pf.output());

        // The node agent is still serving: the next forward works.
        metrics_through(&ns, "127.0.0.1", true).await;
    })
    .await;
    eprintln!("port-forward test took {:?}", start.elapsed());
}
