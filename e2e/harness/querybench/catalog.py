"""What a run's query parameters are drawn from, read from one loaded table: the time range,
sampled trace ids and attribute values, services, span names and their search tokens, and the
anchor (an error span, not a root, of a trace that crosses services) the reader check's
parameters hold (queries.anchored).

Shared by the benchmark (querybench.py) and the reader check after every migration
(readercompat.py). `traces` comes from the trace-id lookup table, which tables below migration 3
do not fill: the reader check reads the catalog without it.
"""

from harness.querybench.queries import tokens


def read_catalog(ch, layout, db, traces=True):
    t = f"`{db}`.`otel_traces`"
    tmin, tmax = ch.rows(f"SELECT toUnixTimestamp64Milli(min(Timestamp)), "
                         f"toUnixTimestamp64Milli(max(Timestamp)) FROM {t}")[0]
    sampled = ch.rows(
        "SELECT TraceId, toUnixTimestamp(min(Start)) * 1000 FROM "
        f"`{db}`.`otel_traces_trace_id_ts` GROUP BY TraceId ORDER BY cityHash64(TraceId) "
        "LIMIT 500") if traces else []
    digests = [r[0] for r in ch.rows(
        f"SELECT {layout.attr('app.request.digest')} FROM {t} ORDER BY cityHash64(SpanId) "
        "LIMIT 500")]
    services = [r[0] for r in ch.rows(f"SELECT DISTINCT ServiceName FROM {t} ORDER BY 1")]
    names = [r[0] for r in ch.rows(f"SELECT DISTINCT SpanName FROM {t} ORDER BY 1")]
    words = sorted({w for n in names for w in tokens(n)})
    anchor = ch.rows(
        f"SELECT TraceId, toUnixTimestamp64Milli(Timestamp), ServiceName, SpanName, "
        f"{layout.attr('app.request.digest')}, {layout.attr('http.response.status_code')} "
        f"FROM {t} WHERE StatusCode = 'Error' AND ParentSpanId != '' AND TraceId IN "
        f"(SELECT TraceId FROM {t} GROUP BY TraceId HAVING uniq(ServiceName) > 1) "
        "ORDER BY cityHash64(SpanId) LIMIT 1")[0]
    root = ch.rows(f"SELECT ServiceName FROM {t} WHERE TraceId = '{anchor[0]}' "
                   "AND ParentSpanId = '' LIMIT 1")
    return {"tmin_ms": int(tmin), "tmax_ms": int(tmax),
            "anchor": {"trace_id": anchor[0], "ts_ms": int(anchor[1]), "service": anchor[2],
                       "span_name": anchor[3], "digest": anchor[4], "status": anchor[5],
                       "root_service": root[0][0] if root else anchor[2]},
            "traces": [(r[0], int(r[1])) for r in sampled], "digests": digests,
            "services": services, "span_names": names, "tokens": words}
