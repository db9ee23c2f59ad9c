"""The Traces dashboards: the spans themselves, read from ClickHouse with the
grafana-clickhouse-datasource plugin. One dashboard per table variant (Map or JSON
attributes, `spec.clickhouse.attributes` of the TracePipeline): the queries differ only where
they read an attribute. A trace is looked up by id through the `<table>_trace_id_ts` table
(first and last second of each trace), so only its time slice of the traces table is read.

Macros used (expanded by the plugin's backend): $__timeFilter, $__timeInterval,
$__interval_s. Template variables: ${database}, ${table}, ${service:singlequote}, ${trace_id}.
"""

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.models import dashboard as models

from common import CLICKHOUSE, base, sql, stat_panel, table_panel, thresholds, ts

TABLE = "`${database}`.`${table}`"
LOOKUP = "`${database}`.`${table}_trace_id_ts`"
WHERE = "$__timeFilter(Timestamp) AND ServiceName IN (${service:singlequote})"


def attribute(variant: str, key: str) -> str:
    """A span attribute as a String, for either table variant."""
    if variant == "map":
        return f"SpanAttributes['{key}']"
    # JSON: dotted keys are nested paths; the sub-column is Dynamic, shown as text.
    return f"toString(SpanAttributes.`{key}`)"


def variables() -> list:
    return [
        dashboard.DatasourceVariable("clickhouse").label("ClickHouse").type("grafana-clickhouse-datasource"),
        dashboard.TextBoxVariable("database").label("Database").default_value("otel"),
        dashboard.TextBoxVariable("table").label("Traces table").default_value("otel_traces"),
        dashboard.QueryVariable("service")
        .label("Service")
        .datasource(CLICKHOUSE)
        .query(f"SELECT DISTINCT ServiceName FROM {TABLE} WHERE $__timeFilter(Timestamp) ORDER BY ServiceName")
        .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .current(models.VariableOption(selected=True, text="All", value="$__all")),
        dashboard.TextBoxVariable("trace_id").label("Trace id"),
    ]


def build(variant: str) -> dashboard.Dashboard:
    label = {"map": "Map", "json": "JSON"}[variant]
    d = base(
        f"tracehouse / Traces ({label} attributes)",
        f"tracehouse-traces-{variant}",
        f"Spans in a tracehouse traces table with {label} attributes: service overview, slowest "
        "operations, error spans, and one trace by id.",
        ["traces", variant],
    )
    for v in variables():
        d = d.with_variable(v)

    d = d.with_row(dashboard.Row("Service overview"))
    d = d.with_panel(stat_panel(
        "Spans in range", "short",
        [sql(f"SELECT count() AS spans FROM {TABLE} WHERE {WHERE}")],
        description="Spans of the selected services in the time range.",
        datasource=CLICKHOUSE,
    ))
    d = d.with_panel(stat_panel(
        "Error ratio", "percentunit",
        [sql(f"SELECT countIf(StatusCode = 'Error') / greatest(count(), 1) AS error_ratio FROM {TABLE} WHERE {WHERE}")],
        description="Share of spans with status Error.",
        steps=thresholds((None, "green"), (0.01, "yellow"), (0.05, "red")),
        datasource=CLICKHOUSE,
    ))
    d = d.with_panel(stat_panel(
        "p99 duration", "ms",
        [sql(f"SELECT quantile(0.99)(Duration) / 1e6 AS p99_ms FROM {TABLE} WHERE {WHERE}")],
        description="99th percentile span duration.",
        steps=thresholds((None, "green"), (500, "yellow"), (2000, "red")),
        datasource=CLICKHOUSE,
    ))
    d = d.with_panel(stat_panel(
        "Services", "short",
        [sql(f"SELECT uniq(ServiceName) AS services FROM {TABLE} WHERE {WHERE}")],
        description="Distinct services seen.",
        datasource=CLICKHOUSE,
    ))
    d = d.with_panel(ts(
        "Spans /s per service", "cps",
        [sql(f"""
SELECT $__timeInterval(Timestamp) AS time, ServiceName, count() / $__interval_s AS spans_per_second
FROM {TABLE}
WHERE {WHERE}
GROUP BY time, ServiceName
ORDER BY time""", "timeseries")],
        description="Span rate per service.",
        datasource=CLICKHOUSE, w=8,
    ))
    d = d.with_panel(ts(
        "Error ratio per service", "percentunit",
        [sql(f"""
SELECT $__timeInterval(Timestamp) AS time, ServiceName, countIf(StatusCode = 'Error') / count() AS error_ratio
FROM {TABLE}
WHERE {WHERE}
GROUP BY time, ServiceName
ORDER BY time""", "timeseries")],
        description="Share of spans with status Error, per service.",
        datasource=CLICKHOUSE, w=8, steps=thresholds((None, "green"), (0.05, "red")),
    ))
    d = d.with_panel(ts(
        "Duration p50 / p95 / p99", "ms",
        [sql(f"""
SELECT $__timeInterval(Timestamp) AS time,
       quantile(0.5)(Duration) / 1e6 AS p50,
       quantile(0.95)(Duration) / 1e6 AS p95,
       quantile(0.99)(Duration) / 1e6 AS p99
FROM {TABLE}
WHERE {WHERE} AND SpanKind IN ('Server', 'Consumer')
GROUP BY time
ORDER BY time""", "timeseries")],
        description="Duration percentiles of server and consumer spans (the work a service was asked to do).",
        datasource=CLICKHOUSE, w=8,
    ))
    d = d.with_panel(table_panel(
        "Services", [sql(f"""
SELECT ServiceName AS service,
       count() AS spans,
       countIf(StatusCode = 'Error') AS errors,
       round(errors / spans, 4) AS error_ratio,
       round(quantile(0.5)(Duration) / 1e6, 2) AS p50_ms,
       round(quantile(0.99)(Duration) / 1e6, 2) AS p99_ms
FROM {TABLE}
WHERE {WHERE}
GROUP BY service
ORDER BY spans DESC""")],
        description="Rate, errors and duration per service.",
    ))

    d = d.with_row(dashboard.Row("Operations and errors"))
    d = d.with_panel(table_panel(
        "Slowest operations", [sql(f"""
SELECT ServiceName AS service, SpanName AS operation, count() AS spans,
       round(quantile(0.5)(Duration) / 1e6, 2) AS p50_ms,
       round(quantile(0.99)(Duration) / 1e6, 2) AS p99_ms,
       round(max(Duration) / 1e6, 2) AS max_ms
FROM {TABLE}
WHERE {WHERE}
GROUP BY service, operation
ORDER BY p99_ms DESC
LIMIT 20""")],
        description="Operations with the highest p99 duration.",
        w=12,
    ))
    d = d.with_panel(table_panel(
        "Error spans by HTTP status code", [sql(f"""
SELECT ServiceName AS service, {attribute(variant, 'http.response.status_code')} AS http_status_code, count() AS spans
FROM {TABLE}
WHERE {WHERE} AND StatusCode = 'Error'
GROUP BY service, http_status_code
ORDER BY spans DESC
LIMIT 20""")],
        description="Error spans grouped by the http.response.status_code attribute (empty: not an HTTP span).",
        w=12,
    ))
    d = d.with_panel(table_panel(
        "Latest error spans", [sql(f"""
SELECT Timestamp AS time, ServiceName AS service, SpanName AS operation,
       {attribute(variant, 'http.request.method')} AS http_method,
       StatusMessage AS status_message, TraceId AS trace_id, round(Duration / 1e6, 2) AS duration_ms
FROM {TABLE}
WHERE {WHERE} AND StatusCode = 'Error'
ORDER BY Timestamp DESC
LIMIT 50""")],
        description="The most recent spans with status Error; copy a trace id into the Trace id box.",
    ))

    d = d.with_row(dashboard.Row("Trace by id"))
    trace_cte = f"""
WITH '${{trace_id}}' AS trace_id,
     (SELECT min(Start) FROM {LOOKUP} WHERE TraceId = trace_id) AS trace_start,
     (SELECT max(End) + 1 FROM {LOOKUP} WHERE TraceId = trace_id) AS trace_end"""
    d = d.with_panel(
        dashboard.Panel()
        .type("traces")
        .title("Trace")
        .description("The trace in the Trace id box, read from its time slice (found in the lookup table).")
        .datasource(CLICKHOUSE)
        .span(24)
        .height(12)
        .with_target(sql(f"""{trace_cte}
SELECT TraceId AS traceID, SpanId AS spanID, ParentSpanId AS parentSpanID,
       ServiceName AS serviceName, SpanName AS operationName,
       toUnixTimestamp64Milli(Timestamp) AS startTime, Duration / 1e6 AS duration
FROM {TABLE}
WHERE TraceId = trace_id AND Timestamp >= trace_start AND Timestamp <= trace_end
ORDER BY Timestamp""", "traces"))
    )
    d = d.with_panel(table_panel(
        "Trace spans", [sql(f"""{trace_cte}
SELECT Timestamp AS time, ServiceName AS service, SpanName AS operation, SpanKind AS kind,
       SpanId AS span_id, ParentSpanId AS parent_span_id, round(Duration / 1e6, 3) AS duration_ms,
       StatusCode AS status, toString(SpanAttributes) AS attributes
FROM {TABLE}
WHERE TraceId = trace_id AND Timestamp >= trace_start AND Timestamp <= trace_end
ORDER BY Timestamp""")],
        description="Every span of the trace with its attributes.",
    ))
    return d
