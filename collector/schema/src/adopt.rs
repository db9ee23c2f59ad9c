//! Adoption: recognising tables the OTel exporter or ClickStack already created.
//!
//! When a `CREATE` migration is pending but its object already exists, the object is
//! compared with the model. If every column the collector writes is there with the
//! same type, on the expected engine, the migration is recorded as adopted and
//! nothing runs. Otherwise nothing is changed and the differences are reported: an
//! existing table is never altered blindly. The comparison here is pure
//! ([`check_traces_table`] and friends); fetching the shape is [`crate::catalog`]'s.
//!
//! What is compared: engine, column names and types (codecs and extra defaulted columns
//! only noted). What is not: skip indexes (bloom filters or the text indexes of
//! opentelemetry-collector-contrib PR #50878 serve readers, not inserts), the sorting and
//! partition keys, and column or table comments (`system.columns.type` never carries the
//! comment; the create-query parsers take comments out first, see [`crate::create_query`]).

use crate::model::{self, Attributes, Engine, SpanColumn, TableOptions};
use crate::types::ClickHouseType;
use crate::version::V_CREATE_TRACES_TABLE;

/// A column as `system.columns` describes it (its `comment` is not read: see the module
/// header).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[cfg_attr(feature = "server", derive(clickhouse::Row))]
pub struct ExistingColumn {
    pub name: String,
    pub ch_type: String,
    /// `DEFAULT`, `MATERIALIZED`, `ALIAS`, `EPHEMERAL` or empty.
    pub default_kind: String,
    /// `CODEC(...)` or empty.
    pub compression_codec: String,
}

impl ExistingColumn {
    pub fn new(name: &str, ch_type: &str) -> Self {
        Self {
            name: name.into(),
            ch_type: ch_type.into(),
            default_kind: String::new(),
            compression_codec: String::new(),
        }
    }
}

/// The outcome of comparing an existing object with what a migration would create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Same shape: record the migration as applied without running it. The notes
    /// list harmless differences (extra defaulted columns, other codecs).
    Adopt { notes: Vec<String> },
    /// Not ours to touch: the differences say why.
    Conflict { differences: Vec<String> },
}

impl Verdict {
    fn from(differences: Vec<String>, notes: Vec<String>) -> Self {
        if differences.is_empty() {
            Self::Adopt { notes }
        } else {
            Self::Conflict { differences }
        }
    }
}

/// Engines (as `system.tables` names them) that satisfy the configured engine.
fn engine_ok(opts: &TableOptions, engine: &str) -> bool {
    match opts.engine {
        // ClickHouse Cloud turns every MergeTree into SharedMergeTree.
        Engine::MergeTree => matches!(engine, "MergeTree" | "SharedMergeTree"),
        Engine::Replicated(_) => matches!(engine, "ReplicatedMergeTree" | "SharedMergeTree"),
        Engine::Null => engine == "Null",
    }
}

fn engine_difference(opts: &TableOptions, engine: &str) -> Option<String> {
    (!engine_ok(opts, engine)).then(|| {
        let want = match opts.engine {
            Engine::MergeTree => "MergeTree (--engine merge-tree)",
            Engine::Replicated(_) => "ReplicatedMergeTree (--engine replicated)",
            Engine::Null => "Null (--engine null)",
        };
        format!("its engine is {engine}, the options ask for {want}")
    })
}

fn same_type(existing: &str, want: &ClickHouseType) -> bool {
    match existing.parse::<ClickHouseType>() {
        Ok(t) => &t == want,
        Err(_) => false,
    }
}

/// Checks an existing traces table against the columns migration 1 creates (later
/// migrations are additive and run after adoption).
pub fn check_traces_table(
    opts: &TableOptions,
    engine: &str,
    existing: &[ExistingColumn],
) -> Verdict {
    let mut differences: Vec<String> = engine_difference(opts, engine).into_iter().collect();
    let mut notes = Vec::new();
    let expected: Vec<_> = model::columns(opts)
        .into_iter()
        .filter(|c| c.since <= V_CREATE_TRACES_TABLE)
        .collect();
    for want in &expected {
        match existing.iter().find(|e| e.name == want.name()) {
            None => {
                let mut d = format!("column {} is missing", want.name());
                if matches!(
                    want.id,
                    SpanColumn::ResourceAttributesKeys | SpanColumn::SpanAttributesKeys
                ) {
                    d.push_str(" (use --no-attribute-keys to adopt a JSON table without the *Keys columns)");
                }
                differences.push(d);
            }
            Some(e) if !same_type(&e.ch_type, &want.ch_type) => {
                let mut d = format!(
                    "column {} is {}, expected {}",
                    want.name(),
                    e.ch_type,
                    want.ch_type
                );
                if want.id == SpanColumn::ResourceAttributes {
                    let other = match opts.attributes {
                        Attributes::Map => "json",
                        Attributes::Json => "map",
                    };
                    d.push_str(&format!(" (is this the --attributes {other} variant?)"));
                }
                differences.push(d);
            }
            Some(e) => {
                let have = e
                    .compression_codec
                    .strip_prefix("CODEC(")
                    .and_then(|c| c.strip_suffix(')'))
                    .unwrap_or(&e.compression_codec);
                if have != want.codec.to_string() {
                    notes.push(format!(
                        "column {} has codec {:?}, the model uses {:?}",
                        want.name(),
                        have,
                        want.codec.to_string()
                    ));
                }
            }
        }
    }
    for e in existing {
        if !expected.iter().any(|w| w.name() == e.name) {
            let how = if e.default_kind.is_empty() {
                "DEFAULT of its type".to_string()
            } else {
                e.default_kind.clone()
            };
            // Inserts name their columns, so an extra column only gets its default.
            notes.push(format!(
                "extra column {} {} is kept; inserts leave it to its {how}",
                e.name, e.ch_type
            ));
        }
    }
    Verdict::from(differences, notes)
}

/// Checks an existing `<table>_trace_id_ts`. Newer exporter versions declare the
/// times as `SimpleAggregateFunction(min|max, DateTime)`, which the view fills the
/// same way, so both spellings are adopted.
pub fn check_lookup_table(
    opts: &TableOptions,
    engine: &str,
    existing: &[ExistingColumn],
) -> Verdict {
    // `SimpleAggregateFunction` columns suggest an aggregating engine; the view only
    // appends to this table, so that variant of the engine serves just as well.
    let base_engine = engine.replace("AggregatingMergeTree", "MergeTree");
    let mut differences: Vec<String> = engine_difference(opts, &base_engine).into_iter().collect();
    let accepted: [(&str, &[&str]); 3] = [
        ("TraceId", &["String"]),
        (
            "Start",
            &["DateTime", "SimpleAggregateFunction(min, DateTime)"],
        ),
        (
            "End",
            &["DateTime", "SimpleAggregateFunction(max, DateTime)"],
        ),
    ];
    let squash = |s: &str| s.replace(' ', "");
    for (name, types) in accepted {
        match existing.iter().find(|e| e.name == name) {
            None => differences.push(format!("column {name} is missing")),
            Some(e) if !types.iter().any(|t| squash(t) == squash(&e.ch_type)) => differences.push(
                format!("column {name} is {}, expected {}", e.ch_type, types[0]),
            ),
            Some(_) => {}
        }
    }
    Verdict::from(differences, Vec::new())
}

/// An existing object named `<table>_trace_id_ts_mv` is adopted if it is a
/// materialized view.
pub fn check_lookup_view(engine: &str) -> Verdict {
    if engine == "MaterializedView" {
        Verdict::Adopt { notes: Vec::new() }
    } else {
        Verdict::Conflict {
            differences: vec![format!("it is a {engine}, not a materialized view")],
        }
    }
}

#[cfg(test)]
mod tests {
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

    /// What `system.columns` shows for a table the exporter created (codecs included).
    fn exporter_columns(o: &TableOptions) -> Vec<ExistingColumn> {
        model::columns(o)
            .iter()
            .map(|c| ExistingColumn {
                name: c.name().into(),
                ch_type: c.ch_type.to_string(),
                default_kind: String::new(),
                compression_codec: format!("CODEC({})", c.codec),
            })
            .collect()
    }

    #[test]
    fn exporter_map_table_is_adopted_without_notes() {
        let o = opts(Attributes::Map, true);
        assert_eq!(
            check_traces_table(&o, "MergeTree", &exporter_columns(&o)),
            Verdict::Adopt { notes: vec![] }
        );
    }

    #[test]
    fn extra_alias_columns_and_other_codecs_are_noted_not_refused() {
        let o = opts(Attributes::Map, true);
        let mut cols = exporter_columns(&o);
        cols.iter_mut()
            .find(|c| c.name == "Duration")
            .unwrap()
            .compression_codec = "CODEC(T64, ZSTD(1))".into();
        cols.push(ExistingColumn {
            name: "SpanAttributeItems".into(),
            ch_type: "Array(String)".into(),
            default_kind: "ALIAS".into(),
            compression_codec: String::new(),
        });
        let Verdict::Adopt { notes } = check_traces_table(&o, "MergeTree", &cols) else {
            panic!("refused");
        };
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("Duration") && notes[0].contains("T64"));
        assert!(notes[1].contains("SpanAttributeItems") && notes[1].contains("ALIAS"));
    }

    #[test]
    fn wrong_variant_missing_columns_and_engine_are_conflicts_with_hints() {
        let json = opts(Attributes::Json, true);
        let map_cols = exporter_columns(&opts(Attributes::Map, true));
        let Verdict::Conflict { differences } = check_traces_table(&json, "MergeTree", &map_cols)
        else {
            panic!("adopted a Map table as JSON");
        };
        let all = differences.join("\n");
        assert!(all.contains("--attributes map"), "{all}");
        assert!(all.contains("ResourceAttributesKeys is missing"), "{all}");
        assert!(all.contains("--no-attribute-keys"), "{all}");

        let o = opts(Attributes::Map, true);
        let mut cols = exporter_columns(&o);
        cols.retain(|c| c.name != "Links.Attributes");
        let Verdict::Conflict { differences } = check_traces_table(&o, "Log", &cols) else {
            panic!("adopted");
        };
        assert_eq!(differences.len(), 2, "{differences:?}");
        assert!(differences[0].contains("engine is Log"));
        assert!(differences[1].contains("Links.Attributes is missing"));
    }

    #[test]
    fn json_table_without_keys_is_adopted_when_keys_are_off() {
        let o = opts(Attributes::Json, false);
        assert!(matches!(
            check_traces_table(&o, "MergeTree", &exporter_columns(&o)),
            Verdict::Adopt { .. }
        ));
    }

    #[test]
    fn lookup_table_accepts_both_exporter_spellings() {
        let o = opts(Attributes::Map, true);
        let old = [
            ExistingColumn::new("TraceId", "String"),
            ExistingColumn::new("Start", "DateTime"),
            ExistingColumn::new("End", "DateTime"),
        ];
        let new = [
            ExistingColumn::new("TraceId", "String"),
            ExistingColumn::new("Start", "SimpleAggregateFunction(min, DateTime)"),
            ExistingColumn::new("End", "SimpleAggregateFunction(max, DateTime)"),
        ];
        assert!(matches!(
            check_lookup_table(&o, "MergeTree", &old),
            Verdict::Adopt { .. }
        ));
        assert!(matches!(
            check_lookup_table(&o, "MergeTree", &new),
            Verdict::Adopt { .. }
        ));
        assert!(matches!(
            check_lookup_table(&o, "AggregatingMergeTree", &new),
            Verdict::Adopt { .. }
        ));
        assert!(matches!(
            check_lookup_table(&o, "Log", &new),
            Verdict::Conflict { .. }
        ));
        let bad = [ExistingColumn::new("TraceId", "UInt64")];
        let Verdict::Conflict { differences } = check_lookup_table(&o, "MergeTree", &bad) else {
            panic!()
        };
        assert_eq!(differences.len(), 3);
        assert!(matches!(
            check_lookup_view("MaterializedView"),
            Verdict::Adopt { .. }
        ));
        assert!(matches!(
            check_lookup_view("View"),
            Verdict::Conflict { .. }
        ));
    }
}
