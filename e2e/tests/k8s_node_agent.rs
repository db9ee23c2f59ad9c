//! The local Kubernetes control plane and the node agent, end to end: real kube-apiserver,
//! kube-controller-manager and etcd from `e2e/stack`, pods run from the collector image built
//! into the node's image storage (chrooted in their own PID and mount namespaces).
//!
//! Needs `e2e/stack up && eval "$(e2e/stack env)"` (KUBECONFIG, TRACEHOUSE_POD_LOGS,
//! TRACEHOUSE_COLLECTOR_IMAGE). Each test works in a namespace of its own and deletes it at
//! the end, pass or fail.
#![cfg(feature = "stack-tests")]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::json;
use tracehouse_e2e::k8s::collector_image;
use tracehouse_e2e::k8s::{client, http_get, pod_pid, pod_ready, wait_for, with_namespace};
use tracehouse_e2e::stack_var;

const HEALTH_PORT: u16 = 8080;

/// Runs `body` in a fresh namespace, then deletes the namespace whatever happened.
async fn in_namespace<F, Fut>(prefix: &str, body: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = ()>,
{
    with_namespace(client().await, prefix, body).await;
}

/// A Deployment of `replicas` `serve-health` processes of the collector image.
fn health_deployment(name: &str, replicas: i32) -> Deployment {
    let image = collector_image();
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": {
                    "terminationGracePeriodSeconds": 10,
                    "containers": [{
                        "name": "collector",
                        "image": image,
                        "args": ["serve-health"],
                        "env": [{ "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } }],
                        "ports": [{ "name": "health", "containerPort": HEALTH_PORT }],
                        "readinessProbe": {
                            "httpGet": { "path": "/readyz", "port": "health" },
                            "periodSeconds": 1
                        },
                        "livenessProbe": {
                            "httpGet": { "path": "/healthz", "port": HEALTH_PORT },
                            "periodSeconds": 2
                        }
                    }]
                }
            }
        }
    }))
    .unwrap()
}

fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status.as_ref()?.pod_ip.clone()
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// Whether `pid` is a live `tracehouse-collector serve-health` process on this machine.
fn is_serve_health_process(pid: i32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let zombie = stat
        .rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    !zombie
        && args
            .first()
            .is_some_and(|a| a.ends_with("tracehouse-collector"))
        && args.iter().any(|a| a == "serve-health")
}

fn pod_log(ns: &str, pod: &str, container: &str) -> PathBuf {
    PathBuf::from(stack_var("TRACEHOUSE_POD_LOGS")).join(format!("{ns}_{pod}_{container}.log"))
}

async fn pods_of(pods: &Api<Pod>, app: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("listing pods")
        .items
}

#[tokio::test]
async fn deployment_pods_run_as_processes_scale_down_gracefully_and_are_collected() {
    in_namespace("th-agent", |client, ns| async move {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        deployments
            .create(&PostParams::default(), &health_deployment("health", 3))
            .await
            .expect("creating the deployment");

        // Three Ready pods, each backed by its own live process on its own loopback IP.
        let running = wait_for(
            "3 Ready pods with processes",
            Duration::from_secs(90),
            || async {
                let list = pods_of(&pods, "health").await;
                let ready: Vec<(String, String, i32)> = list
                    .iter()
                    .filter(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none())
                    .filter_map(|p| Some((name(p), pod_ip(p)?, pod_pid(p)?)))
                    .collect();
                if ready.len() == 3 {
                    Ok(ready)
                } else {
                    Err(format!(
                        "{} pods, {} ready: {:?}",
                        list.len(),
                        ready.len(),
                        ready
                    ))
                }
            },
        )
        .await;
        let mut ips: Vec<&str> = running.iter().map(|(_, ip, _)| ip.as_str()).collect();
        ips.sort_unstable();
        ips.dedup();
        assert_eq!(ips.len(), 3, "pod IPs are distinct: {running:?}");
        for (pod, ip, pid) in &running {
            assert!(ip.starts_with("127."), "{pod} has a loopback IP, got {ip}");
            assert!(
                is_serve_health_process(*pid),
                "{pod}: pid {pid} is a live serve-health process"
            );
            let (code, body) = http_get(ip, HEALTH_PORT, "/healthz")
                .await
                .expect("health endpoint answers");
            assert_eq!(
                (code, body.as_str()),
                (200, "ok"),
                "{pod} answers on its own IP {ip}"
            );
        }

        // Scale to one: two processes get SIGTERM, exit by themselves, and their pods go away.
        deployments
            .patch(
                "health",
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "replicas": 1 } })),
            )
            .await
            .expect("scaling down");
        let survivor = wait_for("only one pod left", Duration::from_secs(60), || async {
            let list = pods_of(&pods, "health").await;
            match list.as_slice() {
                [only] if only.metadata.deletion_timestamp.is_none() => Ok(name(only)),
                _ => Err(format!(
                    "pods: {:?}",
                    list.iter().map(name).collect::<Vec<_>>()
                )),
            }
        })
        .await;
        assert!(
            running.iter().any(|(p, ..)| *p == survivor),
            "the survivor is one of the original pods"
        );
        for (pod, _, pid) in running.iter().filter(|(p, ..)| *p != survivor) {
            wait_for(
                &format!("process {pid} of {pod} to end"),
                Duration::from_secs(15),
                || async {
                    if is_serve_health_process(*pid) {
                        Err("still running".to_owned())
                    } else {
                        Ok(())
                    }
                },
            )
            .await;
            let log =
                std::fs::read_to_string(pod_log(&ns, pod, "collector")).expect("container log");
            assert!(
                log.trim_end()
                    .ends_with("serve-health: SIGTERM received, exiting"),
                "{pod} ended gracefully on SIGTERM; its log ends with:\n{}",
                log.lines().rev().take(5).collect::<Vec<_>>().join("\n")
            );
        }
        let (_, _, survivor_pid) = running.iter().find(|(p, ..)| *p == survivor).unwrap();
        assert!(
            is_serve_health_process(*survivor_pid),
            "the survivor keeps running"
        );

        // Delete the Deployment: the garbage collector removes its ReplicaSet and pods, and the
        // node agent ends the last process.
        deployments
            .delete("health", &DeleteParams::background())
            .await
            .expect("deleting the deployment");
        wait_for("all pods gone", Duration::from_secs(60), || async {
            let list = pods
                .list(&ListParams::default())
                .await
                .expect("listing pods")
                .items;
            if list.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "pods: {:?}",
                    list.iter().map(name).collect::<Vec<_>>()
                ))
            }
        })
        .await;
        wait_for("no process left", Duration::from_secs(15), || async {
            let alive: Vec<i32> = running
                .iter()
                .map(|(_, _, pid)| *pid)
                .filter(|p| is_serve_health_process(*p))
                .collect();
            if alive.is_empty() {
                Ok(())
            } else {
                Err(format!("alive: {alive:?}"))
            }
        })
        .await;
    })
    .await;
}

/// Pods may only be created once the namespace's `default` ServiceAccount exists (the
/// ServiceAccount admission plugin refuses them before).
async fn wait_for_default_service_account(client: &Client, ns: &str) {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    wait_for(
        "the default service account",
        Duration::from_secs(30),
        || async {
            match sas.get_opt("default").await {
                Ok(Some(_)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

#[tokio::test]
async fn crashing_process_is_restarted_with_a_rising_restart_count() {
    in_namespace("th-crash", |client, ns| async move {
        wait_for_default_service_account(&client, &ns).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let image = collector_image();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "crasher" },
            "spec": {
                "containers": [{
                    "name": "collector",
                    "image": image,
                    "args": ["serve-health", "--exit-after-secs", "1", "--exit-code", "3"],
                    "env": [{ "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } }]
                }]
            }
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.expect("creating the pod");

        // Restart count → pid of the process seen with it.
        let pids = std::cell::RefCell::new(BTreeMap::new());
        let status = wait_for("restartCount >= 2", Duration::from_secs(60), || {
            let pods = pods.clone();
            let pids = &pids;
            async move {
                let pod = pods.get("crasher").await.map_err(|e| e.to_string())?;
                let status = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|cs| cs.first().cloned())
                    .ok_or("no container status yet")?;
                if let Some(pid) = pod_pid(&pod) {
                    pids.borrow_mut().insert(status.restart_count, pid);
                }
                if status.restart_count >= 2 { Ok(status) } else { Err(format!("{status:?}")) }
            }
        })
        .await;
        let last = status
            .last_state
            .and_then(|s| s.terminated)
            .expect("the last run's termination is reported");
        assert_eq!(last.exit_code, 3, "the exit code of the crashed run");
        assert_eq!(last.reason.as_deref(), Some("Error"));
        let pids = pids.into_inner();
        let distinct: std::collections::BTreeSet<i32> = pids.values().copied().collect();
        assert!(
            distinct.len() >= 2,
            "each restart is a new process; pids seen by restart count: {pids:?}"
        );
        let pod = pods.get("crasher").await.expect("pod");
        assert_eq!(pod.status.and_then(|s| s.phase).as_deref(), Some("Running"), "restartPolicy Always keeps the pod Running");
    })
    .await;
}

#[tokio::test]
async fn pod_of_an_image_not_in_local_storage_waits_in_image_pull_backoff() {
    in_namespace("th-image", |client, ns| async move {
        wait_for_default_service_account(&client, &ns).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "web" },
            "spec": { "containers": [{ "name": "nginx", "image": "nginx:1.27" }] }
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("creating the pod");
        // ErrImagePull at the first attempt, ImagePullBackOff while it waits to retry.
        let waiting = wait_for(
            "the container to wait in ImagePullBackOff",
            Duration::from_secs(30),
            || async {
                let pod = pods.get("web").await.map_err(|e| e.to_string())?;
                let w = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|cs| cs.first())
                    .and_then(|c| c.state.as_ref()?.waiting.clone())
                    .ok_or_else(|| format!("{:?}", pod.status))?;
                match w.reason.as_deref() {
                    Some("ImagePullBackOff") => Ok(w),
                    other => Err(format!("{other:?}: {:?}", w.message)),
                }
            },
        )
        .await;
        let message = waiting.message.unwrap_or_default();
        assert!(
            message.contains("\"nginx:1.27\"")
                && message.contains("not in this node's image storage"),
            "message names the image and why: {message}"
        );
        let pod = pods.get("web").await.expect("pod");
        assert_eq!(pod.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
    })
    .await;
}

/// The environment of a live process, from `/proc/<pid>/environ`.
fn process_env(pid: i32) -> BTreeMap<String, String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    raw.split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect()
}

#[tokio::test]
async fn pod_env_volumes_and_service_account_reach_the_process() {
    in_namespace("th-env", |client, ns| async move {
        wait_for_default_service_account(&client, &ns).await;
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": { "name": "demo" },
            "data": { "level": "debug", "config.yaml": "version: 1\n" }
        }))
        .unwrap();
        config_maps.create(&PostParams::default(), &cm).await.expect("configmap");
        let secret: Secret = serde_json::from_value(json!({
            "metadata": { "name": "demo" },
            "stringData": { "password": "s3cret" }
        }))
        .unwrap();
        secrets.create(&PostParams::default(), &secret).await.expect("secret");

        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let image = collector_image();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "env" },
            "spec": {
                "containers": [{
                    "name": "collector",
                    "image": image,
                    "args": ["serve-health"],
                    "envFrom": [{ "prefix": "CM_", "configMapRef": { "name": "demo" } }],
                    "env": [
                        { "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } },
                        { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
                        { "name": "POD_NAMESPACE", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } },
                        { "name": "LEVEL", "valueFrom": { "configMapKeyRef": { "name": "demo", "key": "level" } } },
                        { "name": "PASSWORD", "valueFrom": { "secretKeyRef": { "name": "demo", "key": "password" } } },
                        { "name": "URL", "value": "http://$(POD_IP):8080" },
                        { "name": "CONFIG_FILE", "value": "/etc/demo/config.yaml" }
                    ],
                    "volumeMounts": [
                        { "name": "config", "mountPath": "/etc/demo" },
                        { "name": "secret", "mountPath": "/etc/secret", "readOnly": true }
                    ]
                }],
                "volumes": [
                    { "name": "config", "configMap": { "name": "demo" } },
                    { "name": "secret", "secret": { "secretName": "demo" } }
                ]
            }
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.expect("creating the pod");
        let (pid, ip) = wait_for("the pod to run", Duration::from_secs(60), || async {
            let pod = pods.get("env").await.map_err(|e| e.to_string())?;
            match (pod_pid(&pod), pod_ip(&pod), pod_ready(&pod)) {
                (Some(pid), Some(ip), true) => Ok((pid, ip)),
                _ => Err(format!("{:?}", pod.status)),
            }
        })
        .await;

        let env = process_env(pid);
        let var = |k: &str| env.get(k).map(String::as_str).unwrap_or_else(|| panic!("{k} missing from {env:?}"));
        assert_eq!(var("POD_IP"), ip);
        assert_eq!(var("POD_NAME"), "env");
        assert_eq!(var("POD_NAMESPACE"), ns);
        assert_eq!(var("HOSTNAME"), "env");
        assert_eq!(var("LEVEL"), "debug");
        assert_eq!(var("CM_level"), "debug", "envFrom with prefix");
        assert_eq!(var("PASSWORD"), "s3cret");
        assert_eq!(var("URL"), format!("http://{ip}:8080"), "$(VAR) expansion");
        // The process runs chrooted in the image's root: the ConfigMap and Secret are files at
        // their mount paths there, as in a container.
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        assert_eq!(var("CONFIG_FILE"), "/etc/demo/config.yaml", "paths are not rewritten");
        let config_file = root.join("etc/demo/config.yaml");
        assert_eq!(std::fs::read_to_string(&config_file).unwrap(), "version: 1\n");
        assert_eq!(
            std::fs::read_to_string(root.join("etc/secret/password")).unwrap(),
            "s3cret"
        );
        assert!(
            root.join("usr/local/bin/tracehouse-collector").is_file(),
            "the root is the image's"
        );
        assert!(!root.join("root/.cache").exists(), "not the host's root");
        // PID 1 of its own PID namespace, as the image's user (65532, distroless nonroot).
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
                .unwrap_or_default()
        };
        assert_eq!(field("NSpid:").last().map(String::as_str), Some("1"), "{status}");
        assert_eq!(field("Uid:").first().map(String::as_str), Some("65532"), "{status}");

        // In-cluster configuration works: the service-account token, CA and namespace at the
        // standard path, the API server in KUBERNETES_SERVICE_HOST/PORT.
        let sa = root.join("var/run/secrets/kubernetes.io/serviceaccount");
        assert_eq!(std::fs::read_to_string(sa.join("namespace")).unwrap(), ns);
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://{}:{}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    tokenFile: {}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
            var("KUBERNETES_SERVICE_HOST"),
            var("KUBERNETES_SERVICE_PORT"),
            sa.join("ca.crt").display(),
            sa.join("token").display(),
        );
        let kc = Kubeconfig::from_yaml(&kubeconfig).expect("kubeconfig from the pod's files");
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("pod credentials load");
        let as_pod = Client::try_from(config).expect("client");
        let review = Api::<SelfSubjectReview>::all(as_pod)
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .expect("self subject review with the pod's token");
        let user = review.status.and_then(|s| s.user_info).and_then(|u| u.username);
        assert_eq!(user, Some(format!("system:serviceaccount:{ns}:default")));

        // A ConfigMap change reaches the running pod's files.
        config_maps
            .patch("demo", &PatchParams::default(), &Patch::Merge(json!({ "data": { "config.yaml": "version: 2\n" } })))
            .await
            .expect("updating the configmap");
        wait_for("the volume to follow the ConfigMap", Duration::from_secs(30), || async {
            let now = std::fs::read_to_string(&config_file).map_err(|e| e.to_string())?;
            if now == "version: 2\n" { Ok(()) } else { Err(now) }
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn init_container_completes_before_the_main_container_starts() {
    in_namespace("th-init", |client, ns| async move {
        wait_for_default_service_account(&client, &ns).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let image = collector_image();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "init" },
            "spec": {
                "initContainers": [{
                    "name": "prepare",
                    "image": image,
                    "args": ["serve-health", "--port", "8081", "--exit-after-secs", "1", "--exit-code", "0"],
                    "env": [{ "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } }]
                }],
                "containers": [{
                    "name": "collector",
                    "image": image,
                    "args": ["serve-health"],
                    "env": [{ "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } }]
                }]
            }
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.expect("creating the pod");
        let pod = wait_for("the pod to be Ready", Duration::from_secs(60), || async {
            let pod = pods.get("init").await.map_err(|e| e.to_string())?;
            if pod_ready(&pod) { Ok(pod) } else { Err(format!("{:?}", pod.status)) }
        })
        .await;
        let status = pod.status.expect("status");
        let init = status.init_container_statuses.expect("init container statuses");
        let done = init[0].state.clone().and_then(|s| s.terminated).expect("init container terminated");
        assert_eq!((done.exit_code, done.reason.as_deref()), (0, Some("Completed")));
        let main_started = status.container_statuses.expect("container statuses")[0]
            .state
            .clone()
            .and_then(|s| s.running)
            .and_then(|r| r.started_at)
            .expect("main container running");
        let init_finished = done.finished_at.expect("finishedAt");
        assert!(main_started.0 >= init_finished.0, "main started {main_started:?} after init finished {init_finished:?}");
        let initialized = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Initialized")
            .expect("Initialized condition");
        assert_eq!(initialized.status, "True");
    })
    .await;
}
