#!/usr/bin/env python3
"""e2e/column-cost — what each column group and each INSERT costs the ClickHouse server.

    e2e/column-cost --out FILE [--spans 20000] [--span-profile full|light|minimal]
                    [--attributes json|map] [--rows-per-insert 5000]
                    [--batch-sizes all,5000,1000,100] [--repeats 3] [--no-build]
                    [--collector-bin PATH]

The same rows, inserted again and again into the otel_traces table through chserver, with the
server's CPU measured around each set of inserts — the measure e2e/bench calls "ClickHouse
server CPU per span" (utime+stime of the chserver process, /proc/<pid>/stat), on a chserver of
the run's own (bench --own-clickhouse), so nothing else the machine runs is in it:

1. the rows: `tracehouse-loadgen produce` pre-fills a topic with N spans of the profile and
   tracehouse-collector moves them into ClickHouse, as e2e/bench does; the table is copied
   with a row number (`src`), and each insert body below is read back from it as RowBinary
   (the format tracehouse and Rotel send; uncompressed, so no decompression is in the figures);
2. the cases, each into a database of its own made from `tracehouse-collector schema print`
   (the table, its trace-id view and table, the deduplication window), merges stopped, so what
   is measured is the inserts alone, N rows each time:
   a. every column the collector fills, `--rows-per-insert` rows per INSERT;
   b. the same with one heavy column group left to its default (not in the INSERT's column
      list): the attribute key arrays, span attributes, resource attributes, events, links, all
      of those; and every column without the trace-id materialized view;
   c. every column in fewer bigger or more smaller INSERTs (`--batch-sizes`), with the parts
      each made and, after the inserts, what merging them into one part cost (OPTIMIZE FINAL);
3. each case `--repeats` times; the median is reported, with the server's idle CPU over the
   same time taken off (measured before the cases). From the batch sizes a least-squares fit
   of CPU = a·INSERTs + b·rows gives the fixed cost of one INSERT and the cost of one row. The
   fixed cost includes chserver's own handling of a request (Python, the HTTP front over the
   embedded engine), which a ClickHouse server does in C++: it is an upper bound for one. The
   floor beside it: one-row INSERTs into a one-column MergeTree, the same number as the most
   INSERTs of a batch case, through the same path.

Writes a JSON report ({"cases": [...], "fit": {...}, "run": {...}}) and prints a table. Within
a couple of minutes at the defaults. The chserver, topic and databases are removed at the end.
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlencode, urlsplit

from harness.bench.bench import Bench, POLL
from harness.bench.cost import least_squares_2
from harness.bench.options import SPAN_PROFILES
from harness.procs import BenchError, machine, proc_cpu_seconds, run, run_main, say, stop
from harness.bench.report import column_cost_table
from harness.stack import REPO, free_port

# Column groups a collector may leave to the server's defaults; a name ending in "." is a
# Nested group (every subcolumn).
GROUPS = {
    "attribute key arrays": ["ResourceAttributesKeys", "SpanAttributesKeys"],
    "span attributes": ["SpanAttributes", "SpanAttributesKeys"],
    "resource attributes": ["ResourceAttributes", "ResourceAttributesKeys"],
    "events": ["Events."],
    "links": ["Links."],
}
ALL_HEAVY = "all of these groups"


# ---------------------------------------------------------------- pure parts

def variant_columns(columns, left_out):
    """`columns` without those `left_out` names (a name ending in "." takes its subcolumns)."""
    def out(name):
        return any(name == x or (x.endswith(".") and name.startswith(x)) for x in left_out)
    return [c for c in columns if not out(c)]


def cuts(n, rows_per_insert):
    """[(first row, end)] of INSERTs of `rows_per_insert` rows (None: one INSERT) over n rows."""
    step = n if not rows_per_insert else max(1, min(rows_per_insert, n))
    return [(lo, min(lo + step, n)) for lo in range(0, n, step)]


def fit_per_insert(points):
    """cpu = a·inserts + b·rows over (inserts, rows, cpu_seconds) points:
    {"per_insert_us", "per_row_us"}, or None when the points cannot separate the two."""
    fit = least_squares_2(points)
    if fit is None:
        return None
    a, b = fit
    return {"per_insert_us": round(a * 1e6, 1), "per_row_us": round(b * 1e6, 3)}


def schema_statements(ddl, db):
    """`tracehouse-collector schema print` SQL as statements for database `db` (comments off)."""
    body = "\n".join(ln for ln in ddl.splitlines() if not ln.lstrip().startswith("--"))
    out = []
    for stmt in body.split(";"):
        stmt = stmt.strip()
        if stmt:
            out.append(stmt.replace("`x`.", f"`{db}`.").replace("DATABASE IF NOT EXISTS `x`",
                                                                 f"DATABASE IF NOT EXISTS `{db}`"))
    return out


# ---------------------------------------------------------------- the measurement

class Server:
    """chserver over one keep-alive HTTP connection, and the CPU its process has used."""

    def __init__(self, env, pid):
        u = urlsplit(env["CLICKHOUSE_URL"])
        self.host, self.port = u.hostname, u.port
        self.headers = {"X-ClickHouse-User": env["CLICKHOUSE_USER"],
                        "X-ClickHouse-Key": env["CLICKHOUSE_PASSWORD"]}
        self.pid = pid
        self.conn = None

    def cpu(self):
        return proc_cpu_seconds(self.pid)

    def post(self, body, **params):
        for attempt in (1, 2):  # a keep-alive connection the server closed: once more
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
            try:
                self.conn.request("POST", "/?" + urlencode(params), body=body, headers=self.headers)
                r = self.conn.getresponse()
                data = r.read()
            except (http.client.HTTPException, OSError) as e:
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise BenchError(f"chserver: {e}")
                continue
            if r.status != 200:
                raise BenchError(f"chserver: HTTP {r.status}: {data[:300].decode(errors='replace')}")
            return data

    def query(self, sql):
        return self.post(sql.encode()).decode()


class ColumnCost:
    def __init__(self, a):
        self.a = a
        # The bench's setup, reused: own chserver, binaries, a pre-filled topic, a collector.
        self.bench = Bench(SimpleNamespace(
            spans=a.spans, rate=None, duration=None, linger_ms=None, no_attribute_keys=False,
            tracehouse_compression="lz4",
            collector_bin=a.collector_bin, no_build=a.no_build, out=a.out, engine="merge-tree",
            attributes=a.attributes, partitions=8, partitions_sweep=None, own_clickhouse=True,
            span_profile=a.span_profile, legs=["tracehouse"], timeout=300 + a.spans / 1000,
            stall=120, keep=False, stop_stack=False, otelcol_config=None,
            collector_bin_alt=None, alt_config=None, alt_config_text="", processing=None,
            processing_text=None))
        self.server = None
        self.cases = []
        self.n = 0

    def fill(self):
        """N spans through Kafka and tracehouse-collector into a table, copied with row numbers."""
        b = self.bench
        b.produce()
        db, _, _ = b.prepare_database("source")
        group = f"colcost-{b.run_id}"
        p = b.start_tracehouse(db, group, free_port())
        deadline = time.monotonic() + b.args.timeout
        try:
            while b.ch.count(f"`{db}`.otel_traces") < self.a.spans:
                if p.poll() is not None or time.monotonic() > deadline:
                    raise BenchError(f"the collector did not fill {db} (log: {b.dir})")
                time.sleep(POLL)
        finally:
            stop(p)
        self.src_db = db
        b.ch.query(f"CREATE TABLE `{db}`.src ENGINE = MergeTree ORDER BY _row AS "
                   f"SELECT rowNumberInAllBlocks() AS _row, * FROM `{db}`.otel_traces", timeout=300)
        self.n = b.ch.count(f"`{db}`.src")
        self.columns = [c for c in b.ch.query(
            f"SELECT name FROM system.columns WHERE database = '{db}' AND table = 'otel_traces' "
            "ORDER BY position FORMAT TSV").split("\n") if c]
        say(f"{self.n} rows of {len(self.columns)} columns to insert, case after case")

    def bodies(self, columns, rows_per_insert):
        cols = ", ".join(f"`{c}`" for c in columns)
        return [self.server.post(f"SELECT {cols} FROM `{self.src_db}`.src WHERE _row >= {lo} AND "
                                 f"_row < {hi} ORDER BY _row FORMAT RowBinary".encode())
                for lo, hi in cuts(self.n, rows_per_insert)]

    def idle_rate(self, seconds=3.0):
        c0, t0 = self.server.cpu(), time.monotonic()
        time.sleep(seconds)
        return (self.server.cpu() - c0) / (time.monotonic() - t0)

    def one(self, k, columns, bodies, with_view=True, merge=False):
        """One measurement into a fresh database: {"cpu_s", "parts", "merge_cpu_s"}."""
        db = f"colcost_{self.bench.run_id}_{k}"
        for sql in schema_statements(self.ddl, db):
            self.server.query(sql)
        try:
            if not with_view:
                self.server.query(f"DROP VIEW `{db}`.otel_traces_trace_id_ts_mv")
            self.server.query(f"SYSTEM STOP MERGES `{db}`.otel_traces")
            self.server.query(f"SYSTEM STOP MERGES `{db}`.otel_traces_trace_id_ts")
            cols = ", ".join(f"`{c}`" for c in columns)
            stmt = f"INSERT INTO `{db}`.otel_traces ({cols}) FORMAT RowBinary"
            c0, t0 = self.server.cpu(), time.monotonic()
            for body in bodies:
                self.server.post(body, query=stmt)
            c1, t1 = self.server.cpu(), time.monotonic()
            out = {"cpu_s": c1 - c0 - self.idle * (t1 - t0),
                   "parts": int(self.server.query(
                       f"SELECT count() FROM system.parts WHERE database = '{db}' AND "
                       "table = 'otel_traces' AND active"))}
            if merge:
                self.server.query(f"SYSTEM START MERGES `{db}`.otel_traces")
                c0, t0 = self.server.cpu(), time.monotonic()
                self.server.query(f"OPTIMIZE TABLE `{db}`.otel_traces FINAL")
                c1, t1 = self.server.cpu(), time.monotonic()
                out["merge_cpu_s"] = c1 - c0 - self.idle * (t1 - t0)
            return out
        finally:
            self.server.query(f"DROP DATABASE IF EXISTS `{db}` SYNC")

    def floor(self, inserts):
        """CPU of `inserts` one-row INSERTs into a one-column MergeTree, through the same path:
        what any INSERT costs here, whatever its table (chserver's request handling, a part)."""
        db = f"colcost_{self.bench.run_id}_floor"
        self.server.query(f"CREATE DATABASE `{db}`")
        try:
            self.server.query(f"CREATE TABLE `{db}`.t (a UInt8) ENGINE = MergeTree ORDER BY tuple()")
            self.server.query(f"SYSTEM STOP MERGES `{db}`.t")
            runs = []
            for r in range(self.a.repeats):
                c0, t0 = self.server.cpu(), time.monotonic()
                for _ in range(inserts):
                    self.server.post(b"\x01", query=f"INSERT INTO `{db}`.t (a) FORMAT RowBinary")
                c1, t1 = self.server.cpu(), time.monotonic()
                runs.append(c1 - c0 - self.idle * (t1 - t0))
        finally:
            self.server.query(f"DROP DATABASE IF EXISTS `{db}` SYNC")
        out = {"inserts": inserts, "cpu_seconds_runs": [round(x, 3) for x in runs],
               "per_insert_us": round(statistics.median(runs) / inserts * 1e6, 1)}
        say(f"floor: a one-row INSERT into a one-column table costs {out['per_insert_us']} µs")
        return out

    def case(self, name, columns, rows_per_insert, with_view=True, merge=False):
        bodies = self.bodies(columns, rows_per_insert)
        runs = [self.one(f"{len(self.cases)}_{r}", columns, bodies, with_view, merge)
                for r in range(self.a.repeats)]
        cpu = statistics.median(r["cpu_s"] for r in runs)
        c = {"case": name, "columns": len(columns), "rows_per_insert": rows_per_insert or self.n,
             "inserts": len(bodies), "rows": self.n, "body_bytes": sum(map(len, bodies)),
             "parts": runs[0]["parts"], "cpu_seconds_runs": [round(r["cpu_s"], 3) for r in runs],
             "cpu_us_per_span": round(cpu / self.n * 1e6, 2), "trace_id_view": with_view}
        if merge:
            c["merge_cpu_us_per_span"] = round(
                statistics.median(r["merge_cpu_s"] for r in runs) / self.n * 1e6, 2)
        say(f"{name}, {c['rows_per_insert']} rows per INSERT: {c['cpu_us_per_span']} µs per span "
            f"(runs {c['cpu_seconds_runs']} s)")
        self.cases.append(c)
        return c

    def run(self):
        a, b = self.a, self.bench
        b.ensure_stack()
        b.build()
        self.ddl = run([str(b.collector), "schema", "print", "--database", "x", "--engine",
                        "merge-tree", "--attributes", a.attributes], timeout=60).stdout.decode()
        self.server = Server(b.env, b._stack_pid("clickhouse"))
        self.fill()
        self.idle = self.idle_rate()
        say(f"the server's idle CPU: {self.idle * 1000:.1f} ms per second (taken off)")
        every = self.columns
        self.case("every column", every, a.rows_per_insert)
        for name, group in GROUPS.items():
            self.case(f"without {name}", variant_columns(every, group), a.rows_per_insert)
        heavy = [c for g in GROUPS.values() for c in g]
        self.case(f"without {ALL_HEAVY}", variant_columns(every, heavy), a.rows_per_insert)
        self.case("every column, no trace-id view", every, a.rows_per_insert, with_view=False)
        batch = []
        for size in a.batch_sizes:
            c = self.case("every column", every, size, merge=True)
            batch.append((c["inserts"], c["rows"],
                          statistics.median(c["cpu_seconds_runs"])))
        self.floor_result = self.floor(max(c for c, _, _ in batch))
        return fit_per_insert(batch)


def parse(argv=None):
    ap = argparse.ArgumentParser(prog="column-cost", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON report file")
    ap.add_argument("--spans", type=int, default=20000)
    ap.add_argument("--span-profile", choices=sorted(SPAN_PROFILES), default="full")
    ap.add_argument("--attributes", choices=["json", "map"], default="json")
    ap.add_argument("--rows-per-insert", type=int, default=5000,
                    help="rows per INSERT of the column cases (default 5000)")
    ap.add_argument("--batch-sizes", default="all,5000,1000,100",
                    help="rows per INSERT of the batch cases, `all` for one INSERT")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-build", action="store_true",
                    help="use the release binaries already built (as e2e/bench --no-build)")
    ap.add_argument("--collector-bin")
    a = ap.parse_args(argv)
    try:
        a.batch_sizes = [None if x.strip() == "all" else int(x)
                         for x in a.batch_sizes.split(",") if x.strip()]
    except ValueError:
        ap.error("--batch-sizes: comma-separated row counts or `all`")
    if a.spans <= 0 or a.repeats <= 0 or a.rows_per_insert <= 0 \
            or any(x is not None and x <= 0 for x in a.batch_sizes):
        ap.error("--spans, --repeats, --rows-per-insert and --batch-sizes must be positive")
    return a


def main():
    a = parse()
    a.out = str(Path(a.out).resolve())
    os.chdir(REPO)
    cc = ColumnCost(a)
    say(f"run {cc.bench.run_id}: {a.spans} {a.span_profile} spans, {a.attributes} attributes; "
        f"artifacts in {cc.bench.dir}")
    try:
        fit = cc.run()
    finally:
        cc.bench.cleanup()
    b = cc.bench
    result = {"cases": cc.cases, "fit": fit, "floor": getattr(cc, "floor_result", None), "run": {
        "id": b.run_id, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(), "command": "e2e/column-cost " + " ".join(sys.argv[1:]),
        "git": b.git, "prebuilt_binaries": b.prebuilt, "spans": cc.n,
        "span_profile": a.span_profile, "attributes": a.attributes, "repeats": a.repeats,
        "server_idle_cpu_ms_per_s": round(cc.idle * 1000, 2),
        "notes": "server CPU: utime+stime of a chserver of the run's own around each case's "
                 "INSERTs (RowBinary, uncompressed, one keep-alive connection), merges stopped, "
                 "the idle CPU over the same time taken off; median of the repeats. A column "
                 "left out is left to its default. merge: OPTIMIZE TABLE FINAL of the case's "
                 "parts after the inserts. The fixed cost of an INSERT includes chserver's "
                 "Python request handling.",
        "artifacts": str(b.dir)}}
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{cc.n:,} {a.span_profile} spans, {a.attributes} attributes — "
          f"{result['run']['date']}\n")
    print(column_cost_table(result))
    print(f"\nJSON: {a.out}")
    return 0


if __name__ == "__main__":
    run_main(main)
