//! Helpers shared by the integration tests, which run against the real ClickHouse
//! engine of the local stack (`e2e/stack up`). Each test works in its own freshly
//! named database, so the tests can run in parallel and never see each other.
#![allow(dead_code)] // each test binary uses a different subset

use bytes::Bytes;
use clickhouse::{Client, Compression};
use rand::RngCore;
use serde_json::{Value, json};
use tracehouse_schema::ddl::insert_into;
use tracehouse_schema::{
    Attributes, ClickHouseType, ConnectionConfig, Ident, Server, SpanColumn, TableOptions,
    insert_columns,
};

/// The TLS failure `r` names; panics on anything else.
pub fn tls_failure(r: Result<(), tracehouse_schema::Error>) -> tracehouse_schema::tls::TlsFailure {
    match r {
        Err(tracehouse_schema::Error::Tls { failure, .. }) => failure,
        other => panic!("expected a TLS failure, got {other:?}"),
    }
}

/// A connection plus the fresh database name this test owns.
pub struct Ch {
    pub server: Server,
    pub client: Client,
    pub db: String,
}

/// Connects using `CLICKHOUSE_URL` / `CLICKHOUSE_USER` / `CLICKHOUSE_PASSWORD`.
/// Fails (never skips) when they are missing: a green run must mean the engine ran.
pub fn connect(prefix: &str) -> Ch {
    let config = ConnectionConfig::from_env().unwrap_or_else(|e| {
        panic!(
            "{e}\nThese tests need the real ClickHouse engine: from the repository root run \
             `e2e/stack up` and then `eval \"$(e2e/stack env)\"` in this shell"
        )
    });
    let mut client = Client::default()
        .with_url(&config.url)
        .with_compression(Compression::None);
    if let Some(u) = &config.user {
        client = client.with_user(u);
    }
    if let Some(p) = &config.password {
        client = client.with_password(p);
    }
    Ch {
        server: Server::new(&config).expect("ClickHouse TLS settings"),
        client,
        db: fresh_name(&format!("th_{prefix}_")),
    }
}

/// `prefix` + 16 random hex digits.
pub fn fresh_name(prefix: &str) -> String {
    let mut b = [0u8; 8];
    rand::rng().fill_bytes(&mut b);
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{prefix}{hex}")
}

impl Ch {
    /// Default options (Map, MergeTree) for `otel_traces` in this test's database.
    pub fn opts(&self) -> TableOptions {
        TableOptions::new(
            Ident::new("database", &self.db).unwrap(),
            Ident::new("table", "otel_traces").unwrap(),
        )
    }

    pub fn opts_with(&self, attributes: Attributes, keys: bool) -> TableOptions {
        let mut o = self.opts();
        o.attributes = attributes;
        o.attribute_keys_columns = keys;
        o
    }

    pub async fn exec(&self, sql: &str) {
        self.client
            .query_raw(sql)
            .execute()
            .await
            .unwrap_or_else(|e| panic!("{e}\nstatement: {sql}"));
    }

    /// The result as TSV, trailing newline trimmed.
    pub async fn text(&self, sql: &str) -> String {
        let mut cursor = self
            .client
            .query_raw(sql)
            .fetch_bytes("TSV")
            .unwrap_or_else(|e| panic!("{e}\nquery: {sql}"));
        let bytes = cursor
            .collect()
            .await
            .unwrap_or_else(|e| panic!("{e}\nquery: {sql}"));
        String::from_utf8(bytes.to_vec())
            .unwrap()
            .trim_end_matches('\n')
            .to_string()
    }

    /// The ledger's rows from `min_version` on, as `version:mode` separated by spaces (version
    /// 0 holds the TTL and window changes).
    pub async fn ledger_modes(&self, min_version: u32) -> String {
        self.text(&format!(
            "SELECT version, mode FROM `{}`.tracehouse_schema_migrations \
             WHERE version >= {min_version} ORDER BY version",
            self.db
        ))
        .await
        .replace('\t', ":")
        .replace('\n', " ")
    }

    pub async fn count(&self, sql: &str) -> u64 {
        self.text(sql).await.parse().unwrap()
    }

    /// `(name, type, codec)` of every column, from `DESCRIBE TABLE`.
    pub async fn describe(&self, table: &Ident) -> Vec<(String, String, String)> {
        let db = Ident::new("database", &self.db).unwrap();
        self.text(&format!("DESCRIBE TABLE {db}.{table}"))
            .await
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                (f[0].to_string(), f[1].to_string(), f[5].to_string())
            })
            .collect()
    }

    /// Inserts `n` spans through the collector's insert statement (JSONEachRow body).
    pub async fn insert_spans(&self, opts: &TableOptions, trace: u32, n: usize) {
        let body: String = (0..n).map(|i| span_json(opts, trace, i) + "\n").collect();
        let mut insert = self
            .client
            .insert_formatted_with(format!("{} FORMAT JSONEachRow", insert_into(opts)));
        insert.send(Bytes::from(body)).await.unwrap();
        insert.end().await.unwrap();
    }

    /// Drops this test's database. Only tests call this, on success, to keep the
    /// shared server tidy; the library never drops anything.
    pub async fn cleanup(&self) {
        let db = Ident::new("database", &self.db).unwrap();
        self.exec(&format!("DROP DATABASE IF EXISTS {db} SYNC"))
            .await;
    }
}

/// Trace id used by [`span_json`] for trace number `trace`.
pub fn trace_id(trace: u32) -> String {
    format!("{trace:08x}0af7651916cd43dd8448eb21")
}

/// One span as a JSONEachRow object with exactly the insert columns of `opts`,
/// built by walking the model so a column added there is exercised here too.
pub fn span_json(opts: &TableOptions, trace: u32, i: usize) -> String {
    let json_attrs = opts.attributes == Attributes::Json;
    let attrs = |k: &str, v: &str| {
        if json_attrs {
            // Nested objects, as the collector's JSON encoder will produce.
            let (a, b) = k.split_once('.').unwrap_or((k, "x"));
            json!({ a: { b: v } })
        } else {
            json!({ k: v })
        }
    };
    let mut row = serde_json::Map::new();
    for c in insert_columns(opts) {
        let v: Value = match c.id {
            SpanColumn::Timestamp => json!(format!("2024-05-01 12:00:{:02}.123456789", i % 60)),
            SpanColumn::TraceId => json!(trace_id(trace)),
            SpanColumn::SpanId => json!(format!("{i:016x}")),
            SpanColumn::ParentSpanId | SpanColumn::TraceState | SpanColumn::StatusMessage => {
                json!("")
            }
            SpanColumn::SpanName => json!("GET /checkout"),
            SpanColumn::SpanKind => json!("Server"),
            SpanColumn::ServiceName => json!("checkout"),
            SpanColumn::ResourceAttributes => attrs("host.name", "h1"),
            SpanColumn::ResourceAttributesKeys => json!(["host.name"]),
            SpanColumn::ScopeName => json!("io.opentelemetry.http"),
            SpanColumn::ScopeVersion => json!("1.2.3"),
            SpanColumn::SpanAttributes => attrs("http.method", "GET"),
            SpanColumn::SpanAttributesKeys => json!(["http.method"]),
            SpanColumn::Duration => json!(1_500_000 + i as u64),
            SpanColumn::StatusCode => json!("Ok"),
            SpanColumn::EventsTimestamp => json!(["2024-05-01 12:00:00.200000000"]),
            SpanColumn::EventsName => json!(["exception"]),
            SpanColumn::EventsAttributes => json!([attrs("exception.type", "E")]),
            SpanColumn::LinksTraceId => json!([trace_id(trace + 1)]),
            SpanColumn::LinksSpanId => json!(["00000000000000ff"]),
            SpanColumn::LinksTraceState => json!(["k=v"]),
            SpanColumn::LinksAttributes => json!([attrs("link.kind", "follows")]),
        };
        // Sanity: the model's type and the value's shape agree (arrays for arrays).
        assert_eq!(
            matches!(c.ch_type, ClickHouseType::Array(_)),
            v.is_array(),
            "{}",
            c.name()
        );
        row.insert(c.name().to_string(), v);
    }
    Value::Object(row).to_string()
}
