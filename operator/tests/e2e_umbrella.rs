//! The chart as a subchart: an umbrella chart that depends on `charts/tracehouse` (as a
//! platform team's would) and sets `global` values — which Helm passes to every subchart —
//! installs with the real `helm` on the stack's API server, takes `global.imageRegistry` and
//! `global.imagePullSecrets` for the operator and the collectors, and uninstalls without a
//! trace. The umbrella runs no operator pod (`replicaCount: 0`) and no CRD of its own, so it
//! never competes with the stack's release. Real local stack, no mocks (see `common`).
#![cfg(feature = "stack-tests")]

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Api;
use serde_json::json;
use tracehouse_e2e::stack_var;
use tracehouse_operator::defaults::{CollectorDefaults, ENV};

fn helm(args: &[&str]) -> String {
    let out = Command::new(stack_var("TRACEHOUSE_HELM"))
        .args(args)
        .env("KUBECONFIG", stack_var("KUBECONFIG"))
        .output()
        .expect("running helm");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "helm {args:?}: {text}");
    text
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_umbrella_chart_installs_the_chart_with_global_values() {
    in_namespace("tp-umbrella", |client, ns| async move {
        let dir = std::env::temp_dir().join(format!("tracehouse-umbrella-{ns}"));
        let chart = dir.join("platform");
        std::fs::create_dir_all(&chart).unwrap();
        let ours = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/tracehouse");
        let ours = ours.canonicalize().unwrap();
        write(
            &chart.join("Chart.yaml"),
            &format!(
                "apiVersion: v2\nname: platform\nversion: 0.0.1\ndependencies:\n  - name: tracehouse\n    version: 0.1.0\n    repository: file://{}\n",
                ours.display()
            ),
        );
        // `global.storageClass` stands for the keys other subcharts read: ours must accept it.
        write(
            &chart.join("values.yaml"),
            &format!(
                "global:\n  imageRegistry: registry.example\n  imagePullSecrets: [platform-pull]\n  storageClass: fast\ntracehouse:\n  crds: {{ enabled: false }}\n  replicaCount: 0\n  watchNamespace: {ns}\n"
            ),
        );
        let chart_path = chart.to_str().unwrap();
        helm(&["dependency", "build", chart_path]);
        helm(&["lint", "--strict", chart_path]);
        let release = "platform";
        helm(&[
            "install", release, chart_path, "--namespace", &ns, "--wait", "--timeout", "120s",
        ]);

        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let d = deployments.get("platform-tracehouse-operator").await.unwrap();
        let d = serde_json::to_value(&d).unwrap();
        let pod = &d["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        assert_eq!(
            container["image"],
            format!("registry.example/tracehouse/operator:{}", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(pod["imagePullSecrets"], json!([{ "name": "platform-pull" }]));
        let defaults = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == ENV)
            .and_then(|e| e["value"].as_str())
            .expect("the collector defaults");
        let defaults = CollectorDefaults::from_json(defaults).unwrap();
        assert_eq!(
            defaults.image,
            format!("registry.example/tracehouse/collector:{}", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(defaults.image_pull_secrets[0].name, "platform-pull");

        helm(&["uninstall", release, "--namespace", &ns, "--wait"]);
        let roles: Api<ClusterRole> = Api::all(client.clone());
        assert!(
            roles
                .get_opt("platform-tracehouse-operator")
                .await
                .unwrap()
                .is_none(),
            "uninstall leaves no cluster-wide object"
        );
        std::fs::remove_dir_all(&dir).ok();
    })
    .await;
}
