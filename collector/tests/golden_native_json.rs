//! Native inserts into the JSON table, held to RowBinary's: the same records encoded both
//! ways and inserted into two tables of the real engine (the local stack's `e2e/stack`) must
//! store the same rows, value for value and type for type — the golden request, hostile
//! values (empty objects, deep nesting, big ints, NaN and ±Inf, unicode, bytes, arrays of
//! mixed types, dotted keys, a path with more types than a path keeps, more paths than a
//! column keeps) and loadgen's records; in one block and in many, compressed as sent.
//!
//! And the collector itself on the stack (a 26.9 server): `insert_format: auto` sends the JSON
//! table Native, `row_binary` RowBinary, each span stored exactly once.
//!
//! Also the body dump of `e2e/format-cost` (ignored test `dump_bodies`): loadgen's records
//! encoded by the collector in each format, for the server-CPU measure.
//!
//! Needs `CLICKHOUSE_URL` (and `CLICKHOUSE_USER` / `CLICKHOUSE_PASSWORD`); fails, never
//! skips, without them: run `eval "$(e2e/stack env)"` from the repository root first.
#![cfg(feature = "stack-tests")]

mod common;
mod golden_fixture;

use golden_fixture::{arr, assert_rows_eq, b, bytes, d, empty, i, kv, kvl, request, s};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::Value as J;
use tracehouse_collector::decode::Encoding;
use tracehouse_collector::encode::{Compression, Encoder, EncoderOptions};
use tracehouse_loadgen::generate::{Generator, GeneratorConfig};
use tracehouse_schema::ddl::{create_database, create_traces_table};
use tracehouse_schema::{
    Attributes, Engine, Ident, InsertFormat, LATEST_VERSION, TableOptions, insert_columns,
    insert_into,
};

fn table(db: &str, name: &str, keys: bool) -> TableOptions {
    let mut t = TableOptions::new(
        Ident::new("database", db).unwrap(),
        Ident::new("table", name).unwrap(),
    );
    t.attributes = Attributes::Json;
    t.attribute_keys_columns = keys;
    t
}

/// Writes loadgen's records, encoded by the collector for the JSON table, into
/// `$TRACEHOUSE_BODY_DIR` (default `format-cost/` in cargo's test scratch directory,
/// `target/tmp`): `<format>/<n>.bin`, the
/// uncompressed insert bodies of each format the encoder writes, one per
/// `TRACEHOUSE_BODY_BATCH` spans (default 8 000, about what one 8 MiB batch of loadgen's
/// records holds); `insert.sql` (the statement without its `FORMAT`), `table_<engine>.sql`
/// (the table's DDL for `{db}`.`{table}`), `spans.txt`. `TRACEHOUSE_BODY_SPANS` spans in all
/// (default 200 000); `TRACEHOUSE_BODY_BLOCK_BYTES`: Native blocks cut at this many bytes of
/// column data (default the encoder's, 2 MiB). Run by `e2e/format-cost`.
#[test]
#[ignore = "a tool: run by e2e/format-cost"]
fn dump_bodies() {
    let dir = std::env::var("TRACEHOUSE_BODY_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_TARGET_TMPDIR"), "/format-cost").into());
    let spans: usize = std::env::var("TRACEHOUSE_BODY_SPANS")
        .map(|s| s.parse().expect("TRACEHOUSE_BODY_SPANS: a number"))
        .unwrap_or(200_000);
    let batch: usize = std::env::var("TRACEHOUSE_BODY_BATCH")
        .map(|s| s.parse().expect("TRACEHOUSE_BODY_BATCH: a number"))
        .unwrap_or(8_000);
    let block_bytes: usize = std::env::var("TRACEHOUSE_BODY_BLOCK_BYTES")
        .map(|s| s.parse().expect("TRACEHOUSE_BODY_BLOCK_BYTES: a number"))
        .unwrap_or(EncoderOptions::DEFAULT_NATIVE_BLOCK_BYTES);
    let keys = std::env::var("TRACEHOUSE_BODY_NO_KEYS").is_err();
    std::fs::create_dir_all(&dir).unwrap();
    let mut generator = Generator::new(GeneratorConfig {
        seed: 1,
        ..GeneratorConfig::default()
    });
    let mut records = Vec::new();
    let mut n = 0;
    while n < spans {
        let r = generator.next_record();
        n += tracehouse_collector::decode::span_count(&r);
        records.push(r.encode_to_vec());
    }
    let t = table("{db}", "{table}", keys);
    for format in [InsertFormat::RowBinary, InsertFormat::Native] {
        let options = EncoderOptions {
            compression: Compression::None,
            native_block_bytes: block_bytes,
            ..EncoderOptions::new(format)
        };
        let Ok(mut enc) = Encoder::with_options(&t, options) else {
            eprintln!("{format:?}: the encoder does not write the JSON table");
            continue;
        };
        let name = format!("{format:?}").to_lowercase();
        let sub = format!("{dir}/{name}");
        let _ = std::fs::remove_dir_all(&sub);
        std::fs::create_dir_all(&sub).unwrap();
        let (mut bodies, mut bytes) = (0, 0);
        for (i, r) in records.iter().enumerate() {
            enc.push_record(r, Encoding::OtlpProto).unwrap();
            if enc.rows() >= batch || i + 1 == records.len() {
                let body = enc.finish();
                bytes += body.len();
                std::fs::write(format!("{sub}/{bodies:05}.bin"), &body).unwrap();
                bodies += 1;
            }
        }
        eprintln!("{name}: {bodies} bodies, {bytes} bytes for {n} spans");
    }
    std::fs::write(format!("{dir}/insert.sql"), insert_into(&t)).unwrap();
    for (label, engine) in [("null", Engine::Null), ("mergetree", Engine::MergeTree)] {
        let mut t = t.clone();
        t.engine = engine;
        std::fs::write(
            format!("{dir}/table_{label}.sql"),
            create_traces_table(&t, LATEST_VERSION),
        )
        .unwrap();
    }
    std::fs::write(format!("{dir}/spans.txt"), n.to_string()).unwrap();
}

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
    tracehouse_collector::insert::sink::install_crypto_provider();
    Ch {
        http: reqwest::Client::new(),
        url: url.trim_end_matches('/').to_string(),
        user: var("CLICKHOUSE_USER").unwrap_or_else(|| "default".into()),
        key: var("CLICKHOUSE_PASSWORD").unwrap_or_default(),
        db: format!("th_native_json_{:016x}", rand::random::<u64>()),
    }
}

impl Ch {
    async fn post(&self, query: &str, decompress: bool, body: Vec<u8>) -> Vec<u8> {
        let mut req = self.http.post(format!("{}/", self.url));
        if decompress {
            req = req.query(&[("decompress", "1")]);
        }
        let resp = req
            .query(&[("query", query)])
            .header("X-ClickHouse-User", &self.user)
            .header("X-ClickHouse-Key", &self.key)
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("ClickHouse at {} unreachable: {e}", self.url));
        let status = resp.status();
        let bytes = resp.bytes().await.unwrap().to_vec();
        assert!(
            status.is_success(),
            "ClickHouse answered {status}: {}\nquery: {query}",
            String::from_utf8_lossy(&bytes)
        );
        bytes
    }

    async fn exec(&self, sql: &str) -> Vec<u8> {
        self.post(sql, false, Vec::new()).await
    }

    /// A fresh traces table `name` (keys columns or not) in the test's database.
    async fn table(&self, name: &str, keys: bool) -> TableOptions {
        let t = table(&self.db, name, keys);
        self.exec(&create_database(&t)).await;
        self.exec(&create_traces_table(&t, LATEST_VERSION)).await;
        t
    }

    async fn drop(&self) {
        self.exec(&format!("DROP DATABASE IF EXISTS `{}` SYNC", self.db))
            .await;
    }
}

/// The records encoded by one encoder of `format` into one body, compressed as sent.
fn body(
    t: &TableOptions,
    format: InsertFormat,
    block_bytes: usize,
    records: &[Vec<u8>],
) -> (String, Vec<u8>) {
    let options = EncoderOptions {
        native_block_bytes: block_bytes,
        ..EncoderOptions::new(format)
    };
    let mut enc = Encoder::with_options(t, options).unwrap();
    for r in records {
        enc.push_record(r, Encoding::OtlpProto).unwrap();
    }
    assert_eq!(enc.compression(), Compression::Lz4);
    (enc.insert_sql().to_string(), enc.finish().to_vec())
}

/// Every insert column of `t`, rows in one total order, as `format` writes them. `typed`:
/// each `JSON` value with its paths' types (for a text format, where `1` and `1.0` look
/// alike).
async fn stored(ch: &Ch, t: &TableOptions, format: &str, typed: bool) -> Vec<u8> {
    let cols: Vec<String> = insert_columns(t)
        .iter()
        .map(|c| {
            let q = format!("`{}`", c.name());
            match c.name() {
                "ResourceAttributes" | "SpanAttributes" if typed => {
                    format!("({q}, JSONAllPathsWithTypes({q}))")
                }
                "Events.Attributes" | "Links.Attributes" if typed => {
                    format!("arrayMap(x -> (x, JSONAllPathsWithTypes(x)), {q})")
                }
                _ => q,
            }
        })
        .collect();
    ch.exec(&format!(
        "SELECT {} FROM `{}`.`{}` ORDER BY SpanName, SpanId, Timestamp FORMAT {format} \
         SETTINGS output_format_json_quote_denormals = 1, output_format_json_quote_64bit_integers = 0",
        cols.join(", "),
        ch.db,
        t.table.as_str()
    ))
    .await
}

/// Whether stored rows may differ in where a path is kept, not in what is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compare {
    /// The same bytes in RowBinary: every value bit for bit, every path in the same place.
    Exact,
    /// The same paths, types and values, compared as typed JSON text. For a block with more
    /// paths than the column keeps (`max_dynamic_paths`, 1 024): the paths past it go to the
    /// column's shared data, and which ones does is up to the input format (RowBinary: the
    /// last ones met; Native: the last ones in bytewise order). What a query reads is the same.
    Values,
}

/// Inserts `records` into two fresh tables, one in RowBinary and one in Native (blocks of
/// `block_bytes`), and asserts that they store the same rows; returns how many.
async fn assert_same_rows(
    ch: &Ch,
    name: &str,
    keys: bool,
    block_bytes: usize,
    records: &[Vec<u8>],
    compare: Compare,
) -> usize {
    let rb = ch.table(&format!("{name}_rowbinary"), keys).await;
    let native = ch.table(&format!("{name}_native"), keys).await;
    for (t, format) in [
        (&rb, InsertFormat::RowBinary),
        (&native, InsertFormat::Native),
    ] {
        let (sql, body) = body(t, format, block_bytes, records);
        ch.post(&sql, true, body).await;
    }
    let lines = |bytes: Vec<u8>| -> Vec<J> {
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let rb_rows = lines(stored(ch, &rb, "JSONEachRow", true).await);
    let native_rows = lines(stored(ch, &native, "JSONEachRow", true).await);
    assert_rows_eq(
        &native_rows,
        &rb_rows,
        &format!("{name}: Native vs RowBinary"),
    );
    if compare == Compare::Exact {
        let a = stored(ch, &rb, "RowBinary", false).await;
        let b = stored(ch, &native, "RowBinary", false).await;
        assert!(
            a == b,
            "{name}: the stored rows differ in their binary form only (a float's bits, a path's place)"
        );
    }
    rb_rows.len()
}

fn span(name: &str, n: u64, attributes: Vec<KeyValue>) -> Span {
    Span {
        trace_id: vec![0x5b; 16],
        span_id: n.to_be_bytes().to_vec(),
        name: name.into(),
        kind: 2,
        start_time_unix_nano: 1_700_000_000_000_000_000 + n,
        end_time_unix_nano: 1_700_000_000_000_001_000 + n,
        attributes,
        ..Default::default()
    }
}

fn nested_arrays(depth: usize, innermost: AnyValue) -> AnyValue {
    (0..depth).fold(innermost, |v, _| arr(vec![v]))
}

/// Spans whose attributes (and resources', events', links') are what a JSON column finds
/// hardest: one record of its own per case.
fn hostile_records() -> Vec<Vec<u8>> {
    let scalars = vec![
        kv("int.max", i(i64::MAX)),
        kv("int.min", i(i64::MIN)),
        kv("int.zero", i(0)),
        kv("dbl.nan", d(f64::NAN)),
        kv("dbl.inf", d(f64::INFINITY)),
        kv("dbl.neginf", d(f64::NEG_INFINITY)),
        kv("dbl.negzero", d(-0.0)),
        kv("dbl.subnormal", d(5e-324)),
        kv("dbl.max", d(f64::MAX)),
        kv("bool.t", b(true)),
        kv("bool.f", b(false)),
        kv("str.empty", s("")),
        kv("str.unicode", s("héllo ✓ 😀 \u{202e}ltr ключ")),
        kv("str.nul", s("a\0b")),
        kv("str.long", s(&"é".repeat(40_000))),
        kv("bytes", bytes(&[0, 1, 0xfe, 0xff])),
        kv("bytes.empty", bytes(&[])),
        kv("nothing", empty()),
    ];
    let arrays = vec![
        kv("arr.empty", arr(vec![])),
        kv("arr.nulls", arr(vec![empty(), empty()])),
        kv("arr.null.int", arr(vec![empty(), i(1)])),
        kv("arr.int.dbl", arr(vec![i(1), d(2.5), d(f64::NAN)])),
        kv("arr.bool.int", arr(vec![b(true), i(1)])),
        kv("arr.bools", arr(vec![b(true), b(false), empty()])),
        kv("arr.bytes", arr(vec![bytes(&[1, 2]), s("x")])),
        kv(
            "arr.mixed",
            arr(vec![
                s("a"),
                i(1),
                d(2.5),
                b(true),
                empty(),
                arr(vec![i(1)]),
                kvl(vec![kv("k", s("v")), kv("n.m", i(2))]),
                kvl(vec![]),
            ]),
        ),
        kv(
            "arr.ragged",
            arr(vec![
                arr(vec![]),
                arr(vec![i(1)]),
                arr(vec![arr(vec![i(2)])]),
            ]),
        ),
        kv(
            "arr.nested.num",
            arr(vec![arr(vec![i(1)]), arr(vec![d(2.5)])]),
        ),
        kv(
            "arr.nested.mixed",
            arr(vec![arr(vec![i(1)]), arr(vec![s("a")])]),
        ),
        kv(
            "arr.objects",
            arr(vec![
                kvl(vec![kv("a", i(1))]),
                kvl(vec![
                    kv("b", s("x")),
                    kv("c", arr(vec![kvl(vec![kv("d", b(true))])])),
                ]),
                kvl(vec![]),
                empty(),
            ]),
        ),
        kv("arr.deep", nested_arrays(46, arr(vec![i(1), empty()]))),
    ];
    let dots = vec![
        kv("a.b", s("dotted first")),
        kv(
            "a",
            kvl(vec![kv("b", i(2)), kv("c", kvl(vec![kv("d.e", d(1.5))]))]),
        ),
        kv("x", kvl(vec![kv("y", s("nested first"))])),
        kv("x.y", i(3)),
        kv("dup", s("first")),
        kv("dup", s("second")),
        kv("ключ.κλειδί", s("unicode key")),
        kv("quote\"back\\slash`tick", s("odd key")),
        kv(&"k".repeat(2000), s("long key")),
        kv("empty.kvlist", kvl(vec![])),
        kv("only.nulls", kvl(vec![kv("a", empty()), kv("b", empty())])),
    ];
    let resource = |attrs: Vec<KeyValue>| Resource {
        attributes: attrs,
        ..Default::default()
    };
    let record = |resource_attrs: Vec<KeyValue>, spans: Vec<Span>| {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(resource(resource_attrs)),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    };
    let mut with_events = span("events-and-links", 10, arrays.clone());
    with_events.events = vec![
        Event {
            time_unix_nano: 1,
            name: "e1".into(),
            attributes: scalars.clone(),
            ..Default::default()
        },
        Event {
            name: "no attributes".into(),
            ..Default::default()
        },
        Event {
            name: "e3".into(),
            attributes: dots.clone(),
            ..Default::default()
        },
    ];
    with_events.links = vec![
        Link {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            attributes: arrays.clone(),
            ..Default::default()
        },
        Link::default(),
    ];
    // One path, a different type in every span: more than the 32 types a path keeps.
    let many_types: Vec<Span> = (0..40)
        .map(|depth| {
            span(
                "many-types",
                100 + depth as u64,
                vec![
                    kv("t", nested_arrays(depth, i(depth as i64))),
                    kv("same", i(1)),
                ],
            )
        })
        .chain([
            span("many-types", 200, vec![kv("t", s("now a string"))]),
            span("many-types", 201, vec![kv("t", b(false))]),
            span("many-types", 202, vec![kv("t", d(0.5))]),
        ])
        .collect();
    vec![
        record(
            vec![
                kv("service.name", s("hostile ✓")),
                kv("k8s", kvl(vec![kv("pod", kvl(vec![kv("name", s("p"))]))])),
            ],
            vec![
                span("scalars", 1, scalars.clone()),
                span("arrays", 2, arrays.clone()),
                span("dots", 3, dots.clone()),
                span("no-attributes", 4, vec![]),
                span(
                    "only-nulls",
                    5,
                    vec![kv("n", empty()), kv("m", kvl(vec![]))],
                ),
                with_events,
            ],
        ),
        record(scalars.clone(), vec![span("resource-scalars", 20, vec![])]),
        record(
            arrays.clone(),
            vec![span("resource-arrays", 21, dots.clone())],
        ),
        record(
            vec![],
            vec![span("no-resource-attributes", 22, scalars.clone())],
        ),
        record(vec![kv("service.name", s("types"))], many_types),
    ]
}

/// A new path in every span: more than the 1 024 paths a column keeps, in one block.
fn many_paths_record() -> Vec<u8> {
    let spans: Vec<Span> = (0..1100)
        .map(|n| {
            span(
                "many-paths",
                1000 + n,
                vec![kv(&format!("p.{n:04}"), i(n as i64)), kv("z", d(f64::NAN))],
            )
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

fn loadgen_records(n: usize) -> Vec<Vec<u8>> {
    let mut g = Generator::new(GeneratorConfig {
        seed: 11,
        ..GeneratorConfig::default()
    });
    (0..n).map(|_| g.next_record().encode_to_vec()).collect()
}

#[tokio::test]
async fn the_golden_request_stores_the_same_rows_in_native_as_in_rowbinary() {
    let ch = connect();
    let records = [request().encode_to_vec()];
    for keys in [true, false] {
        let name = format!("golden_{keys}");
        let rows = assert_same_rows(&ch, &name, keys, 2 << 20, &records, Compare::Exact).await;
        assert_eq!(rows, 5);
    }
    ch.drop().await;
}

#[tokio::test]
async fn hostile_values_store_the_same_rows_in_native_as_in_rowbinary() {
    let ch = connect();
    let records = hostile_records();
    // One block for everything, and a block per record (paths and types met anew).
    for (name, block_bytes) in [("one_block", 64 << 20), ("block_per_record", 1)] {
        let name = format!("hostile_{name}");
        let rows = assert_same_rows(&ch, &name, true, block_bytes, &records, Compare::Exact).await;
        assert_eq!(rows, 6 + 1 + 1 + 1 + 43);
    }
    let rows = assert_same_rows(
        &ch,
        "many_paths",
        true,
        64 << 20,
        &[many_paths_record()],
        Compare::Values,
    )
    .await;
    assert_eq!(rows, 1100);
    ch.drop().await;
}

#[tokio::test]
async fn loadgen_records_store_the_same_rows_in_native_as_in_rowbinary() {
    let ch = connect();
    let records = loadgen_records(30);
    for keys in [true, false] {
        let name = format!("loadgen_{keys}");
        let rows = assert_same_rows(&ch, &name, keys, 2 << 20, &records, Compare::Exact).await;
        assert_eq!(rows, 3000);
    }
    ch.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collector_sends_a_json_table_native_on_this_server_unless_told_row_binary() {
    use std::time::Duration;
    for (config, format) in [
        (None, "Native"),
        (Some("tests/configs/row-binary.yaml"), "RowBinary"),
    ] {
        let w = common::World::new("nativejson", Attributes::Json);
        w.produce(3_000, 2, 5).await;
        let extra: Vec<&str> = config.map(|c| vec!["--config", c]).unwrap_or_default();
        let c = w.start_collector(&extra);
        assert_eq!(w.wait_rows(3_000, Duration::from_secs(90)).await, 3_000);
        assert!(w.verify(3_000).await.is_exact());
        let log = std::fs::read_to_string(&c.log).unwrap_or_default();
        let line = log
            .lines()
            .find(|l| l.contains("insert format"))
            .unwrap_or_else(|| panic!("no insert format line:\n{}", c.log_tail()));
        assert!(line.contains(&format!("\"{format}\"")), "{line}");
    }
}
