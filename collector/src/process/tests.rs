//! Unit tests of the processing rules over wire views, named by the module's rules.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::Event;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;

use super::*;
use crate::decode::proto::{ResourceView, ScopeView};

fn kv(k: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn s(k: &str, v: &str) -> KeyValue {
    kv(k, any_value::Value::StringValue(v.into()))
}

fn span(name: &str, trace: u8, attrs: Vec<KeyValue>) -> Span {
    Span {
        name: name.into(),
        trace_id: vec![trace; 16],
        span_id: vec![1; 8],
        kind: 2,
        start_time_unix_nano: 1_000,
        end_time_unix_nano: 1_000 + 5_000_000,
        attributes: attrs,
        ..Default::default()
    }
}

fn request(service: &str, spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![s("service.name", service), s("host.name", "h1")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "io.opentelemetry.http".into(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// A span as the rules left it: its name, resource, span and event attributes as text.
#[derive(Debug, PartialEq)]
struct Seen {
    name: String,
    resource: Vec<(String, String)>,
    attrs: Vec<(String, String)>,
    events: Vec<Vec<(String, String)>>,
}

fn text(bodies: &[&[u8]]) -> Vec<(String, String)> {
    bodies
        .iter()
        .map(|b| {
            let kv = proto::kv(b).unwrap();
            let mut v = Vec::new();
            rows::push_value_as_string(kv.value, &mut v, 5).unwrap();
            (
                String::from_utf8(kv.key.to_vec()).unwrap(),
                String::from_utf8(v).unwrap(),
            )
        })
        .collect()
}

/// Runs `yaml`'s rules over `req` as the encoder does: the spans kept, and the counts.
fn run_with(
    yaml: &str,
    key: Option<&[u8]>,
    req: &ExportTraceServiceRequest,
) -> (Vec<Seen>, Vec<RuleCounts>) {
    let cfg: ProcessingConfig = crate::yaml::from_str(yaml).unwrap();
    let p = Processor::new(&cfg, key).unwrap();
    let mut st = p.scratch();
    let payload = req.encode_to_vec();
    let arena = Bump::new();
    let mut kept = Vec::new();
    let mut rss = Vec::new();
    proto::request(&payload, &mut rss).unwrap();
    let mut resource = ResourceView::default();
    let mut scopes = Vec::new();
    let mut scope = ScopeView::default();
    let mut lists = SpanScratch::default();
    for rs in rss {
        proto::resource_spans(rs, &mut resource, &mut scopes).unwrap();
        p.resource(&mut resource.attrs, &arena, &mut st).unwrap();
        for ss in &scopes {
            proto::scope_spans(ss, &mut scope).unwrap();
            for body in &scope.spans {
                let mut view = proto::span(body, &mut lists).unwrap();
                if p.span(&mut view, scope.name, &mut lists, &arena, &mut st)
                    .unwrap()
                    == Verdict::Keep
                {
                    kept.push(Seen {
                        name: String::from_utf8(view.name.to_vec()).unwrap(),
                        resource: text(&resource.attrs),
                        attrs: text(&lists.attrs),
                        events: lists
                            .events
                            .iter()
                            .map(|e| text(&lists.event_attrs[e.attrs.clone()]))
                            .collect(),
                    });
                }
            }
        }
    }
    st.end_record(true);
    (kept, st.drain_counts().collect())
}

fn run(yaml: &str, req: &ExportTraceServiceRequest) -> (Vec<Seen>, Vec<RuleCounts>) {
    run_with(yaml, None, req)
}

fn names(seen: &[Seen]) -> Vec<&str> {
    seen.iter().map(|s| s.name.as_str()).collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn drop_rules_take_every_condition_and_count_by_rule() {
    let req = request(
        "checkout",
        vec![
            span("GET /healthz", 1, vec![s("http.route", "/healthz")]),
            span("GET /cart", 2, vec![s("http.route", "/cart")]),
            span(
                "GET /readyz",
                3,
                vec![s("http.route", "/readyz"), s("k", "v")],
            ),
            span("internal", 4, vec![]),
        ],
    );
    let (seen, counts) = run(
        "rules:
           - {name: health, action: drop, when: [{attribute: http.route, in: [/healthz, /readyz]}]}
           - {name: servers-of-checkout, action: drop, when: [{resource: service.name, equals: checkout}, {span: kind, equals: Server}, {attribute: http.route, exists: false}]}",
        &req,
    );
    assert_eq!(names(&seen), ["GET /cart"]);
    assert_eq!(counts[0].dropped, 2);
    assert_eq!(counts[1].dropped, 1);
    let (seen, _) = run(
        "rules: [{name: other-service, action: drop, when: [{resource: service.name, equals: payments}]}]",
        &req,
    );
    assert_eq!(
        seen.len(),
        4,
        "the resource condition fails: nothing dropped"
    );
}

#[test]
fn span_fields_and_not() {
    let mut error = span("charge", 5, vec![]);
    error.status = Some(Status {
        code: 2,
        ..Default::default()
    });
    error.end_time_unix_nano = error.start_time_unix_nano + 2_000_000_000;
    let req = request("payments", vec![span("GET /a", 1, vec![]), error]);
    let keep_names = |yaml: &str| names(&run(yaml, &req).0).join(",");
    assert_eq!(
        keep_names("rules: [{name: r, action: drop, when: [{span: status, equals: Error}]}]"),
        "GET /a"
    );
    assert_eq!(
        keep_names("rules: [{name: r, action: drop, when: [{span: duration, below: 10ms}]}]"),
        "charge"
    );
    assert_eq!(
        keep_names(
            "rules: [{name: r, action: drop, when: [{span: duration, above: 1s, not: true}]}]"
        ),
        "charge"
    );
    assert_eq!(
        keep_names("rules: [{name: r, action: drop, when: [{span: name, glob: 'GET *'}]}]"),
        "charge"
    );
    assert_eq!(
        keep_names(
            "rules: [{name: r, action: drop, when: [{span: scope, prefix: io.opentelemetry}]}]"
        ),
        ""
    );
    assert_eq!(
        keep_names(
            "rules: [{name: r, action: drop, when: [{resource: service.name, regex: '^pay', not: true}]}]"
        ),
        "GET /a,charge"
    );
}

#[test]
fn redactions_remove_mask_and_hash_in_every_list() {
    let mut sp = span(
        "GET /pay",
        1,
        vec![
            s("http.request.header.authorization", "Bearer secret"),
            s("card", "paid with 4111111111111111 today"),
            s("enduser.id", "alice"),
            kv("retries", any_value::Value::IntValue(3)),
        ],
    );
    sp.events = vec![Event {
        name: "log".into(),
        attributes: vec![s("message", "card 4111111111111111"), s("api.token", "t")],
        ..Default::default()
    }];
    let mut req = request("shop", vec![sp]);
    req.resource_spans[0]
        .resource
        .as_mut()
        .unwrap()
        .attributes
        .push(s("deploy.token", "abc"));
    let (seen, counts) = run(
        r#"rules:
             - {name: creds, action: redact, redact: {keys: [http.request.header.authorization], patterns: ['token'], with: remove}}
             - {name: cards, action: redact, redact: {values: ['4[0-9]{12}(?:[0-9]{3})?'], with: mask}}
             - {name: users, action: redact, redact: {keys: [enduser.id], with: hash, from: [span]}}"#,
        &req,
    );
    assert_eq!(seen.len(), 1);
    let sha_alice = "2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90";
    assert_eq!(
        seen[0].attrs,
        pairs(&[
            ("card", "paid with **** today"),
            ("enduser.id", sha_alice),
            ("retries", "3"),
        ])
    );
    assert_eq!(
        seen[0].resource,
        pairs(&[("service.name", "shop"), ("host.name", "h1")])
    );
    assert_eq!(seen[0].events, [pairs(&[("message", "card ****")])]);
    assert_eq!(
        counts.iter().map(|c| c.redacted).collect::<Vec<_>>(),
        [1, 1, 1]
    );
}

#[test]
fn a_keyed_hash_is_hmac_sha256_and_differs_from_the_plain_one() {
    let req = request("shop", vec![span("x", 1, vec![s("enduser.id", "alice")])]);
    let rules = "rules: [{name: users, action: redact, redact: {keys: [enduser.id], with: hash}}]";
    let (plain, _) = run(rules, &req);
    let (keyed, _) = run_with(rules, Some(b"key"), &req);
    // HMAC-SHA256 with key "key" of "alice" (Python's `hmac.new(b"key", b"alice", sha256)`).
    let hmac_alice = "76fb55e929c06b97b01c35950ee5f72fe415b15ed3a7356c39e709906dbb5c45";
    assert_eq!(keyed[0].attrs, pairs(&[("enduser.id", hmac_alice)]));
    assert_ne!(plain[0].attrs, keyed[0].attrs);
}

#[test]
fn rules_apply_in_order_and_a_later_rule_sees_the_redaction() {
    let req = request("shop", vec![span("x", 1, vec![s("enduser.id", "alice")])]);
    let drop_alice = "{name: alice, action: drop, when: [{attribute: enduser.id, equals: alice}]}";
    let hash = "{name: users, action: redact, redact: {keys: [enduser.id], with: hash}}";
    let (seen, counts) = run(&format!("rules: [{drop_alice}, {hash}]"), &req);
    assert!(seen.is_empty(), "the drop stands before the hash");
    assert_eq!((counts[0].dropped, counts[1].redacted), (1, 0));
    let (seen, counts) = run(&format!("rules: [{hash}, {drop_alice}]"), &req);
    assert_eq!(seen.len(), 1, "after the hash the value is no longer alice");
    assert_eq!((counts[0].redacted, counts[1].dropped), (1, 0));
}

#[test]
fn a_resource_condition_sees_the_resource_as_its_rule_stands() {
    let req = request("synthetic-probe", vec![span("x", 1, vec![])]);
    let drop =
        "{name: probes, action: drop, when: [{resource: service.name, equals: synthetic-probe}]}";
    let mask =
        "{name: svc, action: redact, redact: {keys: [service.name], with: mask, from: [resource]}}";
    assert!(run(&format!("rules: [{drop}, {mask}]"), &req).0.is_empty());
    let (seen, _) = run(&format!("rules: [{mask}, {drop}]"), &req);
    assert_eq!(seen[0].resource[0], ("service.name".into(), "****".into()));
}

#[test]
fn sampling_decides_by_trace_id_keeps_errors_and_applies_only_where_its_conditions_hold() {
    let mut spans: Vec<Span> = (0..=255u8)
        .map(|t| span(&format!("t{t}"), t, vec![]))
        .collect();
    spans[7].status = Some(Status {
        code: 2,
        ..Default::default()
    });
    let req = request("shop", spans.clone());
    let (seen, counts) = run(
        "rules: [{name: tenth, action: sample, sample: {percent: 10}}]",
        &req,
    );
    let sampler = sample::Sampler::new(10.0, 0);
    let want: Vec<String> = (0..=255u8)
        .filter(|&t| t == 7 || sampler.keeps(&[t; 16]))
        .map(|t| format!("t{t}"))
        .collect();
    assert_eq!(names(&seen), want);
    assert_eq!(counts[0].sampled_out as usize, 256 - want.len());
    assert!(
        (10..=45).contains(&want.len()),
        "about a tenth: {}",
        want.len()
    );
    let (with_errors, _) = run(
        "rules: [{name: tenth, action: sample, sample: {percent: 10, errors: sample}}]",
        &req,
    );
    assert_eq!(
        with_errors.len() + usize::from(!sampler.keeps(&[7; 16])),
        want.len()
    );
    // Every span of a trace shares the draw: the same ids twice, same decisions.
    let twice = request("shop", spans.iter().chain(&spans).cloned().collect());
    let (seen2, _) = run(
        "rules: [{name: tenth, action: sample, sample: {percent: 10}}]",
        &twice,
    );
    assert_eq!(seen2.len(), 2 * want.len());
    let only_other = run(
        "rules: [{name: tenth, action: sample, when: [{resource: service.name, equals: other}], sample: {percent: 10}}]",
        &req,
    );
    assert_eq!(only_other.0.len(), 256, "conditions fail: nothing sampled");
    // At 100 % every trace but the all-zero id, which has no randomness: dropped, as the
    // Collector's sampler does (fail closed).
    let all = run(
        "rules: [{name: all, action: sample, sample: {percent: 100}}]",
        &req,
    )
    .0;
    assert_eq!(all.len(), 255);
    assert!(!names(&all).contains(&"t0"));
}

#[test]
fn the_same_record_twice_gives_the_same_spans() {
    let req = request(
        "shop",
        (0..50u8)
            .map(|t| span(&format!("t{t}"), t, vec![s("enduser.id", &format!("u{t}"))]))
            .collect(),
    );
    let rules = "rules:
      - {name: users, action: redact, redact: {keys: [enduser.id], with: hash}}
      - {name: half, action: sample, sample: {percent: 50, seed: 7}}";
    assert_eq!(run(rules, &req).0, run(rules, &req).0);
}

#[test]
fn an_empty_rule_set_is_empty() {
    let p = Processor::new(&ProcessingConfig::default(), None).unwrap();
    assert!(p.is_empty());
}
