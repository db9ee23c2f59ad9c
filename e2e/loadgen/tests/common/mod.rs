//! Helpers shared by the integration tests: the local stack's addresses, throw-away names.
//!
//! Every address and credential comes from the variables printed by `e2e/stack env`; a
//! missing one fails the test (never skips it) with the command that fixes it.

#![allow(dead_code)] // Each test file uses its own subset.

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use tracehouse_loadgen::{ATTR_ID, ATTR_SEQ, ExportTraceServiceRequest};

pub use tracehouse_e2e::{stack_var, unique_name};

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
