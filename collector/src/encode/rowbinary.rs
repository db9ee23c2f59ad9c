//! RowBinary: each row is its columns' values back to back, in insert-column order.
//!
//! `LowCardinality(String)` is written as `String`, `Map` as a var-int count and the
//! key/value pairs, `Array` as a var-int count and the elements, and `JSON` in its
//! native binary form (var-int number of paths, then each path and its `Dynamic`
//! value), so the server parses no text at all.

use tracehouse_schema::SpanColumn;

use super::plan::PlannedColumn;
use super::{Rendered, SpanRow};
use crate::decode::proto;
use crate::rows;
use crate::wire::{put_i64, put_str, put_u64, put_varint};

/// The resource's two attribute columns, serialized once per resource: every span of
/// the resource copies the same bytes.
#[derive(Debug, Default)]
pub(super) struct ResourceBytes {
    attrs: Vec<u8>,
    keys: Vec<u8>,
}

impl ResourceBytes {
    pub(super) fn fill(&mut self, resource: &Rendered) {
        self.attrs.clear();
        put_attrs(&mut self.attrs, resource);
        self.keys.clear();
        put_keys(&mut self.keys, resource);
    }
}

/// Appends one span's row. `resource` holds `row.resource` serialized
/// ([`ResourceBytes::fill`]).
pub(super) fn write_row(
    out: &mut Vec<u8>,
    plan: &[PlannedColumn],
    row: &SpanRow<'_>,
    resource: &ResourceBytes,
    scratch: &mut Rendered,
) -> proto::Result<()> {
    let span = row.span;
    let events = &row.lists.events[span.events.clone()];
    let links = &row.lists.links[span.links.clone()];
    for col in plan {
        use SpanColumn as C;
        match col.id {
            C::Timestamp => put_i64(out, rows::timestamp_ns(span.start_time_unix_nano)),
            C::TraceId => put_hex_id(out, span.trace_id),
            C::SpanId => put_hex_id(out, span.span_id),
            C::ParentSpanId => put_hex_id(out, span.parent_span_id),
            C::TraceState => put_str(out, span.trace_state),
            C::SpanName => put_str(out, span.name),
            C::SpanKind => put_str(out, rows::span_kind(span.kind).as_bytes()),
            C::ServiceName => put_str(out, row.service_name),
            C::ResourceAttributes => out.extend_from_slice(&resource.attrs),
            C::ResourceAttributesKeys => out.extend_from_slice(&resource.keys),
            C::ScopeName => put_str(out, row.scope_name),
            C::ScopeVersion => put_str(out, row.scope_version),
            C::SpanAttributes => put_attrs(out, row.attrs),
            C::SpanAttributesKeys => put_keys(out, row.attrs),
            C::Duration => put_u64(
                out,
                rows::duration_ns(span.start_time_unix_nano, span.end_time_unix_nano),
            ),
            C::StatusCode => put_str(out, rows::status_code(span.status_code).as_bytes()),
            C::StatusMessage => put_str(out, span.status_message),
            C::EventsTimestamp => {
                put_varint(out, events.len() as u64);
                for e in events {
                    put_i64(out, rows::timestamp_ns(e.time_unix_nano));
                }
            }
            C::EventsName => {
                put_varint(out, events.len() as u64);
                for e in events {
                    put_str(out, e.name);
                }
            }
            C::EventsAttributes => {
                put_varint(out, events.len() as u64);
                for e in events {
                    scratch.fill(
                        &row.lists.event_attrs[e.attrs.clone()],
                        proto::EVENT_LINK_VALUE_DEPTH,
                    )?;
                    put_attrs(out, scratch);
                }
            }
            C::LinksTraceId => {
                put_varint(out, links.len() as u64);
                for l in links {
                    put_hex_id(out, l.trace_id);
                }
            }
            C::LinksSpanId => {
                put_varint(out, links.len() as u64);
                for l in links {
                    put_hex_id(out, l.span_id);
                }
            }
            C::LinksTraceState => {
                put_varint(out, links.len() as u64);
                for l in links {
                    put_str(out, l.trace_state);
                }
            }
            C::LinksAttributes => {
                put_varint(out, links.len() as u64);
                for l in links {
                    scratch.fill(
                        &row.lists.link_attrs[l.attrs.clone()],
                        proto::EVENT_LINK_VALUE_DEPTH,
                    )?;
                    put_attrs(out, scratch);
                }
            }
        }
    }
    Ok(())
}

fn put_hex_id(out: &mut Vec<u8>, id: &[u8]) {
    put_varint(out, rows::hex_id_len(id) as u64);
    rows::push_hex_id(id, out);
}

fn put_attrs(out: &mut Vec<u8>, attrs: &Rendered) {
    match attrs {
        Rendered::Map(m) => {
            put_varint(out, m.len() as u64);
            for (k, v) in m.iter() {
                put_str(out, k);
                put_str(out, v);
            }
        }
        Rendered::Json(j) => j.write_binary(out),
    }
}

fn put_keys(out: &mut Vec<u8>, attrs: &Rendered) {
    match attrs {
        Rendered::Json(j) => {
            let keys = j.keys();
            put_varint(out, keys.len() as u64);
            for k in keys {
                put_str(out, k);
            }
        }
        // The plan only has *Keys columns in the JSON variant.
        Rendered::Map(_) => put_varint(out, 0),
    }
}
