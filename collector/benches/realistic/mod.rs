//! Realistic OTLP trace records for the pipeline bench and the server-cost test.
//!
//! One record is one trace of 100 spans over 4 services: resource attributes of every
//! kind (strings, ints, arrays, a nested kvlist), 8–16 span attributes per span
//! (HTTP/DB/RPC semantic conventions plus bools, doubles, bytes, arrays), an
//! exception event on every fifth span and a link on every tenth. Deterministic.
#![allow(dead_code)]

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value::Value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

pub const SPANS_PER_RECORD: usize = 100;

/// A small deterministic generator (no dependence on `rand`'s algorithms).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 11
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn v(value: Value) -> Option<AnyValue> {
    Some(AnyValue { value: Some(value) })
}
fn kv(key: &str, value: Option<AnyValue>) -> KeyValue {
    KeyValue {
        key: key.into(),
        value,
        ..Default::default()
    }
}
fn s(x: impl Into<String>) -> Option<AnyValue> {
    v(Value::StringValue(x.into()))
}
fn i(x: i64) -> Option<AnyValue> {
    v(Value::IntValue(x))
}

const SERVICES: [&str; 4] = ["frontend", "checkout", "payments", "inventory"];
const ROUTES: [&str; 6] = [
    "/cart",
    "/checkout",
    "/api/v1/orders/{id}",
    "/health",
    "/login",
    "/search",
];
const METHODS: [&str; 4] = ["GET", "POST", "PUT", "DELETE"];

fn resource(service: &str, rng: &mut Lcg) -> Resource {
    Resource {
        attributes: vec![
            kv("service.name", s(service)),
            kv(
                "service.version",
                s(format!("1.{}.{}", rng.below(20), rng.below(100))),
            ),
            kv("service.namespace", s("shop")),
            kv("deployment.environment", s("production")),
            kv(
                "host.name",
                s(format!(
                    "ip-10-0-{}-{}.ec2.internal",
                    rng.below(256),
                    rng.below(256)
                )),
            ),
            kv("host.arch", s("amd64")),
            kv("os.type", s("linux")),
            kv("process.pid", i(rng.below(60_000) as i64)),
            kv("process.runtime.name", s("OpenJDK Runtime Environment")),
            kv(
                "process.command_args",
                v(Value::ArrayValue(ArrayValue {
                    values: ["java", "-jar", "app.jar", "--server.port=8080"]
                        .iter()
                        .map(|a| AnyValue {
                            value: Some(Value::StringValue((*a).into())),
                        })
                        .collect(),
                })),
            ),
            kv("telemetry.sdk.name", s("opentelemetry")),
            kv("telemetry.sdk.language", s("java")),
            kv("telemetry.sdk.version", s("1.38.0")),
            kv(
                "k8s",
                v(Value::KvlistValue(KeyValueList {
                    values: vec![
                        kv("namespace.name", s("shop")),
                        kv(
                            "pod.name",
                            s(format!("{service}-7d9f8b6c4-{:05x}", rng.below(1 << 20))),
                        ),
                        kv("node.name", s(format!("node-{}", rng.below(40)))),
                    ],
                })),
            ),
        ],
        ..Default::default()
    }
}

fn span(trace_id: &[u8], n: usize, parent: &[u8], t0: u64, rng: &mut Lcg) -> Span {
    let start = t0 + n as u64 * 1_000_000 + rng.below(500_000);
    let kind = [1, 2, 3, 3, 2][n % 5];
    let route = ROUTES[rng.below(ROUTES.len() as u64) as usize];
    let method = METHODS[rng.below(METHODS.len() as u64) as usize];
    let mut attributes = vec![
        kv("http.request.method", s(method)),
        kv("http.route", s(route)),
        kv(
            "url.full",
            s(format!(
                "https://shop.example.com{route}?q={}",
                rng.below(1 << 30)
            )),
        ),
        kv(
            "http.response.status_code",
            i([200, 200, 200, 201, 404, 500][n % 6]),
        ),
        kv("server.address", s("shop.example.com")),
        kv("server.port", i(443)),
        kv("network.protocol.version", s("1.1")),
        kv(
            "user_agent.original",
            s(
                "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36",
            ),
        ),
    ];
    let extra = rng.below(9) as usize;
    let pool: [(&str, Option<AnyValue>); 9] = [
        ("db.system", s("postgresql")),
        (
            "db.statement",
            s("SELECT id, sku, qty FROM cart_items WHERE cart_id = $1 AND deleted_at IS NULL"),
        ),
        ("rpc.grpc.status_code", i(0)),
        ("cache.hit", v(Value::BoolValue(rng.below(2) == 0))),
        (
            "queue.latency_ms",
            v(Value::DoubleValue(rng.below(10_000) as f64 / 7.0)),
        ),
        (
            "feature.flags",
            v(Value::ArrayValue(ArrayValue {
                values: ["new-checkout", "dark-mode"]
                    .iter()
                    .map(|f| AnyValue {
                        value: Some(Value::StringValue((*f).into())),
                    })
                    .collect(),
            })),
        ),
        (
            "retry.delays_ms",
            v(Value::ArrayValue(ArrayValue {
                values: (0..3)
                    .map(|k| AnyValue {
                        value: Some(Value::IntValue(k * 100)),
                    })
                    .collect(),
            })),
        ),
        ("request.digest", v(Value::BytesValue(rng.bytes(16)))),
        ("enduser.id", s(format!("user-{}", rng.below(100_000)))),
    ];
    attributes.extend(pool.into_iter().take(extra).map(|(k, val)| kv(k, val)));
    let events = if n % 5 == 4 {
        vec![Event {
            time_unix_nano: start + 10_000,
            name: "exception".into(),
            attributes: vec![
                kv("exception.type", s("java.io.IOException")),
                kv("exception.message", s("Connection reset by peer")),
                kv(
                    "exception.stacktrace",
                    s(
                        "java.io.IOException: Connection reset by peer\n\tat sun.nio.ch.SocketDispatcher.read0(Native Method)\n\tat sun.nio.ch.SocketDispatcher.read(SocketDispatcher.java:47)\n\tat sun.nio.ch.NioSocketImpl.tryRead(NioSocketImpl.java:256)\n\tat com.example.shop.CartClient.fetch(CartClient.java:88)",
                    ),
                ),
                kv("exception.escaped", v(Value::BoolValue(false))),
            ],
            ..Default::default()
        }]
    } else {
        Vec::new()
    };
    let links = if n % 10 == 9 {
        vec![Link {
            trace_id: rng.bytes(16),
            span_id: rng.bytes(8),
            trace_state: "vendor=abc".into(),
            attributes: vec![kv("link.kind", s("follows_from"))],
            ..Default::default()
        }]
    } else {
        Vec::new()
    };
    Span {
        trace_id: trace_id.to_vec(),
        span_id: rng.bytes(8),
        parent_span_id: parent.to_vec(),
        trace_state: String::new(),
        flags: 0x101,
        name: format!("{method} {route}"),
        kind,
        start_time_unix_nano: start,
        end_time_unix_nano: start + 200_000 + rng.below(50_000_000),
        attributes,
        events,
        links,
        status: Some(Status {
            message: if n % 6 == 5 {
                "Internal Server Error".into()
            } else {
                String::new()
            },
            code: if n % 6 == 5 { 2 } else { 0 },
        }),
        ..Default::default()
    }
}

/// One record: one trace of 100 spans over the 4 services.
pub fn record(seed: u64) -> ExportTraceServiceRequest {
    let mut rng = Lcg(seed);
    let trace_id = rng.bytes(16);
    let t0 = 1_700_000_000_000_000_000 + seed * 1_000_000_000;
    let root = rng.bytes(8);
    let mut resource_spans = Vec::new();
    for (k, service) in SERVICES.iter().enumerate() {
        let spans: Vec<Span> = (0..SPANS_PER_RECORD / SERVICES.len())
            .map(|n| span(&trace_id, k * 25 + n, &root, t0, &mut rng))
            .collect();
        resource_spans.push(ResourceSpans {
            resource: Some(resource(service, &mut rng)),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "io.opentelemetry.tomcat-10.0".into(),
                    version: "2.4.0-alpha".into(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    ExportTraceServiceRequest { resource_spans }
}
