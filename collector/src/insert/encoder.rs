//! The configured encoder: an [`Encoder`] for the table and insert format the
//! configuration names, bound to the topic's record encoding, behind the workers'
//! [`RecordEncoder`] interface (which the unit tests of the workers and of the insert stage
//! fill with a toy encoder instead).

use std::sync::Arc;

use bytes::Bytes;
use tracehouse_schema::{InsertFormat, SettingError, TableOptions, TableSettings};

use crate::config::Config;
use crate::decode;
use crate::encode::{Encoder, EncoderOptions};
use crate::freshness::EndTimes;
use crate::metrics::{Metrics, RuleLabels};
use crate::process::Processor;
use crate::workers::{EncoderFactory, RecordEncoder};
use prometheus_client::metrics::counter::Counter;

/// The table options the collector writes to, derived from its configuration (the
/// engine, TTL and the rest only matter to migrations, which the operator or the
/// `schema` command run).
pub fn table_options(cfg: &Config) -> Result<TableOptions, SettingError> {
    let c = &cfg.clickhouse;
    TableOptions::try_from(&TableSettings {
        attributes: c.attributes,
        attribute_keys_columns: c.attribute_keys,
        ..TableSettings::new(&c.database, &c.table)
    })
}

/// An [`Encoder`] and the encoding of the records it is fed.
struct ConfiguredEncoder {
    encoder: Encoder,
    encoding: decode::Encoding,
    /// Per processing rule: its dropped, sampled-out and redacted counters.
    processed: Arc<[[Counter; 3]]>,
}

impl RecordEncoder for ConfiguredEncoder {
    fn insert_query(&self) -> String {
        self.encoder.insert_sql().to_string()
    }

    fn append(&mut self, payload: &[u8]) -> Result<u64, decode::DecodeError> {
        let n = self.encoder.push_record(payload, self.encoding);
        if !self.processed.is_empty() {
            for (c, counters) in self.encoder.drain_process_counts().zip(&*self.processed) {
                for (v, counter) in [c.dropped, c.sampled_out, c.redacted]
                    .into_iter()
                    .zip(counters)
                {
                    if v > 0 {
                        counter.inc_by(v);
                    }
                }
            }
        }
        n.map(|n| n as u64)
    }

    fn finish(&mut self) -> Bytes {
        self.encoder.finish()
    }

    fn compression(&self) -> crate::config::Compression {
        self.encoder.compression()
    }

    fn take_end_times(&mut self) -> EndTimes {
        self.encoder.take_end_times()
    }
}

/// The shortest `processing.hash_key_file` key taken.
pub const MIN_HASH_KEY_BYTES: usize = 32;

/// The processing rules of `cfg`, compiled (with the hash key read from its file).
pub fn processor(cfg: &Config) -> Result<Processor, String> {
    let p = &cfg.processing;
    let key = match &p.hash_key_file {
        Some(path) => Some(std::fs::read(path).map_err(|e| {
            format!(
                "invalid `processing.hash_key_file`: cannot read {}: {e}",
                path.display()
            )
        })?),
        None => None,
    };
    let key = key.as_deref().map(|k| k.strip_suffix(b"\n").unwrap_or(k));
    if let Some(k) = key
        && k.len() < MIN_HASH_KEY_BYTES
    {
        return Err(format!(
            "invalid `processing.hash_key_file`: the key has {} bytes, at least {MIN_HASH_KEY_BYTES} \
             are needed (as the OpenTelemetry Collector's redaction processor asks of an HMAC-SHA256 key)",
            k.len()
        ));
    }
    Processor::new(p, key).map_err(|e| e.to_string())
}

/// Build the per-thread encoder factory (checked once here, so workers cannot fail), for the
/// configured `clickhouse.insert_format` (`auto` as known without the server: see
/// [`crate::insert::format`], which may build another for the server at hand).
/// `metrics` receives what the processing rules did.
pub fn factory(cfg: &Config, metrics: &Metrics) -> Result<EncoderFactory, String> {
    factory_with(cfg, metrics, cfg.clickhouse.insert_format)
}

/// [`factory`] for `format` instead of the configured one.
pub fn factory_with(
    cfg: &Config,
    metrics: &Metrics,
    format: InsertFormat,
) -> Result<EncoderFactory, String> {
    let processor = Arc::new(processor(cfg)?);
    let processed: Arc<[[Counter; 3]]> = processor
        .names()
        .iter()
        .map(|rule| {
            ["dropped", "sampled_out", "redacted"].map(|outcome| {
                metrics
                    .spans_processed
                    .get_or_create(&RuleLabels {
                        rule: rule.clone(),
                        outcome,
                    })
                    .clone()
            })
        })
        .collect();
    let table = table_options(cfg).map_err(|e| e.to_string())?;
    // `auto` is resolved for the table by the encoder.
    let encoding = cfg.kafka.encoding;
    let options = EncoderOptions {
        max_expanded_record_bytes: cfg.limits.max_expanded_record_bytes,
        compression: cfg.clickhouse.compression,
        ..EncoderOptions::new(format)
    };
    Encoder::with_options(&table, options).map_err(|e| format!("clickhouse: {e}"))?;
    Ok(Arc::new(move || {
        let encoder = Encoder::with_options(&table, options)
            .expect("checked when the factory was built")
            .with_processor(processor.clone());
        Box::new(ConfiguredEncoder {
            encoder,
            encoding,
            processed: processed.clone(),
        }) as Box<dyn RecordEncoder>
    }))
}
