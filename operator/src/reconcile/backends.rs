//! The one door to everything a reconcile reads or changes outside Kubernetes: the brokers
//! (partition counts, the dead-letter topic, the consumer group's offsets and its oldest
//! unconsumed record, the broker's offsets retention), the gateway pods' /metrics (the
//! autoscaler's samples), and the traces table's schema.
//!
//! One trait, so that a reconcile runs against the real brokers, pods and server in the
//! operator ([`Live`]) and against fakes in its tests (`reconcile/tests.rs`), where the order
//! of these calls and of the API writes is asserted without a stack. Each call reads once;
//! what is derived from a read (the lag, the autoscaler's sample) is derived by the caller,
//! purely, from the one answer.
//!
//! [`Live`] keeps one Kafka client per pipeline ([`crate::kafka::Clients`]): every call names
//! its pipeline ([`Brokers`]), and [`Backends::forget`] drops the client of one that is gone.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tracehouse_schema::{ConnectionConfig, TableOptions};

use crate::autoscale::PodMetricsSource;
use crate::autoscale::sampler::metrics_url;
use crate::kafka::{Clients, KafkaAccess, KafkaClient, KafkaError, PartitionOffsets};
use crate::schema_step::{self, SchemaOutcome};

/// One pipeline's brokers, as every Kafka read of the reconcile names them.
#[derive(Debug, Clone, Copy)]
pub struct Brokers<'a> {
    /// `namespace/name`: whose client serves the read.
    pub pipeline: &'a str,
    pub access: &'a KafkaAccess,
    /// The pipeline's consumer group, whose offsets are read (never joined).
    pub group: &'a str,
    /// Bounds each request.
    pub timeout: Duration,
}

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

/// The brokers, the gateway pods' metrics ([`PodMetricsSource`], what the autoscaler's
/// sampler reads through) and the ClickHouse schema, as the reconciler sees them.
pub trait Backends: PodMetricsSource + Send + Sync {
    /// Partitions per topic.
    fn partitions<'a>(
        &'a self,
        brokers: Brokers<'a>,
        topics: &'a [String],
    ) -> BoxFuture<'a, Result<BTreeMap<String, i32>, KafkaError>>;

    /// Whether the dead-letter topic exists.
    fn dead_letter_topic<'a>(
        &'a self,
        brokers: Brokers<'a>,
        topic: &'a str,
    ) -> BoxFuture<'a, Result<(), KafkaError>>;

    /// The group's committed and end offsets of every partition in `counts` (partitions per
    /// topic): the lag and the autoscaler's samples are made of them.
    fn offsets<'a>(
        &'a self,
        brokers: Brokers<'a>,
        counts: &'a BTreeMap<String, i32>,
    ) -> BoxFuture<'a, Result<Vec<PartitionOffsets>, KafkaError>>;

    /// When the oldest record the group has not committed was written (ms since the epoch),
    /// over the partitions of `offsets` that are behind.
    fn oldest_unconsumed<'a>(
        &'a self,
        brokers: Brokers<'a>,
        offsets: &'a [PartitionOffsets],
    ) -> BoxFuture<'a, Result<Option<i64>, KafkaError>>;

    /// The broker's `offsets.retention.minutes` (`None`: it does not say); `topic`, one of
    /// the pipeline's, finds a broker to ask.
    fn offsets_retention<'a>(
        &'a self,
        brokers: Brokers<'a>,
        topic: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, KafkaError>>;

    /// Brings the traces table up to date, or only reads it (`schema_step::ensure`).
    fn schema<'a>(
        &'a self,
        request: SchemaRequest<'a>,
    ) -> BoxFuture<'a, Result<SchemaOutcome, tracehouse_schema::Error>>;

    /// Lets go of what is held for `pipeline` (`namespace/name`), which is gone.
    fn forget(&self, pipeline: &str);
}

/// The real brokers, pods and server.
#[derive(Debug)]
pub struct Live {
    kafka: Clients,
    http: reqwest::Client,
}

impl Live {
    /// `scrape_timeout` bounds each pod's /metrics read.
    pub fn new(scrape_timeout: Duration) -> anyhow::Result<Self> {
        // reqwest is built without a default TLS provider; the scrapes are plain HTTP, but
        // the client still wants one installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(scrape_timeout)
            .connect_timeout(scrape_timeout)
            .build()?;
        Ok(Self {
            kafka: Clients::default(),
            http,
        })
    }

    fn client(&self, b: Brokers<'_>) -> Result<std::sync::Arc<KafkaClient>, KafkaError> {
        self.kafka.get(b.pipeline, b.access, b.group, b.timeout)
    }

    /// `result` of a read of `b`, its client dropped if the read says so
    /// (`kafka::clients::keeps_after`).
    fn settle<T>(&self, b: Brokers<'_>, result: Result<T, KafkaError>) -> Result<T, KafkaError> {
        if let Err(e) = &result {
            self.kafka.failed(b.pipeline, e);
        }
        result
    }
}

impl Backends for Live {
    fn partitions<'a>(
        &'a self,
        b: Brokers<'a>,
        topics: &'a [String],
    ) -> BoxFuture<'a, Result<BTreeMap<String, i32>, KafkaError>> {
        async move {
            let read = async { self.client(b)?.partitions(topics, b.timeout).await };
            self.settle(b, read.await)
        }
        .boxed()
    }

    fn dead_letter_topic<'a>(
        &'a self,
        b: Brokers<'a>,
        topic: &'a str,
    ) -> BoxFuture<'a, Result<(), KafkaError>> {
        async move {
            let read = async { self.client(b)?.dead_letter_topic(topic, b.timeout).await };
            self.settle(b, read.await)
        }
        .boxed()
    }

    fn offsets<'a>(
        &'a self,
        b: Brokers<'a>,
        counts: &'a BTreeMap<String, i32>,
    ) -> BoxFuture<'a, Result<Vec<PartitionOffsets>, KafkaError>> {
        async move {
            let read = async { self.client(b)?.offsets(counts, b.timeout).await };
            self.settle(b, read.await)
        }
        .boxed()
    }

    fn oldest_unconsumed<'a>(
        &'a self,
        b: Brokers<'a>,
        offsets: &'a [PartitionOffsets],
    ) -> BoxFuture<'a, Result<Option<i64>, KafkaError>> {
        async move {
            let read = async { self.client(b)?.oldest_unconsumed(offsets, b.timeout).await };
            self.settle(b, read.await)
        }
        .boxed()
    }

    fn offsets_retention<'a>(
        &'a self,
        b: Brokers<'a>,
        topic: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, KafkaError>> {
        // Not settled: this read goes through its own admin connection, whose failure says
        // nothing of the client's, and the client remembers it (`RETENTION_RETRY`).
        async move { self.client(b)?.offsets_retention(topic, b.timeout).await }.boxed()
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

    fn forget(&self, pipeline: &str) {
        self.kafka.forget(pipeline);
    }
}

impl PodMetricsSource for Live {
    fn pod_metrics<'a>(&'a self, ip: &'a str) -> BoxFuture<'a, Result<String, String>> {
        async move {
            let url = metrics_url(ip);
            let text = async {
                self.http
                    .get(&url)
                    .send()
                    .await?
                    .error_for_status()?
                    .text()
                    .await
            };
            text.await.map_err(|e| format!("{url}: {e}"))
        }
        .boxed()
    }
}
