"""The query set of the benchmark, TSBS style: a fixed list of query types, each with parameters
drawn per run from the data set's own values (a seeded `random.Random`), rendered for a layout.

Pure: no IO. `catalog` is what the runner read from the loaded data once (time range, sampled
trace ids and attribute values, services, operations); `draw(rng, catalog)` picks one
parameter set; `render(layout, db, params)` gives the SQL statements to run, in order (more than
one only for the widening-window search, which stops at the first window that fills its page).

The shapes follow what trace UIs send. The Grafana ClickHouse plugin's are its own SQL, as its
`src/data/sqlGenerator.test.ts` expects it: trace by id through `otel_traces_trace_id_ts` and
the trace search defaults (root spans, `Duration > 0`, newest first, LIMIT 1000). HyperDX builds
its SQL from a source's expressions, so its shapes here are modelled on what it asks for, not
copied: the waterfall by `TraceId` inside a time window, a search on the implicit column
(`SpanName` for trace sources) that widens the time window until a page is full, attribute
equality and facet value lists. Besides: service and operation latency as the exporter's
README and our dashboards ask for them, and Jaeger's dependency edges (a parent/child
self-join).

The attribute-key shapes (tag "keys") are what a UI asks that the `*AttributesKeys` columns
answer: the keys a service's spans and resources carry in the last hour (a key picker or
autocomplete; HyperDX lists a column's keys with `groupUniqArrayArray` over the keys, or over
`JSONDynamicPathsWithTypes` for JSON), the keys by how many spans carry them, and the spans that
have one key. Each renders in the layout's best form (layouts.Layout.keys_of / has_key): the
keys columns where the table has them, `JSONAllPaths` or the path itself on a JSON table
without them, the map's keys subcolumn or `mapContains` on a Map table. In this data set every
span carries the same keys, so a drawn key is on every span (the skip index can skip nothing:
what evaluating the predicate costs); `spans_with_absent_key` asks for a key that no span
carries (what skipping buys at best) and so returns no rows (tag "no_rows": the reader check,
which wants rows, leaves it out).
"""

from dataclasses import dataclass, field
from typing import Callable

from harness.querybench.layouts import sql_str

HOUR_MS = 3_600_000
PAGE = 50  # rows the widening search wants before it stops
WIDENING_MS = (15 * 60_000, HOUR_MS, 6 * HOUR_MS, 24 * HOUR_MS)  # HyperDX-like steps back


@dataclass(frozen=True)
class Query:
    name: str
    reader: str  # whose shape it is
    what: str
    draw: Callable
    render: Callable
    tags: tuple = field(default=())


def _window(rng, cat, hours):
    """[from, to] in ms: `hours` long, ending at a drawn time inside the data set."""
    span = hours * HOUR_MS
    lo, hi = cat["tmin_ms"] + span, cat["tmax_ms"]
    end = rng.randint(lo, hi) if hi > lo else hi
    return end - span, end


def _t(db, table="otel_traces"):
    return f"`{db}`.`{table}`"


def _between(frm, to, col="Timestamp"):
    return (f"{col} >= fromUnixTimestamp64Milli({int(frm)}) "
            f"AND {col} <= fromUnixTimestamp64Milli({int(to)})")


def _tags(layout, col):
    # The Grafana plugin's tag list for a Map column; JSON columns are returned as they are.
    if layout.attributes == "json":
        return f'"{col}"'
    return f"arrayMap(key -> map('key', key, 'value',\"{col}\"[key]), mapKeys(\"{col}\"))"


# ---------------------------------------------------------------- the queries

def _trace_lookup(layout, db, p):
    tid = sql_str(p["trace_id"])
    return [
        f"WITH '{tid}' as trace_id, (SELECT min(Start) FROM {_t(db, 'otel_traces_trace_id_ts')} "
        "WHERE TraceId = trace_id) as trace_start, "
        f"(SELECT max(End) + 1 FROM {_t(db, 'otel_traces_trace_id_ts')} WHERE TraceId = trace_id) "
        'as trace_end SELECT "TraceId" as traceID, "SpanId" as spanID, "ParentSpanId" as '
        'parentSpanID, "ServiceName" as serviceName, "SpanName" as operationName, '
        'multiply(toUnixTimestamp64Nano("Timestamp"), 0.000001) as startTime, '
        'multiply("Duration", 0.000001) as duration, '
        f"{_tags(layout, 'SpanAttributes')} as tags, {_tags(layout, 'ResourceAttributes')} as "
        "serviceTags, if(\"StatusCode\" IN ('Error', 'STATUS_CODE_ERROR'), 2, 0) as statusCode "
        f"FROM {_t(db)} WHERE traceID = trace_id AND \"Timestamp\" >= trace_start AND "
        '"Timestamp" <= trace_end LIMIT 1000']


def _trace_window(layout, db, p):
    frm, to = p["start_ms"] - 30 * 60_000, p["start_ms"] + 30 * 60_000
    return [
        "SELECT Timestamp, TraceId, SpanId, ParentSpanId, SpanName, ServiceName, Duration, "
        f"StatusCode, SpanAttributes, ResourceAttributes FROM {_t(db)} WHERE ({_between(frm, to)}) "
        f"AND (TraceId = '{sql_str(p['trace_id'])}') ORDER BY Timestamp ASC LIMIT 10000"]


def _draw_trace(rng, cat):
    tid, start_ms = rng.choice(cat["traces"])
    return {"trace_id": tid, "start_ms": start_ms}


def _root_search(layout, db, p):
    return [
        'SELECT "TraceId" as traceID, "ServiceName" as serviceName, "SpanName" as operationName, '
        '"Timestamp" as startTime, multiply("Duration", 0.000001) as duration '
        f"FROM {_t(db)} WHERE ( {_between(p['from'], p['to'])} ) "
        f"AND ( ServiceName = '{sql_str(p['service'])}' ) AND ( ParentSpanId = '' ) "
        "AND ( Duration > 0 ) ORDER BY Timestamp DESC, Duration DESC LIMIT 1000"]


def _draw_service(hours):
    def draw(rng, cat):
        frm, to = _window(rng, cat, hours)
        return {"service": rng.choice(cat["services"]), "from": frm, "to": to}
    return draw


def _traces_grouped(layout, db, p):
    return [
        "SELECT TraceId, min(Timestamp) AS start, count() AS spans, "
        "countIf(StatusCode = 'Error') AS errors, max(Duration) / 1e6 AS longest_ms "
        f"FROM {_t(db)} WHERE {_between(p['from'], p['to'])} "
        f"AND ServiceName = '{sql_str(p['service'])}' "
        "GROUP BY TraceId ORDER BY start DESC LIMIT 20"]


def _attr_needle(layout, db, p):
    return [
        "SELECT Timestamp, TraceId, SpanId, ServiceName, SpanName, Duration "
        f"FROM {_t(db)} WHERE {_between(p['from'], p['to'])} "
        f"AND {layout.attr_equals(p['key'], p['value'])} ORDER BY Timestamp DESC LIMIT 100"]


def _draw_needle(rng, cat):
    frm, to = cat["tmin_ms"], cat["tmax_ms"]
    return {"key": "app.request.digest", "value": rng.choice(cat["digests"]), "from": frm, "to": to}


def _attr_common(layout, db, p):
    return [
        "SELECT Timestamp, TraceId, SpanId, ServiceName, SpanName, Duration "
        f"FROM {_t(db)} WHERE {_between(p['from'], p['to'])} "
        f"AND {layout.attr_equals(p['key'], p['value'])} ORDER BY Timestamp DESC LIMIT 100"]


def _draw_common(rng, cat):
    frm, to = _window(rng, cat, 6)
    return {"key": "http.response.status_code", "value": rng.choice(["503", "500", "404"]),
            "from": frm, "to": to}


def _service_overview(layout, db, p):
    return [
        "SELECT ServiceName AS service, count() AS spans, "
        "countIf(StatusCode = 'Error') / count() AS error_ratio, "
        "quantile(0.99)(Duration) / 1e6 AS p99_ms "
        f"FROM {_t(db)} WHERE {_between(p['from'], p['to'])} "
        "GROUP BY service ORDER BY spans DESC"]


def _draw_window(hours):
    def draw(rng, cat):
        frm, to = _window(rng, cat, hours)
        return {"from": frm, "to": to}
    return draw


def _op_latency(layout, db, p):
    return [
        "SELECT SpanName AS operation, count() AS spans, "
        "quantile(0.5)(Duration) / 1e6 AS p50_ms, quantile(0.99)(Duration) / 1e6 AS p99_ms "
        f"FROM {_t(db)} WHERE {_between(p['from'], p['to'])} "
        f"AND ServiceName = '{sql_str(p['service'])}' GROUP BY operation ORDER BY p99_ms DESC"]


def _errors_over_time(layout, db, p):
    return [
        "SELECT toStartOfInterval(Timestamp, INTERVAL 5 MINUTE) AS t, "
        "countIf(StatusCode = 'Error') / count() AS error_ratio, "
        "quantile(0.99)(Duration) / 1e6 AS p99_ms "
        f"FROM {_t(db)} WHERE {_between(p['from'], p['to'])} "
        f"AND ServiceName = '{sql_str(p['service'])}' GROUP BY t ORDER BY t"]


def _top_slow(layout, db, p):
    return [
        "SELECT Timestamp, TraceId, SpanId, ServiceName, SpanName, Duration / 1e6 AS duration_ms "
        f"FROM {_t(db)} WHERE {_between(p['from'], p['to'])} ORDER BY Duration DESC LIMIT 20"]


def _dependencies(layout, db, p):
    w = _between(p["from"], p["to"])
    return [
        "SELECT parent.ServiceName AS parent, child.ServiceName AS child, count() AS calls "
        f"FROM (SELECT TraceId, ParentSpanId, ServiceName FROM {_t(db)} WHERE {w}) AS child "
        f"INNER JOIN (SELECT TraceId, SpanId, ServiceName FROM {_t(db)} WHERE {w}) AS parent "
        "ON child.TraceId = parent.TraceId AND child.ParentSpanId = parent.SpanId "
        "WHERE parent.ServiceName != child.ServiceName "
        "GROUP BY parent, child ORDER BY calls DESC"]


def _widening(layout, db, p):
    out, end = [], p["to"]
    for step in WIDENING_MS:
        frm = p["to"] - step
        out.append(
            "SELECT Timestamp, ServiceName, SpanName, Duration, TraceId, StatusMessage "
            f"FROM {_t(db)} WHERE {_between(frm, end)} AND (SpanName ILIKE "
            f"'%{sql_str(p['token'])}%') AND StatusCode = 'Error' "
            f"ORDER BY Timestamp DESC LIMIT {PAGE}")
        end = frm
    return out


def _draw_token(rng, cat):
    _, to = _window(rng, cat, 24)
    return {"token": rng.choice(cat["tokens"]), "to": to}


FACET_KEYS = ("http.request.method", "http.response.status_code", "server.port", "app.cache.hit")


def _facets(layout, db, p):
    return [
        f"SELECT {layout.attr(p['key'])} AS value, count() AS spans FROM {_t(db)} "
        f"WHERE {_between(p['from'], p['to'])} GROUP BY value ORDER BY spans DESC LIMIT 20"]


def _draw_facet(rng, cat):
    frm, to = _window(rng, cat, 1)
    return {"key": rng.choice(FACET_KEYS), "from": frm, "to": to}


KEY_SCOPES = ("Span", "Resource")
# Span attribute keys every span of the data set carries (values of several kinds), the same
# name on the Map and the JSON table (no nested kvlist, which JSON splits into paths).
HAS_KEYS = ("url.full", "http.request.method", "server.port", "app.request.digest", "app.tags")
# A key spans of other instrumentations carry (telemetrygen's, loadgen's minimal shape) and no
# span of this data set does.
ABSENT_KEY = "peer.service"


def _keys_of_service(layout, db, p):
    arrays = ", ".join(f"groupUniqArrayArray(1000)({layout.keys_of(s)}) AS {s.lower()}_keys"
                       for s in KEY_SCOPES)
    return [f"SELECT {arrays} FROM {_t(db)} WHERE {_between(p['from'], p['to'])} "
            f"AND ServiceName = '{sql_str(p['service'])}'"]


def _top_keys(layout, db, p):
    return [
        f"SELECT key, count() AS spans FROM {_t(db)} ARRAY JOIN {layout.keys_of('Span')} AS key "
        f"WHERE {_between(p['from'], p['to'])} GROUP BY key ORDER BY spans DESC, key LIMIT 50"]


def _with_key(layout, db, p):
    return [
        "SELECT Timestamp, TraceId, SpanId, ServiceName, SpanName, Duration "
        f"FROM {_t(db)} WHERE {_between(p['from'], p['to'])} "
        f"AND {layout.has_key(p['key'])} ORDER BY Timestamp DESC LIMIT 100"]


def _draw_key(rng, cat):
    frm, to = _window(rng, cat, 6)
    return {"key": rng.choice(HAS_KEYS), "from": frm, "to": to}


def _draw_absent_key(rng, cat):
    frm, to = _window(rng, cat, 6)
    return {"key": ABSENT_KEY, "from": frm, "to": to}


QUERIES = [
    Query("trace_by_id", "Grafana plugin", "trace by id through otel_traces_trace_id_ts",
          _draw_trace, _trace_lookup),
    Query("trace_in_window", "HyperDX", "trace by id in a 1 h window (waterfall)",
          _draw_trace, _trace_window),
    Query("root_spans_by_service", "Grafana plugin", "root spans of a service, 1 h, newest first",
          _draw_service(1), _root_search),
    Query("traces_grouped", "Jaeger/HyperDX", "a service's traces grouped by id, 1 h",
          _draw_service(1), _traces_grouped),
    Query("attr_equals_rare", "HyperDX", "span attribute = value, one match in the day",
          _draw_needle, _attr_needle, ("attribute",)),
    Query("attr_equals_common", "HyperDX", "span attribute = value, ~9 % match, 6 h",
          _draw_common, _attr_common, ("attribute",)),
    Query("service_overview", "exporter README", "count, error ratio, p99 per service, 6 h",
          _draw_window(6), _service_overview),
    Query("operation_latency", "dashboards", "p50/p99 per operation of a service, 6 h",
          _draw_service(6), _op_latency),
    Query("errors_p99_over_time", "dashboards", "error ratio and p99 per 5 min, a service, 24 h",
          _draw_service(24), _errors_over_time),
    Query("top_slow_spans", "HyperDX", "20 slowest spans, 1 h", _draw_window(1), _top_slow),
    Query("service_dependencies", "Jaeger", "service call edges (parent/child join), 1 h",
          _draw_window(1), _dependencies),
    Query("latest_by_name_token", "HyperDX", "latest error spans whose name has a token, "
          "widening windows 15 m → 24 h", _draw_token, _widening),
    Query("facet_values", "HyperDX", "top values of an attribute, 1 h", _draw_facet, _facets,
          ("attribute",)),
    Query("keys_of_service", "HyperDX", "span and resource attribute keys of a service, 1 h "
          "(key picker)", _draw_service(1), _keys_of_service, ("keys",)),
    Query("top_span_keys", "HyperDX", "span attribute keys by spans carrying them, 1 h",
          _draw_window(1), _top_keys, ("keys",)),
    Query("spans_with_key", "HyperDX", "newest spans that have attribute key K (on every span), "
          "6 h", _draw_key, _with_key, ("keys",)),
    Query("spans_with_absent_key", "HyperDX", "newest spans that have attribute key K (on no "
          "span), 6 h", _draw_absent_key, _with_key, ("keys", "no_rows")),
]


def draw_all(rng, catalog, iterations, queries=QUERIES):
    """For each query, `iterations` parameter sets: {query name: [params, ...]}. Drawn once
    per run and used for every layout, so layouts answer the same questions."""
    return {q.name: [q.draw(rng, catalog) for _ in range(iterations)] for q in queries}


def tokens(name):
    """The words of a span name a search box would take (4 letters or more, lower case)."""
    out = []
    for w in "".join(c if c.isalpha() else " " for c in name).split():
        if len(w) >= 4 and w.lower() not in out:
            out.append(w.lower())
    return out


def anchored(catalog):
    """One parameter set per query that must find rows: every window holds the catalog's
    anchor (an error span of a multi-service trace) and every filter names its values. For the
    reader check, where an empty answer means a reader broke, not that a draw missed."""
    a = catalog["anchor"]
    ts = a["ts_ms"]
    around = {"from": ts - 30 * 60_000, "to": ts + 30 * 60_000}
    words = tokens(a["span_name"]) or [a["span_name"]]
    base = {"trace_id": a["trace_id"], "start_ms": ts, "service": a["service"], **around}
    return {
        "trace_by_id": base, "trace_in_window": base, "root_spans_by_service": {
            **base, "service": a["root_service"]},
        "traces_grouped": base,
        "attr_equals_rare": {**base, "key": "app.request.digest", "value": a["digest"]},
        "attr_equals_common": {**base, "key": "http.response.status_code", "value": a["status"]},
        "service_overview": base, "operation_latency": base, "errors_p99_over_time": base,
        "top_slow_spans": base, "service_dependencies": base,
        "latest_by_name_token": {"token": words[0], "to": ts + 60_000},
        "facet_values": {**base, "key": FACET_KEYS[0]},
        "keys_of_service": base, "top_span_keys": base,
        "spans_with_key": {**base, "key": HAS_KEYS[0]},
        "spans_with_absent_key": {**base, "key": ABSENT_KEY},
    }
