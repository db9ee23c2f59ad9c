//! Helpers shared by the integration tests: the local stack's addresses, throw-away names.
//!
//! Every address and credential comes from the variables printed by `e2e/stack env`; a
//! missing one fails the test (never skips it) with the command that fixes it.

#![allow(dead_code)] // Each test file uses its own subset.

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use tracehouse_loadgen::{ATTR_ID, ATTR_SEQ, ExportTraceServiceRequest};

pub use tracehouse_e2e::{stack_var, unique_name};

/// `(loadgen.id, loadgen.seq)` of every span of an OTLP/JSON request, read from the JSON
/// itself (the collector's reader is checked against ours in the collector's tests,
/// `collector/tests/loadgen_json_compat.rs`: the load generator does not depend on it).
pub fn json_ids_and_seqs(req: &serde_json::Value) -> Vec<(String, i64)> {
    let list = |v: &serde_json::Value, key: &str| v[key].as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for rs in list(req, "resourceSpans") {
        for ss in list(&rs, "scopeSpans") {
            for span in list(&ss, "spans") {
                let value = |key: &str| {
                    list(&span, "attributes")
                        .into_iter()
                        .find(|kv| kv["key"] == key)
                        .map(|kv| kv["value"].clone())
                };
                let id = value(ATTR_ID).and_then(|v| v["stringValue"].as_str().map(str::to_string));
                // OTLP/JSON writes 64-bit integers as strings (numbers are accepted too).
                let seq = value(ATTR_SEQ).and_then(|v| match &v["intValue"] {
                    serde_json::Value::String(s) => s.parse().ok(),
                    n => n.as_i64(),
                });
                let (Some(id), Some(seq)) = (id, seq) else {
                    panic!("span {} lacks loadgen.id/loadgen.seq", span["name"]);
                };
                out.push((id, seq));
            }
        }
    }
    out
}

/// `(loadgen.id, loadgen.seq)` of every span of a request.
pub fn ids_and_seqs(req: &ExportTraceServiceRequest) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for span in req
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
    {
        let value = |key: &str| {
            span.attributes
                .iter()
                .find(|kv| kv.key == key)
                .and_then(|kv| kv.value.as_ref()?.value.clone())
        };
        let (Some(Value::StringValue(id)), Some(Value::IntValue(seq))) =
            (value(ATTR_ID), value(ATTR_SEQ))
        else {
            panic!("span {:?} lacks loadgen.id/loadgen.seq", span.name);
        };
        out.push((id, seq));
    }
    out
}
