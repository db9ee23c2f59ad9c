//! Deleting never waits for the operator: pipelines carry no finalizer, and the one older
//! releases added is removed, so a pipeline, and the namespace holding it, go away even
//! with no operator running: here the operator is scaled to 0 (and back, pass or fail);
//! `e2e/tests/helm_chart.rs` deletes both after a real `helm uninstall`. Real local stack,
//! no mocks (see `common`).
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tracehouse_e2e::unique_name;
use tracehouse_operator::FINALIZER;
use tracehouse_operator::crd::TracePipeline;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_releases_finalizer_is_removed_and_the_namespace_deletes() {
    let client = client().await;
    require_operator(&client).await;
    let ns = unique_name("tp-strand").replace('_', "-").to_lowercase();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let created: Namespace = serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap();
    namespaces
        .create(&Default::default(), &created)
        .await
        .expect("namespace");
    let topic = unique_name("tp_strand");
    let database = unique_name("tp_strand");
    let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
    cleaning_up(&topic, &database, async {
        create_topic(&topic, 1).await;
        create_clickhouse_secret(&client, &ns).await;
        // As an older release left it: with the operator's finalizer. Paused, so nothing
        // else happens to it.
        let mut tp = sample(&ns, &topic, &database);
        tp["metadata"]["finalizers"] = json!([FINALIZER]);
        tp["spec"]["paused"] = json!(true);
        apply(&api, &tp).await;
        wait_for(
            "the old finalizer removed",
            Duration::from_secs(60),
            || async {
                let tp = api.get("e2e").await.map_err(|e| e.to_string())?;
                if tp.finalizers().is_empty() {
                    Ok(())
                } else {
                    Err(format!("{:?}", tp.finalizers()))
                }
            },
        )
        .await;
        // Another controller's finalizer is left alone.
        let mut theirs = tp.clone();
        theirs["metadata"]["finalizers"] = json!(["example.com/keep"]);
        apply(&api, &theirs).await;
        tokio::time::sleep(RESYNC + Duration::from_secs(3)).await;
        assert_eq!(
            api.get("e2e").await.unwrap().finalizers(),
            ["example.com/keep"]
        );
        let mut none = tp.clone();
        none["metadata"]["finalizers"] = json!([]);
        apply(&api, &none).await;
    })
    .await;
    // The operator gone (no pod left), the namespace and the pipeline in it still delete.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let replicas = deployments
        .get(OPERATOR_NAME)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let scale = |n: i32| {
        let deployments = deployments.clone();
        async move {
            deployments
                .patch_scale(
                    OPERATOR_NAME,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": { "replicas": n } })),
                )
                .await
                .expect("scaling the operator");
        }
    };
    scale(0).await;
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(async {
        wait_for("no operator pod", Duration::from_secs(90), || async {
            match operator_pods(&client).await.len() {
                0 => Ok(()),
                n => Err(format!("{n} pods")),
            }
        })
        .await;
        namespaces
            .delete(&ns, &DeleteParams::default())
            .await
            .expect("deleting the namespace");
        wait_for(
            "the namespace to be gone with no operator",
            Duration::from_secs(90),
            || async {
                match namespaces.get_opt(&ns).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(n) => Err(format!("{:?}", n.status.and_then(|s| s.conditions))),
                }
            },
        )
        .await;
    }))
    .await;
    scale(replicas).await;
    wait_for("the operator back", Duration::from_secs(120), || async {
        let ready = deployments
            .get(OPERATOR_NAME)
            .await
            .map_err(|e| e.to_string())?
            .status
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        if ready == replicas {
            Ok(())
        } else {
            Err(format!("{ready} ready"))
        }
    })
    .await;
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
}
