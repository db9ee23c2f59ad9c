//! Processing on the local stack: the recipes of docs/processing.md run by the real collector
//! (spans verified dropped, redacted or kept as the rules say, and every kept span stored
//! once), and the rows of processed spans compared column by column with those the real
//! OpenTelemetry Collector writes with the equivalent processors (`e2e/otelcol/processing.yaml`
//! against `tests/configs/processing-differential.yaml`), for the Map and the JSON variant.
#![cfg(feature = "stack-tests")]

mod common;
// The differential parts of the conformance test (not its edge cases).
#[path = "conformance/compare.rs"]
mod compare;
#[path = "conformance/otelcol.rs"]
mod otelcol;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use compare::{Diff, Table, differences, type_differences};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::Event;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use otelcol::{Otelcol, OtelcolDatabase, create_topic, otelcol_bin};
use tracehouse_collector::process::sample::Sampler;
use tracehouse_loadgen::{Encoding, Generator, GeneratorConfig, encode};
use tracehouse_schema::Attributes;

fn s(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn int(k: &str, v: i64) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(v)),
        }),
        ..Default::default()
    }
}

/// What a crafted span is, for the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// A server span on `/healthz` or `/readyz`.
    Health,
    /// Any span of the `synthetic-probe` service.
    Probe,
    /// A server span carrying credentials, a user id and a card number.
    Checkout,
    /// A client span with a `db.statement`.
    Database,
    /// A checkout span with status Error.
    Failed,
}

/// A crafted span: its name, what it is, its trace id.
type Crafted = (String, Shape, [u8; 16]);

/// The traces a gateway sees in front of a web shop: per trace a server span (a health
/// check for one trace in five, else a checkout call with credentials, a user id and a card
/// number in a note and an event, an error for one in seven), a database call, and every
/// tenth trace from the synthetic prober. Deterministic: the same spans every run.
fn shop_records(t0: u64, traces: u64) -> (Vec<ExportTraceServiceRequest>, Vec<Crafted>) {
    let mut records = Vec::new();
    let mut index = Vec::new();
    let mut state = 0x7472_6163_6568_6f75u64;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for chunk in 0..traces.div_ceil(50) {
        let mut shop = Vec::new();
        let mut probe = Vec::new();
        for t in chunk * 50..((chunk + 1) * 50).min(traces) {
            let mut trace_id = [0u8; 16];
            trace_id[..8].copy_from_slice(&next().to_be_bytes());
            trace_id[8..].copy_from_slice(&next().to_be_bytes());
            let start = t0 + t * 1_000_000;
            let span = |n: u64, name: String, kind: i32, attrs: Vec<KeyValue>| Span {
                trace_id: trace_id.to_vec(),
                span_id: (t * 4 + n + 1).to_be_bytes().to_vec(),
                name,
                kind,
                start_time_unix_nano: start + n * 1000,
                end_time_unix_nano: start + n * 1000 + 2_000_000,
                attributes: attrs,
                ..Default::default()
            };
            if t % 10 == 9 {
                let name = format!("probe {t}");
                probe.push(span(0, name.clone(), 3, vec![s("url.path", "/api/cart")]));
                index.push((name, Shape::Probe, trace_id));
                continue;
            }
            if t % 5 == 0 {
                let route = if t % 10 == 0 { "/healthz" } else { "/readyz" };
                let name = format!("GET {route} {t}");
                shop.push(span(0, name.clone(), 2, vec![s("http.route", route)]));
                index.push((name, Shape::Health, trace_id));
                continue;
            }
            let name = format!("POST /checkout {t}");
            let mut server = span(
                0,
                name.clone(),
                2,
                vec![
                    s("http.route", "/checkout"),
                    s(
                        "http.request.header.authorization",
                        &format!("Bearer tok-{t}"),
                    ),
                    s("session.token", "abc"),
                    s("enduser.id", &format!("user-{}", t % 17)),
                    s("note", &format!("paid with 4111111111111111 (order {t})")),
                    int("http.response.status_code", 200),
                ],
            );
            server.events = vec![Event {
                time_unix_nano: start + 500,
                name: "payment".into(),
                attributes: vec![s("card", "5500000000000004"), s("amount", "12.50")],
                ..Default::default()
            }];
            let failed = t % 7 == 3;
            if failed {
                server.status = Some(Status {
                    code: 2,
                    message: "card declined".into(),
                });
            }
            shop.push(server);
            index.push((
                name,
                if failed {
                    Shape::Failed
                } else {
                    Shape::Checkout
                },
                trace_id,
            ));
            let db = format!("SELECT orders {t}");
            shop.push(span(
                1,
                db.clone(),
                3,
                vec![
                    s(
                        "db.statement",
                        "SELECT * FROM orders WHERE card = '4111111111111111'",
                    ),
                    s("db.system", "clickhouse"),
                    s("url.path", "/orders"),
                ],
            ));
            index.push((db, Shape::Database, trace_id));
        }
        for (service, spans) in [("checkout", shop), ("synthetic-probe", probe)] {
            if spans.is_empty() {
                continue;
            }
            records.push(ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    resource: Some(Resource {
                        attributes: vec![
                            s("service.name", service),
                            s("deployment.environment", "prod"),
                            s("billing.card", "4012888888881881"),
                        ],
                        ..Default::default()
                    }),
                    scope_spans: vec![ScopeSpans {
                        scope: Some(InstrumentationScope {
                            name: "io.opentelemetry.http".into(),
                            version: "2.1.0".into(),
                            ..Default::default()
                        }),
                        spans,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            });
        }
    }
    (records, index)
}

/// Spans the collector decided on: written, dropped or sampled out.
fn decided(metrics: &str) -> f64 {
    let removed: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("tracehouse_spans_processed_total{"))
        .filter(|l| l.contains("outcome=\"dropped\"") || l.contains("outcome=\"sampled_out\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    sum_metric(metrics, "tracehouse_spans_decoded_total") + removed
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn config(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/configs")
        .join(name)
        .display()
        .to_string()
}

/// Each span's name → its attributes as the table has them (`SpanAttributes` as JSON text),
/// its `ResourceAttributes`, and the events' attributes.
async fn stored(database: &str, table: &str) -> BTreeMap<String, (String, String, String, u64)> {
    let sql = format!(
        "SELECT SpanName, toJSONString(SpanAttributes), toJSONString(ResourceAttributes), \
         toJSONString(`Events.Attributes`), count() FROM `{database}`.`{table}` \
         GROUP BY SpanName, SpanAttributes, ResourceAttributes, `Events.Attributes` FORMAT TSV"
    );
    query(&sql)
        .await
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[0].to_owned(),
                (
                    f[1].replace("\\\\", "\\"),
                    f[2].replace("\\\\", "\\"),
                    f[3].replace("\\\\", "\\"),
                    f[4].parse().unwrap(),
                ),
            )
        })
        .collect()
}

/// The recipes of docs/processing.md, on the stack: health checks and probes dropped,
/// credentials removed, card numbers masked, user ids hashed with the Secret's key, a tenth
/// of the traces kept (as the Collector's sampler draws them) and every error; each kept
/// span once, and the metrics count what each rule did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recipes_drop_redact_and_sample_as_documented() {
    let w = World::new("recipes", Attributes::Map);
    create_topic(&w.topic).await;
    let (records, index) = shop_records(now_ns() - 60_000_000_000, 2000);
    let payloads: Vec<Vec<u8>> = records
        .iter()
        .map(|r| encode(r, Encoding::OtlpProto))
        .collect();
    w.produce_raw(0, &payloads).await;
    let key = std::env::temp_dir().join(format!("{}-hash.key", w.database));
    std::fs::write(&key, "a-test-key-of-32-bytes-or-more-0\n").unwrap();
    // The recipes' file, plus the key file (as the operator mounts a Secret's key).
    let cfg = std::env::temp_dir().join(format!("{}-recipes.yaml", w.database));
    let recipes = std::fs::read_to_string(config("processing-recipes.yaml")).unwrap();
    std::fs::write(
        &cfg,
        format!("{recipes}  hash_key_file: {}\n", key.display()),
    )
    .unwrap();
    let collector = w.start_collector(&["--config", cfg.to_str().unwrap()]);

    let tenth = Sampler::new(10.0, 0);
    let expected: Vec<&Crafted> = index
        .iter()
        .filter(|(_, shape, id)| match shape {
            Shape::Health | Shape::Probe => false,
            Shape::Failed => true,
            Shape::Checkout | Shape::Database => tenth.keeps(id),
        })
        .collect();
    let total = index.len() as u64;
    collector
        .wait_metrics("every span decided", Duration::from_secs(60), |m| {
            decided(m) >= total as f64
        })
        .await;
    let rows = w
        .wait_rows(expected.len() as u64, Duration::from_secs(30))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let table = stored(&w.database, &w.table).await;
    assert_eq!(
        rows,
        expected.len() as u64,
        "rows: {rows}, expected {}",
        expected.len()
    );
    assert_eq!(table.len(), expected.len(), "one row per kept span name");
    let hmac_user = |u: &str| {
        use hmac::{Hmac, Mac};
        let mut mac =
            Hmac::<sha2::Sha256>::new_from_slice(b"a-test-key-of-32-bytes-or-more-0").unwrap();
        mac.update(u.as_bytes());
        mac.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let mut by_shape = BTreeMap::<&str, u64>::new();
    for (name, shape, _) in &expected {
        let (attrs, resource, events, n) = table
            .get(name)
            .unwrap_or_else(|| panic!("{name} ({shape:?}) is missing"));
        assert_eq!(*n, 1, "{name} stored {n} times");
        let all = format!("{attrs}{resource}{events}");
        for secret in [
            "Bearer",
            "session.token",
            "4111111111111111",
            "5500000000000004",
            "4012888888881881",
            "user-",
        ] {
            assert!(
                !all.contains(secret),
                "{name} still shows {secret:?}: {all}"
            );
        }
        assert!(resource.contains("\"billing.card\":\"****\""), "{resource}");
        match shape {
            Shape::Checkout | Shape::Failed => {
                let t: u64 = name.rsplit(' ').next().unwrap().parse().unwrap();
                let want = format!(
                    "\"enduser.id\":\"{}\"",
                    hmac_user(&format!("user-{}", t % 17))
                );
                assert!(attrs.contains(&want), "{name}: {attrs}");
                assert!(
                    attrs.contains(&format!("\"note\":\"paid with **** (order {t})\"")),
                    "{attrs}"
                );
                assert!(events.contains("\"card\":\"****\""), "{events}");
            }
            Shape::Database => assert!(!attrs.contains("db.statement"), "{attrs}"),
            Shape::Health | Shape::Probe => unreachable!(),
        }
        *by_shape.entry(format!("{shape:?}").leak()).or_default() += 1;
    }
    let count = |rule: &str, outcome: &str| {
        let m = &collector;
        let prefix =
            format!("tracehouse_spans_processed_total{{rule=\"{rule}\",outcome=\"{outcome}\"}}");
        async move { m.metric_sum(&prefix).await as u64 }
    };
    let of = |shape: Shape| index.iter().filter(|(_, s, _)| *s == shape).count() as u64;
    assert_eq!(count("health-checks", "dropped").await, of(Shape::Health));
    assert_eq!(count("synthetic-probes", "dropped").await, of(Shape::Probe));
    let sampled_out = of(Shape::Checkout) + of(Shape::Database)
        - expected
            .iter()
            .filter(|(_, s, _)| matches!(s, Shape::Checkout | Shape::Database))
            .count() as u64;
    assert_eq!(count("keep-a-tenth", "sampled_out").await, sampled_out);
    assert!(count("user-ids", "redacted").await >= of(Shape::Checkout) + of(Shape::Failed));
    eprintln!(
        "recipes: {total} spans in, {} kept ({by_shape:?}), {} health checks and {} probe spans \
         dropped, {sampled_out} sampled out",
        expected.len(),
        of(Shape::Health),
        of(Shape::Probe)
    );
    let _ = std::fs::remove_file(&key);
    let _ = std::fs::remove_file(&cfg);
}

/// The rows of processed spans are those the OpenTelemetry Collector writes with the
/// equivalent processors: the same spans dropped and sampled out, the same attributes
/// removed, hashed and masked, the same `TraceState` written on the sampled spans.
async fn differential(attributes: Attributes) {
    let started = Instant::now();
    let otelcol = otelcol_bin();
    let json = attributes == Attributes::Json;
    let name = format!("proc_{attributes}");
    let w = World::new(&name, attributes);
    let go_db = OtelcolDatabase(tracehouse_e2e::unique_name(&format!("e2e_{name}_otelcol")));
    create_table(&go_db.0, &w.table, attributes);
    create_topic(&w.topic).await;
    let t0 = now_ns() - 60_000_000_000;
    let (records, _) = shop_records(t0, 1000);
    let mut payloads: Vec<Vec<u8>> = records
        .iter()
        .map(|r| encode(r, Encoding::OtlpProto))
        .collect();
    let mut generator = Generator::new(GeneratorConfig {
        generator_id: "processing".into(),
        seed: 23,
        spans_per_record: 100,
        start_time_unix_nano: t0,
        ..GeneratorConfig::default()
    });
    payloads.extend((0..5).map(|_| encode(&generator.next_record(), Encoding::OtlpProto)));
    w.produce_raw(0, &payloads).await;
    let total: usize = records
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len())
        .sum::<usize>()
        + 500;

    let th = w.start_collector(&["--config", &config("processing-differential.yaml")]);
    let go = Otelcol::start(
        &otelcol,
        &w.topic,
        &go_db.0,
        json,
        Encoding::OtlpProto,
        &["processing.yaml"],
    );
    th.wait_metrics("every span decided", Duration::from_secs(60), |m| {
        decided(m) >= total as f64
    })
    .await;
    let written = th.metric_sum("tracehouse_rows_inserted_total").await as u64;
    let go_count = || async {
        let sql = format!("SELECT count() FROM `{}`.`{}`", go_db.0, w.table);
        query(&sql).await.trim().parse::<u64>().unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while go_count().await < written {
        assert!(
            Instant::now() < deadline,
            "otelcol stored {} of the {written} rows tracehouse wrote; its log:\n{}",
            go_count().await,
            go.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Nothing more should arrive: a late row would be a difference too.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let th_rows = Table::read(&w.database, &w.table).await;
    let go_rows = Table::read(&go_db.0, &w.table).await;
    // The JSON variant's deliberate type differences (an integral double stays Float64, an
    // empty array is typed on its own) are the only ones allowed, as in the conformance test.
    let mut explained = std::collections::BTreeSet::new();
    let diffs: Vec<Diff> = differences(&th_rows, &go_rows)
        .into_iter()
        .filter(|d| {
            !matches!(d, Diff::Value { column, tracehouse, otelcol, .. }
                if json && column.ends_with("(paths and types)")
                    && type_differences(tracehouse, otelcol, &mut explained))
        })
        .collect();
    assert!(
        diffs.is_empty(),
        "{} differences from the OpenTelemetry Collector with processors ({attributes}):\n{}\n\notelcol log:\n{}",
        diffs.len(),
        diffs
            .iter()
            .take(30)
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
        go.log_tail()
    );
    let rows = w.count_rows().await;
    assert_eq!(th_rows.len() as u64, rows);
    assert!(
        rows > 0 && (rows as usize) < total / 5,
        "{rows} of {total} kept"
    );
    eprintln!(
        "processing {attributes}: {total} spans in, {rows} rows in both tables, equal column by \
         column ({} columns; deliberate differences {explained:?}) in {:.1} s",
        th_rows.columns.len(),
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn map_rows_of_processed_spans_match_the_opentelemetry_collectors() {
    differential(Attributes::Map).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rows_of_processed_spans_match_the_opentelemetry_collectors() {
    differential(Attributes::Json).await;
}
