//! Namespaced mode on the local cluster: the stack's helm release upgraded to watch two
//! namespaces (`watchNamespaces`) and allow only the stack's hosts (`allowedEndpoints`), as
//! a user installs it. A pipeline in a watched namespace is reconciled (its gateway
//! Deployment appears, and it becomes Ready); one in a namespace the release does not watch
//! is left alone (no status, no gateway); one naming a broker outside the allow-list is
//! refused (`EndpointNotAllowed`, no gateway); the operator's ServiceAccount may read a
//! Secret in a watched namespace and not in any other (SubjectAccessReview and `kubectl auth
//! can-i`), and the release binds no ClusterRole.
//!
//! The release is the stack's own (`tracehouse` in `tracehouse-system`: a second operator
//! watching the whole cluster would reconcile the unwatched pipeline), so the stack's operator
//! is namespaced while this runs; the test puts the release back as `e2e/stack up` makes it
//! (`k8s_operator_up`), then deletes its namespaces, topic and database, pass or fail.
//! Needs `e2e/stack up && eval "$(e2e/stack env)"`.
#![cfg(feature = "stack-tests")]

mod common;

use std::time::Duration;

use common::*;
use futures::FutureExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tracehouse_e2e::k8s::{client, wait_for};
use tracehouse_e2e::{restore_stack_operator, run_repo_command, stack_var, unique_name};
use tracehouse_operator::builders::Names;
use tracehouse_operator::crd::TracePipeline;

const RELEASE: &str = "tracehouse";
const SERVICE_ACCOUNT: &str = "system:serviceaccount:tracehouse-system:tracehouse-operator";

/// `helm ARGS…` against the stack (its admin kubeconfig); the test fails on a non-zero exit.
fn helm(args: &[&str]) -> String {
    let mut all = vec![stack_var("TRACEHOUSE_HELM")];
    all.push("--kubeconfig".into());
    all.push(stack_var("KUBECONFIG"));
    all.extend(args.iter().map(|a| (*a).to_owned()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    run_repo_command(&refs)
}

/// Whether the operator's ServiceAccount may `verb` `resource` (core group) in `ns`
/// (`None`: cluster-wide), as the API server's authorizer answers.
async fn operator_may(client: &Client, verb: &str, resource: &str, ns: Option<&str>) -> bool {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": SERVICE_ACCOUNT,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:tracehouse-system", "system:authenticated"],
            "resourceAttributes": { "verb": verb, "resource": resource, "namespace": ns.unwrap_or("") }
        }
    }))
    .unwrap();
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview")
        .status
        .expect("a review's status")
        .allowed
}

/// The hosts of the stack's Kafka brokers and ClickHouse URL (the allow-list of this test).
fn stack_hosts() -> Vec<String> {
    let mut hosts: Vec<String> = stack_var("KAFKA_BROKERS")
        .split(',')
        .map(|b| b.rsplit_once(':').map_or(b, |(h, _)| h).to_owned())
        .collect();
    let url = stack_var("CLICKHOUSE_URL");
    let authority = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let authority = authority.split('/').next().unwrap_or_default();
    hosts.push(
        authority
            .rsplit_once(':')
            .map_or(authority, |(h, _)| h)
            .to_owned(),
    );
    hosts.dedup();
    hosts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn namespaced_release_reconciles_only_its_namespaces_and_reads_no_other_secret() {
    let client = client().await;
    require_operator(&client).await;
    let base = unique_name("nsmode").replace('_', "-").to_lowercase();
    let watched = [format!("{base}-a"), format!("{base}-b")];
    let unwatched = format!("{base}-c");
    let topic = base.replace('-', "_");
    let database = topic.clone();

    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in watched.iter().chain([&unwatched]) {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap(),
            )
            .await
            .unwrap_or_else(|e| panic!("creating namespace {ns}: {e}"));
    }

    let outcome = std::panic::AssertUnwindSafe(cleaning_up(
        &topic,
        &database,
        scenario(&client, &watched, &unwatched, &topic, &database),
    ))
    .catch_unwind()
    .await;

    // Whatever happened: the stack's release back as `e2e/stack up` installs it, then the
    // namespaces (and the pipelines in them) deleted.
    let restored = std::panic::catch_unwind(restore_stack_operator);
    for ns in watched.iter().chain([&unwatched]) {
        if let Err(e) = namespaces.delete(ns, &DeleteParams::default()).await {
            eprintln!("cleanup: cannot delete namespace {ns}: {e}");
        }
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    restored.expect("restoring the stack's operator release");
    // The cluster-wide release is back: a ClusterRoleBinding again.
    assert!(
        Api::<ClusterRoleBinding>::all(client.clone())
            .get_opt("tracehouse-operator")
            .await
            .unwrap()
            .is_some(),
        "the stack's release binds its ClusterRole again"
    );
}

async fn scenario(
    client: &Client,
    watched: &[String; 2],
    unwatched: &str,
    topic: &str,
    database: &str,
) {
    create_topic(topic, 2).await;
    for ns in [&watched[0], unwatched] {
        create_clickhouse_secret(client, ns).await;
    }

    // 1. The release, namespaced: two watched namespaces, and only the stack's Kafka and
    //    ClickHouse hosts allowed.
    let list = json!(watched).to_string();
    let allowed = json!(stack_hosts()).to_string();
    helm(&[
        "upgrade",
        RELEASE,
        "charts/tracehouse",
        "-n",
        OPERATOR_NAMESPACE,
        "-f",
        "config/local/values.yaml",
        "--set-json",
        &format!("watchNamespaces={list}"),
        "--set-json",
        &format!("allowedEndpoints={allowed}"),
        "--wait",
        "--timeout",
        "180s",
    ]);
    let operator: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    wait_for(
        "the operator rolled out with the watched namespaces",
        Duration::from_secs(180),
        || async {
            let d = operator
                .get(OPERATOR_NAME)
                .await
                .map_err(|e| e.to_string())?;
            let env = d
                .spec
                .as_ref()
                .unwrap()
                .template
                .spec
                .as_ref()
                .unwrap()
                .containers[0]
                .env
                .clone()
                .unwrap_or_default();
            let watches = env.iter().any(|e| {
                e.name == "TRACEHOUSE_OPERATOR_NAMESPACES"
                    && e.value.as_deref() == Some(watched.join(",").as_str())
            });
            let s = d.status.clone().unwrap_or_default();
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let rolled = s.observed_generation == d.metadata.generation
                && s.updated_replicas == Some(want)
                && s.ready_replicas == Some(want)
                && s.replicas == Some(want);
            if watches && rolled {
                Ok(())
            } else {
                Err(format!("watches {watches}, status {s:?}"))
            }
        },
    )
    .await;

    // 2. RBAC: a Role and RoleBinding per watched namespace, no ClusterRoleBinding; the
    //    ServiceAccount reads Secrets in the watched namespaces only.
    assert!(
        Api::<ClusterRoleBinding>::all(client.clone())
            .get_opt("tracehouse-operator")
            .await
            .unwrap()
            .is_none(),
        "namespaced mode binds no ClusterRole"
    );
    for ns in watched {
        assert!(
            Api::<RoleBinding>::namespaced(client.clone(), ns)
                .get_opt("tracehouse-operator")
                .await
                .unwrap()
                .is_some(),
            "a RoleBinding in {ns}"
        );
        assert!(
            operator_may(client, "get", "secrets", Some(ns)).await,
            "the operator may get a Secret in the watched namespace {ns}"
        );
    }
    assert!(
        !operator_may(client, "get", "secrets", Some(unwatched)).await,
        "the operator may not get a Secret in the unwatched namespace {unwatched}"
    );
    assert!(
        !operator_may(client, "get", "secrets", Some("default")).await,
        "nor in default"
    );
    assert!(
        !operator_may(client, "list", "pods", None).await,
        "nor list pods cluster-wide"
    );
    run_repo_command(&[
        "bash",
        "-c",
        &format!(
            "out=\"$(kubectl --kubeconfig \"$KUBECONFIG\" auth can-i get secrets -n {unwatched} --as {SERVICE_ACCOUNT} || true)\"; [ \"$out\" = no ]"
        ),
    ]);

    // 3. A pipeline in a watched namespace and one in the unwatched namespace.
    let name = "e2e";
    let inside: Api<TracePipeline> = Api::namespaced(client.clone(), &watched[0]);
    let outside: Api<TracePipeline> = Api::namespaced(client.clone(), unwatched);
    apply(&outside, &sample(unwatched, topic, database)).await;
    apply(&inside, &sample(&watched[0], topic, database)).await;
    let gateway = Names::of(name).deployment;
    let inside_deployments: Api<Deployment> = Api::namespaced(client.clone(), &watched[0]);
    wait_for(
        "the watched pipeline's gateway Deployment and status",
        Duration::from_secs(180),
        || async {
            let d = inside_deployments
                .get_opt(&gateway)
                .await
                .map_err(|e| e.to_string())?;
            let tp = inside.get(name).await.map_err(|e| e.to_string())?;
            let observed = tp.status.as_ref().and_then(|s| s.observed_generation);
            match (d, observed) {
                (Some(_), Some(_)) => Ok(()),
                (d, _) => Err(format!(
                    "deployment {}, status {:?}",
                    d.is_some(),
                    tp.status
                )),
            }
        },
    )
    .await;
    // And Ready, every step through the namespaced Role: its Secret read, the schema
    // migrated, the gateway's pods listed, its Events written.
    wait_ready(&inside, name, 2, 1, Duration::from_secs(240)).await;
    assert!(
        !pipeline_events(client, &watched[0], name).await.is_empty(),
        "the operator wrote the watched pipeline's Events"
    );

    // 4. A pipeline in the other watched namespace naming a broker outside the allow-list:
    //    refused in its status, no gateway.
    let refused: Api<TracePipeline> = Api::namespaced(client.clone(), &watched[1]);
    let mut elsewhere = sample(&watched[1], topic, database);
    elsewhere["spec"]["kafka"]["bootstrapServers"] = json!("kafka.elsewhere.invalid:9092");
    apply(&refused, &elsewhere).await;
    wait_for(
        "the pipeline naming another broker refused",
        Duration::from_secs(120),
        || async {
            let tp = refused.get(name).await.map_err(|e| e.to_string())?;
            match ready_condition(&tp) {
                Some((status, reason, message))
                    if status == "False"
                        && reason == "EndpointNotAllowed"
                        && message.contains("kafka.elsewhere.invalid:9092") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert!(
        Api::<Deployment>::namespaced(client.clone(), &watched[1])
            .get_opt(&gateway)
            .await
            .unwrap()
            .is_none(),
        "a refused pipeline gets no gateway"
    );

    // 5. The unwatched pipeline: two requeue periods later, still untouched.
    tokio::time::sleep(RESYNC * 2).await;
    let tp = outside.get(name).await.expect("the unwatched pipeline");
    assert!(
        tp.status.is_none(),
        "the unwatched pipeline has no status: {:?}",
        tp.status
    );
    assert!(
        Api::<Deployment>::namespaced(client.clone(), unwatched)
            .get_opt(&gateway)
            .await
            .unwrap()
            .is_none(),
        "and no gateway"
    );
}
