//! Verify: did every generated span reach the ClickHouse table exactly once?
//!
//! For each generator id, one aggregate query counts on the server (no rows are
//! downloaded) over the rows whose `loadgen.id` attribute is that id:
//!
//! - `rows`: matching rows;
//! - `found`: distinct `loadgen.seq` values in `0..expected`;
//! - `missing` = `expected − found`: spans that never arrived;
//! - `duplicated` = rows with a valid seq − distinct seqs: extra copies;
//! - `out_of_range`: rows whose seq is `≥ expected` or not a non-negative integer.
//!
//! The attribute accessor depends on the table variant (checked on the real engine):
//! `Map(LowCardinality(String), String)` columns are read as `SpanAttributes['loadgen.seq']`;
//! `JSON` columns as the path `SpanAttributes.loadgen.seq` (a dotted key is a nested path),
//! whose `Dynamic` value is turned into text first so an `Int64` and a `String` both count.
//! Database and table names are bound as identifiers, the id as a string literal and the
//! expected count as a number, all escaped by the `clickhouse` crate: nothing user-given is
//! spliced into the SQL text by hand. (Client-side binding rather than server-side
//! `{name:Type}` parameters: the crate sends those as a multipart body, which the local
//! stack's ClickHouse-compatible server does not read.)

use std::time::Duration;

use clickhouse::sql::Identifier;
use tracehouse_schema::Attributes;

/// SQL expressions for the generator id (`String`) and the sequence number
/// (`Nullable(UInt64)`, NULL when absent or not a non-negative integer) in a table whose
/// attribute columns are laid out as `attributes`.
fn accessors(attributes: Attributes) -> (&'static str, &'static str) {
    match attributes {
        Attributes::Map => (
            "SpanAttributes['loadgen.id']",
            "toUInt64OrNull(SpanAttributes['loadgen.seq'])",
        ),
        Attributes::Json => (
            "toString(SpanAttributes.loadgen.id)",
            "toUInt64OrNull(toString(SpanAttributes.loadgen.seq))",
        ),
    }
}

/// One generator's promise: spans with seq `0..expected` were produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    pub generator_id: String,
    pub expected: u64,
}

/// Where to look, and for what.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// ClickHouse HTTP endpoint, e.g. `http://127.0.0.1:8123`.
    pub url: String,
    pub user: Option<String>,
    pub password: Option<String>,
    /// TLS for an `https://` URL.
    pub tls: tracehouse_schema::TlsConfig,
    pub database: String,
    pub table: String,
    pub attributes: Attributes,
    pub generators: Vec<Expectation>,
    /// Deadline for each query.
    pub timeout: Duration,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        Self {
            url: "http://localhost:8123".to_string(),
            user: None,
            password: None,
            tls: tracehouse_schema::TlsConfig::default(),
            database: "otel".to_string(),
            table: "otel_traces".to_string(),
            attributes: Attributes::Map,
            generators: Vec::new(),
            timeout: Duration::from_secs(300),
        }
    }
}

/// Delivery counts of one generator; see the module docs for each field.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GeneratorReport {
    pub generator_id: String,
    pub expected: u64,
    pub rows: u64,
    pub found: u64,
    pub missing: u64,
    pub duplicated: u64,
    pub out_of_range: u64,
}

impl GeneratorReport {
    /// Every expected span present exactly once, and nothing else.
    pub fn is_exact(&self) -> bool {
        self.missing == 0 && self.duplicated == 0 && self.out_of_range == 0
    }
}

/// Delivery counts of every generator asked about.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VerifyReport {
    pub database: String,
    pub table: String,
    pub attributes: Attributes,
    pub generators: Vec<GeneratorReport>,
}

impl VerifyReport {
    pub fn missing(&self) -> u64 {
        self.generators.iter().map(|g| g.missing).sum()
    }
    pub fn duplicated(&self) -> u64 {
        self.generators.iter().map(|g| g.duplicated).sum()
    }
    pub fn out_of_range(&self) -> u64 {
        self.generators.iter().map(|g| g.out_of_range).sum()
    }
    /// No loss, no duplicates, no unexpected rows, for every generator.
    pub fn is_exact(&self) -> bool {
        self.generators.iter().all(GeneratorReport::is_exact)
    }
}

/// Why verification could not be done (a failed check is a report, not an error).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("invalid options: {0}")]
    Invalid(String),
    #[error("clickhouse query for generator {generator_id:?}")]
    Query {
        generator_id: String,
        #[source]
        source: clickhouse::error::Error,
    },
    #[error("clickhouse query for generator {generator_id:?} timed out after {timeout:?}")]
    Timeout {
        generator_id: String,
        timeout: Duration,
    },
}

#[derive(Debug, clickhouse::Row, serde::Deserialize)]
struct Counts {
    rows: u64,
    unparsable: u64,
    distinct_seqs: u64,
    found: u64,
    beyond: u64,
}

/// Counts each generator's spans in the table; see the module docs.
pub async fn verify(opts: &VerifyOptions) -> Result<VerifyReport, VerifyError> {
    if opts.generators.is_empty() {
        return Err(VerifyError::Invalid("no generator id to verify".into()));
    }
    let mut client = opts
        .tls
        .clickhouse_client()
        .map_err(|e| VerifyError::Invalid(format!("ClickHouse TLS: {e}")))?
        .with_url(&opts.url);
    if let Some(user) = &opts.user {
        client = client.with_user(user);
    }
    if let Some(password) = &opts.password {
        client = client.with_password(password);
    }
    let (id_expr, seq_expr) = accessors(opts.attributes);
    // `?` placeholders, in order: expected, database, table, generator id.
    let sql = format!(
        "SELECT count() AS rows, countIf(seq IS NULL) AS unparsable, \
         uniqExact(seq) AS distinct_seqs, \
         uniqExactIf(seq, seq < expected) AS found, \
         countIf(seq >= expected) AS beyond \
         FROM (SELECT {seq_expr} AS seq, toUInt64(?) AS expected FROM ?.? WHERE {id_expr} = ?)"
    );
    let mut generators = Vec::with_capacity(opts.generators.len());
    for exp in &opts.generators {
        let query = client
            .query(&sql)
            .bind(exp.expected)
            .bind(Identifier(&opts.database))
            .bind(Identifier(&opts.table))
            .bind(exp.generator_id.as_str());
        let counts = tokio::time::timeout(opts.timeout, query.fetch_one::<Counts>())
            .await
            .map_err(|_| VerifyError::Timeout {
                generator_id: exp.generator_id.clone(),
                timeout: opts.timeout,
            })?
            .map_err(|source| VerifyError::Query {
                generator_id: exp.generator_id.clone(),
                source,
            })?;
        generators.push(report(exp, &counts));
    }
    Ok(VerifyReport {
        database: opts.database.clone(),
        table: opts.table.clone(),
        attributes: opts.attributes,
        generators,
    })
}

fn report(exp: &Expectation, c: &Counts) -> GeneratorReport {
    GeneratorReport {
        generator_id: exp.generator_id.clone(),
        expected: exp.expected,
        rows: c.rows,
        found: c.found,
        missing: exp.expected.saturating_sub(c.found),
        duplicated: (c.rows - c.unparsable).saturating_sub(c.distinct_seqs),
        out_of_range: c.unparsable + c.beyond,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_become_missing_duplicated_and_out_of_range() {
        let exp = Expectation {
            generator_id: "g".into(),
            expected: 10,
        };
        // seqs 0..=7 once, 3 twice more, 12 once, one unparsable row.
        let c = Counts {
            rows: 12,
            unparsable: 1,
            distinct_seqs: 9,
            found: 8,
            beyond: 1,
        };
        let r = report(&exp, &c);
        assert_eq!(
            (r.found, r.missing, r.duplicated, r.out_of_range),
            (8, 2, 2, 2)
        );
        assert!(!r.is_exact());
        let ok = Counts {
            rows: 10,
            unparsable: 0,
            distinct_seqs: 10,
            found: 10,
            beyond: 0,
        };
        assert!(report(&exp, &ok).is_exact());
    }
}
