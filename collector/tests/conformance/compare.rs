//! Reads two traces tables of the same DDL back and lists every difference, column by
//! column, between rows of the same key (TraceId, SpanId, Timestamp).
//!
//! Each column is read as ClickHouse's own text of it (`toString`), which keeps what a
//! user can see: the order and repetitions of Map entries, the exact characters of every
//! string, all digits of times and numbers. A `JSON` column (or an array of them) is
//! also read as its paths with their types (`JSONAllPathsWithTypes`), since the text of
//! `1` does not say whether it is an `Int64` or a `Float64`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value as J;

use crate::common::query;

/// One table read back: a column list and, per key, the rows with that key.
pub struct Table {
    pub columns: Vec<String>,
    pub rows: BTreeMap<Key, Vec<Vec<J>>>,
    span_name: usize,
}

/// A row's identity: TraceId, SpanId and Timestamp as text.
pub type Key = (String, String, String);

/// A column of the DDL and the expression it is read with.
struct Column {
    name: String,
    expr: String,
}

fn columns_of(described: &str) -> Vec<Column> {
    let mut out = Vec::new();
    for line in described.lines().filter(|l| !l.is_empty()) {
        let row: Vec<J> = serde_json::from_str(line).expect("DESCRIBE row");
        let name = row[0].as_str().expect("column name").to_string();
        let ty = row[1].as_str().expect("column type").to_string();
        let q = format!("`{name}`");
        out.push(Column {
            name: name.clone(),
            expr: format!("toString({q})"),
        });
        if ty.starts_with("JSON") {
            out.push(Column {
                name: format!("{name} (paths and types)"),
                expr: format!("JSONAllPathsWithTypes({q})"),
            });
        } else if ty.starts_with("Array(JSON") {
            out.push(Column {
                name: format!("{name} (paths and types)"),
                expr: format!("arrayMap(x -> JSONAllPathsWithTypes(x), {q})"),
            });
        }
    }
    out
}

impl Table {
    pub async fn read(database: &str, table: &str) -> Self {
        let described = query(&format!(
            "DESCRIBE TABLE `{database}`.`{table}` FORMAT JSONCompactEachRow"
        ))
        .await;
        let cols = columns_of(&described);
        let select: Vec<&str> = cols.iter().map(|c| c.expr.as_str()).collect();
        let text = query(&format!(
            "SELECT {} FROM `{database}`.`{table}` FORMAT JSONCompactEachRow",
            select.join(", ")
        ))
        .await;
        let columns: Vec<String> = cols.into_iter().map(|c| c.name).collect();
        let at = |name: &str| {
            columns
                .iter()
                .position(|c| c == name)
                .unwrap_or_else(|| panic!("no column {name} in {columns:?}"))
        };
        let (trace, span, ts, span_name) =
            (at("TraceId"), at("SpanId"), at("Timestamp"), at("SpanName"));
        let mut rows: BTreeMap<Key, Vec<Vec<J>>> = BTreeMap::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let row: Vec<J> = serde_json::from_str(line).expect("row");
            let s = |i: usize| row[i].as_str().unwrap_or_default().to_string();
            rows.entry((s(trace), s(span), s(ts)))
                .or_default()
                .push(row);
        }
        for same_key in rows.values_mut() {
            same_key.sort_by_key(|r| serde_json::to_string(r).unwrap_or_default());
        }
        Self {
            columns,
            rows,
            span_name,
        }
    }

    pub fn len(&self) -> usize {
        self.rows.values().map(Vec::len).sum()
    }
}

/// One difference between the tracehouse table and the OpenTelemetry Collector's.
#[derive(Debug, Clone)]
pub enum Diff {
    /// A row only tracehouse wrote.
    OnlyTracehouse { key: Key, span_name: String },
    /// A row only the OpenTelemetry Collector wrote.
    OnlyOtelcol { key: Key, span_name: String },
    /// Both wrote the row, with different values in `column`.
    Value {
        key: Key,
        span_name: String,
        column: String,
        tracehouse: J,
        otelcol: J,
    },
}

fn short(v: &J) -> String {
    let s = v.to_string();
    if s.chars().count() > 400 {
        let cut: String = s.chars().take(400).collect();
        format!("{cut}… ({} chars)", s.chars().count())
    } else {
        s
    }
}

impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OnlyTracehouse { key, span_name } => {
                write!(f, "span {span_name:?} {key:?}: only in tracehouse's table")
            }
            Self::OnlyOtelcol { key, span_name } => {
                write!(
                    f,
                    "span {span_name:?} {key:?}: only in the OpenTelemetry Collector's table"
                )
            }
            Self::Value {
                key,
                span_name,
                column,
                tracehouse,
                otelcol,
            } => write!(
                f,
                "span {span_name:?} {key:?}, column {column}:\n    tracehouse: {}\n    otelcol:    {}",
                short(tracehouse),
                short(otelcol)
            ),
        }
    }
}

fn name_of(row: &[J], at: usize) -> String {
    row[at].as_str().unwrap_or_default().to_string()
}

/// Every difference between `tracehouse` and `otelcol` (tables of the same DDL).
pub fn differences(tracehouse: &Table, otelcol: &Table) -> Vec<Diff> {
    assert_eq!(
        tracehouse.columns, otelcol.columns,
        "the two tables differ in DDL"
    );
    let at = tracehouse.span_name;
    let mut out = Vec::new();
    for (key, th_rows) in &tracehouse.rows {
        let go_rows = otelcol.rows.get(key).map(Vec::as_slice).unwrap_or_default();
        for (i, th) in th_rows.iter().enumerate() {
            let Some(go) = go_rows.get(i) else {
                out.push(Diff::OnlyTracehouse {
                    key: key.clone(),
                    span_name: name_of(th, at),
                });
                continue;
            };
            for (c, column) in tracehouse.columns.iter().enumerate() {
                if th[c] != go[c] {
                    out.push(Diff::Value {
                        key: key.clone(),
                        span_name: name_of(th, at),
                        column: column.clone(),
                        tracehouse: th[c].clone(),
                        otelcol: go[c].clone(),
                    });
                }
            }
        }
    }
    for (key, go_rows) in &otelcol.rows {
        let th_len = tracehouse.rows.get(key).map_or(0, Vec::len);
        for go in go_rows.iter().skip(th_len) {
            out.push(Diff::OnlyOtelcol {
                key: key.clone(),
                span_name: name_of(go, at),
            });
        }
    }
    out
}

// Deliberate differences of the JSON variant that show in any rows (collector/README.md,
// "Differences from the OpenTelemetry Collector").
pub const INTEGRAL_DOUBLE: &str = "JSON: an integral double stays Float64";
pub const UNTYPED_ARRAY: &str = "JSON: an empty array is typed on its own, not by its neighbours";

/// The type tracehouse gives an array without a typed element (`[]`, `[null]`), the one
/// the server gives such an array on its own.
const NO_ELEMENT_TYPE: &str = "Array(Nullable(String))";

/// The deliberate differences between two `JSONAllPathsWithTypes` results (or arrays of
/// them), path by path; `None` when they differ in paths or in another way.
pub fn type_differences(th: &J, go: &J, out: &mut BTreeSet<&'static str>) -> bool {
    match (th, go) {
        (J::Array(a), J::Array(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| x == y || type_differences(x, y, out))
        }
        (J::Object(a), J::Object(b)) => {
            a.len() == b.len()
                && a.iter().all(|(path, t)| {
                    let (Some(t), Some(g)) = (t.as_str(), b.get(path).and_then(J::as_str)) else {
                        return false;
                    };
                    if t == g {
                        true
                    } else if float_for_int(t, g) {
                        out.insert(INTEGRAL_DOUBLE);
                        true
                    } else if untyped_array(t, g) {
                        out.insert(UNTYPED_ARRAY);
                        true
                    } else {
                        false
                    }
                })
        }
        _ => false,
    }
}

/// An integral double: Go writes `1`, which the server reads as an integer.
fn float_for_int(th: &str, go: &str) -> bool {
    th.replace("Float64", "Int64") == go
}

/// An array without a typed element: the server types the exporter's `[]` like the
/// arrays it met before at that path in the same insert.
fn untyped_array(th: &str, go: &str) -> bool {
    th == NO_ELEMENT_TYPE && go.starts_with("Array(")
}
