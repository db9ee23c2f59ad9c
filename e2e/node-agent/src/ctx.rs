//! What every part of the node agent shares: the API client, the node's identity, the image
//! store, the pod IP pool, directories and timing settings.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};

use crate::images::ImageStore;
use crate::ips::IpPool;

/// Exponential backoff: `initial`, doubled per attempt, capped at `max`.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    pub fn delay(&self, attempt: u32) -> Duration {
        self.initial
            .checked_mul(1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX))
            .unwrap_or(self.max)
            .min(self.max)
    }
}

pub struct Ctx {
    pub client: Client,
    pub node_name: String,
    pub kubelet_version: String,
    /// Port of the kubelet HTTPS server (`streaming`), reported as the Node's
    /// `daemonEndpoints.kubeletEndpoint.port`; `None` when it is not served.
    pub kubelet_port: Option<u16>,
    /// The node's address (`status.hostIP` of its pods).
    pub host_ip: Ipv4Addr,
    pub images: ImageStore,
    /// The agent's own executable, which `unshare` runs as a container's init (see `sandbox`).
    pub agent_exe: PathBuf,
    pub ips: Mutex<IpPool>,
    pub pod_capacity: u32,
    /// Per-pod working directories (`<uid>/volumes/...`).
    pub pods_dir: PathBuf,
    /// Process-group records of running containers (see `process`).
    pub pids_dir: PathBuf,
    /// Container logs, `<namespace>_<pod>_<container>.log`; kept after the pod is gone.
    pub log_dir: PathBuf,
    /// The API server's URL, given to pods as `KUBERNETES_SERVICE_HOST`/`_PORT`.
    pub api_server: String,
    pub restart_backoff: Backoff,
    /// Upper bound of a pod's grace period when the node agent itself shuts down.
    pub shutdown_grace: Duration,
    pub recorder: Recorder,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    /// Publishes an Event about `pod`. Events are diagnostics: failing to publish one (the
    /// namespace is being deleted, say) is logged and otherwise ignored.
    pub async fn event(&self, pod: &Pod, type_: EventType, reason: &str, note: String) {
        let ev = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: reason.to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &pod.object_ref(&())).await {
            tracing::debug!(reason, error = %e, "cannot publish event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let b = Backoff {
            initial: Duration::from_secs(2),
            max: Duration::from_secs(60),
        };
        let secs: Vec<u64> = (0..7).map(|a| b.delay(a).as_secs()).collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(60));
    }
}
