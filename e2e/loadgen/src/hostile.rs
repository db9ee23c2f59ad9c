//! Hostile but valid records (issue 30): shapes a real producer may send that are well-formed
//! OTLP and still hard on a consumer, applied to a generated request after the fact so every
//! span keeps its `loadgen.id` / `loadgen.seq` and `verify` counts them as usual.
//!
//! - [`Hostile::spread_days`]: the request's spans moved back by 0, 1, …, N−1 whole days in
//!   turn (a broken SDK clock, a historical replay). A table `PARTITION BY toDate(…)` then
//!   needs N partitions for one record: ClickHouse refuses an insert block that touches more
//!   than `max_partitions_per_insert_block` (100) with code 252.
//! - [`Hostile::pad_resource_attributes`] × [`Hostile::pad_resource_bytes`]: string
//!   attributes `resource.pad.<i>` of exactly that many bytes added to every resource. A
//!   row-per-span table copies the resource into every span's row, so a record of S spans
//!   under a resource of R bytes expands to about S × R bytes.
//!
//! Pure functions over the request; nothing here knows about Kafka or ClickHouse.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};

const NS_PER_DAY: u64 = 86_400 * 1_000_000_000;

/// Which hostile shapes to apply; the default applies none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hostile {
    /// Spread the spans of each request over this many days (0 or 1: leave the times).
    pub spread_days: u32,
    /// Extra string attributes on every resource.
    pub pad_resource_attributes: usize,
    /// Bytes of each of those attributes' values.
    pub pad_resource_bytes: usize,
}

impl Hostile {
    /// Whether [`Hostile::apply`] changes anything.
    pub fn is_none(&self) -> bool {
        self.spread_days <= 1 && self.pad_resource_attributes == 0
    }

    /// Applies the configured shapes to `req`.
    pub fn apply(&self, req: &mut ExportTraceServiceRequest) {
        if self.spread_days > 1 {
            spread_over_days(req, self.spread_days);
        }
        if self.pad_resource_attributes > 0 {
            pad_resources(req, self.pad_resource_attributes, self.pad_resource_bytes);
        }
    }
}

/// Moves the k-th span of `req` (in request order) and its events back by `k % days` whole
/// days, so a request of at least `days` spans touches exactly `days` dates. Durations are
/// kept; times never go below 0.
pub fn spread_over_days(req: &mut ExportTraceServiceRequest, days: u32) {
    let days = u64::from(days.max(1));
    let spans = req
        .resource_spans
        .iter_mut()
        .flat_map(|r| &mut r.scope_spans)
        .flat_map(|s| &mut s.spans);
    for (k, span) in spans.enumerate() {
        let back = (k as u64 % days) * NS_PER_DAY;
        let shift = |t: &mut u64| *t = t.saturating_sub(back);
        shift(&mut span.start_time_unix_nano);
        shift(&mut span.end_time_unix_nano);
        for e in &mut span.events {
            shift(&mut e.time_unix_nano);
        }
    }
}

/// Adds `count` string attributes `resource.pad.<i>` of exactly `bytes` bytes (printable
/// ASCII, different per attribute) to every resource of `req`.
pub fn pad_resources(req: &mut ExportTraceServiceRequest, count: usize, bytes: usize) {
    for rs in &mut req.resource_spans {
        let resource = rs.resource.get_or_insert_with(Default::default);
        for i in 0..count {
            let fill = b'a' + (i % 26) as u8;
            let mut text = format!("{i}:");
            text.truncate(bytes);
            text.extend(std::iter::repeat_n(fill as char, bytes - text.len()));
            resource.attributes.push(KeyValue {
                key: format!("resource.pad.{i}"),
                value: Some(AnyValue {
                    value: Some(Value::StringValue(text)),
                }),
                ..Default::default()
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use prost::Message as _;

    use super::*;
    use crate::{Generator, GeneratorConfig, Shape};

    const START: u64 = 1_700_000_000_000_000_000;

    fn request(spans: usize, hostile: Hostile) -> ExportTraceServiceRequest {
        Generator::new(GeneratorConfig {
            generator_id: "hostile".into(),
            start_time_unix_nano: START,
            shape: Shape::Minimal,
            services: 1,
            hostile,
            ..GeneratorConfig::default()
        })
        .next_request(spans)
    }

    fn days_touched(req: &ExportTraceServiceRequest) -> BTreeSet<u64> {
        req.resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .map(|s| s.start_time_unix_nano / NS_PER_DAY)
            .collect()
    }

    #[test]
    fn spread_touches_exactly_n_days_and_keeps_durations() {
        let plain = request(101, Hostile::default());
        let spread = request(
            101,
            Hostile {
                spread_days: 101,
                ..Hostile::default()
            },
        );
        let days = days_touched(&spread);
        assert_eq!(days.len(), 101, "{days:?}");
        assert_eq!(*days.last().unwrap() - *days.first().unwrap(), 100);
        let durations = |r: &ExportTraceServiceRequest| -> Vec<u64> {
            r.resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .flat_map(|s| &s.spans)
                .map(|s| s.end_time_unix_nano - s.start_time_unix_nano)
                .collect()
        };
        assert_eq!(durations(&plain), durations(&spread));
        assert!(days_touched(&plain).len() <= 2);
    }

    #[test]
    fn spread_of_one_day_or_none_changes_nothing() {
        let plain = request(50, Hostile::default());
        let one = request(
            50,
            Hostile {
                spread_days: 1,
                ..Hostile::default()
            },
        );
        assert_eq!(plain, one);
        assert!(Hostile::default().is_none());
    }

    #[test]
    fn padding_adds_exact_sized_attributes_to_every_resource() {
        let hostile = Hostile {
            pad_resource_attributes: 100,
            pad_resource_bytes: 4096,
            ..Hostile::default()
        };
        let plain = request(1000, Hostile::default());
        let fat = request(1000, hostile);
        for rs in &fat.resource_spans {
            let pads: Vec<&KeyValue> = rs
                .resource
                .as_ref()
                .unwrap()
                .attributes
                .iter()
                .filter(|kv| kv.key.starts_with("resource.pad."))
                .collect();
            assert_eq!(pads.len(), 100);
            for kv in pads {
                let Some(Value::StringValue(s)) = kv.value.as_ref().and_then(|v| v.value.as_ref())
                else {
                    panic!("{kv:?}")
                };
                assert_eq!(s.len(), 4096);
            }
        }
        let grew = fat.encoded_len() - plain.encoded_len();
        assert!((409_600..420_000).contains(&grew), "grew by {grew} B");
        // The spans (and so what verify counts) are the same.
        let spans = |r: &ExportTraceServiceRequest| {
            r.resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .flat_map(|s| s.spans.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(spans(&plain), spans(&fat));
    }
}
