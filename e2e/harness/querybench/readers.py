"""Reader compatibility: the SQL that trace UIs send, rendered for one layout's table, so a run
can prove every reader still gets rows from every layout.

Three sources, each pure here (the runner executes them):
- the benchmark's own query set (`queries.QUERIES`: the Grafana ClickHouse plugin's and
  HyperDX's shapes), with parameters anchored on one error span (`queries.anchored`) so each
  must return rows (all but those tagged "no_rows", which ask for what the data set does not
  hold: the benchmark runs them, and fails on an error);
- the Grafana plugin's trace-by-id query for a table without the lookup table (what it sends
  when `hasTraceTimestampTable` is off), the one plugin shape the set does not time;
- every `rawSql` of our Traces dashboards (charts/tracehouse/dashboards/tracehouse-traces-<map|
  json>.json, panels and the `service` variable), with the datasource's macros expanded the way
  the plugin's backend expands them (the same rules as e2e/src/grafana.rs) and the variables
  set to the database, table, every service and a drawn trace id.

And how an answer is judged (`judge`): a reader works when its statements run and return
rows. A shape that reads the trace-id lookup table (`<table>_trace_id_ts`, found in its SQL)
can only work where that table exists and its view filled it while the rows arrived; where it
does not (schema versions below 3), an error of an unknown table or an empty answer is "not
applicable", any other error still a failure. The runners say which tables have it.
"""

import json
import re

from harness import REPO
from harness.querybench.layouts import sql_str
from harness.querybench.queries import anchored

DASHBOARDS = REPO / "charts" / "tracehouse" / "dashboards"


class MacroError(ValueError):
    pass


def expand_macros(sql, from_ms, to_ms, interval_ms):
    """The grafana-clickhouse-datasource macros the Traces dashboards use."""
    secs = lambda ms: ms // 1000  # noqa: E731
    interval_s = max(interval_ms // 1000, 1)

    def one(m):
        name, arg = m.group(1), m.group(3)
        if name == "timeFilter":
            return f"{arg} >= toDateTime({secs(from_ms)}) AND {arg} <= toDateTime({secs(to_ms)})"
        if name == "timeFilter_ms":
            return (f"{arg} >= fromUnixTimestamp64Milli({from_ms}) AND "
                    f"{arg} <= fromUnixTimestamp64Milli({to_ms})")
        if name == "timeInterval":
            return f"toStartOfInterval(toDateTime({arg}), INTERVAL {interval_s} second)"
        if arg is not None:
            raise MacroError(f"macro $__{name} takes no argument in: {sql}")
        simple = {"fromTime": f"toDateTime({secs(from_ms)})", "toTime": f"toDateTime({secs(to_ms)})",
                  "fromTime_ms": f"fromUnixTimestamp64Milli({from_ms})",
                  "toTime_ms": f"fromUnixTimestamp64Milli({to_ms})", "interval_s": str(interval_s)}
        if name not in simple:
            raise MacroError(f"unknown macro $__{name} in: {sql}")
        return simple[name]

    return re.sub(r"\$__(\w+)(\(([^)]*)\))?", one, sql)


def interpolate(sql, variables):
    """`${name}` and `${name:singlequote}` (lists are joined the plugin's way)."""
    def one(m):
        name, fmt = m.group(1), m.group(2)
        if name not in variables:
            raise MacroError(f"unknown variable ${{{name}}} in: {sql}")
        v = variables[name]
        if fmt == "singlequote":
            vals = v if isinstance(v, list) else [v]
            return ",".join(f"'{sql_str(x)}'" for x in vals)
        if fmt:
            raise MacroError(f"unsupported format {fmt} in: {sql}")
        return ",".join(v) if isinstance(v, list) else str(v)
    return re.sub(r"\$\{(\w+)(?::(\w+))?\}", one, sql)


def _panels(panels):
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []))


def dashboard_queries(dashboard):
    """(title/refId, rawSql) of every ClickHouse query in a dashboard."""
    out = []
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query" and isinstance(v.get("query"), str):
            out.append((f"variable {v['name']}", v["query"]))
    for p in _panels(dashboard.get("panels", [])):
        for t in p.get("targets", []):
            if "rawSql" in t:
                out.append((f"{p.get('title')} / {t.get('refId')}", t["rawSql"]))
    return out


def dashboard_for(layout):
    path = DASHBOARDS / f"tracehouse-traces-{'json' if layout.attributes == 'json' else 'map'}.json"
    return path.name, json.loads(path.read_text())


def reader_queries(layout, db, catalog, queries):
    """[(reader, name, [sql, ...])] to run once each against the layout's table; each must
    return rows."""
    params = anchored(catalog)
    out = [(q.reader, q.name, q.render(layout, db, params[q.name])) for q in queries
           if "no_rows" not in q.tags]
    tid = catalog["anchor"]["trace_id"]
    out.append(("Grafana plugin", "trace_by_id_without_lookup_table", [
        'SELECT "TraceId" as traceID, "SpanId" as spanID, "ParentSpanId" as parentSpanID, '
        '"ServiceName" as serviceName, "SpanName" as operationName, '
        'multiply(toUnixTimestamp64Nano("Timestamp"), 0.000001) as startTime, '
        'multiply("Duration", 0.000001) as duration, '
        "if(\"StatusCode\" IN ('Error', 'STATUS_CODE_ERROR'), 2, 0) as statusCode "
        f"FROM \"{db}\".\"otel_traces\" WHERE traceID = '{sql_str(tid)}' LIMIT 1000"]))
    name, dash = dashboard_for(layout)
    to_ms = catalog["anchor"]["ts_ms"] + 30 * 60_000
    from_ms = to_ms - 3_600_000
    variables = {"database": db, "table": "otel_traces", "service": catalog["services"],
                 "trace_id": tid, "clickhouse": "clickhouse"}
    for title, raw in dashboard_queries(dash):
        sql = expand_macros(interpolate(raw, variables), from_ms, to_ms, 60_000)
        out.append((f"dashboard {name}", title, [sql]))
    return out


LOOKUP_SUFFIX = "_trace_id_ts"
UNKNOWN_TABLE = "Code: 60."


def needs_lookup(sqls):
    """Whether a shape reads the trace-id lookup table."""
    return any(f"{LOOKUP_SUFFIX}`" in sql or f'{LOOKUP_SUFFIX}"' in sql for sql in sqls)


def judge(sqls, rows, error, lookup_ready):
    """"ok", "n/a" or "fail" for one shape's answer: `rows` returned, or the server's `error`;
    `lookup_ready` whether the table has a lookup table filled by its view."""
    if error is None and rows > 0:
        return "ok"
    if needs_lookup(sqls) and not lookup_ready and (
            error is None or UNKNOWN_TABLE in error):
        return "n/a"
    return "fail"
