//! The configured encoder: an [`Encoder`] for the table and insert format the
//! configuration names, bound to the topic's record encoding, behind the workers'
//! [`RecordEncoder`] interface (which the unit tests of the workers and of the insert stage
//! fill with a toy encoder instead).

use std::sync::Arc;

use bytes::Bytes;
use tracehouse_schema::{SettingError, TableOptions, TableSettings};

use crate::config::Config;
use crate::decode;
use crate::encode::{Encoder, EncoderOptions};
use crate::freshness::EndTimes;
use crate::workers::{EncoderFactory, RecordEncoder};

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
}

impl RecordEncoder for ConfiguredEncoder {
    fn insert_query(&self) -> String {
        self.encoder.insert_sql().to_string()
    }

    fn append(&mut self, payload: &[u8]) -> Result<u64, decode::DecodeError> {
        self.encoder
            .push_record(payload, self.encoding)
            .map(|n| n as u64)
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

/// Build the per-thread encoder factory (checked once here, so workers cannot fail).
pub fn factory(cfg: &Config) -> Result<EncoderFactory, String> {
    let table = table_options(cfg).map_err(|e| e.to_string())?;
    // `auto` is resolved for the table by the encoder.
    let format = cfg.clickhouse.insert_format;
    let encoding = cfg.kafka.encoding;
    let options = EncoderOptions {
        max_expanded_record_bytes: cfg.limits.max_expanded_record_bytes,
        compression: cfg.clickhouse.compression,
        ..EncoderOptions::new(format)
    };
    Encoder::with_options(&table, options).map_err(|e| format!("clickhouse: {e}"))?;
    Ok(Arc::new(move || {
        let encoder =
            Encoder::with_options(&table, options).expect("checked when the factory was built");
        Box::new(ConfiguredEncoder { encoder, encoding }) as Box<dyn RecordEncoder>
    }))
}
