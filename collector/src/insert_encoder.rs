//! Adapts the decode → rows → encode modules to the workers' [`SpanEncoder`] interface,
//! for the table and format the configuration names.

use std::sync::Arc;

use bytes::Bytes;
use tracehouse_schema::{Attributes, Ident, TableOptions};

use crate::config::{AttributesKind, Config, InsertFormat};
use crate::decode;
use crate::encode::{Encoder, Format};
use crate::workers::{EncoderFactory, SpanEncoder};

/// The table options the collector writes to, derived from its configuration.
pub fn table_options(cfg: &Config) -> Result<TableOptions, tracehouse_schema::Error> {
    let c = &cfg.clickhouse;
    let mut t = TableOptions::new(
        Ident::new("clickhouse.database", c.database.as_str())?,
        Ident::new("clickhouse.table", c.table.as_str())?,
    );
    t.attributes = match c.attributes {
        AttributesKind::Map => Attributes::Map,
        AttributesKind::Json => Attributes::Json,
    };
    t.attribute_keys_columns = c.attribute_keys;
    Ok(t)
}

/// The insert format to use: the configured one, or the measured default.
pub fn format(cfg: &Config) -> Format {
    match cfg.clickhouse.insert_format {
        InsertFormat::Native => Format::Native,
        InsertFormat::RowBinary => Format::RowBinary,
        InsertFormat::Auto => match cfg.clickhouse.attributes {
            AttributesKind::Map => Format::Native,
            AttributesKind::Json => Format::RowBinary,
        },
    }
}

struct Adapter {
    encoder: Encoder,
    encoding: decode::Encoding,
}

impl SpanEncoder for Adapter {
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
}

/// Build the per-thread encoder factory (checked once here, so workers cannot fail).
pub fn factory(cfg: &Config) -> Result<EncoderFactory, String> {
    let table = table_options(cfg).map_err(|e| e.to_string())?;
    let format = format(cfg);
    let encoding = cfg.kafka.encoding;
    Encoder::new(&table, format).map_err(|e| format!("clickhouse: {e}"))?;
    Ok(Arc::new(move || {
        let encoder = Encoder::new(&table, format).expect("checked when the factory was built");
        Box::new(Adapter { encoder, encoding }) as Box<dyn SpanEncoder>
    }))
}
