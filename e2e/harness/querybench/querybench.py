#!/usr/bin/env python3
"""e2e/querybench — a TSBS-style query benchmark of the otel_traces table, layout by layout.

    e2e/querybench --spans N --out FILE
                   [--layouts map,map_items,map_buckets,map_trace_proj,json,json_nokeys]
                   [--iterations 20] [--cold-iterations 5] [--seed 1] [--keep]
                   [--profile release|debug] [--no-build]

On the local stack (Kafka and ClickHouse must be running: `e2e/stack up kafka clickhouse`):

1. builds the release binaries (tracehouse-collector, tracehouse-loadgen);
2. fills a fresh topic with N spans of realistic traces (ingest.py: 12 services with 6
   operations each, traces of 15..45 spans, every attribute value kind, ~5 % error spans,
   26 hours of timestamps from a pinned start, seeded);
3. for each layout (layouts.py), into a database of its own: creates the table with
   `tracehouse-collector schema apply` plus the layout's additive statements, loads the topic
   through `tracehouse-collector run`, measures the ingest (collector spans per CPU-second,
   server CPU per span, the merge, bytes on disk);
4. reads a catalog of the data (time range, sampled trace ids, attribute values, services,
   span-name tokens) and draws every query's parameters once (seeded), the same for all layouts;
5. per layout: runs every reader's query shape once and fails the run if one errors or returns
   no rows (readers.py: the Grafana plugin, HyperDX, our Traces dashboards); then each query of
   the set (queries.py) warm (one warm-up, then --iterations draws) and cold (--cold-iterations
   draws, ClickHouse's caches dropped before each), recording wall time (client side), the
   server's elapsed time and the rows and bytes it read (FORMAT JSON statistics; see client.py
   for why not system.query_log) and the CPU the engine's query threads spent
   (`system.events` UserTimeMicroseconds + SystemTimeMicroseconds read before and after each
   execution, less the cost of that read, calibrated at the start; an execution during which
   the server started other queries or merges is counted as disturbed, and the p50 is taken
   over the undisturbed ones when there are any);
6. prints the markdown tables, writes the JSON (FILE) and a PNG beside it (FILE with .png).

docs/querybench.md shows the result files kept in e2e/bench-results/: `e2e/docs` renders them
(report.markdown: date, commit, command of each).
Artifacts (logs, configs) go to $TRACEHOUSE_STATE/querybench/<run-id>/; databases and the topic
are dropped at the end unless --keep. Exit code 0 only if every layout loaded exactly N rows and
every reader query returned rows.
"""

import argparse
import json
import os
import random
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from harness.procs import BenchError, loadavg, machine, run, run_main, say, stop_all
from harness.stack import (REPO, git_revision, kafka_and_clickhouse_running, kafka_java,
                           new_run, stack_env)
from harness.querybench.catalog import read_catalog
from harness.querybench.client import TimedClient
from harness.querybench.ingest import DATA_HOURS, SERVICES, SPANS_PER_TRACE, load, produce
from harness.querybench.layouts import LAYOUTS, parse_layouts
from harness.querybench.queries import QUERIES, draw_all
from harness.querybench.readers import judge, reader_queries
from harness.querybench.report import markdown, plot
from harness.querybench.stats import summarize

# The engine's own CPU accounting of query threads, read around each execution, and the counts
# that tell whether anything else ran on the server meanwhile.
CPU_EVENTS = ("UserTimeMicroseconds", "SystemTimeMicroseconds")
OTHER_EVENTS = ("Query", "Merge")

# Caches dropped before each cold run. The OS page cache is not dropped (the machine is shared).
CACHE_DROPS = ("MARK CACHE", "UNCOMPRESSED CACHE", "INDEX MARK CACHE", "INDEX UNCOMPRESSED CACHE",
               "QUERY CONDITION CACHE", "QUERY CACHE", "MMAP CACHE", "PRIMARY INDEX CACHE",
               "TEXT INDEX HEADER CACHE", "TEXT INDEX POSTINGS CACHE", "TEXT INDEX TOKENS CACHE")


def parse_args():
    ap = argparse.ArgumentParser(prog="querybench", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spans", type=int, help="spans in the data set (the scale factor)")
    ap.add_argument("--out", help="JSON result file (a PNG is written beside it)")
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated, of: "
                    + ", ".join(LAYOUTS))
    ap.add_argument("--iterations", type=int, default=20, help="warm draws per query")
    ap.add_argument("--cold-iterations", type=int, default=5, help="cold draws per query")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--load-timeout", type=int, default=1800, help="seconds per layout load")
    ap.add_argument("--keep", action="store_true", help="keep the topic and databases")
    ap.add_argument("--no-build", action="store_true", help="use the binaries already built")
    ap.add_argument("--profile", choices=("release", "debug"), default="release",
                    help="cargo profile of the binaries (debug: smoke runs only, e2e/test has "
                         "built them already; its ingest figures mean nothing)")
    a = ap.parse_args()
    if not a.spans or not a.out:
        ap.error("--spans and --out are required")
    try:
        a.layout_list = parse_layouts(a.layouts)
    except ValueError as e:
        ap.error(str(e))
    return a


class QueryBench:
    def __init__(self, a):
        self.a = a
        self.run_id, self.dir = new_run("querybench")
        self.topic = f"qb-{self.run_id}"
        self.databases = []
        self.env = self.ch = None

    def setup(self):
        if not kafka_and_clickhouse_running():
            raise BenchError("Kafka and ClickHouse must be running: e2e/stack up kafka clickhouse")
        self.env = stack_env()
        self.ch = TimedClient(self.env["CLICKHOUSE_URL"], self.env["CLICKHOUSE_USER"],
                              self.env["CLICKHOUSE_PASSWORD"])
        self.server_version = self.ch.rows("SELECT version()")[0][0]
        profile = self.a.profile
        target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / profile
        if not self.a.no_build:
            flags = ["--release"] if profile == "release" else []
            say(f"cargo build {' '.join(flags)} -p tracehouse-collector -p tracehouse-loadgen "
                f"(log: {self.dir / 'build.log'})")
            run(["cargo", "build", *flags, "--locked", "-p", "tracehouse-collector",
                 "-p", "tracehouse-loadgen"], timeout=3600, log=self.dir / "build.log")
        self.collector, self.loadgen = target / "tracehouse-collector", target / "tracehouse-loadgen"
        for b in (self.collector, self.loadgen):
            if not os.access(b, os.X_OK):
                raise BenchError(f"{b} is not built (drop --no-build)")
        self.git = git_revision()
        self.calibrate_cpu()
        self.drops = []
        for what in CACHE_DROPS:  # keep the ones this server knows
            try:
                self.ch.execute(f"SYSTEM DROP {what}")
                self.drops.append(what)
            except BenchError:
                pass

    def server_events(self):
        """The server's CPU and query/merge counters now, or None where it has none."""
        names = ", ".join(f"'{e}'" for e in CPU_EVENTS + OTHER_EVENTS)
        got = {e: int(v) for e, v in self.ch.rows(
            f"SELECT event, value FROM system.events WHERE event IN ({names})")}
        if not all(e in got for e in CPU_EVENTS + ("Query",)):
            return None
        return got

    def calibrate_cpu(self):
        """What reading the counters itself adds: the median CPU and query count of ten
        back-to-back reads (the second read counts itself as a query)."""
        self.cpu_floor_us = self.queries_floor = None
        pairs = []
        for _ in range(10):
            e0, e1 = self.server_events(), self.server_events()
            if e0 is None or e1 is None:
                return
            pairs.append(self._delta(e0, e1))
        self.cpu_floor_us = sorted(p[0] for p in pairs)[len(pairs) // 2]
        self.queries_floor = sorted(p[1] for p in pairs)[len(pairs) // 2]

    @staticmethod
    def _delta(e0, e1):
        cpu = sum(e1[e] - e0[e] for e in CPU_EVENTS)
        return cpu, e1["Query"] - e0["Query"], e1.get("Merge", 0) - e0.get("Merge", 0)

    def drop_caches(self):
        for what in self.drops:
            self.ch.execute(f"SYSTEM DROP {what}")

    def catalog(self, layout, db):
        """What parameters are drawn from, read from the loaded data."""
        return read_catalog(self.ch, layout, db)

    def readers(self, layout, db, catalog):
        """Every reader's query shape once; the ones that errored or returned no rows."""
        shapes = reader_queries(layout, db, catalog, QUERIES)
        failures = []
        for reader, name, sqls in shapes:
            rows, error = 0, None
            try:
                rows = sum(self.ch.timed(sql)["rows"] for sql in sqls)
            except BenchError as e:
                error = str(e)
            # Every layout here is at the latest version: its lookup table is there.
            if judge(sqls, rows, error, lookup_ready=True) != "ok":
                failures.append({"reader": reader, "query": name, "error": error or "no rows"})
        return {"checked": len(shapes), "failures": failures}

    def run_query(self, q, layout, db, params):
        """One execution: the statements in order (the widening search stops at a full page)."""
        total, statements = None, 0
        e0 = self.server_events() if self.cpu_floor_us is not None else None
        for sql in q.render(layout, db, params):
            r = self.ch.timed(sql)
            statements += 1
            if total is None:
                total = r
            else:
                for k in ("ms", "server_ms", "rows_read", "bytes_read", "rows"):
                    total[k] += r[k]
            if q.name == "latest_by_name_token" and total["rows"] >= 50:
                break
        e1 = self.server_events() if e0 is not None else None
        if e1 is not None:
            cpu, queries, merges = self._delta(e0, e1)
            total["server_cpu_us"] = cpu - self.cpu_floor_us
            total["disturbed"] = queries - statements - self.queries_floor > 0 or merges > 0
        return total

    def measure(self, layout, db, params):
        out = {}
        for q in QUERIES:
            draws = params[q.name]
            self.run_query(q, layout, db, draws[-1])  # warm-up
            warm = [self.run_query(q, layout, db, p) for p in draws[:self.a.iterations]]
            cold = []
            for p in draws[:self.a.cold_iterations]:
                self.drop_caches()
                cold.append(self.run_query(q, layout, db, p))
            out[q.name] = {"warm": summarize(warm), "cold": summarize(cold)}
            w = out[q.name]["warm"]
            say(f"{layout.name}: {q.name}: warm p50 {w['p50_ms']} ms p95 {w['p95_ms']} ms, "
                f"cold p50 {out[q.name]['cold']['p50_ms']} ms, read {w['rows_read_p50']} rows")
        return out

    def cleanup(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        stop_all()
        if self.a.keep or self.ch is None:
            if self.databases:
                say(f"kept topic {self.topic} and databases {', '.join(self.databases)}")
            return
        for db in self.databases:
            try:
                self.ch.execute(f"DROP DATABASE IF EXISTS `{db}` SYNC")
            except BenchError as e:
                say(f"could not drop {db}: {e}")
        kafka_java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                   self.env["KAFKA_BROKERS"], "--delete", "--topic", self.topic)
        self.ch.close()


def main():
    a = parse_args()
    a.out = str(Path(a.out).resolve())
    os.chdir(REPO)
    b = QueryBench(a)
    names = [lay.name for lay in a.layout_list]
    say(f"run {b.run_id}: {a.spans} spans, layouts {', '.join(names)}; artifacts in {b.dir}")
    result = {"layouts": {}, "run": {}}
    t_start = time.monotonic()
    try:
        b.setup()
        say(f"producing {a.spans} spans into {b.topic}")
        produced = produce(b.loadgen, b.env, b.topic, a.spans, a.seed, b.dir)
        catalog = params = None
        for layout in a.layout_list:
            db = f"qb_{b.run_id}_{layout.name}"
            b.databases.append(db)
            say(f"{layout.name}: loading into {db}")
            ingest = load(b.collector, b.env, b.ch, layout, db, b.topic, a.spans, b.dir,
                          a.load_timeout)
            if catalog is None:
                catalog = b.catalog(layout, db)
                params = draw_all(random.Random(a.seed), catalog,
                                  max(a.iterations, a.cold_iterations))
            b.ch.reconnects = 0
            load0 = loadavg()
            readers = b.readers(layout, db, catalog)
            for f in readers["failures"]:
                say(f"{layout.name}: READER FAILED: {f['reader']} / {f['query']}: {f['error']}")
            queries = b.measure(layout, db, params)
            result["layouts"][layout.name] = {"summary": layout.summary,
                                              "attributes": layout.attributes,
                                              "keys": layout.keys, "ingest": ingest,
                                              "readers": readers, "queries": queries,
                                              "server_reconnects": b.ch.reconnects,
                                              "loadavg_1m_queries": [load0, loadavg()]}
            if b.ch.reconnects:
                say(f"{layout.name}: DISTURBED: the server went away {b.ch.reconnects} times "
                    "while its queries ran (restarted by other work?)")
            if not a.keep:  # no background merges of this layout during the next one
                b.ch.execute(f"DROP DATABASE IF EXISTS `{db}` SYNC")
    finally:
        b.cleanup()
    result["run"] = {
        "id": b.run_id,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "e2e/querybench " + " ".join(sys.argv[1:]),
        "git": b.git,
        "server_version": b.server_version,
        "machine": machine(),
        "spans": a.spans,
        "seed": a.seed,
        "profile": a.profile,
        "iterations": a.iterations,
        "cold_iterations": a.cold_iterations,
        "data": {"services": SERVICES, "mean_spans_per_trace": SPANS_PER_TRACE,
                 "hours": DATA_HOURS, "otlp_bytes": produced["bytes"],
                 "services_seen": len(catalog["services"]),
                 "span_names": len(catalog["span_names"])},
        "cache_drops_for_cold": b.drops,
        "server_cpu_read_floor_us": b.cpu_floor_us,
        "duration_seconds": round(time.monotonic() - t_start, 1),
        "queries": {q.name: {"reader": q.reader, "what": q.what, "tags": list(q.tags)}
                    for q in QUERIES},
        "notes": "wall ms measured by the client around each HTTP request (a fresh "
                 "connection each); rows/bytes read from the server's FORMAT JSON statistics "
                 "(chserver has no system.query_log); server CPU = system.events "
                 "UserTimeMicroseconds + SystemTimeMicroseconds around each execution less "
                 "the calibrated cost of reading them (the engine's query threads, not "
                 "chserver's request path); cold = ClickHouse caches dropped before "
                 "each run, not the OS page cache; tables merged with OPTIMIZE FINAL after load.",
        "artifacts": str(b.dir),
    }
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    png = Path(a.out).with_suffix(".png")
    try:
        plot(result, png)
        result["run"]["png"] = str(png)
        Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    except Exception as e:  # noqa: BLE001 - the figures stand without the picture
        say(f"could not draw {png}: {e}")
    print(markdown(result))
    print(f"\nJSON: {a.out}")
    ok = all(r["ingest"]["exact"] and not r["readers"]["failures"]
             for r in result["layouts"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    run_main(main)
