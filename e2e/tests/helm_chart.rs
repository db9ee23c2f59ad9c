//! The Helm chart on the local cluster, end to end, with the images built from the current
//! build: `helm lint` and the `helm template` goldens; `helm uninstall` (operator gone, CRD,
//! pipelines and ClickHouse data kept); `helm install` with the sample TracePipeline →
//! operator pods from the operator image → collector pods from the collector image → spans
//! delivered exactly once; `helm upgrade` with a changed value rolls the operator; the operator
//! applies its CRD over an older one at start, and `helm rollback` (and the rolled-back
//! operator) leave a newer one as it is; with the operator uninstalled, a pipeline and a namespace
//! holding one still delete (no finalizer waits for it).
//!
//! The release is the stack's own (`tracehouse` in `tracehouse-system`: the CRD belongs to one
//! release), so the operator is briefly down while this runs; the test leaves the stack's
//! release installed as `e2e/stack up` makes it (k8s_operator_up), pass or fail.
//! Needs `e2e/stack up && eval "$(e2e/stack env)"`.
#![cfg(feature = "stack-tests")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::ApiResource;
use kube::{Api, Client, ResourceExt};
use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use serde_json::json;
use tracehouse_e2e::k8s::{client, collector_image, operator_image, pod_ready, wait_for};
use tracehouse_e2e::{
    kafka_admin, restore_stack_operator, run_repo_command, stack_var, unique_name,
};

const RELEASE: &str = "tracehouse";
const NAMESPACE: &str = "tracehouse-system";
const OPERATOR: &str = "tracehouse-operator";
const CRD: &str = "tracepipelines.tracehouse.dev";
const SPANS: u64 = 20_000;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `helm ARGS…` against the stack (its admin kubeconfig); the test fails on a non-zero exit.
fn helm(args: &[&str]) -> String {
    let mut all = vec![stack_var("TRACEHOUSE_HELM")];
    all.push("--kubeconfig".into());
    all.push(stack_var("KUBECONFIG"));
    all.extend(args.iter().map(|a| (*a).to_owned()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    run_repo_command(&refs)
}

/// A binary of the workspace's last build (`e2e/test` builds them all before the tests).
fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/debug/deps/helm_chart-… → target/debug/<name>
    exe.parent()
        .and_then(Path::parent)
        .map(|d| d.join(name))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} is not built next to {}: cargo build --workspace --bins",
                exe.display()
            )
        })
}

fn tracepipelines(client: &Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("tracehouse.dev", "v1alpha1", "TracePipeline");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

/// The operator's pods that are Ready and not terminating, by name.
async fn ready_operator_pods(client: &Client) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    pods.list(&ListParams::default().labels("app.kubernetes.io/name=tracehouse-operator"))
        .await
        .expect("listing operator pods")
        .items
        .into_iter()
        .filter(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// `helm uninstall` of the stack's release, then waits until the operator Deployment is gone.
async fn uninstall(deployments: &Api<Deployment>) {
    helm(&[
        "uninstall",
        RELEASE,
        "-n",
        NAMESPACE,
        "--wait",
        "--timeout",
        "120s",
    ]);
    wait_for(
        "the operator Deployment to be gone",
        Duration::from_secs(60),
        || async {
            match deployments.get_opt(OPERATOR).await {
                Ok(None) => Ok(()),
                other => Err(format!("{:?}", other.map(|d| d.map(|d| d.status)))),
            }
        },
    )
    .await;
}

/// The image and image id the node agent reports for the pod's first container.
const CRD_REVISION: &str = "tracehouse.dev/crd-revision";

/// The revision written on the repository's CRD (`crds/tracepipelines.yaml`).
fn committed_crd_revision() -> u32 {
    let text = std::fs::read_to_string(repo().join("crds/tracepipelines.yaml")).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{CRD_REVISION}:")))
        .expect("crds/tracepipelines.yaml carries its revision");
    line.trim().trim_matches('\'').parse().unwrap()
}

/// Makes the cluster's CRD look like another release's: `revision` written (None: removed, as
/// the charts before revisions left it) and a marker category added.
async fn mark_crd(crds: &Api<CustomResourceDefinition>, revision: Option<u32>) {
    let patch = json!({
        "metadata": { "annotations": { CRD_REVISION: revision.map(|r| r.to_string()) } },
        "spec": { "names": { "categories": ["tracehouse", "tracehouse-e2e"] } },
    });
    crds.patch(CRD, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patching the CRD");
}

/// The repository's CRD applied over whatever the cluster holds.
fn restore_crd() {
    run_repo_command(&[
        "kubectl",
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        "crds/tracepipelines.yaml",
    ]);
}

async fn operator_pod_names(client: &Client) -> Vec<String> {
    ready_operator_pods(client)
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect()
}

/// Waits until two Ready operator pods run and none of them is one of `before`.
async fn wait_for_new_operator_pods(client: &Client, before: &[String]) {
    wait_for(
        "the operator rolled to new pods",
        Duration::from_secs(120),
        || async {
            let names = operator_pod_names(client).await;
            if names.len() == 2 && names.iter().all(|n| !before.contains(n)) {
                Ok(())
            } else {
                Err(format!("{names:?} (before: {before:?})"))
            }
        },
    )
    .await;
}

fn pod_image(pod: &Pod) -> (String, String) {
    let cs = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .expect("container status");
    (cs.image.clone(), cs.image_id.clone())
}

#[test]
fn chart_lints_and_renders_its_goldens() {
    run_repo_command(&[
        &stack_var("TRACEHOUSE_HELM"),
        "lint",
        "--strict",
        "charts/tracehouse",
    ]);
    // The goldens, config/ and the chart's copies of crds/ and config/rbac/role.yaml.
    run_repo_command(&["charts/gen", "--check"]);
    // The strict schema refuses an unknown value, naming it.
    let out = std::process::Command::new(stack_var("TRACEHOUSE_HELM"))
        .args([
            "template",
            "x",
            "charts/tracehouse",
            "--kube-version",
            "1.36.0",
            "--set",
            "replicas=3",
        ])
        .current_dir(repo())
        .output()
        .expect("helm template");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("additional properties 'replicas' not allowed"),
        "{err}"
    );
}

#[tokio::test]
async fn helm_uninstall_install_upgrade_on_the_local_cluster() {
    let client = client().await;
    let name = unique_name("chart").replace('_', "-").to_lowercase();
    let topic = name.replace('-', "_");
    let database = topic.clone();
    let work = std::env::temp_dir().join(&name);
    std::fs::create_dir_all(&work).unwrap();

    let outcome = std::panic::AssertUnwindSafe(scenario(&client, &name, &topic, &database, &work))
        .catch_unwind()
        .await;

    // Whatever happened: the stack's release back as `e2e/stack up` installs it, then the
    // sample pipeline (if step 8 did not get there) and its namespace of step 7 deleted,
    // topic and database dropped.
    let restored = std::panic::catch_unwind(|| {
        restore_crd();
        restore_stack_operator();
    });
    if let Err(e) = tracepipelines(&client, "default")
        .delete(&name, &DeleteParams::default())
        .await
    {
        eprintln!("cleanup: cannot delete TracePipeline default/{name}: {e}");
    }
    let gone = std::panic::AssertUnwindSafe(wait_for(
        "the sample pipeline to be deleted",
        Duration::from_secs(60),
        || async {
            match tracepipelines(&client, "default").get_opt(&name).await {
                Ok(None) => Ok(()),
                other => Err(format!(
                    "{:?}",
                    other.map(|o| o.map(|o| o.metadata.finalizers))
                )),
            }
        },
    ))
    .catch_unwind()
    .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if let Ok(Some(_)) = namespaces.get_opt(&format!("{name}-gone")).await {
        let _ = namespaces
            .delete(&format!("{name}-gone"), &DeleteParams::default())
            .await;
    }
    tracehouse_e2e::delete_topics(&[&topic]).await;
    tracehouse_e2e::drop_database(&database).await;
    let _ = std::fs::remove_dir_all(&work);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    restored.expect("restoring the stack's operator release");
    gone.expect("the sample pipeline is cleaned up");
}

async fn scenario(client: &Client, name: &str, topic: &str, database: &str, work: &Path) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    assert!(
        helm(&["list", "-n", NAMESPACE, "-q"])
            .lines()
            .any(|l| l == RELEASE),
        "the stack installs the operator as helm release {NAMESPACE}/{RELEASE}"
    );

    // 1. helm uninstall: the operator goes; the CRD (resource-policy keep) stays.
    uninstall(&deployments).await;
    assert!(
        accounts.get_opt(OPERATOR).await.unwrap().is_none(),
        "ServiceAccount removed"
    );
    assert!(
        crds.get_opt(CRD).await.unwrap().is_some(),
        "uninstall keeps the CRD"
    );

    // 2. helm install with the sample TracePipeline (Kafka topic → a fresh database).
    kafka_admin()
        .create_topics(
            &[NewTopic::new(topic, 4, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .expect("create_topics")
        .into_iter()
        .for_each(|r| {
            r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
        });
    let values = work.join("values.json");
    std::fs::write(
        &values,
        json!({
            "sample": {
                "enabled": true,
                "name": name,
                "namespace": "default",
                "spec": {
                    "kafka": {
                        "bootstrapServers": stack_var("KAFKA_BROKERS"),
                        "topics": [topic],
                        "consumerGroup": name,
                        "encoding": "otlp_proto"
                    },
                    "clickhouse": {
                        "endpoint": stack_var("CLICKHOUSE_URL"),
                        "database": database,
                        "table": "otel_traces",
                        "credentials": { "name": "tracehouse-clickhouse" }
                    },
                    "collector": {
                        "batch": { "lingerMs": 500 },
                        "maxInflightBytes": 67108864,
                        "resources": { "requests": { "cpu": "100m", "memory": "128Mi" } }
                    },
                    "replicas": { "partitionsPerReplica": 2, "min": 1, "max": 2 }
                }
            }
        })
        .to_string(),
    )
    .unwrap();
    let values = values.display().to_string();
    helm(&[
        "install",
        RELEASE,
        "charts/tracehouse",
        "-n",
        NAMESPACE,
        "--create-namespace",
        "-f",
        "config/local/values.yaml",
        "-f",
        &values,
        "--wait",
        "--timeout",
        "180s",
    ]);
    let first = wait_for(
        "2 Ready operator pods",
        Duration::from_secs(120),
        || async {
            let pods = ready_operator_pods(client).await;
            if pods.len() == 2 {
                Ok(pods)
            } else {
                Err(format!("{} ready", pods.len()))
            }
        },
    )
    .await;
    for pod in &first {
        let (image, id) = pod_image(pod);
        assert_eq!(
            image,
            operator_image(),
            "{} runs the operator image",
            pod.name_any()
        );
        assert!(
            id.starts_with("sha256:"),
            "image id from local storage: {id}"
        );
    }

    // 3. The sample pipeline becomes Ready; its gateway pods run the collector image.
    let pipelines = tracepipelines(client, "default");
    wait_for(
        "the sample TracePipeline to be Ready",
        Duration::from_secs(240),
        || async {
            let tp = pipelines.get(name).await.map_err(|e| e.to_string())?;
            let ready = tp.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            if ready {
                Ok(())
            } else {
                Err(format!("{}", tp.data["status"]))
            }
        },
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let gateways = pods
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/instance={name},app.kubernetes.io/component=gateway"
        )))
        .await
        .expect("gateway pods")
        .items;
    assert!(!gateways.is_empty(), "the sample has gateway pods");
    for pod in &gateways {
        assert_eq!(
            pod_image(pod).0,
            collector_image(),
            "{} runs the collector image",
            pod.name_any()
        );
    }

    // 4. Spans through it, exactly once.
    let generator = format!("{name}-gen");
    let loadgen = workspace_bin("tracehouse-loadgen");
    let loadgen = loadgen.display().to_string();
    let spans = SPANS.to_string();
    run_repo_command(&[
        &loadgen,
        "produce",
        "--topic",
        topic,
        "--partitions",
        "4",
        "--spans",
        &spans,
        "--generator-id",
        &generator,
        "--seed",
        "12",
        "-q",
    ]);
    wait_for(
        "every span in ClickHouse exactly once",
        Duration::from_secs(180),
        || async {
            let out = std::process::Command::new(&loadgen)
                .args(["verify", "--database", database, "--table", "otel_traces"])
                .args(["--generator-id", &generator, "--expected", &spans])
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        },
    )
    .await;

    // 5. helm upgrade with a changed value rolls the operator: new pods replace the old ones.
    helm(&[
        "upgrade",
        RELEASE,
        "charts/tracehouse",
        "-n",
        NAMESPACE,
        "-f",
        "config/local/values.yaml",
        "-f",
        &values,
        "--set",
        "logLevel=debug",
        "--wait",
        "--timeout",
        "180s",
    ]);
    let old: Vec<String> = first.iter().map(ResourceExt::name_any).collect();
    wait_for(
        "the operator rolled to new pods",
        Duration::from_secs(120),
        || async {
            let pods = ready_operator_pods(client).await;
            let names: Vec<String> = pods.iter().map(ResourceExt::name_any).collect();
            let rolled = pods.len() == 2
                && names.iter().all(|n| !old.contains(n))
                && pods.iter().all(|p| {
                    p.spec.as_ref().unwrap().containers[0]
                        .env
                        .iter()
                        .flatten()
                        .any(|e| e.name == "RUST_LOG" && e.value.as_deref() == Some("debug"))
                });
            if rolled {
                Ok(())
            } else {
                Err(format!("{names:?} (before: {old:?})"))
            }
        },
    )
    .await;

    // 6. The CRD moves forward with the operator, and never back with a rollback. The chart
    //    installs it once (crds/); an operator replica applies its own revision at start when
    //    the cluster's is older (it does so before it serves /readyz, so a Ready new pod has
    //    decided), and leaves a newer one.
    let ours = committed_crd_revision();
    let state = || async {
        let crd = crds.get(CRD).await.expect("the CRD");
        let revision = crd
            .metadata
            .annotations
            .unwrap_or_default()
            .get(CRD_REVISION)
            .cloned();
        (revision, crd.spec.names.categories.unwrap_or_default())
    };
    assert_eq!(
        state().await,
        (Some(ours.to_string()), vec!["tracehouse".to_owned()]),
        "the running operator left the CRD at its own revision"
    );
    //  a. An older CRD (no revision: as the charts before revisions left it; one more
    //     category as a marker) is replaced at the operator's next start.
    mark_crd(&crds, None).await;
    let before = operator_pod_names(client).await;
    helm(&[
        "upgrade",
        RELEASE,
        "charts/tracehouse",
        "-n",
        NAMESPACE,
        "-f",
        "config/local/values.yaml",
        "-f",
        &values,
        "--set",
        "logLevel=info",
        "--wait",
        "--timeout",
        "180s",
    ]);
    wait_for_new_operator_pods(client, &before).await;
    wait_for(
        "the new operator applied its CRD over the older one",
        Duration::from_secs(60),
        || async {
            let now = state().await;
            if now == (Some(ours.to_string()), vec!["tracehouse".to_owned()]) {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        },
    )
    .await;
    //  b. helm rollback with a newer CRD on the cluster (a later release's: revision ours+1,
    //     the marker category): the rolled-back operator starts, and the CRD stays as it was.
    mark_crd(&crds, Some(ours + 1)).await;
    let before = operator_pod_names(client).await;
    helm(&[
        "rollback",
        RELEASE,
        "-n",
        NAMESPACE,
        "--wait",
        "--timeout",
        "180s",
    ]);
    wait_for_new_operator_pods(client, &before).await;
    assert_eq!(
        state().await,
        (
            Some((ours + 1).to_string()),
            vec!["tracehouse".to_owned(), "tracehouse-e2e".to_owned()]
        ),
        "helm rollback and the rolled-back operator left the newer CRD as it was"
    );
    //  c. The CRD as the repository has it again (also done on the way out, pass or fail).
    restore_crd();
    assert_eq!(
        state().await,
        (Some(ours.to_string()), vec!["tracehouse".to_owned()])
    );

    // 7. helm uninstall: operator gone; CRD, the pipeline and the spans in ClickHouse stay.
    //    A second pipeline in a namespace of its own, seen by the operator (paused) before
    //    it goes, for step 8.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let strand_ns = format!("{name}-gone");
    namespaces
        .create(
            &Default::default(),
            &serde_json::from_value(json!({ "metadata": { "name": strand_ns } })).unwrap(),
        )
        .await
        .expect("namespace");
    let strand = tracepipelines(client, &strand_ns);
    let mut paused: DynamicObject = pipelines.get(name).await.unwrap();
    paused.metadata = kube::api::ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(strand_ns.clone()),
        ..Default::default()
    };
    paused.data["spec"]["paused"] = json!(true);
    paused.data.as_object_mut().unwrap().remove("status");
    strand
        .create(&Default::default(), &paused)
        .await
        .expect("the second pipeline");
    wait_for(
        "the operator to see the second pipeline",
        Duration::from_secs(60),
        || async {
            let tp = strand.get(name).await.map_err(|e| e.to_string())?;
            let reason = tp.data["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .map(|c| c["reason"].clone());
            match reason {
                Some(r) if r == "Paused" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    uninstall(&deployments).await;
    assert!(
        crds.get_opt(CRD).await.unwrap().is_some(),
        "uninstall keeps the CRD"
    );
    assert!(
        pipelines.get_opt(name).await.unwrap().is_some(),
        "and the pipeline"
    );
    let out = std::process::Command::new(&loadgen)
        .args(["verify", "--database", database, "--table", "otel_traces"])
        .args(["--generator-id", &generator, "--expected", &spans])
        .output()
        .expect("verify");
    assert!(
        out.status.success(),
        "the spans are still in ClickHouse after uninstall: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // 8. With no operator, a pipeline deletes, and so does a namespace holding one: nothing
    //    is left Terminating (no finalizer waits for the operator).
    namespaces
        .delete(&strand_ns, &DeleteParams::default())
        .await
        .expect("deleting the namespace");
    pipelines
        .delete(name, &DeleteParams::default())
        .await
        .expect("deleting the pipeline");
    wait_for(
        "the pipeline and the namespace gone with no operator",
        Duration::from_secs(90),
        || async {
            let tp = pipelines.get_opt(name).await.map_err(|e| e.to_string())?;
            let ns = namespaces
                .get_opt(&strand_ns)
                .await
                .map_err(|e| e.to_string())?;
            match (&tp, &ns) {
                (None, None) => Ok(()),
                _ => Err(format!(
                    "pipeline finalizers {:?}, namespace {:?}",
                    tp.map(|t| t.metadata.finalizers),
                    ns.and_then(|n| n.status).and_then(|s| s.conditions)
                )),
            }
        },
    )
    .await;
}
