//! What the reconciler reads and changes outside Kubernetes: the brokers (partition counts,
//! the dead-letter topic, the consumer group's lag) and the traces table's schema.
//!
//! One trait, so that a reconcile runs against the real brokers and server in the operator
//! ([`Live`]) and against fakes in its tests (`reconcile/tests.rs`), where the order of
//! these calls and of the API writes is asserted without a stack.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tracehouse_schema::{ConnectionConfig, TableOptions};

use crate::crd::LagStatus;
use crate::kafka::{self, KafkaAccess, KafkaError};
use crate::lag;
use crate::schema_step::{self, SchemaOutcome};

/// The schema step's inputs (`schema_step::ensure`'s arguments).
pub struct SchemaRequest<'a> {
    pub connection: &'a ConnectionConfig,
    pub options: &'a TableOptions,
    /// Recorded in the migration ledger.
    pub applied_by: &'a str,
    pub lock_timeout: Duration,
    /// `schemaMode: Verify`: read where the table stands, change nothing.
    pub verify_only: bool,
}

/// The brokers and the ClickHouse schema, as the reconciler sees them.
pub trait Backends: Send + Sync {
    /// Partitions per topic (`kafka::partitions`).
    fn partitions<'a>(
        &'a self,
        access: &'a KafkaAccess,
        topics: &'a [String],
        timeout: Duration,
    ) -> BoxFuture<'a, Result<BTreeMap<String, i32>, KafkaError>>;

    /// Whether the dead-letter topic exists (`kafka::dead_letter_topic`).
    fn dead_letter_topic<'a>(
        &'a self,
        access: &'a KafkaAccess,
        topic: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), KafkaError>>;

    /// How far `group` is behind on the partitions in `counts` (`lag::read`).
    fn lag<'a>(
        &'a self,
        access: &'a KafkaAccess,
        group: &'a str,
        counts: &'a BTreeMap<String, i32>,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<LagStatus, KafkaError>>;

    /// Brings the traces table up to date, or only reads it (`schema_step::ensure`).
    fn schema<'a>(
        &'a self,
        request: SchemaRequest<'a>,
    ) -> BoxFuture<'a, Result<SchemaOutcome, tracehouse_schema::Error>>;
}

/// The real brokers and server.
#[derive(Debug, Clone, Copy, Default)]
pub struct Live;

impl Backends for Live {
    fn partitions<'a>(
        &'a self,
        access: &'a KafkaAccess,
        topics: &'a [String],
        timeout: Duration,
    ) -> BoxFuture<'a, Result<BTreeMap<String, i32>, KafkaError>> {
        kafka::partitions(access, topics, timeout).boxed()
    }

    fn dead_letter_topic<'a>(
        &'a self,
        access: &'a KafkaAccess,
        topic: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), KafkaError>> {
        kafka::dead_letter_topic(access, topic, timeout).boxed()
    }

    fn lag<'a>(
        &'a self,
        access: &'a KafkaAccess,
        group: &'a str,
        counts: &'a BTreeMap<String, i32>,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<LagStatus, KafkaError>> {
        lag::read(access, group, counts, timeout).boxed()
    }

    fn schema<'a>(
        &'a self,
        r: SchemaRequest<'a>,
    ) -> BoxFuture<'a, Result<SchemaOutcome, tracehouse_schema::Error>> {
        schema_step::ensure(
            r.connection,
            r.options,
            r.applied_by,
            r.lock_timeout,
            r.verify_only,
        )
        .boxed()
    }
}
