//! The local Kubernetes control plane for tests: a client from the stack's kubeconfig,
//! throw-away namespaces, waits that always have a deadline, pod facts and a plain HTTP GET
//! to a pod's IP.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{stack_var, unique_name};

/// A client for the stack's kube-apiserver (`KUBECONFIG` from `e2e/stack env`).
pub async fn client() -> Client {
    let path = stack_var("KUBECONFIG");
    let kc = Kubeconfig::read_from(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig of the local stack");
    Client::try_from(config).expect("kube client")
}

/// Runs `body` in a fresh namespace named after `prefix`, then deletes the namespace (with
/// everything in it) whatever happened, and re-raises a panic of `body`.
pub async fn with_namespace<F, Fut>(client: Client, prefix: &str, body: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let ns = unique_name(prefix).replace('_', "-").to_lowercase();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {ns}: {e}"));
    let outcome = AssertUnwindSafe(body(client, ns.clone()))
        .catch_unwind()
        .await;
    if let Err(e) = namespaces.delete(&ns, &DeleteParams::default()).await {
        eprintln!("cleanup: cannot delete namespace {ns}: {e}");
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Polls `check` every 250 ms until it returns `Ok`, or fails after `deadline` with the
/// last state `check` described.
pub async fn wait_for<T, Fut>(what: &str, deadline: Duration, mut check: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    loop {
        match check().await {
            Ok(v) => return v,
            Err(state) if start.elapsed() > deadline => {
                panic!("timed out after {deadline:?} waiting for {what}; last state: {state}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// The collector image the stack built from the current build (`tracehouse/collector:<version>`).
pub fn collector_image() -> String {
    stack_var("TRACEHOUSE_COLLECTOR_IMAGE")
}

/// The operator image the stack built from the current build (`tracehouse/operator:<version>`).
pub fn operator_image() -> String {
    stack_var("TRACEHOUSE_OPERATOR_IMAGE")
}

/// Whether the pod's `Ready` condition is true.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The process id behind the pod's first container: the node agent reports
/// `process://<pid>`, the pid (as this machine sees it) of the container's own program.
pub fn pod_pid(pod: &Pod) -> Option<i32> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .container_id
        .as_deref()?
        .strip_prefix("process://")?
        .parse()
        .ok()
}

/// `GET http://ip:port/path` over a plain socket: the status code and the body.
pub async fn http_get(ip: &str, port: u16, path: &str) -> Result<(u16, String), String> {
    let connect = tokio::net::TcpStream::connect((ip, port));
    let mut stream = tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .map_err(|_| format!("connect {ip}:{port} timed out"))?
        .map_err(|e| format!("connect {ip}:{port}: {e}"))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {ip}:{port}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
        .await
        .map_err(|_| "read timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("malformed response {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}
