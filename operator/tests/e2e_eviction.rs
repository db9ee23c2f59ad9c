//! A node drain is never blocked by a ClickHouse outage: when ClickHouse goes away every
//! gateway turns unready (its `/readyz` fails), the PodDisruptionBudget has no disruption left
//! (`maxUnavailable: 1` of pods that are all unhealthy), and still an eviction through the
//! Eviction API — what `kubectl drain` sends — is granted, because the budget lets unready pods
//! go (`unhealthyPodEvictionPolicy: AlwaysAllow`). The same request with the budget switched to
//! `IfHealthyBudget` is answered 429, so the policy is what lets the drain through.
//!
//! The outage must not touch the stack's shared ClickHouse, so the pipeline writes to a private
//! chserver this test starts and stops (`e2e/stack up clickhouse` in a state directory of its
//! own, on free ports). Real API server, controller-manager (its disruption controller keeps
//! the budget's status) and node agent running the collectors; no mocks (see `common`).
#![cfg(feature = "stack-tests")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{EvictParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tracehouse_e2e::unique_name;
use tracehouse_operator::builders::{Names, PIPELINE_LABEL};
use tracehouse_operator::crd::TracePipeline;

/// A chserver of this test's own: `e2e/stack <verb> clickhouse` under a private state
/// directory and ports; stopped and removed on drop, pass or fail.
struct PrivateClickHouse {
    state: PathBuf,
    port: u16,
    env: Vec<(String, String)>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl PrivateClickHouse {
    fn start() -> Self {
        let state = std::env::temp_dir().join(unique_name("evict_ch"));
        let port = free_port();
        let env = vec![
            ("TRACEHOUSE_STATE".to_owned(), state.display().to_string()),
            ("TRACEHOUSE_CLICKHOUSE_PORT".to_owned(), port.to_string()),
            (
                "TRACEHOUSE_CLICKHOUSE_TLS_PORT".to_owned(),
                free_port().to_string(),
            ),
            (
                "TRACEHOUSE_CLICKHOUSE_MTLS_PORT".to_owned(),
                free_port().to_string(),
            ),
        ];
        let ch = Self { state, port, env };
        ch.stack("up");
        ch
    }

    fn stack(&self, verb: &str) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = Command::new(root.join("e2e/stack"))
            .args([verb, "clickhouse"])
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(&root)
            .output()
            .expect("running e2e/stack");
        assert!(
            out.status.success(),
            "e2e/stack {verb} clickhouse (state {}): {}\n{}",
            self.state.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn password(&self) -> String {
        read(&format!("{}/clickhouse/password", self.state.display()))
            .trim()
            .to_owned()
    }
}

impl Drop for PrivateClickHouse {
    fn drop(&mut self) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let _ = Command::new(root.join("e2e/stack"))
            .args(["down", "clickhouse"])
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(&root)
            .output();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

async fn gateway_pods(pods: &Api<Pod>, name: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("{PIPELINE_LABEL}={name}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

#[tokio::test]
async fn an_unready_gateway_is_evicted_during_a_clickhouse_outage() {
    in_namespace("evict", |client, ns| async move {
        let topic = unique_name("evict");
        create_topic(&topic, 4).await;
        let ch = PrivateClickHouse::start();
        // The database lives on the private chserver and goes with its state directory.
        let outcome = std::panic::AssertUnwindSafe(async {
            put_secret(
                &client,
                &ns,
                "tracehouse-clickhouse",
                "Opaque",
                json!({ "username": "tracehouse", "password": ch.password() }),
            )
            .await;
            let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
            let mut tp = sample(&ns, &topic, "otel_evict");
            tp["spec"]["clickhouse"]["endpoint"] = json!(ch.url());
            apply(&api, &tp).await;
            wait_ready(&api, "e2e", 4, 2, Duration::from_secs(240)).await;

            // The outage: every gateway loses ClickHouse and turns unready.
            ch.stack("down");
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let unready = wait_for(
                "every gateway pod unready",
                Duration::from_secs(120),
                || async {
                    let live = gateway_pods(&pods, "e2e").await;
                    let ready: Vec<String> = live
                        .iter()
                        .filter(|p| pod_ready(p))
                        .map(|p| p.name_any())
                        .collect();
                    if live.len() == 2 && ready.is_empty() {
                        Ok(live)
                    } else {
                        Err(format!("{} pods, ready: {ready:?}", live.len()))
                    }
                },
            )
            .await;

            // The budget sees it: nothing healthy, no disruption allowed by the count.
            let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
            let pdb_name = Names::of("e2e").pdb;
            let pdb = wait_for(
                "the budget's status to show no healthy gateway",
                Duration::from_secs(60),
                || async {
                    let pdb = pdbs.get(&pdb_name).await.map_err(|e| e.to_string())?;
                    let s = pdb.status.clone().unwrap_or_default();
                    if s.current_healthy == Some(0)
                        && s.disruptions_allowed == Some(0)
                        && s.expected_pods == Some(2)
                    {
                        Ok(pdb)
                    } else {
                        Err(format!("{s:?}"))
                    }
                },
            )
            .await;
            assert_eq!(
                pdb.spec
                    .as_ref()
                    .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref()),
                Some("AlwaysAllow")
            );

            // The same request under the other policy is refused (429): the policy is what lets
            // the drain through. The operator does not put its own back meanwhile: the outage
            // stops each reconcile at the schema step, before the apply.
            let victim = unready[0].name_any();
            let set_policy = |policy: &'static str| {
                let pdbs = pdbs.clone();
                let pdb_name = pdb_name.clone();
                async move {
                    pdbs.patch(
                        &pdb_name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "spec": { "unhealthyPodEvictionPolicy": policy } })),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("setting the budget's policy to {policy}: {e}"));
                }
            };
            set_policy("IfHealthyBudget").await;
            match pods.evict(&victim, &EvictParams::default()).await {
                Err(kube::Error::Api(e)) if e.code == 429 => {}
                other => panic!(
                    "under IfHealthyBudget the eviction should be refused with 429: {other:?}"
                ),
            }
            set_policy("AlwaysAllow").await;

            // What `kubectl drain` does: the Eviction API, granted for the unready pod.
            pods.evict(&victim, &EvictParams::default())
                .await
                .unwrap_or_else(|e| {
                    panic!("the eviction of unready {victim} was refused during the outage: {e}")
                });
            wait_for("the evicted pod to go", Duration::from_secs(60), || async {
                match pods.get_opt(&victim).await {
                    Ok(None) => Ok(()),
                    Ok(Some(p)) if p.metadata.deletion_timestamp.is_some() => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
            api.delete("e2e", &Default::default())
                .await
                .expect("deleting the pipeline");
        })
        .catch_unwind()
        .await;
        tracehouse_e2e::delete_topics(&[&topic]).await;
        drop(ch);
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    })
    .await;
}
