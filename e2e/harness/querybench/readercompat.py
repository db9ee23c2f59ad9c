#!/usr/bin/env python3
"""e2e/querybench compat — every reader's queries against every schema version, so a migration
can never silently break a reader.

    e2e/querybench compat [--spans 600] [--jobs 4] [--profile debug|release] [--no-build]
                          [--keep] [--out FILE]

On the local stack (Kafka and ClickHouse running), in about a minute:

1. reads the migration list from the binary (`tracehouse-collector schema print`, whose
   `-- 0001 create_traces_table` lines come from collector/schema/src/migrations.rs), so the
   versions are listed in one place only;
2. fills a fresh topic once with --spans seeded spans (the benchmark's data set, ingest.produce);
3. per case, in a database of its own (cases(): the Map and the JSON variant the operator
   creates, each at every version k = 1..latest, plus the tables of opentelemetry-collector-
   contrib PR #50878 adopted; the latest JSON table without its keys columns,
   `--no-attribute-keys`, read with the shapes of layout json_nokeys), --jobs at a time:
   - `tracehouse-collector schema apply --up-to k` (the latest without --up-to, as the operator
     applies it), or, for the adopted case, the PR's DDL (collector/schema/tests/fixtures/
     pr50878_map.sql, the same the schema crate's adoption test runs) and then `schema apply`,
     which adopts it; for the opt-in layouts (migrations `schema print` marks "opt-in layout …:
     not asked for"), the latest Map table and then `schema apply` again with the layout
     asked for (`--attribute-items`, `--map-serialization buckets`: the library call the
     operator makes for `spec.clickhouse.schema.layouts`), one case per layout and
     one with both, their tables merged (OPTIMIZE FINAL) after the load: bucketed Maps exist
     in merged parts only;
   - notes whether the trace-id lookup table and its view are there, then loads the topic with
     `tracehouse-collector run` until every span is a row;
   - runs every reader's query shape once (readers.reader_queries: the Grafana plugin's and
     HyperDX's shapes, our Traces dashboards' rawSql with the macros expanded), for the adopted
     PR #50878 table also the shapes tuned for its `*AttributeItems` columns (layout map_items);
4. judges every answer (readers.judge) and prints the matrix. Exit 0 only if no answer failed,
   every load was exact, and nothing was "n/a" at the latest version or on the adopted table.
   "n/a" is a shape that reads the lookup table where the version does not have it (below 3).

Why here, in Python, and not as a Rust test of the schema crate: the readers' SQL is rendered in
one place, readers.py (with the dashboards' macros and the layouts' attribute expressions), and
the query benchmark runs it already; a Rust test would need a second copy of that SQL in another
language, which is exactly how the two would drift. What the Rust side owns is used as is: the
migrations through the CLI (`schema apply --up-to`, the same `apply` the operator calls) and the
rows through the real collector, reading the same Kafka records a pipeline reads.

Artifacts (logs, configs, the JSON with every answer) go to
$TRACEHOUSE_STATE/readercompat/<run-id>/; the databases and the topic are dropped at the end
unless --keep.
"""

import argparse
import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.procs import BenchError, run, run_main, say, stop_all
from harness.stack import REPO, kafka_and_clickhouse_running, kafka_java, new_run, stack_env
from harness.querybench.catalog import read_catalog
from harness.querybench.client import TimedClient
from harness.querybench.ingest import apply_schema, fill, produce
from harness.querybench.layouts import LAYOUTS
from harness.querybench.queries import QUERIES
from harness.querybench.readers import LOOKUP_SUFFIX, judge, reader_queries

PR50878_DDL = REPO / "collector" / "schema" / "tests" / "fixtures" / "pr50878_map.sql"


@dataclass(frozen=True)
class Case:
    name: str
    attributes: str  # `schema apply --attributes`, the collector's `attributes`
    up_to: int = None  # `schema apply --up-to`; None: every migration, as the operator applies
    version: int = None  # the version the table is at when the rows arrive
    fixture: Path = None  # DDL run before `schema apply` (tables to adopt)
    read_as: tuple = ("map",)  # the layouts whose reader shapes run
    opt_in: tuple = ()  # `schema apply` flags of the opt-in layouts, applied after the table
    keys: bool = True  # JSON: the *AttributesKeys columns (False: --no-attribute-keys)


# ---------------------------------------------------------------- pure core

def migration_versions(schema_print):
    """[(version, name)] from `tracehouse-collector schema print`."""
    found = [(int(v), n) for v, n in re.findall(r"^-- (\d{4}) (\w+)", schema_print, re.M)]
    if not found or [v for v, _ in found] != list(range(1, len(found) + 1)):
        raise BenchError(f"no contiguous migration list in `schema print`: {found}")
    return found


def opt_in_versions(schema_print):
    """{version: layout option} of the opt-in migrations, which `schema print` (default
    options) marks `(opt-in layout <option>: not asked for)`."""
    return {int(v): o for v, o in re.findall(
        r"^-- (\d{4}) \w+ \(opt-in layout (\S+): not asked for\)", schema_print, re.M)}


# The `schema apply` flags per layout option, and the reader shapes each layout is for
# (layouts.py): the item columns serve the map_items shapes.
OPT_IN_FLAGS = {"attribute_items": ("--attribute-items",),
                "map_serialization=Buckets": ("--map-serialization", "buckets")}
OPT_IN_READ_AS = {"attribute_items": ("map", "map_items"),
                  "map_serialization=Buckets": ("map",)}


def cases(versions, opt_in=None):
    """Every variant the operator creates at every version (an opt-in version is not a table
    of its own: not asked for, it is recorded and changes nothing), the latest JSON table
    without the keys columns (`attributeKeysColumns: false`), the latest Map table with each
    opt-in layout and with all of them, and PR #50878's tables adopted."""
    opt_in = opt_in or {}
    latest = versions[-1][0]
    plain = [v for v, _ in versions if v not in opt_in]
    out = []
    for attributes in ("map", "json"):
        for v in plain:
            # The last plain version is applied as the operator applies it: everything, the
            # opt-in migrations recorded as not asked for.
            whole = v == plain[-1]
            at = latest if whole else v
            out.append(Case(f"{attributes}_v{at}", attributes, None if whole else v, at,
                            read_as=(attributes,)))
    out.append(Case(f"json_v{latest}_no_keys", "json", None, latest, read_as=("json_nokeys",),
                    keys=False))
    for v, option in sorted(opt_in.items()):
        out.append(Case(f"map_v{latest}_{option.split('=')[0]}", "map", None, latest,
                        read_as=OPT_IN_READ_AS[option], opt_in=OPT_IN_FLAGS[option]))
    if len(opt_in) > 1:
        both = tuple(f for o in sorted(opt_in.values()) for f in OPT_IN_FLAGS[o])
        read_as = tuple(dict.fromkeys(r for o in opt_in.values() for r in OPT_IN_READ_AS[o]))
        out.append(Case(f"map_v{latest}_all_layouts", "map", None, latest, read_as=read_as,
                        opt_in=both))
    out.append(Case("map_pr50878_adopted", "map", None, latest, PR50878_DDL,
                    read_as=("map", "map_items")))
    return out


def fixture_statements(text, db):
    """The statements of a fixture file (`;` at a line's end ends one; `--` lines dropped)."""
    out = []
    for chunk in text.split(";\n"):
        sql = "\n".join(line for line in chunk.splitlines() if not line.startswith("--"))
        if sql.strip():
            out.append(sql.replace("{db}", db))
    return out


def shapes_for(case, db, catalogs):
    """[(layout, reader, name, sqls)] to run for a case, each distinct statement once (the
    second layout adds only the shapes it renders differently)."""
    out, seen = [], set()
    for lay in case.read_as:
        for reader, name, sqls in reader_queries(LAYOUTS[lay], db, catalogs[lay], QUERIES):
            key = tuple(sqls)
            if key not in seen:
                seen.add(key)
                out.append((lay, reader, name, sqls))
    return out


def problems(case, latest, lookup_ready, rows, spans, answers):
    """What fails a case: a failed answer, an inexact load, or "n/a" where nothing may be."""
    out = []
    if rows != spans:
        out.append(f"{case.name}: {rows} rows, {spans} spans were loaded")
    must_all = case.version == latest or case.fixture is not None
    if must_all and not lookup_ready:
        out.append(f"{case.name}: no trace-id lookup table with its view at the latest version")
    for a in answers:
        if a["verdict"] == "fail" or (must_all and a["verdict"] == "n/a"):
            what = a["error"] or f"{a['rows']} rows"
            out.append(f"{case.name}: {a['layout']} / {a['reader']} / {a['query']}: {what}")
    return out


# ---------------------------------------------------------------- the IO shell

def run_case(case, ctx):
    """Create, load and read one case's table; its record."""
    db = f"rc_{ctx['run_id']}_{case.name}"
    ctx["databases"].append(db)
    ch, out_dir = ctx["ch"], ctx["dir"]
    t0 = time.monotonic()
    if case.fixture:
        ch.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
        for sql in fixture_statements(case.fixture.read_text(), db):
            ch.execute(sql)
    apply_schema(ctx["collector"], ctx["env"], case.attributes, db,
                 out_dir / f"{case.name}-schema.log", up_to=case.up_to,
                 extra=() if case.keys else ("--no-attribute-keys",))
    if case.opt_in:
        # As the operator does when a pipeline's spec asks for the layouts later: `apply`
        # again, now with them (the library call the operator makes).
        apply_schema(ctx["collector"], ctx["env"], case.attributes, db,
                     out_dir / f"{case.name}-layouts.log", extra=case.opt_in)
    ledger = ch.rows(f"SELECT version, mode FROM `{db}`.tracehouse_schema_migrations "
                     "WHERE version > 0 ORDER BY version")
    objects = {r[0] for r in ch.rows(f"SELECT name FROM system.tables WHERE database = '{db}'")}
    lookup_ready = {f"otel_traces{LOOKUP_SUFFIX}", f"otel_traces{LOOKUP_SUFFIX}_mv"} <= objects
    rows, load_s, _ = fill(ctx["collector"], ctx["env"], ch, case.name, case.attributes, db,
                           ctx["topic"], ctx["spans"], out_dir, timeout=120,
                           attribute_keys=case.keys)
    if case.opt_in:
        # Merged parts are where bucketed Maps live (inserted parts keep the basic
        # serialization): read those, as a table that has been running would be read.
        ch.execute(f"OPTIMIZE TABLE `{db}`.`otel_traces` FINAL")
    rows = int(ch.rows(f"SELECT count() FROM `{db}`.`otel_traces`")[0][0])
    catalogs = {lay: read_catalog(ch, LAYOUTS[lay], db, traces=False) for lay in case.read_as}
    answers = []
    for lay, reader, name, sqls in shapes_for(case, db, catalogs):
        n, error = 0, None
        try:
            n = sum(ch.timed(sql)["rows"] for sql in sqls)
        except BenchError as e:
            error = str(e)
        answers.append({"layout": lay, "reader": reader, "query": name, "rows": n,
                        "error": error, "verdict": judge(sqls, n, error, lookup_ready)})
    return {"case": case.name, "attributes": case.attributes, "version": case.version,
            "adopted_from": case.fixture.name if case.fixture else None,
            "ledger": [f"{v}:{m}" for v, m in ledger], "lookup_ready": lookup_ready,
            "rows": rows, "load_seconds": round(load_s, 1),
            "seconds": round(time.monotonic() - t0, 1), "answers": answers}


def summary_line(rec):
    count = {v: sum(a["verdict"] == v for a in rec["answers"]) for v in ("ok", "n/a", "fail")}
    na = sorted({a["query"] for a in rec["answers"] if a["verdict"] == "n/a"})
    line = (f"{rec['case']:<22} v{rec['version']} ledger {' '.join(rec['ledger'])}: "
            f"{rec['rows']} rows, {count['ok']} ok, {count['n/a']} n/a, {count['fail']} failed "
            f"({rec['seconds']} s)")
    if na:
        line += f"\n{'':<24}n/a (no lookup table yet): {', '.join(na)}"
    return line


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="querybench compat", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spans", type=int, default=600, help="spans in the data set")
    ap.add_argument("--jobs", type=int, default=4, help="cases at a time")
    ap.add_argument("--profile", choices=("release", "debug"), default="debug")
    ap.add_argument("--no-build", action="store_true", help="use the binaries already built")
    ap.add_argument("--keep", action="store_true", help="keep the topic and databases")
    ap.add_argument("--out", help="JSON with every answer (default: in the run's directory)")
    return ap.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    os.chdir(REPO)
    run_id, out_dir = new_run("readercompat")
    if not kafka_and_clickhouse_running():
        raise BenchError("Kafka and ClickHouse must be running: e2e/stack up kafka clickhouse")
    env = stack_env()
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / a.profile
    if not a.no_build:
        flags = ["--release"] if a.profile == "release" else []
        say(f"cargo build {' '.join(flags)} -p tracehouse-collector -p tracehouse-loadgen")
        run(["cargo", "build", *flags, "--locked", "-p", "tracehouse-collector",
             "-p", "tracehouse-loadgen"], timeout=3600, log=out_dir / "build.log")
    collector, loadgen = target / "tracehouse-collector", target / "tracehouse-loadgen"
    t_start = time.monotonic()  # the check's own time, the build left out
    printed = run([str(collector), "schema", "print"], timeout=60).stdout.decode()
    versions = migration_versions(printed)
    latest = versions[-1][0]
    todo = cases(versions, opt_in_versions(printed))
    ctx = {"run_id": run_id, "dir": out_dir, "env": env, "collector": collector,
           "spans": a.spans, "topic": f"rc-{run_id}", "databases": [],
           "ch": TimedClient(env["CLICKHOUSE_URL"], env["CLICKHOUSE_USER"],
                             env["CLICKHOUSE_PASSWORD"])}
    say(f"run {run_id}: migrations {', '.join(f'{v} {n}' for v, n in versions)}; "
        f"{len(todo)} cases, {a.spans} spans; artifacts in {out_dir}")
    records, failed = [], []
    try:
        produce(loadgen, env, ctx["topic"], a.spans, 1, out_dir)
        with ThreadPoolExecutor(max_workers=a.jobs) as pool:
            records = list(pool.map(lambda c: run_case(c, ctx), todo))
    finally:
        stop_all()
        if a.keep:
            say(f"kept topic {ctx['topic']} and databases {', '.join(ctx['databases'])}")
        else:
            for db in ctx["databases"]:
                try:
                    ctx["ch"].execute(f"DROP DATABASE IF EXISTS `{db}` SYNC")
                except BenchError as e:
                    say(f"could not drop {db}: {e}")
            kafka_java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                       env["KAFKA_BROKERS"], "--delete", "--topic", ctx["topic"])
    for case, rec in zip(todo, records):
        print(summary_line(rec))
        failed += problems(case, latest, rec["lookup_ready"], rec["rows"], a.spans,
                           rec["answers"])
    out = Path(a.out) if a.out else out_dir / "readercompat.json"
    out.write_text(json.dumps({"run": run_id, "spans": a.spans, "versions": versions,
                               "seconds": round(time.monotonic() - t_start, 1),
                               "cases": records, "problems": failed}, indent=2) + "\n")
    for p in failed:
        say(f"READER FAILED: {p}")
    say(f"{len(todo)} cases, {sum(len(r['answers']) for r in records)} answers, "
        f"{len(failed)} problems in {time.monotonic() - t_start:.0f} s; JSON: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main, sys.argv[1:])
