#!/usr/bin/env python3
"""e2e/format-cost — what each insert format costs the ClickHouse engine per span.

    format_cost.py --bodies DIR [--engines null,mergetree] [--repeats 5]
                   [--engine-native] [--native-block-rows 900] [--out FILE]

The engine is chdb's, in this process (no HTTP, no chserver): the CPU of one INSERT is the
process's CPU time (getrusage, user + system, every thread) around it, so it is the engine's
work alone. `DIR` is what the collector's ignored test `dump_bodies`
(collector/tests/golden_native_json.rs) writes: `<format>/<n>.bin` uncompressed insert bodies
of the JSON table (loadgen's spans, one body per batch), `insert.sql`, `table_null.sql`,
`table_mergetree.sql`, `spans.txt`. `e2e/format-cost` runs both.

Formats measured: every `<format>` directory (`rowbinary`, `native`: what the collector
writes), and with `--engine-native` two more written by the engine itself from the RowBinary
rows, in Native blocks of `--native-block-rows` rows (about the collector's 2 MiB blocks):
`native_engine` (the engine's default JSON/Dynamic serialization) and `native_engine_flat`
(`output_format_native_use_flattened_dynamic_and_json_serialization=1`).

Each case (engine × format) inserts every body into a fresh table (merges stopped on
MergeTree, so the inserts alone are measured), `--repeats` times in rotated order; the median
CPU per span (user + system, and user alone: system time also holds the machine's page
reclaim, which varies with whatever else runs) is reported with its ratio to RowBinary's. Before measuring, the rows each format
stored are compared (a hash of every column, with the JSON paths' types): a format that
stores other rows than RowBinary fails the run.
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import chdb.session

FORMAT_NAME = {"rowbinary": "RowBinary"}  # every other case is Native
FLAT = "output_format_native_use_flattened_dynamic_and_json_serialization"


def usage():
    """(user, system CPU seconds, minor page faults) of this process, every thread."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt


def clickhouse_format(case):
    return FORMAT_NAME.get(case, "Native")


class Engine:
    def __init__(self, bodies: Path, data_dir):
        self.dir = bodies
        self.tmp = tempfile.mkdtemp(prefix="format-cost-", dir=data_dir)
        self.s = chdb.session.Session(self.tmp)
        self.insert = (bodies / "insert.sql").read_text()
        self.spans = int((bodies / "spans.txt").read_text())
        self.ddl = {e: (bodies / f"table_{e}.sql").read_text() for e in ("null", "mergetree")}
        self.cases = {d.name: sorted(d.glob("*.bin")) for d in sorted(bodies.iterdir()) if d.is_dir()}
        if "rowbinary" not in self.cases:
            sys.exit(f"{bodies}: no rowbinary/ bodies (run the collector's dump_bodies test)")
        self.n = 0

    def q(self, sql, fmt="TSV"):
        return self.s.query(sql, fmt).bytes().decode()

    def create(self, db, table, engine):
        self.q(f"CREATE DATABASE IF NOT EXISTS `{db}`")
        ddl = self.ddl["mergetree" if engine == "mergetree" else "null"]
        if engine == "memory":
            ddl = ddl.replace("ENGINE = Null", "ENGINE = Memory")
        self.q(ddl.replace("{db}", db).replace("{table}", table))
        if engine == "mergetree":
            self.q(f"SYSTEM STOP MERGES `{db}`.`{table}`")

    def insert_file(self, db, table, path, fmt, settings=""):
        settings = f" SETTINGS {settings}" if settings else ""
        self.q(self.insert.replace("{db}", db).replace("{table}", table)
               + f" FROM INFILE '{path}'{settings} FORMAT {fmt}")

    def engine_native(self, block_rows):
        """Native bodies written by the engine from the RowBinary bodies, one per body, in blocks
        of `block_rows` rows, with and without the flattened JSON serialization."""
        out = {"native_engine": [], "native_engine_flat": []}
        cols = self.insert[self.insert.index("(") + 1:self.insert.rindex(")")]
        for d in out:
            (Path(self.tmp) / d).mkdir()
        for i, body in enumerate(self.cases["rowbinary"]):
            t = f"b{i:05}"
            self.create("src", t, "memory")
            self.insert_file("src", t, body, "RowBinary")
            rows = int(self.q(f"SELECT count() FROM src.{t}"))
            for d, flat in (("native_engine", 0), ("native_engine_flat", 1)):
                # One SELECT per block: a Native body is its blocks back to back.
                blocks = [self.s.query(f"SELECT {cols} FROM src.{t} LIMIT {block_rows} OFFSET {lo} "
                                       f"SETTINGS max_threads = 1, {FLAT} = {flat}", "Native").bytes()
                          for lo in range(0, rows, block_rows)]
                p = Path(self.tmp) / d / f"{i:05}.bin"
                p.write_bytes(b"".join(blocks))
                out[d].append(p)
            self.q(f"DROP TABLE src.{t}")
        self.cases.update(out)

    def digest(self, db, table):
        """(rows, a hash of every stored value and JSON type) of a table."""
        cols = self.q(f"SELECT name, type FROM system.columns WHERE database = '{db}' AND "
                      f"table = '{table}' ORDER BY position").strip().split("\n")
        exprs = []
        for line in cols:
            name, typ = line.split("\t")
            c = f"`{name}`"
            if typ == "JSON":
                exprs.append(f"toJSONString({c})")
                exprs.append(f"toString(JSONAllPathsWithTypes({c}))")
            elif typ == "Array(JSON)":
                exprs.append(f"toString(arrayMap(x -> (toJSONString(x), JSONAllPathsWithTypes(x)), {c}))")
            else:
                exprs.append(f"toString({c})")
        return self.q(f"SELECT count(), sum(cityHash64({', '.join(exprs)})) FROM `{db}`.`{table}`").strip()

    def check(self):
        """Every case stores the rows RowBinary stores."""
        digests = {}
        for case, bodies in self.cases.items():
            t = f"check_{case}"
            self.create("chk", t, "mergetree")
            for b in bodies:
                self.insert_file("chk", t, b, clickhouse_format(case))
            digests[case] = self.digest("chk", t)
        self.q("DROP DATABASE chk SYNC")
        base = digests["rowbinary"]
        for case, d in digests.items():
            mark = "same rows" if d == base else "DIFFERENT ROWS"
            print(f"  {case:<20} {d:<40} {mark}")
        return all(d == base for d in digests.values())

    def measure(self, engine, case):
        self.n += 1
        t = f"t{self.n}"
        self.create("m", t, engine)
        fmt = clickhouse_format(case)
        (u0, s0, f0), w0 = usage(), time.monotonic()
        for b in self.cases[case]:
            self.insert_file("m", t, b, fmt)
        (u1, s1, f1), wall = usage(), time.monotonic() - w0
        self.q(f"DROP TABLE m.{t} SYNC")
        return {"cpu": u1 - u0 + s1 - s0, "user": u1 - u0, "system": s1 - s0, "wall": wall,
                "minflt": f1 - f0}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bodies", type=Path, required=True, help="what dump_bodies wrote")
    ap.add_argument("--engines", default="null,mergetree", help="table engines, comma-separated")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--engine-native", action="store_true",
                    help="also Native bodies written by the engine (flattened and not)")
    ap.add_argument("--native-block-rows", type=int, default=900,
                    help="rows per block of the engine's Native bodies")
    ap.add_argument("--no-check", action="store_true", help="skip the stored-rows comparison")
    ap.add_argument("--data-dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                    help="where the engine keeps its tables (default /dev/shm: see above)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()

    e = Engine(a.bodies, a.data_dir)
    try:
        run(e, a)
    finally:
        e.s.close()
        shutil.rmtree(e.tmp, ignore_errors=True)


def run(e, a):
    print(f"engine {e.q('SELECT version()').strip()}, {e.spans} spans, "
          f"{len(e.cases['rowbinary'])} bodies per format")
    if a.engine_native:
        e.engine_native(a.native_block_rows)
    for case, bodies in e.cases.items():
        size = sum(os.path.getsize(b) for b in bodies)
        print(f"  {case:<20} {size / e.spans:8.0f} bytes per span")
    if not a.no_check:
        print("rows stored by each format:")
        if not e.check():
            sys.exit("a format stored other rows than RowBinary")

    engines = a.engines.split(",")
    cases = list(e.cases)
    results = {(g, c): [] for g in engines for c in cases}
    for r in range(a.repeats):
        order = cases[r % len(cases):] + cases[:r % len(cases)]
        for g in engines:
            for c in order:
                results[(g, c)].append(e.measure(g, c))
        print(f"  repeat {r + 1}/{a.repeats} done", flush=True)

    rows = []
    per_span = lambda v: v * 1e6 / e.spans  # noqa: E731
    print(f"\n{'engine':<10} {'format':<20} {'CPU µs/span':>12} {'vs RowBinary':>13} "
          f"{'user µs':>8} {'vs RB':>6} {'system µs':>10} {'faults/span':>12} {'wall µs':>8}")
    for g in engines:
        med = lambda c, k: statistics.median(x[k] for x in results[(g, c)])  # noqa: E731
        for c in cases:
            row = {"engine": g, "format": c, "runs": results[(g, c)]}
            for k in ("cpu", "user", "system", "wall", "minflt"):
                row[k + "_per_span"] = per_span(med(c, k)) / (1e6 if k == "minflt" else 1)
            row["rowbinary_over_this"] = med("rowbinary", "cpu") / med(c, "cpu")
            row["rowbinary_over_this_user"] = med("rowbinary", "user") / med(c, "user")
            rows.append(row)
            print(f"{g:<10} {c:<20} {row['cpu_per_span']:12.2f} {row['rowbinary_over_this']:12.2f}x "
                  f"{row['user_per_span']:8.2f} {row['rowbinary_over_this_user']:5.2f}x "
                  f"{row['system_per_span']:10.2f} {row['minflt_per_span']:12.2f} {row['wall_per_span']:8.2f}")
    if a.out:
        a.out.write_text(json.dumps({"spans": e.spans, "repeats": a.repeats, "cases": rows}, indent=1))


if __name__ == "__main__":
    main()
