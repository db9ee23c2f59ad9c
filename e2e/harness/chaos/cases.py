"""The fault matrix: one function per case. Each builds its world, puts load on it with
`tracehouse-loadgen produce`, injects its fault into real processes (collectors it started, the
runner's PRIVATE chserver and Kafka — never the shared stack's), and judges with
`tracehouse-loadgen verify` (lost, duplicated) plus the case's own promise. A case returns its
figures and raises `Failed` (with the same figures) when a promise is broken.

Figures: `lost`, `duplicated` (verify), `recover_s` (the case's time to recover, defined where
it is measured) and `peak_rss_mib` (the highest resident memory of any of its collectors).
"""

import os
import random
import re
import subprocess
import time
from collections import Counter

from harness.chaos.infra import wait_for
from harness.chaos.world import CONFIGS, REPO

SMALL = str(CONFIGS / "small-batches.yaml")
POISON = str(CONFIGS / "poison.yaml")
SLOW = str(CONFIGS / "slow.yaml")
OUTAGE = str(CONFIGS / "outage.yaml")
OUTAGE_RSS_BOUND_MIB = 256


class Failed(Exception):
    def __init__(self, figures, why):
        super().__init__(why)
        self.figures = figures


def figures(w, recover_s, **extra):
    lost, dup, rep = w.lost_duplicated()
    f = {"lost": lost, "duplicated": dup, "recover_s": round(recover_s, 1),
         "peak_rss_mib": round(w.peak_rss_mib(), 1), **extra}
    return f, rep


def check(f, ok, why):
    if not ok:
        raise Failed(f, why)


def exact(f, rep):
    check(f, f["lost"] == 0 and f["duplicated"] == 0, f"verify: {rep}")


def wait_metric(collector, what, pred, timeout):
    return wait_for(what, lambda: pred(collector.metrics()) or None, timeout, 0.5)


def m(samples, name):
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))


# ------------------------------------------------------------------ 1. kill -9 at random moments

def kill_and_replace(w, rng, live, prod, spans, *args):
    """kill -9 a random live collector, start a replacement (with `args`) 0–1 s later, and wait
    until it inserts rows (or nothing is left to insert). Returns seconds from the kill."""
    victim = rng.choice([c for c in live if c.alive])
    victim.kill9()
    t_kill = time.monotonic()
    live.remove(victim)
    time.sleep(rng.uniform(0.0, 1.0))
    new = w.start_collector(*args)
    live.append(new)
    wait_for("the replacement collector inserting",
             lambda: m(new.metrics(), "tracehouse_rows_inserted_total") > 0
             or (prod.poll() is not None and w.count() >= spans), 180, 0.25)
    return time.monotonic() - t_kill


def kill9(ctx, w):
    kills, rate = ctx.p["kills"], 2000
    rng = random.Random(ctx.seed)
    spans = rate * kills * 20  # the load lasts through the kills (~20 s each, see recover_s)
    prod = w.produce_bg(w.gen("load"), spans, partitions=4, rate=rate)
    live = [w.start_collector("--config", SMALL), w.start_collector("--config", SMALL)]
    w.wait_rows(1, 120)
    recover = []
    for _ in range(kills):
        time.sleep(rng.uniform(0.3, 3.0))  # a random moment: mid-batch, -insert, -commit, -rebalance
        recover.append(kill_and_replace(w, rng, live, prod, spans, "--config", SMALL))
    w.wait_produced(prod)
    t0 = time.monotonic()
    w.wait_rows(spans, ctx.p["catch_up_s"])
    time.sleep(3)  # give a straggling duplicate the time to show up
    f, rep = figures(w, max(recover), kills=kills, catch_up_s=round(time.monotonic() - t0, 1),
                     recover_mean_s=round(sum(recover) / len(recover), 1))
    exact(f, rep)
    return f


# ------------------------------------------------------------------ 2. ClickHouse refuses part of a batch

def reject(ctx, w):
    bad = w.gen("bad")
    ctx.ch.set_faults([{"match": w.database, "reject_marker": bad}])
    try:
        w.produce(w.gen("good1"), 8000, partitions=4, seed=1)
        w.produce(bad, 400, partitions=4, seed=2)  # 4 records of 100 spans, one per partition
        del w.generators[bad]
        w.produce(w.gen("good2"), 8000, partitions=4, seed=3)
        t0 = time.monotonic()
        c = w.start_collector("--config", POISON)
        took = w.wait_rows(16000, ctx.p["catch_up_s"])
        s = wait_metric(c, "4 rejected records skipped and dead-lettered, lag 0",
                        lambda s: m(s, 'tracehouse_records_skipped_total{reason="rejected"}') == 4
                        and m(s, "tracehouse_records_dead_lettered_total") == 4
                        and m(s, "tracehouse_consumer_lag_records") == 0 and s, 60)
        recover = time.monotonic() - t0
        dl = w.dead_letters(expect=4)
        bad_rows = w.verify({bad: 400})[bad]["rows"]
    finally:
        ctx.ch.set_faults([])
    f, rep = figures(w, recover, rows_in_s=round(took, 1), dead_lettered=len(dl),
                     bad_rows_landed=bad_rows,
                     rejected=m(s, 'tracehouse_records_skipped_total{reason="rejected"}'))
    exact(f, rep)
    check(f, bad_rows == 0, f"{bad_rows} refused rows landed")
    where = {(h.get("tracehouse.source.partition"), h.get("tracehouse.source.offset")) for h, _ in dl}
    check(f, len(dl) == 4 and len(where) == 4
          and all(h.get("tracehouse.reason") == "rejected" and h.get("tracehouse.source.topic") == w.topic
                  and "117" in h.get("tracehouse.detail", "") for h, _ in dl),
          f"dead letters with provenance: {dl}")
    return f


# ------------------------------------------------------------------ 3. poison records, proto and JSON

def poison(ctx, w, encoding):
    if encoding == "otlp_json":
        garbage, truncated, oversized = b"\xff\xfe not json", b'{"resourceSpans":[{"resource":{"attr', b" " * (2 << 20)
    else:
        garbage, truncated, oversized = b"\xff\xff\xff not protobuf", bytes([0x0A, 0xFF, 0x01]), b"\x0a" * (2 << 20)
    w.produce(w.gen("before"), 3000, partitions=2, seed=4, encoding=encoding)
    w.produce_raw([garbage, truncated, b"", oversized], partition=0)
    w.produce(w.gen("after"), 3000, partitions=2, seed=5, encoding=encoding)
    t0 = time.monotonic()
    c = w.start_collector("--config", POISON, "--encoding", encoding)
    w.wait_rows(6000, ctx.p["catch_up_s"])
    want = {"decode_error": 2, "oversized": 1, "empty": 1}

    def counted(s):
        got = {r: m(s, f'tracehouse_records_skipped_total{{reason="{r}"}}') for r in want}
        return (got == want and m(s, "tracehouse_records_dead_lettered_total") == 3
                and m(s, "tracehouse_consumer_lag_records") == 0 and got)
    try:
        got = wait_metric(c, f"skipped by reason {want}, 3 dead-lettered, lag 0", counted, 60)
    except Exception:
        got = {r: m(c.metrics(), f'tracehouse_records_skipped_total{{reason="{r}"}}') for r in want}
    recover = time.monotonic() - t0
    dl = w.dead_letters(expect=3)
    f, rep = figures(w, recover, skipped=got, dead_lettered=len(dl))
    exact(f, rep)
    reasons = Counter(h.get("tracehouse.reason") for h, _ in dl)
    check(f, got == want, f"skipped by reason: {got}, want {want}")
    check(f, reasons == Counter({"decode_error": 2, "oversized": 1})
          and all(h.get("tracehouse.source.topic") == w.topic for h, _ in dl),
          f"dead letters: {dl}")
    return f


# ------------------------------------------------------------------ 4. ClickHouse slow

def slow(ctx, w):
    delay, secs, rate = ctx.p["slow_delay_ms"], ctx.p["slow_s"], 6000
    spans = rate * secs
    ctx.ch.set_faults([{"match": w.database, "delay_ms": delay}])
    try:
        prod = w.produce_bg(w.gen("load"), spans, partitions=4, rate=rate)
        c = w.start_collector("--config", SLOW)
        paused, end = 0.0, time.monotonic() + secs
        while time.monotonic() < end:
            paused = max(paused, m(c.metrics(), "tracehouse_paused_partitions"))
            time.sleep(0.5)
    finally:
        ctx.ch.set_faults([])
    t0 = time.monotonic()
    w.wait_produced(prod)
    w.wait_rows(spans, ctx.p["catch_up_s"])
    recover = time.monotonic() - t0
    time.sleep(2)
    s = c.metrics()
    errors, retries = m(s, "tracehouse_insert_errors_total"), m(s, "tracehouse_insert_retries_total")
    f, rep = figures(w, recover, delay_ms=delay, slow_s=secs, max_paused_partitions=paused,
                     insert_errors=errors, insert_retries=retries)
    exact(f, rep)
    check(f, paused > 0, "partitions never paused while ClickHouse was slow")
    check(f, errors == 0 and retries == 0, f"timeout storm: {errors} insert errors, {retries} retries")
    return f


# ------------------------------------------------------------------ 5. ClickHouse down, same process

def outage(ctx, w):
    down_s, rate = ctx.p["outage_s"], ctx.p["outage_rate"]
    c = w.start_collector("--config", OUTAGE)
    w.produce(w.gen("before"), 5000, partitions=4, seed=6)
    w.wait_rows(5000, 120)
    ctx.ch.down()
    t_down = time.monotonic()
    prod = w.produce_bg(w.gen("during"), rate * down_s, partitions=4, seed=7, rate=rate)
    samples, members, filled_at = [], set(), None
    next_group = 0.0
    while time.monotonic() - t_down < down_s:
        s = c.metrics()
        check({"lost": None, "duplicated": None}, c.alive, "the collector exited while ClickHouse was down")
        now = time.monotonic()
        if filled_at is None and m(s, "tracehouse_paused_partitions") > 0:
            filled_at = now
        samples.append((now, m(s, "tracehouse_consumer_lag_records"), c.rss[-1][1] if c.rss else 0))
        if now >= next_group:
            try:
                members.add(w.group_members())
            except Exception as e:  # noqa: BLE001
                members.add(("?", str(e)[:60]))
            next_group = now + 10
        time.sleep(1)
    ctx.ch.up()
    t_up = time.monotonic()
    w.wait_produced(prod)
    w.wait_rows(w.expected(), ctx.p["catch_up_s"] + down_s)
    recover = time.monotonic() - t_up
    time.sleep(3)
    after = [r for t, _, r in samples if filled_at is not None and t >= filled_at + 5 and r > 0]
    med = sorted(after)[len(after) // 2] if after else 0
    spread = max(abs(r - med) / med for r in after) * 100 if after else None
    lags = [lag for _, lag, _ in samples]
    f, rep = figures(w, recover, down_s=down_s, lag_max=max(lags, default=0),
                     rss_after_fill_mib=[round(min(after) / 1024, 1), round(max(after) / 1024, 1)] if after else None,
                     rss_spread_pct=round(spread, 1) if spread is not None else None,
                     group=sorted(str(x) for x in members), restarts=len(w.collectors) - 1)
    exact(f, rep)
    check(f, filled_at is not None, "the budget never filled (no partition paused)")
    check(f, lags and max(lags) > lags[0], "lag did not grow")
    check(f, spread is not None and spread <= 10, f"RSS not flat after the budget filled: ±{spread}%")
    check(f, all(x[0] not in (0, "?") for x in members), f"left the group: {members}")
    # The bound collector/tests/e2e_outage.rs holds the same 48 MiB budget to.
    check(f, f["peak_rss_mib"] < OUTAGE_RSS_BOUND_MIB,
          f"peak RSS {f['peak_rss_mib']} MiB over {OUTAGE_RSS_BOUND_MIB} MiB with a 48 MiB budget")
    return f


# ------------------------------------------------------------------ 6. Kafka broker restart

def kafka_restart(ctx, w):
    rate, secs = 4000, ctx.p["kafka_load_s"]
    spans = rate * secs
    prod = w.produce_bg(w.gen("load"), spans, partitions=4, rate=rate)
    w.start_collector("--config", SMALL)
    w.start_collector("--config", SMALL)
    w.wait_rows(2000, 120)
    time.sleep(random.Random(ctx.seed).uniform(1, 4))
    restart_took = ctx.kafka.restart()
    t_back, rows_back = time.monotonic(), w.count()
    # Recovered: rows flow again after the broker's return (the load goes on meanwhile).
    wait_for("rows flowing after the broker restart", lambda: w.count() > rows_back, 180, 0.25)
    recover = time.monotonic() - t_back
    w.wait_produced(prod)
    w.wait_rows(spans, ctx.p["catch_up_s"])
    time.sleep(3)
    alive = sum(c.alive for c in w.collectors)
    f, rep = figures(w, recover, broker_restart_s=round(restart_took, 1), collectors_alive=alive)
    exact(f, rep)
    check(f, alive == 2, "a collector exited over the broker restart")
    return f


# ------------------------------------------------------------------ 7. insert refused for space

def no_space(ctx, w):
    secs, rate = ctx.p["space_s"], 4000
    ctx.ch.set_faults([{"match": w.database, "error": {
        "code": 243, "name": "NOT_ENOUGH_SPACE",
        "message": "Cannot reserve 1.00 MiB, not enough space (chserver fault switch)"}}])
    try:
        prod = w.produce_bg(w.gen("load"), rate * secs, partitions=4, rate=rate)
        c = w.start_collector("--config", OUTAGE)
        time.sleep(secs)
        during = w.count()
        retries = m(c.metrics(), 'tracehouse_insert_retries_total{reason="server_busy"}')
    finally:
        ctx.ch.set_faults([])
    t0 = time.monotonic()
    w.wait_produced(prod)
    w.wait_rows(w.expected(), ctx.p["catch_up_s"])
    recover = time.monotonic() - t0
    time.sleep(2)
    f, rep = figures(w, recover, refused_s=secs, retries_while_full=retries, rows_while_full=during)
    exact(f, rep)
    check(f, retries > 0 and during == 0, "inserts were not refused and retried while the disk was full")
    return f


# ------------------------------------------------------------------ 9. rebalance storm

def rebalance(ctx, w):
    """The group scaled 1 → 4 → 2 → 1 under load, by starting collectors and stopping them
    with SIGTERM as a Deployment's scale-down does (the runner, not the operator, scales)."""
    rate, hold, steps = 3000, ctx.p["rebalance_hold_s"], [1, 4, 2, 1]
    spans = rate * hold * len(steps)
    prod = w.produce_bg(w.gen("load"), spans, partitions=8, rate=rate)
    live, exits = [], []
    for n in steps:
        while len(live) < n:
            live.append(w.start_collector("--config", SMALL))
        while len(live) > n:
            exits.append(live.pop(0).stop(grace=15))
        time.sleep(hold)
    w.wait_produced(prod)
    t0 = time.monotonic()
    w.wait_rows(spans, ctx.p["catch_up_s"])
    recover = time.monotonic() - t0
    time.sleep(3)
    f, rep = figures(w, recover, steps="→".join(map(str, steps)), hold_s=hold, stop_exit_codes=exits)
    exact(f, rep)
    check(f, all(code == 0 for code in exits), f"a scaled-down collector exited with {exits}")
    return f


# ------------------------------------------------------------------ 10. decoder fuzzing

def fuzz(ctx, _w):
    """The collector's seeded differential fuzz test (collector/src/encode/fuzz.rs), run for
    the profile's seconds per decoder on the pinned stable toolchain (not coverage-guided)."""
    secs = ctx.p["fuzz_s"]
    cmd = ["cargo", "test", "--locked", "-q", "-p", "tracehouse-collector", "--lib", "encode::fuzz",
           "--", "--ignored", "--nocapture"]
    env = dict(os.environ, TRACEHOUSE_FUZZ_SECONDS=str(secs), TRACEHOUSE_FUZZ_SEED=str(ctx.seed))
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=2 * secs + 1800)
    out = r.stdout + r.stderr
    counts = re.findall(r"fuzz: (otlp_\w+) (\d+) inputs", out)
    f = {"lost": "-", "duplicated": "-", "recover_s": "-", "peak_rss_mib": "-",
         "seconds_per_decoder": secs, "seed": ctx.seed, "inputs": {k: int(v) for k, v in counts}}
    check(f, r.returncode == 0 and len(counts) == 2, f"fuzz test failed:\n{out[-3000:]}")
    return f


# ------------------------------------------------------------------ 11. coverage-guided decoder fuzzing

def fuzz_guided(ctx, _w):
    """e2e/fuzz: the libFuzzer targets of collector/fuzz (otlp_proto against prost,
    otlp_json), instrumented on the pinned stable toolchain, the profile's seconds each."""
    secs = ctx.p["fuzz_s"]
    r = subprocess.run([str(REPO / "e2e" / "fuzz"), "--seconds", str(secs)], cwd=REPO,
                       capture_output=True, text=True, timeout=2 * secs + 1800)
    out = r.stdout + r.stderr
    lines = re.findall(r"fuzz-guided: (otlp_\w+) (\d+) runs, (\d+) edges, (\d+) features, corpus (\d+)", out)
    f = {"lost": "-", "duplicated": "-", "recover_s": "-", "peak_rss_mib": "-",
         "seconds_per_target": secs,
         "targets": {t: {"runs": int(n), "edges": int(e), "features": int(ft), "corpus": int(c)}
                     for t, n, e, ft, c in lines}}
    check(f, r.returncode == 0 and len(lines) == 2, f"e2e/fuzz failed:\n{out[-3000:]}")
    return f


CASES = {
    "kill9": (kill9, "kill -9 of a collector at random moments (2 in the group)"),
    "reject": (reject, "ClickHouse permanently refuses part of a batch"),
    "poison_proto": (lambda ctx, w: poison(ctx, w, "otlp_proto"), "poison/truncated/empty/oversized, otlp_proto"),
    "poison_json": (lambda ctx, w: poison(ctx, w, "otlp_json"), "poison/truncated/empty/oversized, otlp_json"),
    "slow": (slow, "ClickHouse answers every insert seconds late"),
    "outage": (outage, "ClickHouse down, the same collector process keeps running"),
    "kafka_restart": (kafka_restart, "Kafka broker restart mid-load"),
    "no_space": (no_space, "inserts refused for space (243 NOT_ENOUGH_SPACE)"),
    "rebalance": (rebalance, "rebalance storm: collectors 1→4→2→1 under load (SIGTERM scale-down)"),
    "fuzz": (fuzz, "decoders fuzzed (otlp_proto against prost, otlp_json), seeded mutations"),
    "fuzz_guided": (fuzz_guided, "decoders fuzzed by libFuzzer, coverage-guided (e2e/fuzz)"),
}

# Cases that need no topic, database or collector.
WITHOUT_WORLD = {"fuzz", "fuzz_guided"}
