"""The IO of what a span costs (cost.py has the arithmetic): CPU readings of a process over a
window, the baseline (idle and the harness's own polling) before a leg, waiting for the parts
to settle, `system.events`, bytes on disk, OPTIMIZE … FINAL, and the calibration of chserver's
own request path. bench.py calls these around each leg.
"""

import http.client
import statistics
import time
from urllib.parse import urlencode, urlsplit

from harness.bench.cost import (KEYS_COLUMNS, KEYS_INDEXES, Settler, disk_figures, fit_insert_and_byte,
                                parse_events, parse_settle_probe, rate)
from harness.procs import BenchError, proc_cpu_seconds, say


def cpu_or_none(pid):
    try:
        return proc_cpu_seconds(pid) if pid else None
    except OSError:
        return None


def baseline(poll_once, settle_once, server_pid, broker_pid, seconds, interval):
    """CPU-seconds per second of the server and the broker: doing nothing ("server_idle"),
    while the harness polls as it does during a leg (`poll_once` every `interval` seconds:
    "server_poll", "broker_poll") and as it does while waiting for parts to settle
    (`settle_once` every second: "server_settle"). Each phase lasts `seconds`."""
    out = {"seconds": seconds}

    def phase(step, every):
        s0, k0, t0 = cpu_or_none(server_pid), cpu_or_none(broker_pid), time.monotonic()
        while time.monotonic() - t0 < seconds:
            if step:
                step()
            time.sleep(every)
        t1 = time.monotonic()
        return rate(s0, cpu_or_none(server_pid), t1 - t0), rate(k0, cpu_or_none(broker_pid), t1 - t0)

    out["server_idle"], out["broker_idle"] = phase(None, 0.5)
    out["server_poll"], out["broker_poll"] = phase(poll_once, interval)
    out["server_settle"], _ = phase(settle_once, 1.0)
    return {k: (round(v, 5) if isinstance(v, float) else v) for k, v in out.items()}


def settle_probe(db):
    """Merges running in the database, and its active parts (count, newest, highest block)."""
    return (f"SELECT (SELECT count() FROM system.merges WHERE database = '{db}'), count(), "
            f"toString(max(modification_time)), max(max_block_number) FROM system.parts "
            f"WHERE database = '{db}' AND active FORMAT TSV")


def settle(ch, db, quiet, timeout):
    """Wait until the database's parts have settled (cost.Settler); seconds waited, whether it
    settled within `timeout`, and how many probes failed."""
    s, t0, errors = Settler(quiet), time.monotonic(), 0
    while True:
        t = time.monotonic() - t0
        try:
            merges, sig = parse_settle_probe(ch.query(settle_probe(db)))
            if s.observe(t, merges, sig):
                return {"seconds": round(t, 1), "settled": True, "probe_errors": errors}
        except (BenchError, ValueError):
            errors += 1
        if t > timeout:
            return {"seconds": round(t, 1), "settled": False, "probe_errors": errors}
        time.sleep(1.0)


def events(ch):
    try:
        return parse_events(ch.query("SELECT event, value FROM system.events FORMAT TSV"))
    except (BenchError, ValueError) as e:
        say(f"system.events: {e}")
        return None


def product_tables(ch, db):
    """The tables that store data in the database (not views), as the schema made them."""
    return [t for t in ch.query(
        f"SELECT name FROM system.tables WHERE database = '{db}' AND engine NOT LIKE '%View%' "
        "ORDER BY name FORMAT TSV").split("\n") if t]


def disk(ch, db, tables, spans):
    """Bytes on disk of the product's tables after settling, and the keys columns' share."""
    names = ", ".join(f"'{t}'" for t in tables)
    by_table = {t: 0 for t in tables}
    parts = 0
    for line in ch.query(f"SELECT table, sum(bytes_on_disk), count() FROM system.parts WHERE "
                         f"database = '{db}' AND table IN ({names}) AND active GROUP BY table "
                         "FORMAT TSV").splitlines():
        t, b, n = line.split("\t")
        by_table[t] = int(b)
        if t == "otel_traces":
            parts = int(n)
    cols = ", ".join(f"'{c}'" for c in KEYS_COLUMNS)
    wide = int(ch.query(
        f"SELECT sum(bytes_on_disk) FROM system.parts WHERE database = '{db}' AND "
        f"table = 'otel_traces' AND active AND part_type = 'Wide' FORMAT TSV").strip() or 0)
    keys_cols = int(ch.query(
        f"SELECT sum(column_data_compressed_bytes) + sum(column_marks_bytes) FROM "
        f"system.parts_columns WHERE database = '{db}' AND table = 'otel_traces' AND active "
        f"AND part_type = 'Wide' AND column IN ({cols}) FORMAT TSV").strip() or 0)
    idx = ", ".join(f"'{i}'" for i in KEYS_INDEXES)
    keys_idx = int(ch.query(
        f"SELECT sum(data_compressed_bytes) + sum(marks_bytes) FROM system.data_skipping_indices "
        f"WHERE database = '{db}' AND table = 'otel_traces' AND name IN ({idx}) FORMAT TSV")
        .strip() or 0)
    return disk_figures(spans, by_table, wide, keys_cols, keys_idx, parts)


def optimize_final(ch, db, tables, server_pid):
    """OPTIMIZE TABLE … FINAL of each product table after settling: CPU and seconds."""
    c0, t0 = cpu_or_none(server_pid), time.monotonic()
    for t in tables:
        ch.query(f"OPTIMIZE TABLE `{db}`.`{t}` FINAL", timeout=1800)
    t1, c1 = time.monotonic(), cpu_or_none(server_pid)
    return {"cpu": None if c0 is None or c1 is None else c1 - c0, "seconds": t1 - t0}


# ---------------------------------------------------------------- chserver's own path

class Poster:
    """INSERT bodies over one keep-alive HTTP connection."""

    def __init__(self, env):
        u = urlsplit(env["CLICKHOUSE_URL"])
        self.host, self.port = u.hostname, u.port
        self.headers = {"X-ClickHouse-User": env["CLICKHOUSE_USER"],
                        "X-ClickHouse-Key": env["CLICKHOUSE_PASSWORD"]}
        self.conn = None

    def post(self, body, **params):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
        self.conn.request("POST", "/?" + urlencode(params), body=body, headers=self.headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise BenchError(f"chserver: HTTP {r.status}: {data[:300].decode(errors='replace')}")
        return data

    def close(self):
        if self.conn is not None:
            self.conn.close()


def _row_binary_strings(n, size):
    value = b"x" * size
    head = bytearray()
    v = size
    while True:  # LEB128 length
        b = v & 0x7F
        v >>= 7
        head.append(b | (0x80 if v else 0))
        if not v:
            break
    return (bytes(head) + value) * n


def calibrate(ch, env, server_pid, small=200, large=4, large_mib=8, rounds=3):
    """chserver's own cost per INSERT and per byte: `small` one-row INSERTs and `large` INSERTs
    of `large_mib` MiB (64 KiB strings), RowBinary, uncompressed, into a one-String-column Null
    table, on one keep-alive connection, `rounds` times; the server's idle CPU over the same
    time taken off; a least-squares fit of CPU = a·INSERTs + b·bytes over the rounds. What it
    gives is an upper bound of chserver's part: the engine's own per-query work (parsing the
    statement, building the pipeline) is in it too, and a real server does that as well."""
    db = "bench_calibration"
    ch.query(f"DROP DATABASE IF EXISTS `{db}` SYNC")
    ch.query(f"CREATE DATABASE `{db}`")
    ch.query(f"CREATE TABLE `{db}`.t (s String) ENGINE = Null")
    # The same one-row INSERTs into a MergeTree (merges stopped): the difference is what
    # writing one small part costs (used to estimate the harness's freshness view).
    ch.query(f"CREATE TABLE `{db}`.p (s String) ENGINE = MergeTree ORDER BY tuple()")
    ch.query(f"SYSTEM STOP MERGES `{db}`.p")
    poster = Poster(env)
    stmt = f"INSERT INTO `{db}`.t (s) FORMAT RowBinary"
    tiny = _row_binary_strings(1, 1)
    big = _row_binary_strings(large_mib * 16, 65536)
    try:
        t0, c0 = time.monotonic(), cpu_or_none(server_pid)
        time.sleep(3)
        idle = rate(c0, cpu_or_none(server_pid), time.monotonic() - t0) or 0.0
        points, parts = [], []
        for _ in range(rounds):
            for n, body in ((small, tiny), (large, big)):
                c0, t0 = cpu_or_none(server_pid), time.monotonic()
                for _ in range(n):
                    poster.post(body, query=stmt)
                c1, t1 = cpu_or_none(server_pid), time.monotonic()
                points.append((n, n * len(body), c1 - c0 - idle * (t1 - t0)))
            c0, t0 = cpu_or_none(server_pid), time.monotonic()
            for _ in range(small):
                poster.post(tiny, query=f"INSERT INTO `{db}`.p (s) FORMAT RowBinary")
            c1, t1 = cpu_or_none(server_pid), time.monotonic()
            parts.append((c1 - c0 - idle * (t1 - t0)) / small)
    finally:
        poster.close()
        ch.query(f"DROP DATABASE IF EXISTS `{db}` SYNC")
    fit = fit_insert_and_byte(points)
    small_us = statistics.median(c / n for n, _, c in points[0::2]) * 1e6
    out = {"points": [[n, b, round(c, 4)] for n, b, c in points], "idle_per_second": round(idle, 5),
           "small_insert_us": round(small_us, 1),
           "small_part_insert_us": round(statistics.median(parts) * 1e6, 1),
           "per_part_us": round(statistics.median(parts) * 1e6 - small_us, 1), **(fit or {"per_insert_us": None,
                                                           "per_mib_ms": None})}
    say(f"chserver's own path: {out['per_insert_us']} µs per INSERT, {out['per_mib_ms']} ms per "
        f"MiB (a one-row INSERT: {out['small_insert_us']} µs; one more small part: "
        f"{out['per_part_us']} µs)")
    return out
