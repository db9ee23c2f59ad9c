//! Leader election on a `coordination.k8s.io/v1` Lease, so two operator replicas can run and
//! only one reconciles. kube-rs has no elector of its own; this follows client-go's rules:
//!
//! - a Lease whose holder is empty, or whose record has not changed for `leaseDurationSeconds`
//!   *as measured by our own monotonic clock* (never by comparing clocks across machines), may
//!   be taken;
//! - every write carries the `resourceVersion` read just before, so of two candidates racing
//!   for an expired Lease exactly one wins (the other gets 409 Conflict);
//! - the holder renews every `renew_every`; if it cannot renew for a whole lease duration it
//!   must stop reconciling, because another replica may already have taken over;
//! - on a clean shutdown the holder releases the Lease so a standby takes over at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

/// Where the Lease is and who we are.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// Unique per replica: the pod name (a restarted container of the same pod may take
    /// its own Lease back at once).
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_every: Duration,
    pub retry_every: Duration,
}

impl LeaseConfig {
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
            retry_every: Duration::from_secs(2),
        }
    }
}

/// Why holding the Lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Shutdown was requested; the Lease is still held.
    Shutdown,
    /// Renewal failed for a whole lease duration, or someone else holds the Lease now.
    Lost,
}

/// The Lease record as last seen, and when we saw it change.
struct Observed {
    resource_version: Option<String>,
    at: Instant,
}

pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    observed: Option<Observed>,
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

impl LeaderElector {
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(15)
    }

    /// One attempt: `true` when we hold the Lease afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let me = self.config.identity.clone();
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(self.lease_seconds()),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.saw(&created);
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let rv = lease.metadata.resource_version.clone();
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|o| o.resource_version != rv);
        if changed {
            self.saw(&lease);
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let held_for = Duration::from_secs(
            spec.lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .unwrap_or(15),
        );
        let expired = self
            .observed
            .as_ref()
            .is_some_and(|o| o.at.elapsed() > held_for);
        if holder != me {
            if !holder.is_empty() && !expired {
                return Ok(false);
            }
            spec.holder_identity = Some(me);
            spec.acquire_time = Some(now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(now());
        spec.lease_duration_seconds = Some(self.lease_seconds());
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                self.saw(&updated);
                Ok(true)
            }
            // Someone else wrote first: they won this round.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn saw(&mut self, lease: &Lease) {
        self.observed = Some(Observed {
            resource_version: lease.metadata.resource_version.clone(),
            at: Instant::now(),
        });
    }

    /// Waits until we hold the Lease; `false` when shutdown came first.
    pub async fn acquire(&mut self, shutdown: &CancellationToken) -> bool {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return true,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: cannot read or write the Lease")
                }
            }
            tokio::select! {
                () = tokio::time::sleep(self.config.retry_every) => {}
                () = shutdown.cancelled() => return false,
            }
        }
    }

    /// Renews until shutdown or until the Lease is lost. On shutdown the Lease is still
    /// ours: stop reconciling, then [`release`](Self::release) it.
    pub async fn hold(&mut self, shutdown: &CancellationToken) -> Ended {
        let mut last_renewal = Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.config.renew_every) => {}
                // The caller stops reconciling first, then calls `release`.
                () = shutdown.cancelled() => return Ended::Shutdown,
            }
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewal = Instant::now(),
                Ok(false) => {
                    tracing::error!("leader election: another replica holds the Lease now");
                    return Ended::Lost;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: renewal failed");
                    // Stop before the Lease can have expired for the others.
                    if last_renewal.elapsed() + self.config.renew_every
                        >= self.config.lease_duration
                    {
                        return Ended::Lost;
                    }
                }
            }
        }
    }

    /// Gives the Lease up (holder emptied), so a standby need not wait for it to expire.
    pub async fn release(&mut self) {
        let result = async {
            let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
                return Ok(());
            };
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(());
            }
            spec.holder_identity = None;
            spec.renew_time = Some(now());
            self.api
                .replace(&self.config.name, &PostParams::default(), &lease)
                .await
                .map(|_| ())
        }
        .await;
        match result {
            Ok(()) => tracing::info!("leader election: Lease released"),
            Err(e) => {
                tracing::warn!(error = %e, "leader election: cannot release the Lease; it expires on its own")
            }
        }
    }
}
