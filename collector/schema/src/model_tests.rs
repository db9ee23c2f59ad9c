//! Unit tests of `model.rs`.

use super::*;
use crate::ident::Ident;

fn opts(attributes: Attributes, keys: bool) -> TableOptions {
    let mut o = TableOptions::new(
        Ident::new("database", "otel").unwrap(),
        Ident::new("table", "otel_traces").unwrap(),
    );
    o.attributes = attributes;
    o.attribute_keys_columns = keys;
    o
}

fn names(cols: &[Column]) -> Vec<&'static str> {
    cols.iter().map(Column::name).collect()
}

const OTEL_22: [&str; 22] = [
    "Timestamp",
    "TraceId",
    "SpanId",
    "ParentSpanId",
    "TraceState",
    "SpanName",
    "SpanKind",
    "ServiceName",
    "ResourceAttributes",
    "ScopeName",
    "ScopeVersion",
    "SpanAttributes",
    "Duration",
    "StatusCode",
    "StatusMessage",
    "Events.Timestamp",
    "Events.Name",
    "Events.Attributes",
    "Links.TraceId",
    "Links.SpanId",
    "Links.TraceState",
    "Links.Attributes",
];

#[test]
fn map_variant_inserts_the_22_otel_columns_in_order() {
    assert_eq!(
        names(&insert_columns(&opts(Attributes::Map, true))),
        OTEL_22
    );
}

#[test]
fn json_variant_adds_keys_columns_after_their_attributes_only_when_enabled() {
    assert_eq!(
        names(&insert_columns(&opts(Attributes::Json, false))),
        OTEL_22
    );
    let with_keys = names(&insert_columns(&opts(Attributes::Json, true)));
    assert_eq!(with_keys.len(), 24);
    let pos = |n| with_keys.iter().position(|c| *c == n).unwrap();
    assert_eq!(pos("ResourceAttributesKeys"), pos("ResourceAttributes") + 1);
    assert_eq!(pos("SpanAttributesKeys"), pos("SpanAttributes") + 1);
    let without: Vec<_> = with_keys
        .into_iter()
        .filter(|n| !n.ends_with("Keys"))
        .collect();
    assert_eq!(without, OTEL_22);
}

#[test]
fn nested_columns_are_arrays_of_the_attribute_type() {
    let json = insert_columns(&opts(Attributes::Json, true));
    let by = |id| {
        json.iter()
            .find(|c| c.id == id)
            .unwrap()
            .ch_type
            .to_string()
    };
    assert_eq!(by(SpanColumn::EventsTimestamp), "Array(DateTime64(9))");
    assert_eq!(by(SpanColumn::EventsAttributes), "Array(JSON)");
    assert_eq!(by(SpanColumn::SpanAttributes), "JSON");
    assert_eq!(
        by(SpanColumn::SpanAttributesKeys),
        "Array(LowCardinality(String))"
    );
    let map = insert_columns(&opts(Attributes::Map, true));
    let by = |id| map.iter().find(|c| c.id == id).unwrap().ch_type.to_string();
    assert_eq!(
        by(SpanColumn::LinksAttributes),
        "Array(Map(LowCardinality(String), String))"
    );
    assert_eq!(
        SpanColumn::LinksAttributes.nested(),
        Some(("Links", "Attributes"))
    );
    assert_eq!(SpanColumn::Duration.nested(), None);
}

#[test]
fn null_engine_has_no_codecs_and_no_indexes() {
    let mut o = opts(Attributes::Map, true);
    o.engine = Engine::Null;
    assert!(columns(&o).iter().all(|c| c.codec.is_default()));
    assert!(indexes(&o).is_empty());
}

#[test]
fn ttl_parses_days_and_durations_and_renders_like_the_exporter() {
    let t = |s: &str| s.parse::<Ttl>().unwrap();
    assert_eq!(t("30").interval_sql(), "toIntervalDay(30)");
    assert_eq!(t("30d").interval_sql(), "toIntervalDay(30)");
    assert_eq!(t("48h").interval_sql(), "toIntervalDay(2)");
    assert_eq!(t("36h").interval_sql(), "toIntervalHour(36)");
    assert_eq!(t("90m").interval_sql(), "toIntervalMinute(90)");
    assert_eq!(t("61s").interval_sql(), "toIntervalSecond(61)");
    assert_eq!(t("36h").to_string(), "36h");
    for bad in [
        "",
        "0",
        "0d",
        "-1",
        "1w",
        "d",
        "1.5d",
        "99999999999999999999d",
        "36500",
    ] {
        assert!(bad.parse::<Ttl>().is_err(), "{bad:?} parsed");
    }
}

#[test]
fn derived_names_must_fit_the_identifier_limit() {
    let mut o = opts(Attributes::Map, true);
    o.table = Ident::new("table", "t".repeat(49)).unwrap();
    assert!(o.validate().is_ok());
    o.table = Ident::new("table", "t".repeat(50)).unwrap();
    let err = o.validate().unwrap_err().to_string();
    assert!(err.contains("_trace_id_ts_mv"), "{err}");
}
