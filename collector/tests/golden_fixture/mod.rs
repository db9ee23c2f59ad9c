//! The golden request and the rows the OTel exporter semantics say it must become.
//!
//! One `ExportTraceServiceRequest` covers every rule of the compat notes §2–3
//! (`docs/compat-notes.md`): normal, empty and all-zero ids, a span ending before it
//! starts, an unknown span kind, a missing status, every attribute value kind (string
//! with non-ASCII and HTML
//! characters, bool, int, doubles including 1e21, 1e-7, -0, NaN and ±Inf, bytes,
//! arrays of each shape, nested kvlists, the empty value, a repeated key), events,
//! links, a resource without `service.name`, a span without scope, and a 1 MiB
//! attribute.
//!
//! Expected rows are written out by hand in a canonical JSON form:
//! times as integer nanoseconds, Map attributes as `[[key, value], …]` sorted by key as
//! the exporter sends them, JSON attributes as `{path: [type, value]}` (non-finite floats
//! as "nan"/"inf"/"-inf").
#![allow(dead_code)] // each test binary uses a different subset

#[path = "../otlp_values/mod.rs"]
mod otlp_values;
pub use otlp_values::*;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, any_value::Value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use serde_json::{Value as J, json};

pub const T0: u64 = 1_700_000_000_123_456_789;
pub const BIG_LEN: usize = 1 << 20;

pub fn big_string() -> String {
    let mut s = "x".repeat(BIG_LEN - 2);
    s.push('é');
    s
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub const TRACE: &str = "5b8efff798038103d269b633813fc60c";
pub const LINKED_TRACE: &str = "5b8efff798038103d269b633813fc60d";

pub fn request() -> ExportTraceServiceRequest {
    let all_values = Span {
        trace_id: hex(TRACE),
        span_id: hex("eee19b7ec3c1b174"),
        parent_span_id: hex("eee19b7ec3c1b173"),
        trace_state: "k=v".into(),
        name: "all-values".into(),
        kind: 2,
        start_time_unix_nano: T0,
        end_time_unix_nano: T0 + 1_500_000,
        attributes: vec![
            kv("str", s("héllo ✓ <a&b> \"q\"\n")),
            kv("bool", b(true)),
            kv("int", i(-42)),
            kv("dbl", d(2.75)),
            kv("dbl.big", d(1e21)),
            kv("dbl.small", d(1.5e-7)),
            kv("bytes", v(Value::BytesValue(vec![0, 1, 2, 0xfb, 0xff]))),
            kv("arr.str", arr(vec![s("a"), s("b")])),
            kv("arr.int", arr(vec![i(1), i(2)])),
            kv("arr.num", arr(vec![i(1), d(2.5)])),
            kv("arr.mixed", arr(vec![s("a"), i(1)])),
            kv("arr.empty", arr(vec![])),
            kv(
                "arr.nested",
                arr(vec![arr(vec![i(1), i(2)]), arr(vec![i(3)])]),
            ),
            kv("arr.kv", arr(vec![kvl(vec![kv("k", i(1))])])),
            kv(
                "http",
                kvl(vec![
                    kv("request", kvl(vec![kv("method", s("GET"))])),
                    kv("status_code", i(200)),
                ]),
            ),
            kv("http.route", s("/cart")),
            kv("nothing", AnyValue { value: None }),
        ],
        events: vec![
            Event {
                time_unix_nano: T0 + 1_000,
                name: "exception".into(),
                attributes: vec![
                    kv("exception.type", s("IOError")),
                    kv("exception.escaped", b(false)),
                ],
                ..Default::default()
            },
            Event {
                time_unix_nano: T0 + 2_000,
                name: "retry".into(),
                ..Default::default()
            },
        ],
        links: vec![
            Link {
                trace_id: hex(LINKED_TRACE),
                span_id: hex("eee19b7ec3c1b175"),
                trace_state: "a=b".into(),
                attributes: vec![kv("link.kind", s("follows"))],
                ..Default::default()
            },
            Link {
                trace_id: vec![0; 16],
                ..Default::default()
            },
        ],
        status: Some(Status {
            message: "boom ✗".into(),
            code: 2,
        }),
        ..Default::default()
    };
    let zero_ids = Span {
        trace_id: vec![0; 16],
        span_id: vec![],
        parent_span_id: vec![0; 8],
        name: "zero-ids".into(),
        kind: 7,
        start_time_unix_nano: T0 + 5_000,
        end_time_unix_nano: T0,
        ..Default::default()
    };
    let big = Span {
        trace_id: hex(TRACE),
        span_id: hex("00000000000000b1"),
        name: "big".into(),
        kind: 3,
        start_time_unix_nano: T0 + 10,
        end_time_unix_nano: T0 + 20,
        attributes: vec![kv("big", s(&big_string()))],
        status: Some(Status {
            message: String::new(),
            code: 1,
        }),
        ..Default::default()
    };
    let no_service = Span {
        trace_id: hex(TRACE),
        span_id: hex("00000000000000c1"),
        name: "no-service".into(),
        kind: 5,
        start_time_unix_nano: T0 + 30,
        end_time_unix_nano: T0 + 31,
        ..Default::default()
    };
    let special = Span {
        trace_id: hex(TRACE),
        span_id: hex("00000000000000d1"),
        name: "special-values".into(),
        kind: 1,
        start_time_unix_nano: T0 + 40,
        end_time_unix_nano: T0 + 41,
        attributes: vec![
            kv("dbl.int", d(2.0)),
            kv("dbl.negzero", d(-0.0)),
            kv("dbl.nan", d(f64::NAN)),
            kv("dbl.inf", d(f64::INFINITY)),
            kv("dbl.neginf", d(f64::NEG_INFINITY)),
            kv("arr.nan", arr(vec![d(1.5), d(f64::NAN)])),
            kv("arr.boolnum", arr(vec![b(true), i(1)])),
            kv("dup", s("first")),
            kv("dup", s("second")),
        ],
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![
            ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![
                        kv("service.name", s("checkout ✓")),
                        kv("host.name", s("h-1")),
                        kv(
                            "k8s",
                            kvl(vec![
                                kv("pod", kvl(vec![kv("name", s("p-1"))])),
                                kv("ns", s("prod")),
                            ]),
                        ),
                        kv("host.cpus", i(8)),
                    ],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "io.opentelemetry.http".into(),
                        version: "1.2.3".into(),
                        ..Default::default()
                    }),
                    spans: vec![all_values, zero_ids, big],
                    ..Default::default()
                }],
                ..Default::default()
            },
            ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("region", s("eu-west ✓"))],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: None,
                    spans: vec![no_service, special],
                    ..Default::default()
                }],
                ..Default::default()
            },
        ],
    }
}

/// Span names in request order (also the order of [`expected_rows`]).
pub const SPAN_NAMES: [&str; 5] = [
    "all-values",
    "zero-ids",
    "big",
    "no-service",
    "special-values",
];

/// Which attribute layout the expectations are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Map,
    Json,
}

fn ns(t: u64) -> J {
    json!(t)
}

/// The expected attribute value of one column, per variant.
struct Attrs {
    map: J,
    json: J,
    keys: J,
}

fn resource_a() -> Attrs {
    Attrs {
        map: json!([
            ["host.cpus", "8"],
            ["host.name", "h-1"],
            ["k8s", r#"{"ns":"prod","pod":{"name":"p-1"}}"#],
            ["service.name", "checkout ✓"]
        ]),
        json: json!({
            "host.cpus": ["Int64", 8],
            "host.name": ["String", "h-1"],
            "k8s.ns": ["String", "prod"],
            "k8s.pod.name": ["String", "p-1"],
            "service.name": ["String", "checkout ✓"]
        }),
        keys: json!([
            "host.cpus",
            "host.name",
            "k8s.ns",
            "k8s.pod.name",
            "service.name"
        ]),
    }
}

fn resource_b() -> Attrs {
    Attrs {
        map: json!([["region", "eu-west ✓"]]),
        json: json!({"region": ["String", "eu-west ✓"]}),
        keys: json!(["region"]),
    }
}

fn empty_attrs() -> Attrs {
    Attrs {
        map: json!([]),
        json: json!({}),
        keys: json!([]),
    }
}

fn all_values_attrs() -> Attrs {
    Attrs {
        map: json!([
            ["arr.empty", "[]"],
            ["arr.int", "[1,2]"],
            ["arr.kv", r#"[{"k":1}]"#],
            ["arr.mixed", r#"["a",1]"#],
            ["arr.nested", "[[1,2],[3]]"],
            ["arr.num", "[1,2.5]"],
            ["arr.str", r#"["a","b"]"#],
            ["bool", "true"],
            ["bytes", "AAEC+/8="],
            ["dbl", "2.75"],
            ["dbl.big", "1e+21"],
            ["dbl.small", "1.5e-7"],
            ["http", r#"{"request":{"method":"GET"},"status_code":200}"#],
            ["http.route", "/cart"],
            ["int", "-42"],
            ["nothing", ""],
            ["str", "héllo ✓ <a&b> \"q\"\n"]
        ]),
        json: json!({
            "arr.empty": ["Array(Nullable(String))", []],
            "arr.int": ["Array(Nullable(Int64))", [1, 2]],
            "arr.kv": ["Array(JSON(max_dynamic_types=16, max_dynamic_paths=256))", [{"k": ["Int64", 1]}]],
            "arr.mixed": ["Array(Dynamic)", [["String", "a"], ["Int64", 1]]],
            "arr.nested": ["Array(Array(Nullable(Int64)))", [[1, 2], [3]]],
            "arr.num": ["Array(Nullable(Float64))", [1.0, 2.5]],
            "arr.str": ["Array(Nullable(String))", ["a", "b"]],
            "bool": ["Bool", true],
            "bytes": ["String", "AAEC+/8="],
            "dbl": ["Float64", 2.75],
            "dbl.big": ["Float64", 1e21],
            "dbl.small": ["Float64", 1.5e-7],
            "http.request.method": ["String", "GET"],
            "http.route": ["String", "/cart"],
            "http.status_code": ["Int64", 200],
            "int": ["Int64", -42],
            "str": ["String", "héllo ✓ <a&b> \"q\"\n"]
        }),
        keys: json!([
            "arr.empty",
            "arr.int",
            "arr.kv",
            "arr.mixed",
            "arr.nested",
            "arr.num",
            "arr.str",
            "bool",
            "bytes",
            "dbl",
            "dbl.big",
            "dbl.small",
            "http.request.method",
            "http.route",
            "http.status_code",
            "int",
            "nothing",
            "str"
        ]),
    }
}

fn big_attrs() -> Attrs {
    Attrs {
        map: json!([["big", big_string()]]),
        json: json!({"big": ["String", big_string()]}),
        keys: json!(["big"]),
    }
}

fn special_attrs() -> Attrs {
    Attrs {
        map: json!([
            ["arr.boolnum", "[true,1]"],
            ["arr.nan", ""],
            ["dbl.inf", "Infinity"],
            ["dbl.int", "2"],
            ["dbl.nan", "NaN"],
            ["dbl.neginf", "-Infinity"],
            ["dbl.negzero", "-0"],
            ["dup", "first"],
            ["dup", "second"]
        ]),
        json: json!({
            "arr.boolnum": ["Array(Dynamic)", [["Bool", true], ["Int64", 1]]],
            "arr.nan": ["Array(Nullable(Float64))", [1.5, "nan"]],
            "dbl.inf": ["Float64", "inf"],
            "dbl.int": ["Float64", 2.0],
            "dbl.nan": ["Float64", "nan"],
            "dbl.neginf": ["Float64", "-inf"],
            "dbl.negzero": ["Float64", -0.0],
            "dup": ["String", "second"]
        }),
        keys: json!([
            "arr.boolnum",
            "arr.nan",
            "dbl.inf",
            "dbl.int",
            "dbl.nan",
            "dbl.neginf",
            "dbl.negzero",
            "dup"
        ]),
    }
}

fn attrs_value(a: &Attrs, variant: Variant) -> J {
    match variant {
        Variant::Map => a.map.clone(),
        Variant::Json => a.json.clone(),
    }
}

/// The expected rows, in request order, for the insert columns of `variant` (with the
/// `*Keys` columns when `keys`).
pub fn expected_rows(variant: Variant, keys: bool) -> Vec<J> {
    struct Row {
        ts: u64,
        trace: &'static str,
        span: &'static str,
        parent: &'static str,
        state: &'static str,
        name: &'static str,
        kind: &'static str,
        service: &'static str,
        resource: Attrs,
        scope: (&'static str, &'static str),
        attrs: Attrs,
        duration: u64,
        status: (&'static str, &'static str),
        events: Vec<(u64, &'static str, Attrs)>,
        links: Vec<(&'static str, &'static str, &'static str, Attrs)>,
    }
    let http = ("io.opentelemetry.http", "1.2.3");
    let rows = vec![
        Row {
            ts: T0,
            trace: TRACE,
            span: "eee19b7ec3c1b174",
            parent: "eee19b7ec3c1b173",
            state: "k=v",
            name: "all-values",
            kind: "Server",
            service: "checkout ✓",
            resource: resource_a(),
            scope: http,
            attrs: all_values_attrs(),
            duration: 1_500_000,
            status: ("Error", "boom ✗"),
            events: vec![
                (
                    T0 + 1_000,
                    "exception",
                    Attrs {
                        map: json!([
                            ["exception.escaped", "false"],
                            ["exception.type", "IOError"]
                        ]),
                        json: json!({
                            "exception.escaped": ["Bool", false],
                            "exception.type": ["String", "IOError"]
                        }),
                        keys: json!([]),
                    },
                ),
                (T0 + 2_000, "retry", empty_attrs()),
            ],
            links: vec![
                (
                    LINKED_TRACE,
                    "eee19b7ec3c1b175",
                    "a=b",
                    Attrs {
                        map: json!([["link.kind", "follows"]]),
                        json: json!({"link.kind": ["String", "follows"]}),
                        keys: json!([]),
                    },
                ),
                ("", "", "", empty_attrs()),
            ],
        },
        Row {
            ts: T0 + 5_000,
            trace: "",
            span: "",
            parent: "",
            state: "",
            name: "zero-ids",
            kind: "",
            service: "checkout ✓",
            resource: resource_a(),
            scope: http,
            attrs: empty_attrs(),
            duration: 0,
            status: ("Unset", ""),
            events: vec![],
            links: vec![],
        },
        Row {
            ts: T0 + 10,
            trace: TRACE,
            span: "00000000000000b1",
            parent: "",
            state: "",
            name: "big",
            kind: "Client",
            service: "checkout ✓",
            resource: resource_a(),
            scope: http,
            attrs: big_attrs(),
            duration: 10,
            status: ("Ok", ""),
            events: vec![],
            links: vec![],
        },
        Row {
            ts: T0 + 30,
            trace: TRACE,
            span: "00000000000000c1",
            parent: "",
            state: "",
            name: "no-service",
            kind: "Consumer",
            service: "",
            resource: resource_b(),
            scope: ("", ""),
            attrs: empty_attrs(),
            duration: 1,
            status: ("Unset", ""),
            events: vec![],
            links: vec![],
        },
        Row {
            ts: T0 + 40,
            trace: TRACE,
            span: "00000000000000d1",
            parent: "",
            state: "",
            name: "special-values",
            kind: "Internal",
            service: "",
            resource: resource_b(),
            scope: ("", ""),
            attrs: special_attrs(),
            duration: 1,
            status: ("Unset", ""),
            events: vec![],
            links: vec![],
        },
    ];
    rows.into_iter()
        .map(|r| {
            let mut o = serde_json::Map::new();
            o.insert("Timestamp".into(), ns(r.ts));
            o.insert("TraceId".into(), json!(r.trace));
            o.insert("SpanId".into(), json!(r.span));
            o.insert("ParentSpanId".into(), json!(r.parent));
            o.insert("TraceState".into(), json!(r.state));
            o.insert("SpanName".into(), json!(r.name));
            o.insert("SpanKind".into(), json!(r.kind));
            o.insert("ServiceName".into(), json!(r.service));
            o.insert(
                "ResourceAttributes".into(),
                attrs_value(&r.resource, variant),
            );
            if keys {
                o.insert("ResourceAttributesKeys".into(), r.resource.keys.clone());
            }
            o.insert("ScopeName".into(), json!(r.scope.0));
            o.insert("ScopeVersion".into(), json!(r.scope.1));
            o.insert("SpanAttributes".into(), attrs_value(&r.attrs, variant));
            if keys {
                o.insert("SpanAttributesKeys".into(), r.attrs.keys.clone());
            }
            o.insert("Duration".into(), json!(r.duration));
            o.insert("StatusCode".into(), json!(r.status.0));
            o.insert("StatusMessage".into(), json!(r.status.1));
            o.insert(
                "Events.Timestamp".into(),
                J::Array(r.events.iter().map(|e| ns(e.0)).collect()),
            );
            o.insert(
                "Events.Name".into(),
                J::Array(r.events.iter().map(|e| json!(e.1)).collect()),
            );
            o.insert(
                "Events.Attributes".into(),
                J::Array(
                    r.events
                        .iter()
                        .map(|e| attrs_value(&e.2, variant))
                        .collect(),
                ),
            );
            o.insert(
                "Links.TraceId".into(),
                J::Array(r.links.iter().map(|l| json!(l.0)).collect()),
            );
            o.insert(
                "Links.SpanId".into(),
                J::Array(r.links.iter().map(|l| json!(l.1)).collect()),
            );
            o.insert(
                "Links.TraceState".into(),
                J::Array(r.links.iter().map(|l| json!(l.2)).collect()),
            );
            o.insert(
                "Links.Attributes".into(),
                J::Array(r.links.iter().map(|l| attrs_value(&l.3, variant)).collect()),
            );
            J::Object(o)
        })
        .collect()
}

/// Compares two canonical rows column by column, with a readable message.
pub fn assert_rows_eq(got: &[J], want: &[J], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: row count");
    for (g, w) in got.iter().zip(want) {
        let name = w["SpanName"].as_str().unwrap_or("?");
        let (J::Object(g), J::Object(w)) = (g, w) else {
            panic!("{what}: rows are not objects");
        };
        let gk: Vec<&String> = g.keys().collect();
        let wk: Vec<&String> = w.keys().collect();
        assert_eq!(gk, wk, "{what}: columns of row {name}");
        for (col, wv) in w {
            let gv = &g[col];
            if gv != wv {
                let show = |v: &J| {
                    let s = v.to_string();
                    if s.len() > 400 {
                        format!("{}… ({} bytes)", &s[..400], s.len())
                    } else {
                        s
                    }
                };
                panic!(
                    "{what}: row {name}, column {col}:\n   got: {}\n  want: {}",
                    show(gv),
                    show(wv)
                );
            }
        }
    }
}
