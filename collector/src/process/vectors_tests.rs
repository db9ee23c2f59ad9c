//! The processing rules against the OpenTelemetry Collector's own outputs: the vectors
//! `e2e/otelcol/vectors/generate` recorded by running the `probabilistic_sampler`,
//! `attributes` and `redaction` processors of v0.155.0
//! (`collector/tests/fixtures/otel_processing_vectors.json`; `e2e/otelcol/PROCESSORS.md`).

use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, KeyValue, KeyValueList, any_value,
};
use prost::Message;
use serde_json::Value as J;

use super::sample::{Draw, Priority, Sampler};
use super::*;

fn vectors() -> J {
    serde_json::from_str(include_str!(
        "../../tests/fixtures/otel_processing_vectors.json"
    ))
    .unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// `{"str": s}`, `{"int": "7"}`, … (the vectors' `value_encoding`) as an OTLP value.
fn any(v: &J) -> AnyValue {
    let (kind, x) = v.as_object().unwrap().iter().next().unwrap();
    let value = match kind.as_str() {
        "str" => any_value::Value::StringValue(x.as_str().unwrap().into()),
        "int" => any_value::Value::IntValue(x.as_str().unwrap().parse().unwrap()),
        // Go's `math.NaN()` has its own bits (0x7ff8000000000001), which its hash reads.
        "double" if x == "NaN" => {
            any_value::Value::DoubleValue(f64::from_bits(0x7ff8_0000_0000_0001))
        }
        "double" => any_value::Value::DoubleValue(x.as_str().unwrap().parse().unwrap()),
        "bool" => any_value::Value::BoolValue(x.as_bool().unwrap()),
        "bytes_hex" => any_value::Value::BytesValue(hex(x.as_str().unwrap())),
        "slice" => any_value::Value::ArrayValue(ArrayValue {
            values: x.as_array().unwrap().iter().map(any).collect(),
        }),
        "map" => any_value::Value::KvlistValue(KeyValueList {
            values: x.as_array().unwrap().iter().map(kv).collect(),
        }),
        "empty" => return AnyValue { value: None },
        other => panic!("value kind {other}"),
    };
    AnyValue { value: Some(value) }
}

fn kv(pair: &J) -> KeyValue {
    KeyValue {
        key: pair[0].as_str().unwrap().into(),
        value: Some(any(&pair[1])),
        ..Default::default()
    }
}

/// A config's `key: value` line.
fn setting<'a>(yaml: &'a str, key: &str) -> Option<&'a str> {
    yaml.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(": "))
        .map(str::trim)
}

fn sampler_of(yaml: &str) -> Sampler {
    let pct: f64 = setting(yaml, "sampling_percentage")
        .unwrap()
        .parse()
        .unwrap();
    let seed = setting(yaml, "hash_seed").map_or(0, |s| s.parse().unwrap());
    Sampler::new(pct, seed)
}

/// The sampler of a run in the Collector's default `hash_seed` mode (default `fail_closed`
/// and precision) with a positive percentage, the only one tracehouse has; `None` for others.
fn hash_seed_sampler(yaml: &str) -> Option<Sampler> {
    let pct: f64 = setting(yaml, "sampling_percentage")?.parse().ok()?;
    let hash_seed = matches!(setting(yaml, "mode"), None | Some("hash_seed"))
        && setting(yaml, "fail_closed").is_none()
        && setting(yaml, "sampling_precision").is_none();
    (hash_seed && pct > 0.0).then(|| sampler_of(yaml))
}

/// The span's first `sampling.priority`, read as the rules read it.
fn sampling_priority(attrs: &[&[u8]]) -> Priority {
    attrs
        .iter()
        .map(|b| crate::decode::proto::kv(b).unwrap())
        .find(|kv| kv.key == b"sampling.priority")
        .map_or(Priority::Defer, |kv| priority_of(kv.value))
}

#[test]
fn the_sampler_keeps_what_the_collectors_hash_seed_mode_keeps_and_writes_its_tracestate() {
    let v = vectors();
    let ps = &v["probabilistic_sampler"];
    let ids: Vec<Vec<u8>> = ps["trace_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| hex(t.as_str().unwrap()))
        .collect();
    let mut runs = 0;
    let mut out = Vec::new();
    for run in ps["grid"].as_array().unwrap() {
        let Some(sampler) = hash_seed_sampler(run["config_yaml"].as_str().unwrap()) else {
            continue;
        };
        runs += 1;
        let kept = run["kept"].as_str().unwrap().as_bytes();
        for (i, id) in ids.iter().enumerate() {
            let draw = sampler.draw(id, b"", Priority::Defer, &mut out);
            let name = run["name"].as_str().unwrap();
            assert_eq!(draw != Draw::Drop, kept[i] == b'1', "{name}: trace {i}");
            if let Some(ts) = run["tracestate_out_of_kept"].get(i.to_string()) {
                assert_eq!(draw, Draw::KeepWith, "{name}: trace {i}");
                assert_eq!(
                    std::str::from_utf8(&out).unwrap(),
                    ts.as_str().unwrap(),
                    "{name}: trace {i}"
                );
            }
        }
    }
    assert!(runs >= 12, "{runs} hash_seed runs");
}

#[test]
fn arriving_tracestates_and_priorities_are_treated_as_the_collector_treats_them() {
    let v = vectors();
    let ps = &v["probabilistic_sampler"];
    let mut out = Vec::new();
    let mut cases = 0;
    for run in ps["tracestate_cases"]["runs"].as_array().unwrap() {
        let Some(sampler) = hash_seed_sampler(run["config_yaml"].as_str().unwrap()) else {
            continue;
        };
        for c in run["cases"].as_array().unwrap() {
            cases += 1;
            let ts = c["tracestate_in"].as_str().unwrap();
            let draw = sampler.draw(
                &hex(c["trace_id"].as_str().unwrap()),
                ts.as_bytes(),
                Priority::Defer,
                &mut out,
            );
            assert_eq!(
                draw != Draw::Drop,
                c["kept"].as_bool().unwrap(),
                "{ts:?} {c}"
            );
            if let Some(want) = c.get("tracestate_out") {
                assert_eq!(
                    std::str::from_utf8(&out).unwrap(),
                    want.as_str().unwrap(),
                    "{ts:?}"
                );
            }
        }
    }
    for run in ps["sampling_priority_cases"]["runs"].as_array().unwrap() {
        let Some(sampler) = hash_seed_sampler(run["config_yaml"].as_str().unwrap()) else {
            continue;
        };
        for c in run["cases"].as_array().unwrap() {
            cases += 1;
            let attrs: Vec<Vec<u8>> = c["attributes_in"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| kv(p).encode_to_vec())
                .collect();
            let bodies: Vec<&[u8]> = attrs.iter().map(Vec::as_slice).collect();
            let priority = sampling_priority(&bodies);
            let draw = sampler.draw(
                &hex(c["trace_id"].as_str().unwrap()),
                b"",
                priority,
                &mut out,
            );
            assert_eq!(draw != Draw::Drop, c["kept"].as_bool().unwrap(), "{c}");
            if let Some(want) = c.get("tracestate_out") {
                assert_eq!(
                    std::str::from_utf8(&out).unwrap(),
                    want.as_str().unwrap(),
                    "{c}"
                );
            }
        }
    }
    assert!(cases >= 90, "{cases} cases");
}

/// Runs `rules` over one attribute list as a span's, and returns it as the vectors write
/// lists (`[[key, value]…]`, with the same value encoding).
fn redact_span_attrs(rules: &str, key: Option<&[u8]>, input: &[KeyValue]) -> Vec<(String, String)> {
    let cfg: ProcessingConfig = crate::yaml::from_str(rules).unwrap();
    let p = Processor::new(&cfg, key).unwrap();
    let mut st = p.scratch();
    let bodies: Vec<Vec<u8>> = input.iter().map(Message::encode_to_vec).collect();
    let arena = Bump::new();
    let mut lists = SpanScratch {
        attrs: bodies.iter().map(Vec::as_slice).collect(),
        ..Default::default()
    };
    let mut span = SpanView {
        trace_id: &[1; 16],
        ..Default::default()
    };
    assert_eq!(
        p.span(&mut span, b"", &mut lists, &arena, &mut st).unwrap(),
        Verdict::Keep
    );
    lists.attrs.iter().map(|b| typed(b)).collect()
}

/// A `KeyValue` body as `(key, value in the vectors' encoding)`.
fn typed(body: &[u8]) -> (String, String) {
    let kv = KeyValue::decode(body).unwrap();
    (kv.key, encode(kv.value.as_ref()).to_string())
}

fn encode(v: Option<&AnyValue>) -> J {
    use any_value::Value as V;
    match v.and_then(|v| v.value.as_ref()) {
        Some(V::StringValue(s)) => serde_json::json!({"str": s}),
        Some(V::IntValue(i)) => serde_json::json!({"int": i.to_string()}),
        Some(V::BoolValue(b)) => serde_json::json!({"bool": b}),
        Some(V::ArrayValue(a)) => {
            serde_json::json!({"slice": a.values.iter().map(|x| encode(Some(x))).collect::<Vec<_>>()})
        }
        other => serde_json::json!({"other": format!("{other:?}")}),
    }
}

fn pairs_of(list: &J) -> Vec<(String, String)> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().to_owned(), p[1].to_string()))
        .collect()
}

#[test]
fn hash_without_a_key_is_the_attributes_processors_sha256_for_every_value_type() {
    let v = vectors();
    let cases = v["attributes_hash"]["hash_key"]["cases"]
        .as_array()
        .unwrap();
    assert!(cases.len() >= 20);
    let rules = "rules: [{name: h, action: redact, redact: {keys: [enduser.id], with: hash, from: [span]}}]";
    for c in cases {
        let input = [kv(&serde_json::json!(["enduser.id", c["in"]]))];
        let got = redact_span_attrs(rules, None, &input);
        assert_eq!(
            got,
            [("enduser.id".to_owned(), c["out"].to_string())],
            "{}",
            c["in"]
        );
    }
}

/// The attributes every redaction run of the vectors starts from.
fn redaction_input(v: &J) -> Vec<KeyValue> {
    v["redaction"]["input_attributes"]
        .as_array()
        .unwrap()
        .iter()
        .map(kv)
        .collect()
}

fn redaction_run<'a>(v: &'a J, name: &str) -> &'a J {
    v["redaction"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap()
}

const TOKENS_CARDS_MAILS: &str = r#"patterns: ['.*token.*'], values: ['4[0-9]{12}(?:[0-9]{3})?', '[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}']"#;

#[test]
fn mask_is_the_redaction_processors_mask_of_blocked_keys_and_values() {
    let v = vectors();
    let input = redaction_input(&v);
    let rules = format!(
        "rules: [{{name: r, action: redact, redact: {{{TOKENS_CARDS_MAILS}, with: mask}}}}]"
    );
    let got = redact_span_attrs(&rules, None, &input);
    let want = pairs_of(&redaction_run(&v, "summary_silent")["output_spans"][0]["attributes"]);
    assert_eq!(got, want);
}

#[test]
fn a_keyed_hash_is_the_redaction_processors_hmac_sha256_on_text_values() {
    let v = vectors();
    let input = redaction_input(&v);
    let rules = format!(
        "rules: [{{name: r, action: redact, redact: {{{TOKENS_CARDS_MAILS}, with: hash}}}}]"
    );
    let got = redact_span_attrs(&rules, Some(b"tracehouse-differential-key-0032"), &input);
    let want = pairs_of(&redaction_run(&v, "hash_hmac_sha256")["output_spans"][0]["attributes"]);
    let want: Vec<_> = want
        .into_iter()
        .filter(|(k, _)| !k.starts_with("redaction."))
        .collect();
    assert_eq!(got.len(), want.len());
    for ((gk, gv), (wk, wv)) in got.iter().zip(&want) {
        assert_eq!(gk, wk);
        // Without `redact_all_types` the Collector hashes a non-text value under a blocked key
        // as "" (every int token alike); tracehouse hashes its text, as the recipe's
        // `redact_all_types: true` does.
        if gk == "x-token-count" {
            continue;
        }
        assert_eq!(gv, wv, "{gk}");
    }
}
