//! What Grafana would send to its data sources for a dashboard, without a Grafana server:
//! the queries of every panel (and of query variables) read from a dashboard's JSON model,
//! template variables interpolated, and the grafana-clickhouse-datasource macros expanded the
//! way that plugin's backend expands them (`pkg/macros/macros.go` of the plugin: seconds via
//! `toDateTime(<unix>)`, milliseconds via `fromUnixTimestamp64Milli(<ms>)`).
//!
//! Pure: the stack tests (`operator/tests/e2e_dashboards.rs`) send the results to the real
//! Prometheus and ClickHouse engine.

use std::collections::BTreeMap;

use serde_json::Value;

/// One query of a dashboard.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// `panel title / refId`, or `variable <name>`: what a failure names.
    pub origin: String,
    pub kind: QueryKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum QueryKind {
    /// PromQL (`expr` of a Prometheus target).
    PromQL(String),
    /// SQL (`rawSql` of a grafana-clickhouse-datasource target, or a variable's query).
    Sql(String),
    /// A Prometheus variable's `label_values(selector, label)`: Grafana asks Prometheus for
    /// the values of `label` on the series `selector` matches.
    LabelValues { selector: String, label: String },
}

/// Every panel target (rows' nested panels too) and every query variable of `dashboard`.
pub fn queries(dashboard: &Value) -> Vec<Query> {
    let mut out = Vec::new();
    let mut panels: Vec<&Value> = Vec::new();
    for p in dashboard["panels"].as_array().into_iter().flatten() {
        panels.push(p);
        panels.extend(p["panels"].as_array().into_iter().flatten());
    }
    for p in panels {
        let title = p["title"].as_str().unwrap_or("(untitled)");
        for t in p["targets"].as_array().into_iter().flatten() {
            let origin = format!("{title} / {}", t["refId"].as_str().unwrap_or("?"));
            if let Some(expr) = t["expr"].as_str() {
                out.push(Query {
                    origin,
                    kind: QueryKind::PromQL(expr.to_owned()),
                });
            } else if let Some(sql) = t["rawSql"].as_str() {
                out.push(Query {
                    origin,
                    kind: QueryKind::Sql(sql.to_owned()),
                });
            }
        }
    }
    for v in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if v["type"] != "query" {
            continue;
        }
        let origin = format!("variable {}", v["name"].as_str().unwrap_or("?"));
        let query = v["query"].as_str().unwrap_or_default().to_owned();
        if v["datasource"]["type"] == "grafana-clickhouse-datasource" {
            out.push(Query {
                origin,
                kind: QueryKind::Sql(query),
            });
        } else if let Some((selector, label)) = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .and_then(|q| q.rsplit_once(','))
        {
            out.push(Query {
                origin,
                kind: QueryKind::LabelValues {
                    selector: selector.trim().to_owned(),
                    label: label.trim().to_owned(),
                },
            });
        }
    }
    out
}

/// Replaces `$name`, `${name}` and `${name:format}` with `vars[name]` (longest names first, so
/// `$pipeline` never eats `$pipe`). Unknown variables are left as they are.
pub fn interpolate(text: &str, vars: &BTreeMap<&str, String>) -> String {
    let mut names: Vec<&&str> = vars.keys().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let mut out = text.to_owned();
    for name in names {
        let value = &vars[*name];
        // ${name:format}: the format is applied by the caller when building the value.
        while let Some(start) = out.find(&format!("${{{name}:")) {
            let Some(end) = out[start..].find('}') else {
                break;
            };
            out.replace_range(start..start + end + 1, value);
        }
        out = out.replace(&format!("${{{name}}}"), value);
        out = out.replace(&format!("${name}"), value);
    }
    out
}

/// Values quoted the way `${var:singlequote}` formats a multi-value variable: `'a','b'`.
pub fn singlequote(values: &[String]) -> String {
    values
        .iter()
        .map(|v| format!("'{}'", v.replace('\'', "\\'")))
        .collect::<Vec<_>>()
        .join(",")
}

/// The time range and interval of one panel refresh.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    pub from_ms: i64,
    pub to_ms: i64,
    pub interval_ms: i64,
}

#[derive(Debug, PartialEq, thiserror::Error)]
pub enum MacroError {
    #[error("macro {macro_name} expects {expected} argument(s), got {got}: {sql}")]
    Arguments {
        macro_name: String,
        expected: usize,
        got: usize,
        sql: String,
    },
    #[error("unclosed argument list of macro {macro_name}: {sql}")]
    Unclosed { macro_name: String, sql: String },
    #[error("unknown macro $__{macro_name}: {sql}")]
    Unknown { macro_name: String, sql: String },
}

/// Expands the grafana-clickhouse-datasource macros of `sql` for `range`.
pub fn expand_clickhouse_macros(sql: &str, range: Range) -> Result<String, MacroError> {
    let secs = |ms: i64| ms.div_euclid(1000);
    let date = |ms: i64| {
        let day = k8s_openapi::jiff::Timestamp::from_millisecond(ms)
            .map(|t| {
                t.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC)
                    .date()
                    .to_string()
            })
            .unwrap_or_default();
        format!("toDate('{day}')")
    };
    let interval_s = (range.interval_ms / 1000).max(1);
    let interval_ms = range.interval_ms.max(1);
    let mut out = String::new();
    let mut rest = sql;
    while let Some(at) = rest.find("$__") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 3..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let name = &after[..name_len];
        let mut tail = &after[name_len..];
        let mut args: Vec<String> = Vec::new();
        let takes_args = matches!(
            name,
            "timeFilter"
                | "timeFilter_ms"
                | "dateFilter"
                | "dateTimeFilter"
                | "dt"
                | "timeInterval"
                | "timeInterval_ms"
        );
        if takes_args || tail.starts_with('(') {
            let Some(open) = tail.strip_prefix('(') else {
                return Err(MacroError::Unclosed {
                    macro_name: name.to_owned(),
                    sql: sql.to_owned(),
                });
            };
            let Some(close) = open.find(')') else {
                return Err(MacroError::Unclosed {
                    macro_name: name.to_owned(),
                    sql: sql.to_owned(),
                });
            };
            args = open[..close]
                .split(',')
                .map(|a| a.trim().to_owned())
                .filter(|a| !a.is_empty())
                .collect();
            tail = &open[close + 1..];
        }
        let want = |n: usize| {
            if args.len() == n {
                Ok(())
            } else {
                Err(MacroError::Arguments {
                    macro_name: name.to_owned(),
                    expected: n,
                    got: args.len(),
                    sql: sql.to_owned(),
                })
            }
        };
        let (from, to) = (range.from_ms, range.to_ms);
        let text = match name {
            "fromTime" => format!("toDateTime({})", secs(from)),
            "toTime" => format!("toDateTime({})", secs(to)),
            "fromTime_ms" => format!("fromUnixTimestamp64Milli({from})"),
            "toTime_ms" => format!("fromUnixTimestamp64Milli({to})"),
            "interval_s" => interval_s.to_string(),
            "timeFilter" => {
                want(1)?;
                let c = &args[0];
                format!(
                    "{c} >= toDateTime({}) AND {c} <= toDateTime({})",
                    secs(from),
                    secs(to)
                )
            }
            "timeFilter_ms" => {
                want(1)?;
                let c = &args[0];
                format!(
                    "{c} >= fromUnixTimestamp64Milli({from}) AND {c} <= fromUnixTimestamp64Milli({to})"
                )
            }
            "dateFilter" => {
                want(1)?;
                let c = &args[0];
                format!("{c} >= {} AND {c} <= {}", date(from), date(to))
            }
            "dateTimeFilter" | "dt" => {
                want(2)?;
                let (d, t) = (&args[0], &args[1]);
                format!(
                    "({d} >= {} AND {d} <= {}) AND ({t} >= toDateTime({}) AND {t} <= toDateTime({}))",
                    date(from),
                    date(to),
                    secs(from),
                    secs(to)
                )
            }
            "timeInterval" => {
                want(1)?;
                format!(
                    "toStartOfInterval(toDateTime({}), INTERVAL {interval_s} second)",
                    args[0]
                )
            }
            "timeInterval_ms" => {
                want(1)?;
                format!(
                    "toStartOfInterval(toDateTime64({}, 3), INTERVAL {interval_ms} millisecond)",
                    args[0]
                )
            }
            other => {
                return Err(MacroError::Unknown {
                    macro_name: other.to_owned(),
                    sql: sql.to_owned(),
                });
            }
        };
        out.push_str(&text);
        rest = tail;
    }
    out.push_str(rest);
    Ok(out)
}

/// The metric names (`tracehouse_…`) a PromQL expression reads.
pub fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("tracehouse_") {
        let boundary = at == 0
            || !rest[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let len = rest[at..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len() - at);
        if boundary {
            names.push(rest[at..at + len].to_owned());
        }
        rest = &rest[at + len..];
    }
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RANGE: Range = Range {
        from_ms: 1_700_000_000_123,
        to_ms: 1_700_003_600_456,
        interval_ms: 15_000,
    };

    #[test]
    fn macros_expand_as_the_plugin_backend_does() {
        let sql = "SELECT $__timeInterval(Timestamp) AS t, count() / $__interval_s FROM x \
                   WHERE $__timeFilter(Timestamp) AND $__dateFilter(d) AND y >= $__fromTime \
                   AND y <= $__toTime AND z > $__fromTime_ms AND $__timeFilter_ms(w) \
                   AND $__dateTimeFilter(d, Timestamp)";
        let out = expand_clickhouse_macros(sql, RANGE).unwrap();
        assert_eq!(
            out,
            "SELECT toStartOfInterval(toDateTime(Timestamp), INTERVAL 15 second) AS t, count() / 15 FROM x \
             WHERE Timestamp >= toDateTime(1700000000) AND Timestamp <= toDateTime(1700003600) \
             AND d >= toDate('2023-11-14') AND d <= toDate('2023-11-14') AND y >= toDateTime(1700000000) \
             AND y <= toDateTime(1700003600) AND z > fromUnixTimestamp64Milli(1700000000123) \
             AND w >= fromUnixTimestamp64Milli(1700000000123) AND w <= fromUnixTimestamp64Milli(1700003600456) \
             AND (d >= toDate('2023-11-14') AND d <= toDate('2023-11-14')) AND (Timestamp >= toDateTime(1700000000) AND Timestamp <= toDateTime(1700003600))"
        );
    }

    #[test]
    fn macro_errors_name_the_macro() {
        assert!(matches!(
            expand_clickhouse_macros("WHERE $__timeFilter(a, b)", RANGE),
            Err(MacroError::Arguments {
                expected: 1,
                got: 2,
                ..
            })
        ));
        assert!(matches!(
            expand_clickhouse_macros("WHERE $__timeFilter(a", RANGE),
            Err(MacroError::Unclosed { .. })
        ));
        assert!(matches!(
            expand_clickhouse_macros("WHERE $__conditionalAll(a, $x)", RANGE),
            Err(MacroError::Unknown { .. })
        ));
    }

    #[test]
    fn variables_are_interpolated_in_every_syntax() {
        let vars = BTreeMap::from([
            ("pipe", "P".to_owned()),
            ("pipeline", ".*".to_owned()),
            ("service", "'a','b'".to_owned()),
        ]);
        assert_eq!(
            interpolate(
                r#"x{pipeline=~"$pipeline"} ${pipe} IN (${service:singlequote}) $unknown"#,
                &vars
            ),
            r#"x{pipeline=~".*"} P IN ('a','b') $unknown"#
        );
        assert_eq!(singlequote(&["a".into(), "o'b".into()]), r"'a','o\'b'");
    }

    #[test]
    fn queries_come_from_rows_panels_and_clickhouse_variables() {
        let d = json!({
            "panels": [
                {"type": "row", "title": "R", "panels": [
                    {"title": "Nested", "targets": [{"refId": "A", "expr": "up"}]}
                ]},
                {"title": "Top", "targets": [{"refId": "B", "rawSql": "SELECT 1"}]}
            ],
            "templating": {"list": [
                {"type": "query", "name": "svc", "query": "SELECT 2",
                 "datasource": {"type": "grafana-clickhouse-datasource"}},
                {"type": "query", "name": "ns", "query": "label_values(up{a=~\"$x\", b=\"c\"}, namespace)",
                 "datasource": {"type": "prometheus"}},
                {"type": "textbox", "name": "t", "query": "x"}
            ]}
        });
        let q = queries(&d);
        assert_eq!(
            q,
            [
                Query {
                    origin: "Nested / A".into(),
                    kind: QueryKind::PromQL("up".into())
                },
                Query {
                    origin: "Top / B".into(),
                    kind: QueryKind::Sql("SELECT 1".into())
                },
                Query {
                    origin: "variable svc".into(),
                    kind: QueryKind::Sql("SELECT 2".into())
                },
                Query {
                    origin: "variable ns".into(),
                    kind: QueryKind::LabelValues {
                        selector: r#"up{a=~"$x", b="c"}"#.into(),
                        label: "namespace".into()
                    }
                },
            ]
        );
    }

    #[test]
    fn metric_names_are_whole_identifiers() {
        assert_eq!(
            metric_names(
                "sum(rate(tracehouse_inserts_total[1m])) / on (x) my_tracehouse_x + tracehouse_a_bucket"
            ),
            ["tracehouse_a_bucket", "tracehouse_inserts_total"]
        );
    }
}
