//! The Kafka clients of every pipeline this operator reconciles: one [`KafkaClient`] per
//! pipeline, reused by every reconcile and autoscaler sample of it, so a pipeline costs one
//! TLS and SASL handshake per broker instead of one per read (a managed cluster counts
//! connection attempts: tens of pipelines reading every 30 s would reach its limits).
//!
//! **The rule** ([`rule`], pure): a pipeline's client is kept while the fingerprint of its
//! Kafka settings ([`fingerprint`]: brokers, client properties with the Secrets' contents
//! inline, consumer group) stays the same; a changed fingerprint (a rotated password or
//! certificate, another bootstrap address) replaces it; a deleted pipeline's is dropped
//! ([`Clients::forget`]). A client whose read failed to reach or be let in by the brokers is
//! dropped too ([`keeps_after`]): kept, librdkafka would redial them every few seconds
//! between reconciles — a wrong password tried again and again, which managed clusters
//! count against the account — while the reconcile's own retries back off. A topic-level
//! failure (a missing topic) keeps it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::client::KafkaClient;
use super::{KafkaAccess, KafkaError};

/// What [`Clients::get`] does with a pipeline's client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cached {
    /// The settings are the ones the client was made with.
    Reuse,
    /// No client yet.
    Create,
    /// The settings changed: a new client, the old one dropped.
    Replace,
}

/// Pure: what to do with the client held for a pipeline (`held`: its fingerprint, if any)
/// when the reconcile wants `wanted`.
pub fn rule(held: Option<&str>, wanted: &str) -> Cached {
    match held {
        None => Cached::Create,
        Some(h) if h == wanted => Cached::Reuse,
        Some(_) => Cached::Replace,
    }
}

/// Pure: whether a pipeline's client is kept after a read failed with `error`: yes when the
/// brokers answered (about a topic), no when they could not be reached or refused the client.
pub fn keeps_after(error: &KafkaError) -> bool {
    match error {
        KafkaError::TopicNotFound { .. }
        | KafkaError::DeadLetterTopicNotFound { .. }
        | KafkaError::Topic { .. } => true,
        KafkaError::Unreachable { .. }
        | KafkaError::AuthFailed { .. }
        | KafkaError::TokenFailed { .. }
        | KafkaError::TlsFailed { .. }
        | KafkaError::ProtocolMismatch { .. }
        | KafkaError::Task(_) => false,
    }
}

/// `sha256:<hex>` over the brokers, the consumer group, every client property in order and
/// the OAuth client: tells settings apart without keeping any value (properties hold
/// passwords and keys, the OAuth client its secret).
pub fn fingerprint(access: &KafkaAccess, group: &str) -> String {
    let mut h = Sha256::new();
    let mut field = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(access.brokers.as_bytes());
    field(group.as_bytes());
    for (k, v) in &access.properties {
        field(k.as_bytes());
        field(v.as_bytes());
    }
    if let Some(o) = &access.oauth {
        field(b"oauth");
        field(o.token_endpoint.as_bytes());
        field(o.client_id.as_bytes());
        field(o.client_secret.as_bytes());
        field(o.scope.as_deref().unwrap_or_default().as_bytes());
        for (k, v) in &o.extensions {
            field(k.as_bytes());
            field(v.as_bytes());
        }
        field(o.ca_pem.as_deref().unwrap_or_default().as_bytes());
    }
    let hex: String = h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

struct Entry {
    fingerprint: String,
    client: Arc<KafkaClient>,
}

/// One client per pipeline (keyed `namespace/name`).
#[derive(Default)]
pub struct Clients {
    entries: Mutex<HashMap<String, Entry>>,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients")
            .field("pipelines", &self.len())
            .finish()
    }
}

impl Clients {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pipelines holding a client.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The client of `pipeline` for these settings: the one it has, or a new one ([`rule`]).
    /// `timeout` bounds the new client's socket operations.
    pub fn get(
        &self,
        pipeline: &str,
        access: &KafkaAccess,
        group: &str,
        timeout: Duration,
    ) -> Result<Arc<KafkaClient>, KafkaError> {
        let wanted = fingerprint(access, group);
        let mut entries = self.entries();
        let held = entries.get(pipeline).map(|e| e.fingerprint.as_str());
        let cached = rule(held, &wanted);
        if cached == Cached::Reuse
            && let Some(e) = entries.get(pipeline)
        {
            return Ok(e.client.clone());
        }
        // Creating a librdkafka client only configures it: it connects on its first read.
        let client = Arc::new(KafkaClient::connect(access, group, timeout)?);
        let old = entries.insert(
            pipeline.to_owned(),
            Entry {
                fingerprint: wanted,
                client: client.clone(),
            },
        );
        drop(entries);
        if cached == Cached::Replace {
            tracing::info!(
                pipeline,
                "Kafka settings changed: a new client for the pipeline"
            );
        }
        release(old.map(|e| e.client));
        Ok(client)
    }

    /// After a read of `pipeline` failed with `error`: drops its client unless
    /// [`keeps_after`] says otherwise.
    pub fn failed(&self, pipeline: &str, error: &KafkaError) {
        if !keeps_after(error) {
            tracing::debug!(pipeline, %error, "Kafka client dropped after a failed read");
            self.forget(pipeline);
        }
    }

    /// Drops the client of a pipeline that is gone.
    pub fn forget(&self, pipeline: &str) {
        let old = self.entries().remove(pipeline);
        release(old.map(|e| e.client));
    }
}

/// Drops a client off the async workers: destroying a librdkafka client waits for its
/// threads (a read still running holds its own reference and drops it when done).
fn release(client: Option<Arc<KafkaClient>>) {
    if let Some(client) = client {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(move || drop(client));
            }
            Err(_) => drop(client),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn access(password: &str) -> KafkaAccess {
        KafkaAccess {
            brokers: "kafka:9094".into(),
            properties: BTreeMap::from([
                ("security.protocol".into(), "SASL_SSL".into()),
                ("sasl.mechanism".into(), "SCRAM-SHA-512".into()),
                ("sasl.username".into(), "writer".into()),
                ("sasl.password".into(), password.into()),
            ]),
            ..Default::default()
        }
    }

    #[test]
    fn a_client_is_reused_while_the_settings_stay_and_replaced_when_they_change() {
        let a = fingerprint(&access("hunter2"), "tracehouse.shop.orders");
        assert_eq!(rule(None, &a), Cached::Create);
        assert_eq!(rule(Some(&a), &a), Cached::Reuse);
        let rotated = fingerprint(&access("hunter3"), "tracehouse.shop.orders");
        assert_eq!(rule(Some(&a), &rotated), Cached::Replace);
        let other_group = fingerprint(&access("hunter2"), "tracehouse.shop.other");
        assert_eq!(rule(Some(&a), &other_group), Cached::Replace);
        let mut moved = access("hunter2");
        moved.brokers = "kafka-2:9094".into();
        assert_ne!(fingerprint(&moved, "tracehouse.shop.orders"), a);
    }

    #[test]
    fn a_rotated_oauth_client_secret_is_another_client() {
        let with = |secret: &str| KafkaAccess {
            oauth: Some(tracehouse_contract::oauth::OAuthClient {
                token_endpoint: "https://idp/token".into(),
                client_id: "tracehouse".into(),
                client_secret: secret.into(),
                scope: None,
                extensions: BTreeMap::new(),
                ca_pem: None,
            }),
            ..access("unused")
        };
        let a = fingerprint(&with("s3cr3t"), "g");
        assert_eq!(a, fingerprint(&with("s3cr3t"), "g"));
        assert_ne!(a, fingerprint(&with("rotated"), "g"));
        assert_ne!(a, fingerprint(&access("unused"), "g"));
        assert!(!a.contains("s3cr3t"));
    }

    #[test]
    fn the_fingerprint_never_shows_a_value_and_fields_do_not_run_together() {
        let a = fingerprint(&access("hunter2"), "g");
        assert!(a.starts_with("sha256:") && !a.contains("hunter2"), "{a}");
        // "ab" + "c" and "a" + "bc" are different settings.
        let one = KafkaAccess {
            brokers: "ab".into(),
            properties: BTreeMap::new(),
            ..Default::default()
        };
        let two = KafkaAccess {
            brokers: "a".into(),
            properties: BTreeMap::new(),
            ..Default::default()
        };
        assert_ne!(fingerprint(&one, "c"), fingerprint(&two, "bc"));
    }

    #[test]
    fn a_client_the_brokers_refused_or_never_answered_is_dropped_a_missing_topic_keeps_it() {
        let brokers = || "kafka:9094".to_owned();
        let kept = [
            KafkaError::TopicNotFound {
                topic: "spans".into(),
                brokers: brokers(),
            },
            KafkaError::DeadLetterTopicNotFound {
                topic: "dlq".into(),
                brokers: brokers(),
            },
        ];
        for e in &kept {
            assert!(keeps_after(e), "{e}");
        }
        let dropped = [
            KafkaError::AuthFailed {
                brokers: brokers(),
                detail: "SASL authentication error".into(),
            },
            KafkaError::TlsFailed {
                brokers: brokers(),
                detail: "certificate verify failed".into(),
            },
            KafkaError::ProtocolMismatch {
                brokers: brokers(),
                detail: "connecting to a SSL listener?".into(),
            },
            KafkaError::Unreachable {
                brokers: brokers(),
                source: rdkafka::error::KafkaError::MetadataFetch(
                    rdkafka::types::RDKafkaErrorCode::AllBrokersDown,
                ),
            },
        ];
        for e in &dropped {
            assert!(!keeps_after(e), "{e}");
        }
    }

    #[tokio::test]
    async fn one_client_per_pipeline_until_its_settings_change_or_it_is_forgotten() {
        // Making a client does not connect, so no broker is needed here.
        let clients = Clients::default();
        let t = Duration::from_secs(1);
        let first = clients
            .get("shop/orders", &access("hunter2"), "g", t)
            .unwrap();
        let again = clients
            .get("shop/orders", &access("hunter2"), "g", t)
            .unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let other = clients
            .get("shop/other", &access("hunter2"), "g", t)
            .unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(clients.len(), 2);
        let rotated = clients
            .get("shop/orders", &access("hunter3"), "g", t)
            .unwrap();
        assert!(!Arc::ptr_eq(&first, &rotated));
        assert_eq!(clients.len(), 2);
        // A missing topic keeps the client; a refused password drops it.
        let missing = KafkaError::TopicNotFound {
            topic: "spans".into(),
            brokers: "kafka:9094".into(),
        };
        clients.failed("shop/orders", &missing);
        assert_eq!(clients.len(), 2);
        let refused = KafkaError::AuthFailed {
            brokers: "kafka:9094".into(),
            detail: "SASL authentication error".into(),
        };
        clients.failed("shop/other", &refused);
        assert_eq!(clients.len(), 1);
        clients.forget("shop/orders");
        assert!(clients.is_empty());
    }
}
