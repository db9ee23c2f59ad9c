//! Every Kafka client the collector makes — the group consumer, the watermark reader, the
//! dead-letter producer — configured here and only here, and the OAUTHBEARER token source
//! they share ([`token_source`]).
//!
//! Each starts from the brokers and the user's `kafka.properties` (security, SASL, TLS, …)
//! and adds what its role needs. The user's properties win over our tuning, never over the
//! settings the delivery guarantees rest on ([`PINNED`]): the collector commits only what
//! ClickHouse acknowledged, so the consumer must never commit or store offsets by itself.
//! With `kafka.oauth`, each client is made inside a [`WithToken`] that keeps its token
//! current from the one [`TokenSource`].

use std::sync::Arc;

use rdkafka::config::ClientConfig;
pub use tracehouse_contract::oauth::{TokenSource, WithToken};

use crate::config::KafkaConfig;

/// Consumer settings the at-least-once rules depend on; `kafka.properties` cannot change
/// them (`Config::validate` refuses them there by name, and they are applied last).
pub const PINNED: [(&str, &str); 3] = [
    ("enable.auto.commit", "false"),
    ("enable.auto.offset.store", "false"),
    // Offsets come from the commits of acknowledged batches; with no commit yet, start at
    // the beginning rather than skip what is already in the topic.
    ("auto.offset.reset", "earliest"),
];

/// The settings every client shares: where the brokers are and how to reach them.
fn base<'a>(
    brokers: &str,
    properties: impl IntoIterator<Item = (&'a String, &'a String)>,
    tuning: &[(&str, &str)],
) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    for (k, v) in tuning {
        c.set(*k, *v);
    }
    for (k, v) in properties {
        c.set(k, v);
    }
    c
}

/// The group consumer of the source.
pub fn consumer<'a>(
    brokers: &str,
    group_id: &str,
    properties: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> ClientConfig {
    let c = base(
        brokers,
        properties,
        &[
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("fetch.max.bytes", "8388608"),
            ("max.partition.fetch.bytes", "2097152"),
            ("queued.max.messages.kbytes", "8192"),
            // librdkafka postpones a partition's next fetch by this much once the local
            // queue holds `queued.max.messages.kbytes`; its default (1 s) made one
            // partition deliver about 8 MiB a second however fast it was drained (one
            // partition: 44 K spans/s at 1 s, 217 K at 10 ms; docs/benchmarks.md).
            ("fetch.queue.backoff.ms", "10"),
            ("session.timeout.ms", "30000"),
            ("max.poll.interval.ms", "300000"),
        ],
    );
    of_group(c, group_id)
}

/// A consumer of `group_id` with the settings the delivery guarantees rest on, last.
fn of_group(mut c: ClientConfig, group_id: &str) -> ClientConfig {
    c.set("group.id", group_id);
    for (k, v) in PINNED {
        c.set(k, v);
    }
    c
}

/// The bundle replayer's consumer ([`crate::source`]'s `replay`): assigned the ranges of a
/// recorded bundle, never joining the group (it only assigns) and never committing. It
/// carries the group's id because librdkafka refuses `assign` without one, and the
/// group's ACLs then cover it.
pub fn replayer<'a>(
    brokers: &str,
    group_id: &str,
    properties: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> ClientConfig {
    let c = base(
        brokers,
        properties,
        &[
            // A replay reads a few ranges, often of many partitions: small prefetch, so
            // what it reads past the ranges costs little memory.
            ("fetch.max.bytes", "4194304"),
            ("max.partition.fetch.bytes", "1048576"),
            ("queued.max.messages.kbytes", "4096"),
            ("fetch.queue.backoff.ms", "10"),
        ],
    );
    of_group(c, group_id)
}

/// The client that reads high watermarks for the lag metrics (no group).
pub fn watermarks<'a>(
    brokers: &str,
    properties: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> ClientConfig {
    base(brokers, properties, &[])
}

/// The dead-letter producer. Its own size limit is generous: what a copy may weigh is
/// decided by `kafka.dead_letter_max_bytes` and the topic ([`crate::insert::dead_letter`]).
pub fn dead_letter_producer<'a>(
    brokers: &str,
    properties: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> ClientConfig {
    base(
        brokers,
        properties,
        &[
            ("message.timeout.ms", "30000"),
            ("compression.type", "lz4"),
            ("message.max.bytes", "67108864"),
        ],
    )
}

/// The token source of `kafka.oauth` (none without it), its first token asked for now: a
/// refusal of the client credentials (an HTTP 4xx from the token endpoint) stops the
/// collector with the endpoint's answer, since asking again cannot change it; an endpoint that
/// does not answer yet is asked again by every client while it waits for its token.
pub async fn token_source(k: &KafkaConfig) -> anyhow::Result<Option<Arc<TokenSource>>> {
    let Some(oauth) = &k.oauth else {
        return Ok(None);
    };
    let source = TokenSource::new(oauth.client()?);
    let asking = source.clone();
    match tokio::task::spawn_blocking(move || asking.token()).await? {
        Ok(t) => tracing::info!(
            endpoint = %oauth.token_endpoint, principal = %t.principal, valid_for = ?t.lifetime,
            "OAUTHBEARER token fetched"
        ),
        Err(e) if e.is_refusal() => anyhow::bail!("kafka.oauth: {e}"),
        Err(e) => tracing::warn!("kafka.oauth: {e}; the Kafka clients wait for a token"),
    }
    Ok(Some(source))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn user_properties_win_over_tuning_but_never_over_the_pinned_settings() {
        let p = props(&[
            ("security.protocol", "SASL_SSL"),
            ("session.timeout.ms", "45000"),
            ("enable.auto.commit", "true"),
        ]);
        let c = consumer("b:9092", "g", &p);
        assert_eq!(c.get("bootstrap.servers"), Some("b:9092"));
        assert_eq!(c.get("group.id"), Some("g"));
        assert_eq!(c.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(c.get("session.timeout.ms"), Some("45000"));
        assert_eq!(c.get("enable.auto.commit"), Some("false"));
        assert_eq!(c.get("enable.auto.offset.store"), Some("false"));
    }

    #[test]
    fn the_replayer_assigns_under_the_group_s_id_and_never_commits() {
        let c = replayer("b", "g", &props(&[("enable.auto.commit", "true")]));
        assert_eq!(c.get("group.id"), Some("g"));
        assert_eq!(c.get("enable.auto.commit"), Some("false"));
        assert_eq!(c.get("enable.auto.offset.store"), Some("false"));
    }

    #[test]
    fn a_drained_partition_is_fetched_again_at_once() {
        // librdkafka's 1 s default backoff caps one partition at ~8 MiB/s.
        let c = consumer("b", "g", &props(&[]));
        assert_eq!(c.get("fetch.queue.backoff.ms"), Some("10"));
        let user = consumer("b", "g", &props(&[("fetch.queue.backoff.ms", "100")]));
        assert_eq!(user.get("fetch.queue.backoff.ms"), Some("100"));
    }

    #[test]
    fn every_client_carries_the_security_properties() {
        let p = props(&[("sasl.mechanism", "SCRAM-SHA-512")]);
        for c in [
            consumer("b", "g", &p),
            watermarks("b", &p),
            dead_letter_producer("b", &p),
        ] {
            assert_eq!(c.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        }
        assert_eq!(
            dead_letter_producer("b", &p).get("compression.type"),
            Some("lz4")
        );
    }
}
