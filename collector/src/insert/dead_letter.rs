//! The dead-letter topic: where a skipped record is copied with its provenance, and the
//! rule that keeps a copy that can never be delivered from stalling its partition.
//!
//! Invariants:
//! 1. a copy is bounded: a payload over `max_copy_bytes` is cut to that size, and the
//!    headers say so (`tracehouse.payload.bytes`, `tracehouse.payload.truncated`); the
//!    default stays under the broker's default `max.message.bytes` (1 MiB), so an
//!    `oversized` record — over `limits.max_record_bytes` by definition — still parks;
//! 2. a produce error is classified once ([`ParkError::permanent`]): transient errors (the
//!    broker is down, a leader moves, a timeout) are retried by the insert stage with
//!    backoff, for as long as the partition is held; permanent ones (the topic refuses the
//!    message's size or format) are answered by a smaller copy — the headers alone — and if
//!    even that is refused the copy is given up, counted
//!    (`tracehouse_dead_letter_failures_total`) and logged with the record's provenance;
//! 3. so no record can hold its batch's acknowledgement forever: the committed offset keeps
//!    moving, and a restart does not replay everything since.

use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::batch::{RecordBatch, Skipped};

/// One copy to park: a skipped record's payload (perhaps cut) and where it came from.
#[derive(Debug, Clone, Copy)]
pub struct Letter<'a> {
    pub batch: &'a RecordBatch,
    pub skipped: &'a Skipped,
    /// What is sent: the payload, its first bytes, or nothing.
    pub payload: &'a [u8],
    /// The size of the record's whole payload.
    pub original_bytes: usize,
}

impl Letter<'_> {
    pub fn truncated(&self) -> bool {
        self.payload.len() < self.original_bytes
    }
}

/// Why a copy was not parked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParkError {
    /// The same copy would be refused again: send a smaller one or give up.
    pub permanent: bool,
    pub message: String,
}

/// Where skipped records go: one attempt to park a copy.
pub trait DeadLetterSink: Send + Sync + 'static {
    fn park(
        &self,
        letter: &Letter<'_>,
    ) -> impl std::future::Future<Output = Result<(), ParkError>> + Send;
}

/// The copies to try for a skipped record, largest first: the payload (cut to `max_bytes`),
/// then the headers alone.
pub fn copies(payload: &[u8], max_bytes: usize) -> [&[u8]; 2] {
    [&payload[..payload.len().min(max_bytes)], &[]]
}

/// Whether a produce error is the message's fault (the same copy is refused again).
pub fn is_permanent(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::InvalidMessageSize
            | RDKafkaErrorCode::MessageBatchTooLarge
            | RDKafkaErrorCode::InvalidRecord
            | RDKafkaErrorCode::InvalidMessage
            | RDKafkaErrorCode::InvalidRequiredAcks
    )
}

fn classify(e: &KafkaError) -> ParkError {
    let permanent = e.rdkafka_error_code().is_some_and(is_permanent);
    ParkError {
        permanent,
        message: e.to_string(),
    }
}

/// The dead-letter topic: the record's payload, with headers naming its source topic,
/// partition and offset, and why it was skipped.
#[derive(Clone)]
pub struct KafkaDeadLetters {
    pub producer: FutureProducer,
    pub topic: String,
}

impl DeadLetterSink for KafkaDeadLetters {
    async fn park(&self, letter: &Letter<'_>) -> Result<(), ParkError> {
        let (batch, skipped) = (letter.batch, letter.skipped);
        let offset = skipped.offset.to_string();
        let partition = batch.partition.to_string();
        let original = letter.original_bytes.to_string();
        let mut headers = OwnedHeaders::new()
            .insert(Header {
                key: "tracehouse.source.topic",
                value: Some(batch.topic.as_bytes()),
            })
            .insert(Header {
                key: "tracehouse.source.partition",
                value: Some(partition.as_bytes()),
            })
            .insert(Header {
                key: "tracehouse.source.offset",
                value: Some(offset.as_bytes()),
            })
            .insert(Header {
                key: "tracehouse.reason",
                value: Some(skipped.reason.label().as_bytes()),
            })
            .insert(Header {
                key: "tracehouse.detail",
                value: Some(skipped.detail.as_bytes()),
            })
            .insert(Header {
                key: "tracehouse.payload.bytes",
                value: Some(original.as_bytes()),
            });
        if letter.truncated() {
            headers = headers.insert(Header {
                key: "tracehouse.payload.truncated",
                value: Some(b"true".as_slice()),
            });
        }
        let record = FutureRecord::<(), [u8]>::to(&self.topic)
            .payload(letter.payload)
            .headers(headers);
        self.producer
            .send(record, Duration::from_secs(30))
            .await
            .map(|_| ())
            .map_err(|(e, _)| classify(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_DEAD_LETTER_MAX_BYTES;

    #[test]
    fn a_copy_is_cut_to_the_bound_then_the_headers_alone() {
        let payload = vec![7u8; 3 << 20];
        let [first, last] = copies(&payload, DEFAULT_DEAD_LETTER_MAX_BYTES);
        assert_eq!(first.len(), DEFAULT_DEAD_LETTER_MAX_BYTES);
        assert!(last.is_empty());
        let [small, _] = copies(b"abc", DEFAULT_DEAD_LETTER_MAX_BYTES);
        assert_eq!(small, b"abc");
    }

    #[test]
    fn size_and_format_refusals_are_permanent_outages_are_not() {
        for code in [
            RDKafkaErrorCode::MessageSizeTooLarge,
            RDKafkaErrorCode::MessageBatchTooLarge,
            RDKafkaErrorCode::InvalidRecord,
        ] {
            let e = KafkaError::MessageProduction(code);
            assert!(classify(&e).permanent, "{code:?}");
        }
        for code in [
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::NotLeaderForPartition,
            RDKafkaErrorCode::UnknownTopicOrPartition,
        ] {
            let e = KafkaError::MessageProduction(code);
            assert!(!classify(&e).permanent, "{code:?}");
        }
    }
}
