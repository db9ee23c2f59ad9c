"""Loading the data set into one layout through the real collector, and what that cost.

`produce` fills a Kafka topic once per run with `tracehouse-loadgen produce` (seeded, a pinned
start time and a trace interval that spreads the spans over more than a day). `load` then, per
layout: creates the database with `tracehouse-collector schema apply`, runs the layout's
additive statements, starts `tracehouse-collector run` on the topic with a fresh consumer group,
waits until every span is a row, and measures the collector's CPU-seconds (/proc, read right
before it is stopped) and the ClickHouse server's CPU-seconds over the same interval (the server
is shared with whatever else runs on the stack: noise is possible, reported as it is). Then
`OPTIMIZE TABLE … FINAL` merges the parts (timed, server CPU measured: the merge is part of what
a layout costs — text indexes and bucketed maps are built or rewritten there) and
`system.parts` gives the bytes on disk; for a table with the `*AttributesKeys` columns, also
theirs and their bloom filters' (`keys_disk`, as e2e/bench counts the keys columns' share).
"""

import json
import os
import subprocess
import time

from harness.procs import BenchError, proc_cpu_seconds, run, say, spawn, stop
from harness.stack import STATE, free_port

# What every span carries: loadgen's "rich" shape (every attribute value kind, events, links),
# 12 services with 6 operations each, traces of 15..45 spans, ~5 % error spans (loadgen's rate).
SERVICES = 12
SPANS_PER_TRACE = 30
DATA_HOURS = 26  # "a day or more of timestamps"
START_NS = 1_793_491_200 * 10**9  # 2026-11-01T00:00:00Z: same data, byte for byte, every run


def trace_interval_ms(spans):
    traces = max(spans // SPANS_PER_TRACE, 1)
    return DATA_HOURS * 3_600_000 / traces


def produce(loadgen, env, topic, spans, seed, out_dir):
    cmd = [str(loadgen), "produce", "--brokers", env["KAFKA_BROKERS"], "--topic", topic,
           "--partitions", "4", "--spans", str(spans), "--encoding", "otlp_proto",
           "--compression", "lz4", "--seed", str(seed), "--generator-id", topic,
           "--services", str(SERVICES), "--spans-per-trace", str(SPANS_PER_TRACE),
           "--start-time-ns", str(START_NS),
           "--trace-interval-ms", f"{trace_interval_ms(spans):.3f}", "--quiet"]
    (out_dir / "produce-command.txt").write_text(" ".join(cmd) + "\n")
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=max(600, spans / 2000))
    except subprocess.TimeoutExpired:
        raise BenchError("tracehouse-loadgen produce did not finish in time") from None
    if r.returncode != 0:
        raise BenchError(f"tracehouse-loadgen produce exited with {r.returncode}: "
                         f"{r.stderr.decode(errors='replace')[-400:]}")
    produced = json.loads(r.stdout)
    if produced["spans"] != spans:
        raise BenchError(f"produced {produced['spans']} spans, asked for {spans}")
    return produced


def _stack_pid(component):
    try:
        return int((STATE / "pids" / f"{component}.pid").read_text())
    except (OSError, ValueError):
        return None


def _cpu(pid):
    try:
        return proc_cpu_seconds(pid) if pid else None
    except OSError:
        return None


def _config(env, topic, group, db, attributes, mport, attribute_keys=True):
    keys = "" if attribute_keys else "  attribute_keys: false\n"
    return (f"kafka:\n  brokers: \"{env['KAFKA_BROKERS']}\"\n  topics: [\"{topic}\"]\n"
            f"  group_id: \"{group}\"\n  encoding: otlp_proto\n"
            f"clickhouse:\n  url: \"{env['CLICKHOUSE_URL']}\"\n  database: \"{db}\"\n"
            f"  table: otel_traces\n  attributes: {attributes}\n{keys}"
            f"metrics_addr: \"127.0.0.1:{mport}\"\n")


def apply_schema(collector, env, attributes, db, log, up_to=None, extra=()):
    """`tracehouse-collector schema apply` (the library the operator calls): the database and
    the table with `attributes`, every migration or those up to version `up_to`; `extra`:
    more flags (the opt-in layouts)."""
    cmd = [str(collector), "schema", "apply", "--database", db, "--engine", "merge-tree",
           "--attributes", attributes, "--clickhouse-url", env["CLICKHOUSE_URL"],
           "--user", env["CLICKHOUSE_USER"]]
    if up_to is not None:
        cmd += ["--up-to", str(up_to)]
    run(cmd + list(extra), timeout=300, env={**os.environ, **env}, log=log)


def fill(collector, env, ch, name, attributes, db, topic, spans, out_dir, timeout,
         attribute_keys=True):
    """`tracehouse-collector run` on the topic (a fresh consumer group) into `db` until the
    table holds `spans` rows; (rows, wall seconds, collector CPU-seconds). `attribute_keys`:
    the collector fills the JSON table's keys columns (false for a table without them). Logs:
    `<name>-collector.*` in out_dir."""
    cfg = out_dir / f"{name}-collector.yaml"
    cfg.write_text(_config(env, topic, f"{db}-group", db, attributes, free_port(),
                           attribute_keys))
    log = out_dir / f"{name}-collector.log"
    t0 = time.monotonic()
    p = spawn([str(collector), "run", "--config", str(cfg)], log, env={**os.environ, **env})
    rows = 0
    try:
        deadline = t0 + timeout
        next_note = t0 + 10
        while True:
            if p.poll() is not None:
                raise BenchError(f"{name}: the collector exited with {p.returncode} (log: {log})")
            rows = int(ch.rows(f"SELECT count() FROM `{db}`.`otel_traces`")[0][0])
            if rows >= spans:
                break
            now = time.monotonic()
            if now > deadline:
                raise BenchError(f"{name}: {rows}/{spans} rows after {timeout}s (log: {log})")
            if now > next_note:
                say(f"{name}: {rows}/{spans} rows after {now - t0:.0f}s")
                next_note = now + 10
            time.sleep(0.25)
        return rows, time.monotonic() - t0, proc_cpu_seconds(p.pid)
    finally:
        stop(p)


def load(collector, env, ch, layout, db, topic, spans, out_dir, timeout):
    """Create, fill and merge one layout's table; its ingest figures."""
    apply_schema(collector, env, layout.attributes, db, out_dir / f"{layout.name}-schema.log",
                 extra=layout.schema_flags)
    for sql in layout.ddl(db):
        ch.execute(sql)
    ch_pid = _stack_pid("clickhouse")
    ch0 = _cpu(ch_pid)
    rows, wall, cpu = fill(collector, env, ch, layout.name, layout.attributes, db, topic, spans,
                           out_dir, timeout, attribute_keys=layout.attribute_keys)
    ch1 = _cpu(ch_pid)
    ingest_ch = ch1 - ch0 if ch0 is not None and ch1 is not None else None

    say(f"{layout.name}: {rows} rows in {wall:.1f}s (collector {cpu:.1f} CPU-s); merging")
    m0, t1 = _cpu(ch_pid), time.monotonic()
    ch.execute(f"OPTIMIZE TABLE `{db}`.`otel_traces` FINAL")
    ch.execute(f"OPTIMIZE TABLE `{db}`.`otel_traces_trace_id_ts` FINAL")
    merge_wall = time.monotonic() - t1
    m1 = _cpu(ch_pid)
    merge_ch = m1 - m0 if m0 is not None and m1 is not None else None
    final_rows = int(ch.rows(f"SELECT count() FROM `{db}`.`otel_traces`")[0][0])
    disk = parts(ch, db)
    main = disk.get("otel_traces", {})
    return {
        "rows": final_rows,
        "exact": final_rows == spans,
        "load_wall_seconds": round(wall, 2),
        "collector_cpu_seconds": round(cpu, 2),
        "spans_per_cpu_second": round(spans / cpu) if cpu else None,
        "server_cpu_seconds_ingest": round(ingest_ch, 2) if ingest_ch is not None else None,
        "server_cpu_us_per_span": round(ingest_ch / spans * 1e6, 2) if ingest_ch else None,
        "merge_wall_seconds": round(merge_wall, 2),
        "server_cpu_seconds_merge": round(merge_ch, 2) if merge_ch is not None else None,
        "disk": disk,
        "bytes_on_disk": sum(t["bytes_on_disk"] for t in disk.values()),
        "bytes_per_span": round(sum(t["bytes_on_disk"] for t in disk.values()) / spans, 1),
        "index_bytes": main.get("index_bytes"),
        "keys": keys_disk(ch, db) if layout.keys else None,
    }


def parts(ch, db):
    out = {}
    for table, n, rows, on_disk, data, idx in ch.rows(
            "SELECT table, count(), sum(rows), sum(bytes_on_disk), sum(data_compressed_bytes), "
            "sum(secondary_indices_compressed_bytes) FROM system.parts "
            f"WHERE database = '{db}' AND active GROUP BY table ORDER BY table"):
        out[table] = {"parts": int(n), "rows": int(rows), "bytes_on_disk": int(on_disk),
                      "data_bytes": int(data), "index_bytes": int(idx)}
    return out


KEYS_COLUMNS = ("ResourceAttributesKeys", "SpanAttributesKeys")
KEYS_INDEXES = ("idx_res_attr_keys", "idx_span_attr_keys")


def keys_disk(ch, db):
    """The keys columns' bytes in `otel_traces`: compressed data and marks per column
    (`system.parts_columns`; a compact part keeps every column in one file and counts none
    here) and their bloom-filter indexes (`system.data_skipping_indices`), with the
    uncompressed bytes a reader of the whole column reads."""
    cols = ", ".join(f"'{c}'" for c in KEYS_COLUMNS)
    idx = ", ".join(f"'{i}'" for i in KEYS_INDEXES)
    out = {"columns": {}}
    for col, data, marks, raw in ch.rows(
            "SELECT column, sum(column_data_compressed_bytes), sum(column_marks_bytes), "
            "sum(column_data_uncompressed_bytes) FROM system.parts_columns "
            f"WHERE database = '{db}' AND table = 'otel_traces' AND active AND column IN ({cols}) "
            "GROUP BY column ORDER BY column"):
        out["columns"][col] = {"bytes": int(data) + int(marks),
                               "uncompressed_bytes": int(raw)}
    out["columns_bytes"] = sum(c["bytes"] for c in out["columns"].values())
    out["index_bytes"] = int(ch.rows(
        "SELECT sum(data_compressed_bytes) + sum(marks_bytes) FROM system.data_skipping_indices "
        f"WHERE database = '{db}' AND table = 'otel_traces' AND name IN ({idx})")[0][0] or 0)
    return out
