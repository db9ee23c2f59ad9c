//! The edge-case records of the differential test: one small `ExportTraceServiceRequest`
//! per concern, so that a record the OpenTelemetry Collector refuses loses only the spans
//! of that concern.
//!
//! Every span has a name saying what it tests and a start time of its own, so each row is
//! found by (TraceId, SpanId, Timestamp) even when its ids are empty.

#[path = "../otlp_values/mod.rs"]
mod otlp_values;
use otlp_values::*;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

/// One record of the edge-case set.
pub struct EdgeRecord {
    pub request: ExportTraceServiceRequest,
    /// Some attribute value (resource, span, event or link, at any depth) is NaN or ±Inf.
    pub non_finite: bool,
    /// Some id is neither empty nor of its proper length (16 bytes for a trace, 8 for a
    /// span): pdata refuses the whole record.
    pub wrong_length_ids: bool,
}

impl EdgeRecord {
    pub fn spans(&self) -> usize {
        self.request
            .resource_spans
            .iter()
            .flat_map(|rs| &rs.scope_spans)
            .map(|ss| ss.spans.len())
            .sum()
    }
}

/// Builds the spans of the set, numbering them so each gets its own start time and ids.
struct Spans {
    t0: u64,
    n: u64,
}

impl Spans {
    /// A plain span named `name`: fresh non-zero ids, a parent, 1 µs long, kind Server,
    /// status Ok, one string attribute.
    fn span(&mut self, name: &str) -> Span {
        self.n += 1;
        let n = self.n;
        let mut trace_id = [0u8; 16];
        trace_id[..8].copy_from_slice(&0x7e57_c0de_0000_0000_u64.to_be_bytes());
        trace_id[8..].copy_from_slice(&n.to_be_bytes());
        let start = self.t0 + n * 1_000_000;
        Span {
            trace_id: trace_id.to_vec(),
            span_id: (0x5000_0000_0000_0000 | n).to_be_bytes().to_vec(),
            parent_span_id: (0x6000_0000_0000_0000 | n).to_be_bytes().to_vec(),
            name: name.into(),
            kind: 2,
            start_time_unix_nano: start,
            end_time_unix_nano: start + 1_000,
            attributes: vec![kv("case", s(name))],
            status: Some(Status {
                message: String::new(),
                code: 1,
            }),
            ..Default::default()
        }
    }
}

fn resource(attrs: Vec<KeyValue>) -> Option<Resource> {
    Some(Resource {
        attributes: attrs,
        ..Default::default()
    })
}

fn service(name: &str) -> Option<Resource> {
    resource(vec![kv("service.name", s(name))])
}

fn scope() -> Option<InstrumentationScope> {
    Some(InstrumentationScope {
        name: "conformance".into(),
        version: "1.0.0".into(),
        ..Default::default()
    })
}

fn request(
    resource: Option<Resource>,
    scope: Option<InstrumentationScope>,
    spans: Vec<Span>,
) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource,
            scope_spans: vec![ScopeSpans {
                scope,
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn record(spans: Vec<Span>) -> EdgeRecord {
    EdgeRecord {
        request: request(service("conformance"), scope(), spans),
        non_finite: false,
        wrong_length_ids: false,
    }
}

fn with_attrs(mut span: Span, attrs: Vec<KeyValue>) -> Span {
    span.attributes.extend(attrs);
    span
}

/// Names of the spans whose rows differ on purpose (see collector/README.md,
/// "Differences from the OpenTelemetry Collector").
pub const END_BEFORE_START: &str = "time.end-before-start";
pub const END_ZERO: &str = "time.end-zero";
pub const BOOL_NUMBER_ARRAY: &str = "array.bools-and-numbers";
pub const INTEGRAL_DOUBLES: &str = "double.integral";
pub const WRONG_LENGTH_TRACE_ID: &str = "ids.trace-id-of-8-bytes";
pub const WRONG_LENGTH_SPAN_ID: &str = "ids.span-id-of-16-bytes";

/// The edge-case set; `t0`: a start time near now (ns), so the rows land in today's
/// partition.
pub fn edge_records(t0: u64) -> Vec<EdgeRecord> {
    let mut sp = Spans { t0, n: 0 };
    let mut out = Vec::new();

    // Ids: empty, all zero, a zero parent.
    let mut empty_ids = sp.span("ids.empty");
    empty_ids.trace_id.clear();
    empty_ids.span_id.clear();
    empty_ids.parent_span_id.clear();
    let mut zero_ids = sp.span("ids.all-zero");
    zero_ids.trace_id = vec![0; 16];
    zero_ids.span_id = vec![0; 8];
    zero_ids.parent_span_id = vec![0; 8];
    let mut root = sp.span("ids.root");
    root.parent_span_id.clear();
    out.push(record(vec![empty_ids, zero_ids, root]));

    // Times: end before start, end zero, start zero.
    let mut before = sp.span(END_BEFORE_START);
    before.end_time_unix_nano = before.start_time_unix_nano - 5_000;
    let mut end_zero = sp.span(END_ZERO);
    end_zero.end_time_unix_nano = 0;
    let mut same = sp.span("time.zero-length");
    same.end_time_unix_nano = same.start_time_unix_nano;
    out.push(record(vec![before, end_zero, same]));

    // Kinds, statuses, trace state, flags.
    let mut kinds = Vec::new();
    for (kind, code) in [(0, 0), (1, 2), (3, 0), (4, 1), (5, 2), (9, 7)] {
        let mut span = sp.span(&format!("kind.{kind}.status.{code}"));
        span.kind = kind;
        span.status = Some(Status {
            message: if code == 2 {
                "boom ✗ \"quoted\"".into()
            } else {
                String::new()
            },
            code,
        });
        span.trace_state = "vendor=a,other=b c".into();
        span.flags = 0x301;
        kinds.push(span);
    }
    let mut no_status = sp.span("status.missing");
    no_status.status = None;
    kinds.push(no_status);
    out.push(record(kinds));

    // Finite doubles, JSON's awkward ones included.
    out.push(record(vec![
        with_attrs(
            sp.span("double.finite"),
            vec![
                kv("big", d(1e21)),
                kv("small", d(1e-7)),
                kv("tiny", d(5e-324)),
                kv("max", d(f64::MAX)),
                kv("sum", d(0.1 + 0.2)),
                kv("neg", d(-2.5)),
                kv("micro", d(1e-6)),
                kv("in.array", arr(vec![d(1e21), d(1e-7), d(-0.5)])),
            ],
        ),
        with_attrs(
            sp.span(INTEGRAL_DOUBLES),
            vec![
                kv("one", d(1.0)),
                kv("thousand", d(1000.0)),
                kv("neg.zero", d(-0.0)),
                kv("beyond.int64", d(1e20 + 12345.0)),
                kv("in.array", arr(vec![d(1.0), d(2.0)])),
                kv("in.kvlist", kvl(vec![kv("two", d(2.0))])),
            ],
        ),
    ]));

    // Non-finite doubles: each place in a record of its own, with a bystander span.
    let non_finite_cases: Vec<(&str, Vec<KeyValue>)> = vec![
        ("double.nan", vec![kv("v", d(f64::NAN))]),
        ("double.inf", vec![kv("v", d(f64::INFINITY))]),
        ("double.neg-inf", vec![kv("v", d(f64::NEG_INFINITY))]),
        (
            "double.non-finite-nested",
            vec![
                kv("arr", arr(vec![s("a"), d(f64::NAN)])),
                kv("map", kvl(vec![kv("inf", d(f64::INFINITY))])),
            ],
        ),
    ];
    for (name, attrs) in non_finite_cases {
        let span = with_attrs(sp.span(name), attrs);
        let bystander = sp.span(&format!("{name}.bystander"));
        out.push(EdgeRecord {
            non_finite: true,
            ..record(vec![span, bystander])
        });
    }
    let mut event_nan = sp.span("double.nan-in-event");
    event_nan.events.push(Event {
        time_unix_nano: event_nan.start_time_unix_nano + 10,
        name: "e".into(),
        attributes: vec![kv("v", d(f64::NAN))],
        ..Default::default()
    });
    out.push(EdgeRecord {
        non_finite: true,
        ..record(vec![event_nan])
    });
    out.push(EdgeRecord {
        request: request(
            resource(vec![
                kv("service.name", s("nan-resource")),
                kv("r", d(f64::NEG_INFINITY)),
            ]),
            scope(),
            vec![sp.span("double.nan-in-resource")],
        ),
        non_finite: true,
        wrong_length_ids: false,
    });

    // Ints, bools, bytes, the empty value.
    out.push(record(vec![with_attrs(
        sp.span("scalars"),
        vec![
            kv("int.min", i(i64::MIN)),
            kv("int.max", i(i64::MAX)),
            kv("int.zero", i(0)),
            kv("bool.t", b(true)),
            kv("bool.f", b(false)),
            kv("bytes", bytes(&[0, 1, 2, 0xfb, 0xff])),
            kv("bytes.empty", bytes(&[])),
            kv("bytes.empty.in.array", arr(vec![bytes(&[]), bytes(b"x")])),
            kv("bytes.empty.in.kvlist", kvl(vec![kv("b", bytes(&[]))])),
            kv("nothing", empty()),
            KeyValue {
                key: "no.value".into(),
                value: None,
                ..Default::default()
            },
        ],
    )]));

    // Keys: empty, repeated with the same and with different types.
    out.push(record(vec![
        with_attrs(sp.span("keys.empty"), vec![kv("", s("empty key"))]),
        with_attrs(
            sp.span("keys.empty-nested"),
            vec![kv("outer", kvl(vec![kv("", i(1)), kv("x", i(2))]))],
        ),
        with_attrs(
            sp.span("keys.duplicate-same-type"),
            vec![kv("dup", s("first")), kv("dup", s("second"))],
        ),
        with_attrs(
            sp.span("keys.duplicate-different-type"),
            vec![kv("dup", s("first")), kv("dup", i(2))],
        ),
        with_attrs(
            sp.span("keys.duplicate-in-kvlist"),
            vec![kv("m", kvl(vec![kv("k", s("first")), kv("k", i(2))]))],
        ),
    ]));

    // Nesting: deep kvlists, arrays of every shape, empty ones.
    let mut deep = kvl(vec![kv("leaf", s("bottom"))]);
    for level in 0..8 {
        deep = kvl(vec![kv(&format!("l{level}"), deep), kv("n", i(level))]);
    }
    out.push(record(vec![
        with_attrs(sp.span("kvlist.deep"), vec![kv("deep", deep)]),
        with_attrs(
            sp.span("array.mixed"),
            vec![kv(
                "mixed",
                arr(vec![
                    s("a"),
                    i(1),
                    d(2.5),
                    empty(),
                    bytes(b"xy"),
                    arr(vec![i(1)]),
                ]),
            )],
        ),
        with_attrs(
            sp.span("array.shapes"),
            vec![
                kv("strings", arr(vec![s("a"), s("b")])),
                kv("ints", arr(vec![i(1), i(-2)])),
                kv("numbers", arr(vec![i(1), d(2.5)])),
                kv("bools", arr(vec![b(true), b(false)])),
                kv("nested", arr(vec![arr(vec![i(1), i(2)]), arr(vec![i(3)])])),
                kv(
                    "objects",
                    arr(vec![kvl(vec![kv("k", i(1))]), kvl(vec![kv("k", i(2))])]),
                ),
                kv("nulls", arr(vec![empty(), empty()])),
                kv("strings.and.null", arr(vec![s("x"), empty()])),
            ],
        ),
        with_attrs(
            sp.span(BOOL_NUMBER_ARRAY),
            vec![kv("bn", arr(vec![b(true), i(1)]))],
        ),
        with_attrs(
            sp.span("empty.containers"),
            vec![
                kv("arr", arr(vec![])),
                kv("map", kvl(vec![])),
                kv("arr.of.empty", arr(vec![arr(vec![]), kvl(vec![])])),
                kv(
                    "map.of.empty",
                    kvl(vec![kv("a", arr(vec![])), kv("m", kvl(vec![]))]),
                ),
            ],
        ),
    ]));

    // Strings: long, non-ASCII, characters JSON escapes, inside and outside JSON text.
    let odd = "héllo ✓ 日本語 🎉 <a&b> \"q\" \\ \t\n\u{1}\u{7f}\u{2028}\u{2029}";
    let long: String = "long ✓ ".repeat(20_000);
    let mut strings = with_attrs(
        sp.span("strings ✓ <&>"),
        vec![
            kv("odd", s(odd)),
            kv("odd.in.array", arr(vec![s(odd)])),
            kv("odd.in.kvlist", kvl(vec![kv(odd, s(odd))])),
            kv("ключ ✓", s("значение")),
            kv("long", s(&long)),
        ],
    );
    strings.trace_state = odd.into();
    strings.status = Some(Status {
        message: odd.into(),
        code: 2,
    });
    out.push(EdgeRecord {
        request: request(
            resource(vec![
                kv("service.name", s("sérvice ✓ <&>")),
                kv("odd", s(odd)),
            ]),
            Some(InstrumentationScope {
                name: "scöpe <&>".into(),
                version: odd.into(),
                ..Default::default()
            }),
            vec![strings],
        ),
        non_finite: false,
        wrong_length_ids: false,
    });

    // Resources and scopes: missing, empty, service.name of another type or repeated.
    let mut resources = ExportTraceServiceRequest::default();
    let shapes: Vec<(&str, Option<Resource>, Option<InstrumentationScope>)> = vec![
        ("resource.missing", None, None),
        (
            "resource.empty",
            resource(vec![]),
            Some(InstrumentationScope::default()),
        ),
        (
            "resource.service-int",
            resource(vec![kv("service.name", i(42))]),
            scope(),
        ),
        (
            "resource.service-twice",
            resource(vec![
                kv("service.name", s("first")),
                kv("service.name", s("second")),
                kv("z", s("last")),
                kv("a", s("first")),
            ]),
            scope(),
        ),
        (
            "resource.service-kvlist",
            resource(vec![kv(
                "service.name",
                kvl(vec![kv("b", i(1)), kv("a", i(2))]),
            )]),
            scope(),
        ),
    ];
    for (name, res, sc) in shapes {
        resources
            .resource_spans
            .extend(request(res, sc, vec![sp.span(name)]).resource_spans);
    }
    out.push(EdgeRecord {
        request: resources,
        non_finite: false,
        wrong_length_ids: false,
    });

    // Events and links: empty ids, zero ids, times, names and attributes.
    let mut el = sp.span("events-links");
    let t = el.start_time_unix_nano;
    el.events = vec![
        Event {
            time_unix_nano: t + 1,
            name: "first ✓".into(),
            attributes: vec![kv("z", i(1)), kv("a", arr(vec![s("<&>")]))],
            ..Default::default()
        },
        Event::default(),
        Event {
            time_unix_nano: t + 2,
            name: "dup-keys".into(),
            attributes: vec![kv("k", s("first")), kv("k", b(true))],
            ..Default::default()
        },
    ];
    el.links = vec![
        Link::default(),
        Link {
            trace_id: vec![0; 16],
            span_id: vec![0; 8],
            trace_state: "k=v".into(),
            attributes: vec![kv("link.kind", s("zero ids"))],
            ..Default::default()
        },
        Link {
            trace_id: vec![0xab; 16],
            span_id: vec![0xcd; 8],
            attributes: vec![kv("b", d(1.5)), kv("a", kvl(vec![kv("x", s("y"))]))],
            flags: 0x301,
            ..Default::default()
        },
    ];
    out.push(record(vec![el]));

    // Ids of the wrong length, each in a record of its own.
    let mut short_trace = sp.span(WRONG_LENGTH_TRACE_ID);
    short_trace.trace_id.truncate(8);
    let mut long_span = sp.span(WRONG_LENGTH_SPAN_ID);
    long_span.span_id.extend_from_slice(&[0xee; 8]);
    for span in [short_trace, long_span] {
        out.push(EdgeRecord {
            wrong_length_ids: true,
            ..record(vec![span])
        });
    }

    out
}
