//! The start-up check: before consuming, look at the table the collector will write to —
//! is it there, is its shape what the inserts need, is its deduplication window large
//! enough for the partitions of the topics — and say so. The judgement is the schema
//! crate's ([`tracehouse_schema::table_check`]); this is its thin IO shell.
//!
//! What it does with each answer, and why:
//! - the table is missing: wait for it (logged every 30 s) — the operator's migrations may
//!   still be running, and consuming now would only turn every insert into a retry;
//! - its shape differs: an error naming each difference, and go on — inserts then fail with
//!   the server's own error, which the retry policy and the rejection breaker
//!   ([`crate::insert::breaker`]) keep from losing data;
//! - its window is off or smaller than the partitions need: a warning with both numbers
//!   (`tracehouse_dedup_window_blocks` and `tracehouse_dedup_window_needed_blocks` show
//!   them): a replay after a crash may then duplicate rows, nothing is lost;
//! - ClickHouse or Kafka cannot be asked: a warning, and go on (the pipeline's own
//!   reachability handling takes over).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use tracehouse_schema::TlsConfig;
use tracehouse_schema::client::{ConnectionConfig, Server};
use tracehouse_schema::dedup_window::PipelineShape;
use tracehouse_schema::table_check::{self, TableProblem};

use crate::config::{ClickHouseConfig, Config, ConfigError};
use crate::insert::encoder::table_options;
use crate::kafka_clients::{self, TokenSource, WithToken};
use crate::metrics::Metrics;

/// How often a missing table is looked for again.
const MISSING_TABLE_POLL: Duration = Duration::from_secs(2);

/// The partitions of `cfg`'s topics, summed (`None` when Kafka cannot say in 10 s).
fn topic_partitions(cfg: &Config, oauth: Option<&Arc<TokenSource>>) -> Option<u64> {
    let k = &cfg.kafka;
    let consumer: BaseConsumer = kafka_clients::watermarks(&k.brokers, &k.properties)
        .create()
        .ok()?;
    let consumer = WithToken::new(consumer, oauth);
    let mut total = 0u64;
    for topic in &k.topics {
        let md = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .ok()?;
        total += md.topics().first()?.partitions().len() as u64;
    }
    Some(total)
}

/// TLS to ClickHouse from the files `clickhouse.tls` names (the CA bundle, the client
/// certificate and key), read now; a file that cannot be read names the field.
pub fn clickhouse_tls(c: &ClickHouseConfig) -> Result<TlsConfig, ConfigError> {
    let t = &c.tls;
    TlsConfig::from_files(
        t.ca_file.as_deref(),
        t.client_cert_file.as_deref(),
        t.client_key_file.as_deref(),
        t.insecure_skip_verify,
    )
    .map_err(|e| ConfigError::Invalid {
        field: "clickhouse.tls",
        reason: e.to_string(),
    })
}

/// Check the table; returns when the collector may start consuming (or `stop` resolved,
/// then `false`).
pub async fn check(
    cfg: &Config,
    oauth: Option<&Arc<TokenSource>>,
    metrics: &Metrics,
    stop: impl Future<Output = ()>,
) -> bool {
    let c = &cfg.clickhouse;
    let server = match (c.credentials(), clickhouse_tls(c), table_options(cfg)) {
        (Ok(creds), Ok(tls), Ok(opts)) => Server::new(&ConnectionConfig {
            url: c.url.clone(),
            user: Some(creds.user),
            password: Some(creds.password),
            tls,
        })
        .map(|s| (s, opts)),
        _ => return true, // validated before; nothing to check with
    };
    let Ok((server, opts)) = server else {
        return true;
    };
    let partitions = {
        let cfg = cfg.clone();
        let oauth = oauth.cloned();
        tokio::task::spawn_blocking(move || topic_partitions(&cfg, oauth.as_ref()))
            .await
            .ok()
            .flatten()
    };
    let need = partitions.map(|p| {
        PipelineShape::new(p, Duration::from_millis(cfg.batch.linger_ms)).required_window()
    });
    if let Some(n) = need {
        metrics.dedup_window_needed.set(n as i64);
    }
    tokio::pin!(stop);
    let mut waited = 0u32;
    loop {
        let found = tokio::select! {
            r = table_check::check_table(&server, &opts, need) => r,
            () = &mut stop => return false,
        };
        let check = match found {
            Ok(check) => check,
            Err(e) => {
                tracing::warn!(error = %e, "cannot check the traces table at start; going on");
                return true;
            }
        };
        if let Some(w) = check.dedup_window {
            metrics.dedup_window.set(w as i64);
        }
        metrics
            .dedup_window_seconds
            .set(check.dedup_window_seconds.unwrap_or(0) as i64);
        if check.problems.contains(&TableProblem::Missing) {
            if waited.is_multiple_of(15) {
                tracing::error!(database = %opts.database, table = %opts.table, "the traces table does not exist; waiting for it (run the schema migrations: the operator does, or `tracehouse-collector schema apply`)");
            }
            waited += 1;
            tokio::select! {
                () = tokio::time::sleep(MISSING_TABLE_POLL) => continue,
                () = &mut stop => return false,
            }
        }
        for p in &check.problems {
            if p.is_fatal() {
                tracing::error!(problem = %p, "the traces table is not what the collector writes; inserts will fail until it is fixed (nothing is skipped meanwhile)");
            } else {
                tracing::warn!(problem = %p, partitions = ?partitions, linger_ms = cfg.batch.linger_ms, "deduplication window");
            }
        }
        if check.problems.is_empty() {
            tracing::info!(dedup_window = ?check.dedup_window, needed = ?need, partitions = ?partitions, "traces table checked");
        }
        return true;
    }
}
