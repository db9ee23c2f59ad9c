//! Realistic, deterministic OTLP traces, each span numbered for delivery checks.
//!
//! A [`Generator`] walks an endless stream of traces (about
//! [`GeneratorConfig::spans_per_trace`] spans each) and cuts it into
//! `ExportTraceServiceRequest`s of any size with [`Generator::next_request`]. A trace may
//! straddle two requests, as it does behind a batching SDK or collector.
//!
//! What the data looks like, and why:
//! - **Trees**: the first span of a trace is its root (empty `parent_span_id`); every other
//!   span's parent is one of the few spans just before it in the same trace, and its time
//!   range lies inside its parent's. About a third of the children cross into another
//!   service (kind `Server`/`Consumer`), the rest stay in-process (`Internal`, `Client`,
//!   `Producer`, some `Unspecified`).
//! - **Resources and scopes**: [`GeneratorConfig::services`] resources, each with
//!   `service.name` and a varied set of resource attributes (strings, an int, a double, a
//!   bool, an array), and [`GeneratorConfig::scopes_per_service`] instrumentation scopes
//!   with a version and an attribute. A request groups its spans by resource, then scope.
//! - **Attributes of every `AnyValue` kind** on every span: string, bool, int, double
//!   (sometimes tiny or huge, to exercise shortest round-trip formatting), bytes, arrays
//!   and a nested key-value list two levels deep; free-text values contain quotes,
//!   backslashes and non-ASCII text so encoders must escape properly.
//! - **Events** with attributes, **links** to spans of earlier traces, trace state,
//!   flags and status codes (`Unset`, `Ok`, `Error` with a message).
//! - **Verification keys**: every span carries `loadgen.id` (string, the generator id) and
//!   `loadgen.seq` (int, 0, 1, 2, … in generation order, never repeated by one generator).
//!
//! Everything is a function of the configuration: the seed, the generator id (mixed into
//! the seed so two generators given the same seed still differ), the size knobs and the
//! start time. [`GeneratorConfig::default`] takes the start time from the clock so the
//! spans land in today's partitions; pin [`GeneratorConfig::start_time_unix_nano`] for
//! byte-identical output across runs.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value::Value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link, SpanKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

use crate::hostile::Hostile;
use crate::rng::SplitMix64;

/// Attribute key carrying the generator id (string) on every span.
pub const ATTR_ID: &str = "loadgen.id";
/// Attribute key carrying the span's sequence number (int, from 0) on every span.
pub const ATTR_SEQ: &str = "loadgen.seq";

const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.26.0";
const NS_PER_MS: u64 = 1_000_000;

/// What to generate. Every field has a sensible default; see [`Default`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratorConfig {
    /// Value of the `loadgen.id` attribute; also mixed into the seed.
    pub generator_id: String,
    /// Seed of the random stream.
    pub seed: u64,
    /// Mean spans per trace; each trace has between half and one and a half times this
    /// many (at least 1). Default 100.
    pub spans_per_trace: usize,
    /// Spans per request for [`Generator::next_record`] (and per Kafka record when
    /// producing). Default 100.
    pub spans_per_record: usize,
    /// Number of distinct resources (services). Default 6.
    pub services: usize,
    /// Instrumentation scopes per service. Default 2.
    pub scopes_per_service: usize,
    /// Extra free-text string attributes per span (`app.attr.<i>`), on top of the fixed
    /// set of every value kind. Default 4.
    pub extra_span_attributes: usize,
    /// Extra free-text string attributes per resource (`resource.attr.<i>`). Default 2.
    pub extra_resource_attributes: usize,
    /// Approximate length in bytes of free-text string values (URL, messages, extras).
    /// Default 32.
    pub attribute_value_bytes: usize,
    /// Each span has 0..=this many events, uniformly. Default 2.
    pub max_events_per_span: usize,
    /// Each span has up to this many links (each present with probability 1/4). Default 1.
    pub max_links_per_span: usize,
    /// What spans and resources carry besides ids, times and the verification keys.
    /// Default [`Shape::Rich`].
    pub shape: Shape,
    /// Start time of the first trace, ns since the epoch; later traces start about
    /// [`GeneratorConfig::trace_interval_ns`] apart. Default: the clock at the time
    /// `default()` is called.
    pub start_time_unix_nano: u64,
    /// Mean gap between the starts of two traces, ns; each gap is drawn between half and one
    /// and a half times this. Default 1 ms. Larger gaps spread a data set over hours or
    /// days of timestamps (the query benchmark's day of data).
    pub trace_interval_ns: u64,
    /// Move each request in time so its latest span ends at the clock as the request is
    /// made (all its times by the same amount), so a consumer can tell how long after a
    /// span ended it saw it. Output then depends on the clock. Default false.
    pub end_at_clock: bool,
    /// Hostile but valid shapes applied to every request (spans spread over days, padded
    /// resources; see [`crate::hostile`]). Default: none.
    pub hostile: Hostile,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Self {
            generator_id: "loadgen".to_string(),
            seed: 1,
            spans_per_trace: 100,
            spans_per_record: 100,
            services: 6,
            scopes_per_service: 2,
            extra_span_attributes: 4,
            extra_resource_attributes: 2,
            attribute_value_bytes: 32,
            max_events_per_span: 2,
            max_links_per_span: 1,
            shape: Shape::Rich,
            start_time_unix_nano: now,
            trace_interval_ns: NS_PER_MS,
            end_at_clock: false,
            hostile: Hostile::default(),
        }
    }
}

/// Moves every time of `req` (span start and end, event times) by one amount so that its
/// latest span end is `end_ns`.
pub fn end_at(req: &mut ExportTraceServiceRequest, end_ns: u64) {
    let spans = || {
        req.resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
    };
    let Some(latest) = spans().map(|s| s.end_time_unix_nano).max() else {
        return;
    };
    let shift = |t: &mut u64| *t = (*t as i128 + end_ns as i128 - latest as i128).max(0) as u64;
    for r in &mut req.resource_spans {
        for s in r.scope_spans.iter_mut().flat_map(|s| &mut s.spans) {
            shift(&mut s.start_time_unix_nano);
            shift(&mut s.end_time_unix_nano);
            for e in &mut s.events {
                shift(&mut e.time_unix_nano);
            }
        }
    }
}

/// What a generated span and its resource carry (`--shape rich|minimal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Shape {
    /// Every `AnyValue` kind, events, links, trace state, status messages, and resources
    /// with about twenty attributes (the module docs); sized by the other knobs.
    #[default]
    Rich,
    /// Shaped like the spans of the OpenTelemetry project's `telemetrygen traces`: two
    /// short string attributes (`net.sock.peer.addr`, `peer.service`) besides the
    /// verification keys, no events, links or trace state, status unset, and resources
    /// carrying only `service.name`. The size knobs are ignored. For comparing with
    /// figures published on such spans.
    Minimal,
}

/// One service: its resource and scopes, built once and cloned into each request.
#[derive(Debug)]
struct Service {
    resource: Resource,
    scopes: Vec<InstrumentationScope>,
    /// Offset into [`OPERATIONS`] so each service has its own span names.
    name_offset: usize,
}

/// A span of the current trace that later spans may use as parent.
#[derive(Debug, Clone, Copy)]
struct Node {
    span_id: [u8; 8],
    start: u64,
    end: u64,
    service: usize,
    kind: SpanKind,
}

/// The trace being generated; it may continue into the next request.
#[derive(Debug, Default)]
struct Trace {
    trace_id: [u8; 16],
    /// Spans still to generate in this trace.
    remaining: usize,
    nodes: Vec<Node>,
}

/// Endless stream of traces cut into requests. Not `Sync`; one per producing thread.
#[derive(Debug)]
pub struct Generator {
    config: GeneratorConfig,
    rng: SplitMix64,
    services: Vec<Service>,
    extra_keys: Vec<String>,
    next_seq: u64,
    next_trace_start: u64,
    trace: Trace,
    /// Recent `(trace_id, span_id)` pairs of finished traces, targets of links.
    link_targets: Vec<([u8; 16], [u8; 8])>,
}

impl Generator {
    /// A generator at sequence number 0. Zero counts in the config are raised to 1 where
    /// a zero would make no sense (services, scopes, spans per trace/record).
    pub fn new(mut config: GeneratorConfig) -> Self {
        config.spans_per_trace = config.spans_per_trace.max(1);
        config.spans_per_record = config.spans_per_record.max(1);
        config.services = config.services.max(1);
        config.scopes_per_service = config.scopes_per_service.max(1);
        let mut rng = SplitMix64::new(config.seed ^ fnv1a(config.generator_id.as_bytes()));
        let services = (0..config.services)
            .map(|i| build_service(i, &config, &mut rng))
            .collect();
        let extra_keys = (0..config.extra_span_attributes)
            .map(|i| format!("app.attr.{i}"))
            .collect();
        Self {
            next_trace_start: config.start_time_unix_nano,
            config,
            rng,
            services,
            extra_keys,
            next_seq: 0,
            trace: Trace::default(),
            link_targets: Vec::with_capacity(16),
        }
    }

    /// The configuration in force (after the zero-count adjustments of [`Generator::new`]).
    pub fn config(&self) -> &GeneratorConfig {
        &self.config
    }

    /// Sequence number the next span will get = spans generated so far.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// A request of [`GeneratorConfig::spans_per_record`] spans.
    pub fn next_record(&mut self) -> ExportTraceServiceRequest {
        self.next_request(self.config.spans_per_record)
    }

    /// The next `spans` spans of the stream as one request (an empty request for 0).
    /// Sequence numbers continue from the previous call.
    pub fn next_request(&mut self, spans: usize) -> ExportTraceServiceRequest {
        let scopes = self.config.scopes_per_service;
        // Buckets [service][scope]: the request groups spans by resource, then scope.
        let mut buckets: Vec<Vec<Vec<Span>>> = (0..self.services.len())
            .map(|_| vec![Vec::new(); scopes])
            .collect();
        for _ in 0..spans {
            let (service, span) = self.next_span();
            let scope = self.rng.index(scopes);
            buckets[service][scope].push(span);
        }
        let resource_spans = buckets
            .into_iter()
            .enumerate()
            .filter(|(_, by_scope)| by_scope.iter().any(|s| !s.is_empty()))
            .map(|(i, by_scope)| {
                let svc = &self.services[i];
                ResourceSpans {
                    resource: Some(svc.resource.clone()),
                    scope_spans: by_scope
                        .into_iter()
                        .enumerate()
                        .filter(|(_, spans)| !spans.is_empty())
                        .map(|(j, spans)| ScopeSpans {
                            scope: Some(svc.scopes[j].clone()),
                            spans,
                            schema_url: SCHEMA_URL.to_string(),
                        })
                        .collect(),
                    schema_url: SCHEMA_URL.to_string(),
                }
            })
            .collect();
        let mut req = ExportTraceServiceRequest { resource_spans };
        if self.config.end_at_clock {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            end_at(&mut req, now);
        }
        self.config.hostile.apply(&mut req);
        req
    }

    fn start_trace(&mut self) {
        if let Some(root) = self.trace.nodes.first() {
            if self.link_targets.len() == 16 {
                self.link_targets.remove(0);
            }
            let tail = self.trace.nodes.last().map_or(root.span_id, |n| n.span_id);
            self.link_targets.push((self.trace.trace_id, tail));
        }
        let mean = self.config.spans_per_trace as u64;
        let len = self.rng.range((mean / 2).max(1), (mean + mean / 2).max(1));
        self.trace.trace_id = self.rng.nonzero_id();
        self.trace.remaining = len as usize;
        self.trace.nodes.clear();
    }

    /// The next span of the stream and the index of its service.
    fn next_span(&mut self) -> (usize, Span) {
        if self.trace.remaining == 0 {
            self.start_trace();
        }
        self.trace.remaining -= 1;
        let seq = self.next_seq;
        self.next_seq += 1;

        let rng = &mut self.rng;
        let span_id: [u8; 8] = rng.nonzero_id();
        let n_services = self.services.len();
        let (node, parent_span_id) = match self.trace.nodes.len() {
            0 => {
                let start = self.next_trace_start;
                let gap = self.config.trace_interval_ns.max(2);
                self.next_trace_start += rng.range(gap / 2, 3 * gap / 2);
                // Roots are mostly at the edge service, like real front doors.
                let service = if rng.chance(70) {
                    0
                } else {
                    rng.index(n_services)
                };
                let duration = rng.range(5 * NS_PER_MS, 2_000 * NS_PER_MS);
                let root = Node {
                    span_id,
                    start,
                    end: start + duration,
                    service,
                    kind: SpanKind::Server,
                };
                (root, Vec::new())
            }
            len => {
                // A parent among the last few spans: deep, bushy trees, and parents always
                // precede children.
                let parent = self.trace.nodes[len - 1 - rng.index(len.min(8))];
                let (service, kind) = if n_services > 1 && rng.chance(30) {
                    let other = (parent.service + 1 + rng.index(n_services - 1)) % n_services;
                    let kind = if parent.kind == SpanKind::Producer {
                        SpanKind::Consumer
                    } else {
                        SpanKind::Server
                    };
                    (other, kind)
                } else {
                    let kind = *rng.pick(&[
                        SpanKind::Internal,
                        SpanKind::Internal,
                        SpanKind::Internal,
                        SpanKind::Client,
                        SpanKind::Client,
                        SpanKind::Producer,
                        SpanKind::Unspecified,
                    ]);
                    (parent.service, kind)
                };
                let window = parent.end - parent.start;
                let start = parent.start + rng.below((window / 2).max(1));
                // Inside the parent's window (a 1 ns child of a parent ending at `start`
                // may overhang by 1 ns; durations stay positive).
                let end = start + 1 + rng.below((parent.end - start).max(1));
                let end = end.min(parent.end.max(start + 1));
                (
                    Node {
                        span_id,
                        start,
                        end,
                        service,
                        kind,
                    },
                    parent.span_id.to_vec(),
                )
            }
        };
        self.trace.nodes.push(node);
        let span = self.build_span(seq, node, parent_span_id);
        (node.service, span)
    }

    fn build_span(&mut self, seq: u64, node: Node, parent_span_id: Vec<u8>) -> Span {
        let cfg = &self.config;
        let rng = &mut self.rng;
        let text_len = cfg.attribute_value_bytes;
        let svc = &self.services[node.service];
        let name = OPERATIONS[(svc.name_offset + rng.index(6)) % OPERATIONS.len()].to_string();
        if cfg.shape == Shape::Minimal {
            let remote = matches!(node.kind, SpanKind::Server | SpanKind::Consumer);
            return Span {
                attributes: vec![
                    kv(ATTR_ID, string(&cfg.generator_id)),
                    kv(ATTR_SEQ, int(seq as i64)),
                    kv("net.sock.peer.addr", string("1.2.3.4")),
                    kv(
                        "peer.service",
                        string(if remote {
                            "telemetrygen-client"
                        } else {
                            "telemetrygen-server"
                        }),
                    ),
                ],
                status: Some(Status::default()),
                ..span_base(self.trace.trace_id, node, parent_span_id, name)
            };
        }

        let mut attributes = Vec::with_capacity(14 + self.extra_keys.len());
        attributes.push(kv(ATTR_ID, string(&cfg.generator_id)));
        attributes.push(kv(ATTR_SEQ, int(seq as i64)));
        attributes.push(kv(
            "http.request.method",
            string(rng.pick(&["GET", "GET", "GET", "POST", "PUT", "DELETE", "PATCH"])),
        ));
        attributes.push(kv(
            "http.response.status_code",
            int(*rng.pick(&[200, 200, 200, 200, 201, 204, 301, 400, 404, 500, 503])),
        ));
        let mut url = String::from("https://shop.example.com/api/v1/");
        push_words(rng, &mut url, text_len);
        attributes.push(kv("url.full", string(&url)));
        attributes.push(kv("server.port", int(*rng.pick(&[80, 443, 8080, 9090]))));
        attributes.push(kv("app.cache.hit", boolean(rng.chance(40))));
        attributes.push(kv("app.sampling.ratio", double(varied_double(rng))));
        let digest: [u8; 16] = rng.nonzero_id();
        attributes.push(kv("app.request.digest", bytes(digest.to_vec())));
        let tags = (0..rng.range(1, 4))
            .map(|_| string(rng.pick(WORDS)))
            .collect::<Vec<_>>();
        attributes.push(kv("app.tags", array(tags)));
        let backoff = (0..rng.range(0, 3))
            .map(|i| int((i as i64 + 1) * rng.range(10, 200) as i64))
            .collect::<Vec<_>>();
        attributes.push(kv("app.retry.backoff_ms", array(backoff)));
        let features = kvlist(vec![
            kv("beta", boolean(rng.chance(20))),
            kv("ratio", double(rng.unit_f64())),
        ]);
        attributes.push(kv(
            "app.request.context",
            kvlist(vec![
                kv("user.id", string(format!("user-{}", rng.below(100_000)))),
                kv("tenant.id", int(rng.below(64) as i64)),
                kv("features", features),
            ]),
        ));
        for key in &self.extra_keys {
            let mut text = String::new();
            push_words(rng, &mut text, text_len);
            attributes.push(kv(key, string(&text)));
        }

        let duration = node.end - node.start;
        let events = (0..rng.range(0, cfg.max_events_per_span as u64))
            .map(|i| {
                let mut message = String::new();
                push_words(rng, &mut message, text_len);
                let name = *rng.pick(&["exception", "message", "retry", "cache.miss"]);
                Event {
                    time_unix_nano: node.start + rng.below(duration.max(1)),
                    name: name.to_string(),
                    attributes: vec![
                        kv("exception.type", string(rng.pick(EXCEPTIONS))),
                        kv("exception.message", string(&message)),
                        kv("event.index", int(i as i64)),
                        kv("event.handled", boolean(rng.chance(50))),
                    ],
                    dropped_attributes_count: 0,
                }
            })
            .collect();

        let mut links = Vec::new();
        for i in 0..cfg.max_links_per_span {
            if !rng.chance(25) {
                continue;
            }
            let (trace_id, span_id) = if self.link_targets.is_empty() {
                (rng.nonzero_id::<16>(), rng.nonzero_id::<8>())
            } else {
                *rng.pick(&self.link_targets)
            };
            links.push(Link {
                trace_id: trace_id.to_vec(),
                span_id: span_id.to_vec(),
                trace_state: if rng.chance(50) {
                    "rojo=00f067aa0ba902b7".into()
                } else {
                    String::new()
                },
                attributes: vec![
                    kv(
                        "link.type",
                        string(rng.pick(&["follows_from", "batch", "retry_of"])),
                    ),
                    kv("link.index", int(i as i64)),
                ],
                dropped_attributes_count: 0,
                flags: 0x101,
            });
        }

        let status = match rng.below(100) {
            0..=87 => Status {
                message: String::new(),
                code: StatusCode::Unset as i32,
            },
            88..=94 => Status {
                message: String::new(),
                code: StatusCode::Ok as i32,
            },
            _ => Status {
                message: format!("upstream timeout after {} ms", rng.range(100, 30_000)),
                code: StatusCode::Error as i32,
            },
        };
        Span {
            trace_state: if rng.chance(20) {
                "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE".into()
            } else {
                String::new()
            },
            attributes,
            events,
            links,
            status: Some(status),
            ..span_base(self.trace.trace_id, node, parent_span_id, name)
        }
    }
}

/// The fields every [`Shape`] fills the same way: ids, name, kind, flags and times.
fn span_base(trace_id: [u8; 16], node: Node, parent_span_id: Vec<u8>, name: String) -> Span {
    let remote = matches!(node.kind, SpanKind::Server | SpanKind::Consumer);
    Span {
        trace_id: trace_id.to_vec(),
        span_id: node.span_id.to_vec(),
        parent_span_id,
        // W3C sampled bit; "has is_remote" bit; "is_remote" on entry spans.
        flags: 0x1 | 0x100 | if remote { 0x200 } else { 0 },
        name,
        kind: node.kind as i32,
        start_time_unix_nano: node.start,
        end_time_unix_nano: node.end,
        ..Span::default()
    }
}

fn build_service(i: usize, cfg: &GeneratorConfig, rng: &mut SplitMix64) -> Service {
    let name = SERVICES
        .get(i)
        .map_or_else(|| format!("service-{i}"), |s| (*s).to_string());
    let language = *rng.pick(&["go", "java", "python", "rust", "nodejs", "dotnet"]);
    if cfg.shape == Shape::Minimal {
        return Service {
            resource: Resource {
                attributes: vec![kv("service.name", string(&name))],
                dropped_attributes_count: 0,
                entity_refs: Vec::new(),
            },
            scopes: (0..cfg.scopes_per_service)
                .map(|j| InstrumentationScope {
                    name: SCOPES[(i + j) % SCOPES.len()].to_string(),
                    ..InstrumentationScope::default()
                })
                .collect(),
            name_offset: (i * 5) % OPERATIONS.len(),
        };
    }
    let instance: [u8; 16] = rng.nonzero_id();
    let mut attributes = vec![
        kv("service.name", string(&name)),
        kv("service.namespace", string("shop")),
        kv(
            "service.version",
            string(format!("1.{}.{}", rng.below(20), rng.below(10))),
        ),
        kv("service.instance.id", string(hex(&instance))),
        kv(
            "host.name",
            string(format!("node-{}.shop.internal", rng.below(32))),
        ),
        kv("host.arch", string(rng.pick(&["amd64", "arm64"]))),
        kv("os.type", string("linux")),
        kv(
            "deployment.environment.name",
            string(rng.pick(&["production", "staging"])),
        ),
        kv("telemetry.sdk.name", string("opentelemetry")),
        kv("telemetry.sdk.language", string(language)),
        kv("telemetry.sdk.version", string("1.38.0")),
        kv("k8s.namespace.name", string("shop")),
        kv(
            "k8s.pod.name",
            string(format!("{name}-{:x}", rng.below(1 << 24))),
        ),
        kv("process.pid", int(rng.range(1, 65_535) as i64)),
        kv("service.experimental", boolean(rng.chance(20))),
        kv("host.cpu.quota", double((rng.range(1, 16) as f64) / 4.0)),
        kv(
            "host.ip",
            array(vec![
                string(format!("10.0.{}.{}", rng.below(256), rng.below(256))),
                string(format!("fd00::{:x}", rng.below(65_536))),
            ]),
        ),
    ];
    for k in 0..cfg.extra_resource_attributes {
        let mut text = String::new();
        push_words(rng, &mut text, cfg.attribute_value_bytes);
        attributes.push(kv(&format!("resource.attr.{k}"), string(&text)));
    }
    let scopes = (0..cfg.scopes_per_service)
        .map(|j| InstrumentationScope {
            name: SCOPES[(i + j) % SCOPES.len()].to_string(),
            version: format!("2.{}.0", (i + j) % 7),
            attributes: vec![kv("scope.index", int(j as i64))],
            dropped_attributes_count: 0,
        })
        .collect();
    Service {
        resource: Resource {
            attributes,
            dropped_attributes_count: 0,
            entity_refs: Vec::new(),
        },
        scopes,
        name_offset: (i * 5) % OPERATIONS.len(),
    }
}

/// Mostly ordinary magnitudes; now and then values whose text form needs an exponent
/// (below 1e-6, at or above 1e21) and integral doubles, the cases attribute-to-string
/// conversions get wrong.
fn varied_double(rng: &mut SplitMix64) -> f64 {
    match rng.below(20) {
        0 => rng.unit_f64() * 1e-7,
        1 => (1.0 + rng.unit_f64()) * 1e21,
        2 => rng.below(1000) as f64,
        3 => -rng.unit_f64() * 100.0,
        _ => rng.unit_f64(),
    }
}

/// Appends random words to `out` until it is at least `target` bytes long.
fn push_words(rng: &mut SplitMix64, out: &mut String, target: usize) {
    let goal = out.len() + target;
    while out.len() < goal {
        if !out.is_empty() && !out.ends_with('/') {
            out.push(if rng.chance(70) { '-' } else { ' ' });
        }
        let word = WORDS[rng.index(WORDS.len())];
        out.push_str(word);
    }
}

/// Stable 64-bit FNV-1a, to fold the generator id into the seed.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

fn kv(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(value),
        ..Default::default()
    }
}
fn any(v: Value) -> AnyValue {
    AnyValue { value: Some(v) }
}
fn string(s: impl AsRef<str>) -> AnyValue {
    any(Value::StringValue(s.as_ref().to_string()))
}
fn int(i: i64) -> AnyValue {
    any(Value::IntValue(i))
}
fn double(d: f64) -> AnyValue {
    any(Value::DoubleValue(d))
}
fn boolean(b: bool) -> AnyValue {
    any(Value::BoolValue(b))
}
fn bytes(b: Vec<u8>) -> AnyValue {
    any(Value::BytesValue(b))
}
fn array(values: Vec<AnyValue>) -> AnyValue {
    any(Value::ArrayValue(ArrayValue { values }))
}
fn kvlist(values: Vec<KeyValue>) -> AnyValue {
    any(Value::KvlistValue(KeyValueList { values }))
}

const SERVICES: &[&str] = &[
    "frontend",
    "cart",
    "checkout",
    "payment",
    "shipping",
    "email",
    "recommendation",
    "ad",
    "currency",
    "quote",
    "inventory",
    "auth",
];

const SCOPES: &[&str] = &[
    "io.opentelemetry.http",
    "io.opentelemetry.grpc",
    "io.opentelemetry.jdbc",
    "io.opentelemetry.kafka-clients",
    "io.opentelemetry.redis",
    "com.shop.instrumentation",
];

const OPERATIONS: &[&str] = &[
    "GET /api/products",
    "GET /api/cart",
    "POST /api/cart/items",
    "POST /api/checkout",
    "oteldemo.CartService/GetCart",
    "oteldemo.PaymentService/Charge",
    "SELECT shop.orders",
    "INSERT shop.orders",
    "UPDATE shop.inventory",
    "redis GET",
    "redis SETEX",
    "orders publish",
    "orders process",
    "render template",
    "compute shipping quote",
    "convert currency",
    "send confirmation email",
    "load recommendations",
    "authorize",
    "HTTP GET",
];

const EXCEPTIONS: &[&str] = &[
    "java.net.SocketTimeoutException",
    "ConnectionResetError",
    "context.DeadlineExceeded",
    "System.InvalidOperationException",
    "std::io::Error",
];

/// Vocabulary of free-text values: mostly plain words, plus a few that need escaping in
/// JSON (quotes, backslash, tab) and non-ASCII text.
const WORDS: &[&str] = &[
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "order",
    "cart",
    "item",
    "user",
    "session",
    "payment",
    "retry",
    "timeout",
    "cache",
    "query",
    "3f9a2c",
    "0xdeadbeef",
    "42",
    "2024-06-01",
    "\"quoted\"",
    "back\\slash",
    "tab\there",
    "grüße",
    "日本語",
    "emoji🚀",
];

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    fn config(seed: u64) -> GeneratorConfig {
        GeneratorConfig {
            generator_id: "unit".into(),
            seed,
            start_time_unix_nano: 1_700_000_000_000_000_000,
            ..GeneratorConfig::default()
        }
    }

    fn spans(req: &ExportTraceServiceRequest) -> impl Iterator<Item = &Span> {
        req.resource_spans
            .iter()
            .flat_map(|rs| rs.scope_spans.iter().flat_map(|ss| ss.spans.iter()))
    }

    fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref()?.value.as_ref())
    }

    fn seq_of(span: &Span) -> u64 {
        match attr(span, ATTR_SEQ) {
            Some(Value::IntValue(i)) => *i as u64,
            other => panic!("loadgen.seq is {other:?}"),
        }
    }

    #[test]
    fn same_seed_gives_identical_requests() {
        let (mut a, mut b) = (Generator::new(config(9)), Generator::new(config(9)));
        for n in [1, 100, 37, 250] {
            assert_eq!(a.next_request(n), b.next_request(n));
        }
    }

    #[test]
    fn different_seed_or_id_gives_different_ids() {
        let a = Generator::new(config(9)).next_request(10);
        let b = Generator::new(config(10)).next_request(10);
        let c = Generator::new(GeneratorConfig {
            generator_id: "other".into(),
            ..config(9)
        })
        .next_request(10);
        let first = |r: &ExportTraceServiceRequest| spans(r).next().unwrap().trace_id.clone();
        assert_ne!(first(&a), first(&b));
        assert_ne!(first(&a), first(&c));
    }

    #[test]
    fn trace_interval_spreads_root_starts() {
        let hour = 3_600 * 1_000_000_000;
        let mut g = Generator::new(GeneratorConfig {
            trace_interval_ns: hour,
            spans_per_trace: 10,
            ..config(4)
        });
        let req = g.next_request(100);
        let mut roots: Vec<u64> = spans(&req)
            .filter(|s| s.parent_span_id.is_empty())
            .map(|s| s.start_time_unix_nano)
            .collect();
        roots.sort_unstable();
        assert!(roots.len() >= 5, "{} traces in 100 spans", roots.len());
        for pair in roots.windows(2) {
            let gap = pair[1] - pair[0];
            assert!((hour / 2..=3 * hour / 2).contains(&gap), "gap {gap} ns");
        }
    }

    #[test]
    fn request_has_exactly_the_asked_number_of_spans() {
        let mut g = Generator::new(config(1));
        for n in [0, 1, 7, 100, 333] {
            assert_eq!(spans(&g.next_request(n)).count(), n);
        }
        assert_eq!(g.next_seq(), 441);
    }

    #[test]
    fn seq_is_unique_and_contiguous_across_requests() {
        let mut g = Generator::new(config(3));
        let mut seen = HashSet::new();
        for n in [50, 100, 1, 149, 200] {
            for span in spans(&g.next_request(n)) {
                assert!(seen.insert(seq_of(span)), "seq {} repeated", seq_of(span));
                assert!(
                    matches!(attr(span, ATTR_ID), Some(Value::StringValue(s)) if s == "unit"),
                    "loadgen.id missing"
                );
            }
        }
        assert_eq!(seen, (0..500).collect::<HashSet<u64>>());
    }

    #[test]
    fn every_span_has_every_any_value_kind() {
        let mut g = Generator::new(config(5));
        let req = g.next_request(300);
        for span in spans(&req) {
            let mut kinds = HashSet::new();
            let mut stack: Vec<&AnyValue> = span
                .attributes
                .iter()
                .filter_map(|kv| kv.value.as_ref())
                .collect();
            while let Some(v) = stack.pop() {
                match v.value.as_ref().expect("no empty values are generated") {
                    Value::StringValue(_) => kinds.insert("string"),
                    Value::BoolValue(_) => kinds.insert("bool"),
                    Value::IntValue(_) => kinds.insert("int"),
                    Value::DoubleValue(_) => kinds.insert("double"),
                    Value::BytesValue(_) => kinds.insert("bytes"),
                    Value::ArrayValue(a) => {
                        stack.extend(&a.values);
                        kinds.insert("array")
                    }
                    Value::KvlistValue(l) => {
                        // Nested: a kvlist inside the kvlist.
                        if l.values.iter().any(|kv| {
                            matches!(
                                kv.value.as_ref().and_then(|v| v.value.as_ref()),
                                Some(Value::KvlistValue(_))
                            )
                        }) {
                            kinds.insert("nested kvlist");
                        }
                        stack.extend(l.values.iter().filter_map(|kv| kv.value.as_ref()));
                        kinds.insert("kvlist")
                    }
                    Value::StringValueStrindex(_) => panic!("profiles-only value in a span"),
                };
            }
            assert_eq!(kinds.len(), 8, "span {} has only {kinds:?}", span.name);
        }
        // Events with attributes and links appear somewhere in 300 spans.
        assert!(spans(&req).any(|s| !s.events.is_empty() && !s.events[0].attributes.is_empty()));
        assert!(spans(&req).any(|s| !s.links.is_empty() && !s.links[0].attributes.is_empty()));
        // All status codes and several kinds.
        let codes: HashSet<i32> = spans(&req)
            .map(|s| s.status.as_ref().unwrap().code)
            .collect();
        assert_eq!(codes.len(), 3);
        let kinds: HashSet<i32> = spans(&req).map(|s| s.kind).collect();
        assert!(kinds.len() >= 5, "span kinds {kinds:?}");
    }

    #[test]
    fn resources_have_service_name_and_scopes() {
        let req = Generator::new(config(2)).next_request(1000);
        assert_eq!(req.resource_spans.len(), 6);
        let mut names = HashSet::new();
        for rs in &req.resource_spans {
            let res = rs.resource.as_ref().unwrap();
            let name = res
                .attributes
                .iter()
                .find(|kv| kv.key == "service.name")
                .unwrap();
            names.insert(format!("{:?}", name.value));
            assert!(res.attributes.len() >= 17);
            for ss in &rs.scope_spans {
                let scope = ss.scope.as_ref().unwrap();
                assert!(!scope.name.is_empty() && !scope.version.is_empty());
            }
        }
        assert_eq!(names.len(), 6);
    }

    #[test]
    fn traces_are_trees_with_one_root_and_children_inside_parents() {
        let mut g = Generator::new(config(11));
        let req = g.next_request(5000);
        let mut by_trace: HashMap<Vec<u8>, Vec<&Span>> = HashMap::new();
        for s in spans(&req) {
            by_trace.entry(s.trace_id.clone()).or_default().push(s);
        }
        // 5000 spans of ~100-span traces: dozens of traces, all but the last complete.
        assert!(by_trace.len() >= 30, "{} traces", by_trace.len());
        let mut sizes = Vec::new();
        for (trace_id, spans) in &by_trace {
            assert_eq!(trace_id.len(), 16);
            let ids: HashMap<&[u8], &Span> =
                spans.iter().map(|s| (s.span_id.as_slice(), *s)).collect();
            assert_eq!(ids.len(), spans.len(), "span ids unique within a trace");
            let roots: Vec<_> = spans
                .iter()
                .filter(|s| s.parent_span_id.is_empty())
                .collect();
            assert_eq!(roots.len(), 1, "exactly one root");
            for s in spans {
                assert_eq!(s.span_id.len(), 8);
                assert!(s.start_time_unix_nano < s.end_time_unix_nano);
                if s.parent_span_id.is_empty() {
                    continue;
                }
                let p = ids
                    .get(s.parent_span_id.as_slice())
                    .unwrap_or_else(|| panic!("parent of {} not in its trace", s.name));
                assert!(seq_of(p) < seq_of(s), "parent generated first");
                assert!(p.start_time_unix_nano <= s.start_time_unix_nano);
                assert!(
                    s.end_time_unix_nano <= p.end_time_unix_nano.max(s.start_time_unix_nano + 1)
                );
            }
            sizes.push(spans.len());
        }
        let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
        assert!((60.0..=140.0).contains(&mean), "mean trace size {mean}");
    }

    #[test]
    fn end_at_clock_moves_a_request_so_its_latest_span_ends_now_keeping_durations() {
        let plain = Generator::new(config(3)).next_request(50);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let live = Generator::new(GeneratorConfig {
            end_at_clock: true,
            ..config(3)
        })
        .next_request(50);
        let latest = spans(&live).map(|s| s.end_time_unix_nano).max().unwrap();
        assert!(
            latest >= now && latest - now < 5_000_000_000,
            "{latest} vs {now}"
        );
        for (a, b) in spans(&plain).zip(spans(&live)) {
            assert_eq!(a.span_id, b.span_id);
            assert_eq!(
                a.end_time_unix_nano - a.start_time_unix_nano,
                b.end_time_unix_nano - b.start_time_unix_nano
            );
            let shift = b.end_time_unix_nano - a.end_time_unix_nano;
            for (ea, eb) in a.events.iter().zip(&b.events) {
                assert_eq!(eb.time_unix_nano - ea.time_unix_nano, shift);
            }
        }
    }

    #[test]
    fn size_knobs_change_the_payload() {
        use prost::Message;
        let small = GeneratorConfig {
            attribute_value_bytes: 8,
            extra_span_attributes: 0,
            ..config(1)
        };
        let big = GeneratorConfig {
            attribute_value_bytes: 256,
            extra_span_attributes: 16,
            ..config(1)
        };
        let s = Generator::new(small).next_request(100).encoded_len();
        let b = Generator::new(big).next_request(100).encoded_len();
        assert!(b > 4 * s, "small {s} B, big {b} B");
    }

    #[test]
    fn minimal_spans_carry_the_keys_and_two_short_attributes() {
        use prost::Message;
        let minimal = GeneratorConfig {
            shape: Shape::Minimal,
            ..config(5)
        };
        let mut g = Generator::new(minimal);
        let first = g.next_request(100);
        let second = g.next_request(100);
        let seqs: Vec<u64> = spans(&first).chain(spans(&second)).map(seq_of).collect();
        let mut sorted = seqs.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..200).collect::<Vec<_>>());
        for rs in &first.resource_spans {
            let attrs = &rs.resource.as_ref().unwrap().attributes;
            assert_eq!(attrs.len(), 1);
            assert_eq!(attrs[0].key, "service.name");
        }
        for s in spans(&first) {
            let keys: Vec<&str> = s.attributes.iter().map(|kv| kv.key.as_str()).collect();
            assert_eq!(
                keys,
                [ATTR_ID, ATTR_SEQ, "net.sock.peer.addr", "peer.service"]
            );
            assert!(s.events.is_empty() && s.links.is_empty() && s.trace_state.is_empty());
            assert!(s.start_time_unix_nano < s.end_time_unix_nano);
        }
        // A fraction of a rich span's size.
        let rich = Generator::new(config(5)).next_request(100).encoded_len();
        let small = first.encoded_len();
        assert!(small * 4 < rich, "minimal {small} B, rich {rich} B");
    }
}
