//! The golden request through the real ClickHouse engine (the local stack's
//! `e2e/stack`): tables created from the schema crate's DDL in a fresh database, the
//! encoded body POSTed compressed (`decompress=1`) with the schema's insert statement,
//! the rows read back and compared with the hand-written expectations.
//!
//! For the JSON variant the stored paths and types are compared with the expected
//! ones, and the stored values with what the engine makes of the OTel exporter's own
//! JSON text for the same attributes (inserted into a second table).
//!
//! Needs `CLICKHOUSE_URL` (and `CLICKHOUSE_USER` / `CLICKHOUSE_PASSWORD`); fails, never
//! skips, without them: run `eval "$(e2e/stack env)"` from the repository root first.
#![cfg(feature = "stack-tests")]

mod golden_fixture;

use golden_fixture::{SPAN_NAMES, Variant, assert_rows_eq, expected_rows, request};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, KeyValueList, any_value::Value};
use serde_json::{Value as J, json};
use tracehouse_collector::encode::Encoder;
use tracehouse_collector::rows::as_string::go_json;
use tracehouse_schema::ddl::{create_database, create_traces_table};
use tracehouse_schema::{
    Attributes, Ident, InsertFormat, LATEST_VERSION, TableOptions, insert_columns,
};

struct Ch {
    http: reqwest::Client,
    url: String,
    user: String,
    key: String,
    db: String,
}

fn connect() -> Ch {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let url = var("CLICKHOUSE_URL").unwrap_or_else(|| {
        panic!(
            "CLICKHOUSE_URL is not set. These tests need the real ClickHouse engine: from the \
             repository root run `e2e/stack up kafka clickhouse` (if it is not running) and \
             `eval \"$(e2e/stack env)\"` in this shell"
        )
    });
    // reqwest is built without a default TLS provider in this workspace; plain HTTP
    // still needs one installed before a client is built. Already installed is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ch {
        http: reqwest::Client::new(),
        url: url.trim_end_matches('/').to_string(),
        user: var("CLICKHOUSE_USER").unwrap_or_else(|| "default".into()),
        key: var("CLICKHOUSE_PASSWORD").unwrap_or_default(),
        db: format!("th_encode_{:016x}", rand::random::<u64>()),
    }
}

/// Percent-encodes a URL query value.
fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Ch {
    fn table(&self, name: &str, attributes: Attributes, keys: bool) -> TableOptions {
        let mut t = TableOptions::new(
            Ident::new("database", &self.db).unwrap(),
            Ident::new("table", name).unwrap(),
        );
        t.attributes = attributes;
        t.attribute_keys_columns = keys;
        t
    }

    async fn post(&self, params: &str, body: Vec<u8>) -> String {
        let resp = self
            .http
            .post(format!("{}/?{params}", self.url))
            .header("X-ClickHouse-User", &self.user)
            .header("X-ClickHouse-Key", &self.key)
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("ClickHouse at {} unreachable: {e}", self.url));
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert!(
            status.is_success(),
            "ClickHouse answered {status}: {text}\nrequest: {params}"
        );
        text
    }

    async fn exec(&self, sql: &str) -> String {
        self.post("", sql.as_bytes().to_vec()).await
    }

    async fn create(&self, t: &TableOptions) {
        self.exec(&create_database(t)).await;
        self.exec(&create_traces_table(t, LATEST_VERSION)).await;
    }

    /// Sends an encoder body with the encoder's own insert statement, compressed.
    async fn insert(&self, enc: &Encoder, body: Vec<u8>) {
        let params = format!("decompress=1&query={}", url_encode(enc.insert_sql()));
        self.post(&params, body).await;
    }

    async fn rows(&self, sql: &str) -> Vec<J> {
        let sql = format!(
            "{sql} FORMAT JSONEachRow SETTINGS output_format_json_quote_64bit_integers = 0, \
             output_format_json_quote_64bit_floats = 0"
        );
        self.exec(&sql)
            .await
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    async fn drop(&self) {
        self.exec(&format!("DROP DATABASE IF EXISTS `{}` SYNC", self.db))
            .await;
    }
}

/// `ORDER BY` the request order of the golden spans.
fn order_by_request() -> String {
    let names: Vec<String> = SPAN_NAMES.iter().map(|n| format!("'{n}'")).collect();
    format!("ORDER BY indexOf([{}], SpanName)", names.join(", "))
}

/// A `SELECT` of every insert column in the canonical form of the fixture, with the
/// expression for each column given by `attrs` for attribute columns.
async fn canonical_rows(ch: &Ch, t: &TableOptions, attrs: impl Fn(&str) -> String) -> Vec<J> {
    let cols = insert_columns(t);
    let exprs: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let q = format!("`{}`", c.name());
            let e = match c.name() {
                "Timestamp" => format!("toUnixTimestamp64Nano({q})"),
                "Events.Timestamp" => format!("arrayMap(t -> toUnixTimestamp64Nano(t), {q})"),
                "ResourceAttributes" | "SpanAttributes" => attrs(&q),
                "Events.Attributes" | "Links.Attributes" => {
                    format!("arrayMap(a -> {}, {q})", attrs("a"))
                }
                _ => q,
            };
            format!("{e} AS c{i}")
        })
        .collect();
    let sql = format!(
        "SELECT {} FROM `{}`.`{}` {}",
        exprs.join(", "),
        ch.db,
        t.table.as_str(),
        order_by_request()
    );
    ch.rows(&sql)
        .await
        .into_iter()
        .map(|row| {
            let mut o = serde_json::Map::new();
            for (i, c) in cols.iter().enumerate() {
                o.insert(c.name().to_string(), row[format!("c{i}")].clone());
            }
            J::Object(o)
        })
        .collect()
}

#[tokio::test]
async fn map_variant_round_trips_through_the_engine_in_rowbinary_and_native() {
    let ch = connect();
    for format in [InsertFormat::RowBinary, InsertFormat::Native] {
        let name = format!("traces_{format:?}").to_lowercase();
        let t = ch.table(&name, Attributes::Map, false);
        ch.create(&t).await;
        let mut enc = Encoder::new(&t, format).unwrap();
        enc.push_request(&request()).unwrap();
        let body = enc.finish().to_vec();
        ch.insert(&enc, body).await;
        // Map → [[key, value], …] keeping order and repeated keys.
        let got = canonical_rows(&ch, &t, |m| {
            format!("arrayZip(mapKeys({m}), mapValues({m}))")
        })
        .await;
        assert_rows_eq(
            &got,
            &expected_rows(Variant::Map, false),
            &format!("engine {format:?}"),
        );
    }
    ch.drop().await;
}

/// `{path: [type, value]}` of the fixture → `{path: type}`.
fn types_of(attrs: &J) -> J {
    let J::Object(o) = attrs else {
        panic!("not an object: {attrs}")
    };
    J::Object(o.iter().map(|(p, tv)| (p.clone(), tv[0].clone())).collect())
}

/// Attributes as the OTel exporter sends them for the JSON variant:
/// `json.Marshal(attributes.AsRaw())`, except that `<`, `>` and `&` are not HTML-escaped
/// (`go_json` follows pdata's `AsString`, which does not escape them): the server reads
/// `\u003c` and `<` as the same character, so the stored rows are the same
/// (`tests/e2e_conformance.rs` compares them with the real exporter's).
fn exporter_json_text(attrs: &[KeyValue]) -> Option<String> {
    let object = AnyValue {
        value: Some(Value::KvlistValue(KeyValueList {
            values: attrs.to_vec(),
        })),
    };
    go_json(&object)
}

#[tokio::test]
async fn json_variant_stores_the_expected_paths_and_types_and_the_exporters_values() {
    let ch = connect();
    let req = request();
    for keys in [true, false] {
        let t = ch.table(&format!("traces_json_{keys}"), Attributes::Json, keys);
        ch.create(&t).await;
        let mut enc = Encoder::new(&t, InsertFormat::RowBinary).unwrap();
        enc.push_request(&req).unwrap();
        let body = enc.finish().to_vec();
        ch.insert(&enc, body).await;

        // 1. Every column, attributes as {path: type}: the engine kept exactly the
        //    paths and types the encoder meant.
        let got = canonical_rows(&ch, &t, |a| format!("JSONAllPathsWithTypes({a})")).await;
        let mut want = expected_rows(Variant::Json, keys);
        for row in &mut want {
            for col in ["ResourceAttributes", "SpanAttributes"] {
                row[col] = types_of(&row[col]);
            }
            for col in ["Events.Attributes", "Links.Attributes"] {
                let arr: Vec<J> = row[col].as_array().unwrap().iter().map(types_of).collect();
                row[col] = J::Array(arr);
            }
        }
        assert_rows_eq(&got, &want, &format!("engine JSON keys={keys}"));

        // 2. The values: the engine's reading of the exporter's JSON text for the same
        //    attributes must be the same objects. (The special-values span is left out:
        //    its NaN makes Go's json.Marshal fail, so the exporter cannot send it.)
        let text = ch.table(&format!("traces_json_text_{keys}"), Attributes::Json, keys);
        ch.create(&text).await;
        let mut lines = String::new();
        for rs in &req.resource_spans {
            let resource = rs.resource.as_ref().map_or(&[][..], |r| &r.attributes);
            for span in rs.scope_spans.iter().flat_map(|ss| &ss.spans) {
                let (Some(res), Some(attrs)) = (
                    exporter_json_text(resource),
                    exporter_json_text(&span.attributes),
                ) else {
                    continue;
                };
                let events: Vec<String> = span
                    .events
                    .iter()
                    .filter_map(|e| exporter_json_text(&e.attributes))
                    .collect();
                let links: Vec<String> = span
                    .links
                    .iter()
                    .filter_map(|l| exporter_json_text(&l.attributes))
                    .collect();
                let parse = |s: &String| serde_json::from_str::<J>(s).unwrap();
                let row = json!({
                    "SpanName": span.name,
                    "ResourceAttributes": parse(&res),
                    "SpanAttributes": parse(&attrs),
                    "Events.Attributes": events.iter().map(parse).collect::<Vec<_>>(),
                    "Links.Attributes": links.iter().map(parse).collect::<Vec<_>>(),
                });
                lines.push_str(&row.to_string());
                lines.push('\n');
            }
        }
        let insert = format!(
            "INSERT INTO `{}`.`{}` (SpanName, ResourceAttributes, SpanAttributes, `Events.Attributes`, `Links.Attributes`) FORMAT JSONEachRow",
            ch.db,
            text.table.as_str()
        );
        ch.post(
            &format!("query={}", url_encode(&insert)),
            lines.into_bytes(),
        )
        .await;
        let values = |table: &str| {
            format!(
                "SELECT SpanName, toJSONString(ResourceAttributes) AS r, JSONAllPathsWithTypes(ResourceAttributes) AS rt, \
                 toJSONString(SpanAttributes) AS s, JSONAllPathsWithTypes(SpanAttributes) AS st, \
                 arrayMap(x -> toJSONString(x), `Events.Attributes`) AS e, \
                 arrayMap(x -> toJSONString(x), `Links.Attributes`) AS l \
                 FROM `{}`.`{table}` WHERE SpanName != 'special-values' {}",
                ch.db,
                order_by_request()
            )
        };
        let from_binary = ch.rows(&values(t.table.as_str())).await;
        let from_text = ch.rows(&values(text.table.as_str())).await;
        assert_eq!(from_binary.len(), 4);
        assert_rows_eq(
            &from_binary,
            &from_text,
            &format!("binary vs exporter text, keys={keys}"),
        );
    }
    ch.drop().await;
}

#[test]
fn exporter_text_of_the_golden_span_is_what_go_would_send() {
    // Guards the reference used above: Go's json.Marshal of the attributes' AsRaw().
    let req = request();
    let span = &req.resource_spans[0].scope_spans[0].spans[0];
    assert_eq!(
        exporter_json_text(&span.attributes).unwrap(),
        r#"{"arr.empty":[],"arr.int":[1,2],"arr.kv":[{"k":1}],"arr.mixed":["a",1],"arr.nested":[[1,2],[3]],"arr.num":[1,2.5],"arr.str":["a","b"],"bool":true,"bytes":"AAEC+/8=","dbl":2.75,"dbl.big":1e+21,"dbl.small":1.5e-7,"http":{"request":{"method":"GET"},"status_code":200},"http.route":"/cart","int":-42,"nothing":null,"str":"héllo ✓ <a&b> \"q\"\n"}"#
    );
    let special = &req.resource_spans[1].scope_spans[0].spans[1];
    assert_eq!(
        exporter_json_text(&special.attributes),
        None,
        "NaN: json.Marshal fails"
    );
}

#[path = "../benches/realistic/mod.rs"]
mod realistic;

/// CPU time (user + system) of a process so far, in milliseconds.
fn process_cpu_ms(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised command name; utime and stime are fields 14, 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = rest
        .split(' ')
        .skip(11)
        .take(2)
        .map(|x| x.parse().unwrap())
        .collect();
    // Clock ticks are 1/100 s on Linux.
    (f[0] + f[1]) * 10
}

/// Measures the ClickHouse server's CPU for inserting the same realistic spans in each
/// format: `/proc/<pid>/stat` of the local stack's server before and after each insert.
/// A measurement, not a check; run by hand:
/// `cargo test -p tracehouse-collector --test golden_clickhouse -- --ignored --nocapture`
#[tokio::test]
#[ignore = "measurement: run by hand with --ignored --nocapture"]
async fn server_cpu_per_insert_format() {
    use tracehouse_collector::encode::{Compression, EncoderOptions};
    use tracehouse_schema::Engine;

    let pid_file = std::env::var("CLICKHOUSE_PID_FILE").unwrap_or_else(|_| {
        format!(
            "{}/.cache/tracehouse/state/pids/clickhouse.pid",
            std::env::var("HOME").unwrap()
        )
    });
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap_or_else(|e| panic!("{pid_file}: {e} (is `e2e/stack up clickhouse` running?)"))
        .trim()
        .parse()
        .unwrap();
    let ch = connect();
    let records: Vec<_> = (1..=500).map(realistic::record).collect();
    let spans = records.len() * realistic::SPANS_PER_RECORD;
    const REPEATS: usize = 3;
    println!("{spans} spans per insert, best of {REPEATS}; server pid {pid}");
    println!("engine     attrs format     body      body bytes  server CPU ms  µs/span  wall ms");
    for engine in [Engine::Null, Engine::MergeTree] {
        for (attributes, format) in [
            (Attributes::Map, InsertFormat::RowBinary),
            (Attributes::Map, InsertFormat::Native),
            (Attributes::Json, InsertFormat::RowBinary),
        ] {
            for compression in [Compression::None, Compression::Lz4] {
                let name = format!("cost_{engine:?}_{attributes:?}_{format:?}_{compression:?}")
                    .to_lowercase();
                let mut t = ch.table(&name, attributes, true);
                t.engine = engine.clone();
                ch.create(&t).await;
                let mut options = EncoderOptions::new(format);
                options.compression = compression;
                let mut enc = Encoder::with_options(&t, options).unwrap();
                for r in &records {
                    enc.push_request(r).unwrap();
                }
                let body = enc.finish().to_vec();
                let decompress = if compression == Compression::Lz4 {
                    "decompress=1&"
                } else {
                    ""
                };
                let params = format!("{decompress}query={}", url_encode(enc.insert_sql()));
                let (mut best_cpu, mut best_wall) = (u64::MAX, u128::MAX);
                for _ in 0..REPEATS {
                    let cpu0 = process_cpu_ms(pid);
                    let t0 = std::time::Instant::now();
                    ch.post(&params, body.clone()).await;
                    best_wall = best_wall.min(t0.elapsed().as_millis());
                    best_cpu = best_cpu.min(process_cpu_ms(pid) - cpu0);
                }
                println!(
                    "{:<10} {:<5} {:<10} {:<9} {:>10}  {:>13}  {:>7.2}  {:>7}",
                    format!("{engine:?}"),
                    format!("{attributes:?}"),
                    format!("{format:?}"),
                    format!("{compression:?}"),
                    body.len(),
                    best_cpu,
                    best_cpu as f64 * 1000.0 / spans as f64,
                    best_wall
                );
            }
        }
    }
    ch.drop().await;
}
