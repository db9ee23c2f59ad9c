"""The fault matrix's production cases (issue 30): what the first cases never had — many
partitions at the default linger, a dead-letter topic at the broker's default message size,
hostile but valid records, SIGTERM with the broker away, and a batch-size change rolled out
under load. Each is judged as the others are: `tracehouse-loadgen verify` (0 lost, 0
duplicated) plus its own promise, and, where a case's promise is "nothing stalls", the group's
committed offsets read from Kafka itself (lag 0), not from the collector's metrics.

- `many_partitions_kill9`: ≥ 96 partitions, default batching (linger 1 s), two collectors, kill -9
  under load, a replacement started after 0–1 s.
- `many_partitions_kill9_late`: the same partitions, the private chserver answering INSERTs ~4 s
  late (rows in, answer held) for a few seconds, one collector kill -9'd in that window and no
  replacement: the survivor takes the dead member's partitions after the session timeout, while
  every partition keeps inserting a block per linger (the deduplication window is counted in
  blocks, table-wide).
- `dead_letter_too_large`: the dead-letter topic at the broker default `max.message.bytes`
  (1048588, set on the topic), a 3 MiB undecodable record and a 5 MiB one over a 4 MiB
  `limits.max_record_bytes`: every good row lands and the committed lag reaches 0 in a bound.
- `spans_over_100_days`: one record with spans on 101 days (`--spread-days 101`) between good
  records on one partition: good rows land, the record is skipped with a named reason (or
  inserted exactly once), lag 0.
- `fat_resource`: one valid record of 10 000 spans under a resource of 100 attributes of 4 KiB
  (`--pad-resource-attributes`): peak RSS bounded, good rows land, lag 0.
- `sigterm_broker_down`: SIGTERM of the only collector while the (private) broker is stopped,
  then the broker back and a new collector.
- `batch_size_rollout`: a rolling update of two collectors to other batch settings
  (`max_records`/`max_bytes`/`linger_ms`) under load on one group: start new, SIGTERM old.
- `rolling_upgrade` (issue 41): the previous release (`previous.py`, `th2:` metadata and tokens
  that do not name the log) and this one in one group under load: an upgrade one pod at a time
  (the first old one SIGTERM'd, the second kill -9'd), then the staged rollback: the new
  release rolled to `kafka.commit_format: th2`, then the old release rolled in (SIGTERM each).
- `processing_change` (issue 38): three collectors redacting with one rule set (A), one kill -9'd
  while the server holds its answers (its inserts are in, unacknowledged) and replaced by one
  with another rule set (B), the others rolled from A to B (SIGTERM): a replay under B of a
  batch A inserted reuses A's token, so A's rows stand; every row is A's or B's, none raw or
  mixed.
"""

import json
import random
import re
import time
from pathlib import Path

from harness.chaos.cases import check, exact, figures, kill_and_replace, m
from harness.chaos.infra import wait_for
from harness.procs import say
from harness.stack import Kafka
from harness.chaos.world import CONFIGS

SMALL = str(CONFIGS / "small-batches.yaml")
SMALL_TH2 = str(CONFIGS / "small-batches-th2.yaml")
LARGE = str(CONFIGS / "large-batches.yaml")
LONG_LINGER = str(CONFIGS / "long-linger.yaml")
RULES_A = str(CONFIGS / "processing-rollout-a.yaml")
RULES_B = str(CONFIGS / "processing-rollout-b.yaml")
DEAD_LETTER = str(CONFIGS / "dead-letter-limits.yaml")
BROKER_DEFAULT_MAX_MESSAGE_BYTES = 1048588  # Kafka's default message.max.bytes
FAT_RSS_BOUND_MIB = 512
FAT_RSS_ABORT_MIB = 2048  # past this the collector is stopped: the shared machine comes first
SKIPPED = re.compile(r'^tracehouse_records_skipped_total\{.*reason="([^"]+)"')


def skipped_by_reason(samples):
    out = {}
    for k, v in samples.items():
        hit = SKIPPED.match(k)
        if hit and v:
            out[hit.group(1)] = out.get(hit.group(1), 0) + int(v)
    return out


def sized_window(w, partitions):
    """Sizes the table's deduplication window for `partitions` at the default linger
    (`schema apply --partitions`, the arithmetic of collector/schema/src/dedup_window.rs) and
    returns the window the table has."""
    w.apply_schema(partitions=partitions)
    return w.dedup_window()


def small_records(n=10):
    """Records of n spans: at a modest span rate every partition still gets records each linger."""
    return ["--spans-per-record", str(n)]


def wait_lag_zero(w, partitions, timeout):
    """Seconds until the group's committed offsets reach the partitions' ends (from Kafka)."""
    t0, last = time.monotonic(), [None]

    def done():
        try:
            last[0] = w.committed_lag(partitions)
        except Exception as e:  # noqa: BLE001 - a failed read is retried until the deadline
            last[0] = f"? ({e})"
        return last[0] == 0
    try:
        wait_for(f"committed lag 0 on {w.topic}", done, timeout, 1.0)
    except Exception:  # noqa: BLE001
        return None, last[0]
    return time.monotonic() - t0, 0


# ------------------------------------------------------------------ a. many partitions, kill -9

def many_partitions_kill9(ctx, w):
    parts, rate, kills = ctx.p["mp_partitions"], ctx.p["mp_rate"], ctx.p["mp_kills"]
    rng = random.Random(ctx.seed)
    window = sized_window(w, parts)
    spans = rate * (15 + 45 * kills)  # the load lasts through the kills (~30 s session timeout each)
    prod = w.produce_bg(w.gen("load"), spans, partitions=parts, rate=rate, extra=small_records())
    live = [w.start_collector(), w.start_collector()]  # default batching: linger 1 s
    w.wait_rows(1, 120)
    recover = []
    for _ in range(kills):
        time.sleep(rng.uniform(5.0, 10.0))  # blocks pile up in the deduplication window meanwhile
        recover.append(kill_and_replace(w, rng, live, prod, spans))
    w.wait_produced(prod)
    t0 = time.monotonic()
    w.wait_rows(spans, ctx.p["catch_up_s"])
    time.sleep(5)  # give a straggling duplicate the time to show up
    f, rep = figures(w, max(recover), partitions=parts, rate=rate, kills=kills, dedup_window=window,
                     catch_up_s=round(time.monotonic() - t0, 1),
                     recover_mean_s=round(sum(recover) / len(recover), 1))
    exact(f, rep)
    return f


# ------------------------------------------------------------------ b. … while answers are late, no replacement

def many_partitions_kill9_late(ctx, w):
    parts, rate = ctx.p["mp_partitions"], ctx.p["late_rate"]
    delay, late_s = ctx.p["late_delay_ms"], ctx.p["late_s"]
    rng = random.Random(ctx.seed)
    warm = 10
    # Through the kill, the survivor's takeover after the 30 s session timeout, and beyond.
    spans = rate * (warm + late_s + 45)
    window = sized_window(w, parts)
    prod = w.produce_bg(w.gen("load"), spans, partitions=parts, rate=rate, extra=small_records())
    a, b = w.start_collector(), w.start_collector()
    w.wait_rows(1, 120)
    time.sleep(warm)
    ctx.ch.set_faults([{"match": w.database, "delay_ms": delay}])
    try:
        t_late = time.monotonic()
        time.sleep(rng.uniform(0.5, min(1.5, late_s / 2)))  # inserts of both are waiting for answers
        victim = rng.choice([a, b])
        victim.kill9()
        t_kill = time.monotonic()
        survivor = b if victim is a else a
        inserts_at_kill = m(survivor.metrics(), "tracehouse_inserts_total")
        time.sleep(max(0.0, t_late + late_s - time.monotonic()))
    finally:
        ctx.ch.set_faults([])
    # The takeover: the dead member evicted, the survivor alone holds every partition. The
    # survivor's inserts meanwhile are blocks the table's deduplication window had to hold.
    k = Kafka(w.brokers)
    try:
        wait_for("the survivor holding every partition",
                 lambda: w.group_members()[0] == 1 and k.assigned_partitions(w.group) == parts, 120, 0.5)
    finally:
        k.close()
    takeover_s = time.monotonic() - t_kill
    blocks = m(survivor.metrics(), "tracehouse_inserts_total") - inserts_at_kill
    w.wait_produced(prod)
    w.wait_rows(spans, ctx.p["catch_up_s"])
    recover = time.monotonic() - t_kill
    time.sleep(5)
    f, rep = figures(w, recover, partitions=parts, rate=rate, delay_ms=delay, late_s=late_s,
                     dedup_window=window,
                     killed_after_s=round(t_kill - t_late, 2), takeover_s=round(takeover_s, 1),
                     survivor_inserts_kill_to_takeover=blocks, survivor_alive=survivor.alive)
    exact(f, rep)
    check(f, survivor.alive, "the surviving collector exited")
    return f


# ------------------------------------------------------------------ c. dead-letter topic too small for the copy

def dead_letter_too_large(ctx, w):
    bound = ctx.p["stall_bound_s"]
    w.create_topic(w.dlq, 1, {"max.message.bytes": str(BROKER_DEFAULT_MAX_MESSAGE_BYTES)})
    w.produce(w.gen("before"), 3000, partitions=2, seed=4)
    # 3 MiB undecodable (under the 4 MiB limit: decode_error), 5 MiB (over it: oversized);
    # random bytes, so the copies stay over the dead-letter topic's 1048588 bytes however the
    # dead-letter producer compresses them (its batches are what the topic limit measures).
    noise = random.Random(ctx.seed).randbytes
    w.produce_raw([b"\xff\xff\xff" + noise((3 << 20) - 3), noise(5 << 20)], partition=0)
    w.produce(w.gen("after"), 3000, partitions=2, seed=5)
    t0 = time.monotonic()
    c = w.start_collector("--config", DEAD_LETTER)
    w.wait_rows(6000, ctx.p["catch_up_s"])
    rows_s = time.monotonic() - t0
    lag_s, lag = wait_lag_zero(w, 2, bound)
    s = c.metrics()
    skipped = skipped_by_reason(s)
    dl = w.dead_letters(expect=2, timeout=5)
    f, rep = figures(w, time.monotonic() - t0, rows_in_s=round(rows_s, 1),
                     lag_zero_s=round(lag_s, 1) if lag_s is not None else None, committed_lag=lag,
                     skipped=skipped, dead_lettered=m(s, "tracehouse_records_dead_lettered_total"),
                     dead_letter_records=[(h.get("tracehouse.reason"), n) for h, n in dl],
                     collector_alive=c.alive)
    exact(f, rep)
    check(f, lag_s is not None, f"committed lag {lag} after {bound} s: the partition's commit is stuck")
    check(f, skipped.get("decode_error", 0) >= 1 and skipped.get("oversized", 0) >= 1,
          f"skipped by reason: {skipped}")
    check(f, all(n <= BROKER_DEFAULT_MAX_MESSAGE_BYTES for _, n in dl), f"dead letters: {dl}")
    return f


# ------------------------------------------------------------------ d. one record's spans over 101 days

def spans_over_100_days(ctx, w):
    bound, days = ctx.p["stall_bound_s"], 101
    bad = w.gen("days")
    # One partition: the hostile record sits between good records of the same partition.
    w.produce(w.gen("before"), 2000, partitions=1, seed=4)
    w.produce(bad, days, partitions=1, seed=2,
              extra=["--spans-per-record", str(days), "--spread-days", str(days), "--shape", "minimal"])
    del w.generators[bad]
    w.produce(w.gen("after"), 2000, partitions=1, seed=5)
    t0 = time.monotonic()
    c = w.start_collector()
    lag_s, lag = wait_lag_zero(w, 1, bound)
    try:
        w.wait_rows(4000, 30)
    except Exception:  # noqa: BLE001 - judged by verify below
        pass
    time.sleep(3)
    s = c.metrics()
    skipped = skipped_by_reason(s)
    bad_rep = w.verify({bad: days})[bad]
    f, rep = figures(w, time.monotonic() - t0, lag_zero_s=round(lag_s, 1) if lag_s is not None else None,
                     committed_lag=lag, skipped=skipped, table_rows=w.count(),
                     hostile_rows=bad_rep["rows"], hostile_duplicated=bad_rep["duplicated"],
                     dead_lettered=m(s, "tracehouse_records_dead_lettered_total"),
                     insert_errors=m(s, "tracehouse_insert_errors_total"))
    exact(f, rep)
    check(f, lag_s is not None, f"committed lag {lag} after {bound} s")
    check(f, (bad_rep["rows"] == 0 and sum(skipped.values()) == 1)
          or (bad_rep["found"] == days and bad_rep["duplicated"] == 0),
          f"the 101-day record: neither skipped with a reason ({skipped}) nor inserted once ({bad_rep})")
    return f


# ------------------------------------------------------------------ e. fat resource × many spans

def fat_resource(ctx, w):
    bound, spans = ctx.p["stall_bound_s"], ctx.p["fat_spans"]
    fat = w.gen("fat")
    w.produce(w.gen("before"), 3000, partitions=2, seed=4)
    w.produce(fat, spans, partitions=2, seed=2,
              extra=["--spans-per-record", str(spans), "--shape", "minimal", "--services", "1",
                     "--pad-resource-attributes", "100", "--pad-resource-bytes", "4096",
                     "-X", "message.max.bytes=16000000"])
    del w.generators[fat]
    w.produce(w.gen("after"), 3000, partitions=2, seed=5)
    t0 = time.monotonic()
    c = w.start_collector()
    aborted, lag = None, None
    deadline = t0 + bound
    while time.monotonic() < deadline:
        rss_mib = (c.rss[-1][1] if c.rss else 0) / 1024
        if rss_mib > FAT_RSS_ABORT_MIB:
            aborted = round(rss_mib)
            c.kill9()
            break
        if not c.alive:
            break
        try:
            lag = w.committed_lag(2)
        except Exception:  # noqa: BLE001
            lag = None
        if lag == 0 and w.count() >= 6000:
            break
        time.sleep(0.5)
    took = time.monotonic() - t0
    time.sleep(2)
    s = c.metrics() if c.alive else {}
    skipped = skipped_by_reason(s)
    fat_rep = w.verify({fat: spans})[fat]
    f, rep = figures(w, took, committed_lag=lag, skipped=skipped, fat_rows=fat_rep["rows"],
                     aborted_at_rss_mib=aborted, collector_alive=c.alive,
                     rss_bound_mib=FAT_RSS_BOUND_MIB)
    check(f, aborted is None, f"resident memory passed {aborted} MiB: stopped")
    check(f, c.alive, "the collector exited")
    exact(f, rep)
    check(f, lag == 0, f"committed lag {lag} after {bound} s")
    check(f, f["peak_rss_mib"] <= FAT_RSS_BOUND_MIB,
          f"peak RSS {f['peak_rss_mib']} MiB over {FAT_RSS_BOUND_MIB} MiB")
    check(f, (fat_rep["rows"] == 0 and sum(skipped.values()) == 1)
          or (fat_rep["found"] == spans and fat_rep["duplicated"] == 0),
          f"the fat record: neither skipped with a reason ({skipped}) nor inserted once ({fat_rep})")
    return f


# ------------------------------------------------------------------ f. SIGTERM while the broker is down

def sigterm_broker_down(ctx, w):
    rate, down_s = 2000, ctx.p["broker_down_s"]
    rng = random.Random(ctx.seed)
    spans = rate * 20
    prod = w.produce_bg(w.gen("load"), spans, partitions=4, rate=rate)
    c = w.start_collector("--config", LONG_LINGER)
    w.wait_rows(1, 120)
    time.sleep(rng.uniform(3.0, 6.0))
    t_down = time.monotonic()
    ctx.kafka.down()
    stopped_s = time.monotonic() - t_down
    time.sleep(rng.uniform(0.0, 1.0))
    t_term = time.monotonic()
    code = c.stop(grace=30)
    exit_s = time.monotonic() - t_term
    time.sleep(max(0.0, t_down + down_s - time.monotonic()))
    ctx.kafka.up()
    t_up = time.monotonic()
    new = w.start_collector("--config", LONG_LINGER)
    w.wait_produced(prod)
    w.wait_rows(spans, ctx.p["catch_up_s"])
    recover = time.monotonic() - t_up
    time.sleep(5)
    f, rep = figures(w, recover, broker_stop_s=round(stopped_s, 1), sigterm_exit_code=code,
                     sigterm_exit_s=round(exit_s, 1), broker_down_s=round(t_up - t_down, 1),
                     new_alive=new.alive)
    exact(f, rep)
    return f


# ------------------------------------------------------------------ g. batch settings rolled out under load

def replace(live, slot, start, how="term", overlap=2.0):
    """One pod of a rolling update: `start()` the replacement, then stop the pod in `slot`
    `overlap` s later, by SIGTERM (its exit code is returned) or kill -9 (None)."""
    new = start()
    time.sleep(overlap)
    code = None
    if how == "kill":
        live[slot].kill9()
    else:
        code = live[slot].stop(grace=20)
    live[slot] = new
    return code


def settled(ctx, w, prod, spans):
    """Every produced span in the table: seconds from the end of production."""
    w.wait_produced(prod)
    t0 = time.monotonic()
    w.wait_rows(spans, ctx.p["catch_up_s"])
    recover = time.monotonic() - t0
    time.sleep(5)
    return recover


def batch_size_rollout(ctx, w):
    rate, hold, rollouts = 3000, ctx.p["rollout_hold_s"], ctx.p["rollouts"]
    parts, overlap = 8, 2.0
    configs = [SMALL, LARGE]
    spans = int(rate * hold * (rollouts + 1.5))
    prod = w.produce_bg(w.gen("load"), spans, partitions=parts, rate=rate)
    gen = 0
    live = [w.start_collector("--config", configs[0]), w.start_collector("--config", configs[0])]
    w.wait_rows(1, 120)
    exits = []
    for _ in range(rollouts):
        time.sleep(hold)
        gen += 1
        cfg = configs[gen % 2]
        # A rolling update, one pod at a time: the new one starts, then the old one gets SIGTERM.
        for i in range(len(live)):
            exits.append(replace(live, i, lambda: w.start_collector("--config", cfg),
                                 overlap=overlap))
        say(f"{w.case}: generation {gen} on {cfg.rsplit('/', 1)[-1]}")
    recover = settled(ctx, w, prod, spans)
    f, rep = figures(w, recover, rollouts=rollouts, hold_s=hold, stop_exit_codes=exits,
                     configs=[c.rsplit("/", 1)[-1] for c in configs])
    exact(f, rep)
    check(f, all(code == 0 for code in exits), f"a replaced collector exited with {exits}")
    return f


# ------------------------------------------------------------------ h. old and new binaries in one group

def held(w):
    """Partitions the world's group holds now, as Kafka says."""
    k = Kafka(w.brokers)
    try:
        return k.assigned_partitions(w.group)
    finally:
        k.close()


def rolling_upgrade(ctx, w):
    """An upgrade from the previous release and a rollback to it, one pod at a time, under
    load: each step starts the replacement, then stops the pod it replaces 2 s later.

    Up: the new collector reads the old one's `th2:` cuts and replays them under their old
    tokens, so even a kill -9 of an old pod loses and duplicates nothing. Down, staged as
    docs/upgrade.md says: first the new release rolled to `kafka.commit_format: th2`, which
    finishes the cuts it named and writes new ones as the old release does; then the old
    release rolled in. A partition handed to the old one then carries only cuts it reads."""
    from harness.chaos.previous import previous_collector
    old = previous_collector()
    rate, hold, parts, overlap = 3000, ctx.p["rollout_hold_s"], 8, 2.0
    # (binary, config, how the replaced pod stops)
    steps = [("new", SMALL, "term"), ("new", SMALL, "kill"),
             ("new", SMALL_TH2, "term"), ("new", SMALL_TH2, "term"),
             ("old", SMALL, "term"), ("old", SMALL, "term")]
    # Load through the whole rollout: the holds, and the group settling after each step
    # (after a kill -9, up to the session timeout).
    spans = int(rate * (hold * (len(steps) + 1.5) + 60))
    prod = w.produce_bg(w.gen("load"), spans, partitions=parts, rate=rate)
    live = [w.start_collector("--config", SMALL, binary=old),
            w.start_collector("--config", SMALL, binary=old)]
    w.wait_rows(1, 120)
    exits, done, staged_s = [], [], None
    for i, (to, cfg, how) in enumerate(steps):
        time.sleep(hold)
        slot = i % 2
        binary = old if to == "old" else None
        code = replace(live, slot, lambda: w.start_collector("--config", cfg, binary=binary),
                       how, overlap)
        if code is not None:
            exits.append(code)
        label = f"{to}{'/th2' if cfg == SMALL_TH2 else ''}/{how}"
        done.append(label)
        # As a rollout waits for readiness, wait for the group to settle: every partition
        # held again (a kill -9'd member blocks the group until its session times out).
        wait_for(f"the group of two holding all {parts} partitions",
                 lambda: w.group_members() == (2, "ConsumerGroupState.STABLE") and held(w) == parts,
                 ctx.p["catch_up_s"], 0.5)
        say(f"{w.case}: pod {slot} -> {label}")
        if i + 1 < len(steps) and steps[i + 1][0] == "old" and to == "new":
            # The staged rollback's check before the older release rolls in: every
            # partition's commit metadata in a format it reads (docs/upgrade.md).
            t_th2 = time.monotonic()
            # (the collectors' gauge: confluent-kafka cannot read a metadata string back.)
            wait_for("every collector's commit metadata in the th1/th2 format",
                     lambda: sum(c.metric("tracehouse_assigned_partitions") for c in live) == parts
                     and all(c.metric("tracehouse_commit_metadata_named_partitions") == 0
                             for c in live),
                     ctx.p["catch_up_s"], 0.5)
            staged_s = round(time.monotonic() - t_th2, 1)
    recover = settled(ctx, w, prod, spans)
    f, rep = figures(w, recover, steps=done, hold_s=hold, stop_exit_codes=exits,
                     th2_metadata_after_s=staged_s, previous_release=Path(old).parent.parent.name)
    exact(f, rep)
    check(f, all(code == 0 for code in exits), f"a replaced collector exited with {exits}")
    return f


# ------------------------------------------------------------------ i. processing rules changed by a crash and a rollout

# Every row of processing_change's table by the rule set that wrote it (the two configurations'
# headers): A hashes url.full and the resource's host.name (64 hex digits), removes
# app.request.context and keeps app.tags; B masks both (`****`) and removes both keys. `raw`: a
# value one of them redacts, as the load generator wrote it; `mixed`: neither A nor B whole.
RULE_SETS_SQL = """
SELECT count() AS rows, countIf(a) AS a, countIf(b) AS b, countIf(raw) AS raw
FROM (
  SELECT SpanAttributes['url.full'] AS url, ResourceAttributes['host.name'] AS host,
         mapContains(SpanAttributes, 'app.request.context') AS ctx,
         mapContains(SpanAttributes, 'app.tags') AS tags,
         match(url, '^[0-9a-f]{{64}}$') AND match(host, '^[0-9a-f]{{64}}$') AND NOT ctx AND tags AS a,
         url = '****' AND host = '****' AND NOT ctx AND NOT tags AS b,
         startsWith(url, 'https://') OR startsWith(host, 'node-') OR ctx AS raw
  FROM `{db}`.otel_traces)
FORMAT JSONEachRow
"""


def rows_by_rule_set(w):
    r = json.loads(w.ch_client.query(RULE_SETS_SQL.format(db=w.database), timeout=120))
    return {k: int(v) for k, v in r.items()}


def processing_change(ctx, w):
    """A changed rule set across a crash and a rollout, under load on 8 partitions.

    Three collectors run rule set A. The private chserver then answers INSERTs late (rows in,
    answer held) for a few seconds; within that window one collector is kill -9'd — its last
    inserts are stored and never acknowledged, so never committed — and a replacement with
    rule set B starts 0–1 s later. The two others are rolled from A to B one at a time (start
    the new one, SIGTERM the old one 2 s later). After the session timeout a B collector takes
    the dead member's partitions and replays its batches under their recorded tokens: the
    server keeps what A inserted under each token and drops B's differently redacted copy.

    Judged: 0 lost, 0 duplicated (loadgen verify, which reads loadgen.id/seq: untouched by
    either set); every stored row redacted wholly by A or wholly by B (none raw, none mixed),
    both sets present; rows the B collectors had acknowledged beyond the rows stored as B —
    replays that stood as A inserted them — above 0; clean exits."""
    rate, hold, parts, overlap = 3000, ctx.p["rollout_hold_s"], 8, 2.0
    delay_ms, late_s = 3000, 3.0
    rng = random.Random(ctx.seed)
    # Sized for 8 partitions at the 200 ms linger of both configurations: a token must outlive
    # the session timeout and the replay after it.
    window = sized_window(w, parts)
    # The load lasts through the hold under A, the late window, the session timeout (30 s)
    # with the rollout inside it, and a hold under B.
    spans = int(rate * (hold + late_s + 35 + hold))
    prod = w.produce_bg(w.gen("load"), spans, partitions=parts, rate=rate)
    live = [w.start_collector("--config", RULES_A) for _ in range(3)]
    w.wait_rows(1, 120)
    time.sleep(hold)
    ctx.ch.set_faults([{"match": w.database, "delay_ms": delay_ms}])
    try:
        t_late = time.monotonic()
        time.sleep(rng.uniform(0.5, 1.5))  # every collector has inserts in, answers held
        slot = rng.randrange(len(live))
        live[slot].kill9()
        t_kill = time.monotonic()
        time.sleep(rng.uniform(0.0, 1.0))
        b = [w.start_collector("--config", RULES_B)]
        live[slot] = b[0]
        time.sleep(max(0.0, t_late + late_s - time.monotonic()))
    finally:
        ctx.ch.set_faults([])
    exits = []
    for i in range(len(live)):
        if i == slot:
            continue
        exits.append(replace(live, i, lambda: w.start_collector("--config", RULES_B), "term", overlap))
        b.append(live[i])
    say(f"{w.case}: every pod on rule set B (kill -9 of pod {slot} {time.monotonic() - t_kill:.1f} s ago)")
    # As a rollout waits for readiness: the group of three holding all 8 partitions again (the
    # dead member's wait for the session timeout, then the replays under B).
    wait_for(f"the group of three holding all {parts} partitions",
             lambda: w.group_members() == (3, "ConsumerGroupState.STABLE") and held(w) == parts,
             ctx.p["catch_up_s"], 0.5)
    settled_s = time.monotonic() - t_kill
    recover = settled(ctx, w, prod, spans)
    by_set = rows_by_rule_set(w)
    acked_b = sum(c.metric("tracehouse_rows_inserted_total") for c in b)
    replays = sum(c.metric("tracehouse_bundle_replays_total") for c in b)
    mixed = by_set["rows"] - by_set["a"] - by_set["b"]
    f, rep = figures(w, recover, spans=spans, partitions=parts, rate=rate, dedup_window=window,
                     killed_after_late_s=round(t_kill - t_late, 2),
                     group_settled_after_kill_s=round(settled_s, 1), stop_exit_codes=exits,
                     table_rows=by_set["rows"], rows_rule_set_a=by_set["a"],
                     rows_rule_set_b=by_set["b"], rows_mixed=mixed, rows_raw=by_set["raw"],
                     rows_acked_by_b=int(acked_b), b_acked_rows_stored_as_a=int(acked_b) - by_set["b"],
                     b_bundle_replays=int(replays))
    exact(f, rep)
    check(f, by_set["raw"] == 0, f"{by_set['raw']} rows hold a value rule sets A and B redact, as it came")
    check(f, mixed == 0, f"{mixed} rows redacted by neither rule set whole: {by_set}")
    check(f, by_set["a"] > 0 and by_set["b"] > 0, f"the rule set did not change mid-stream: {by_set}")
    check(f, acked_b > by_set["b"],
          f"no replay under B of a batch A had inserted: B acknowledged {acked_b} rows, {by_set['b']} stored as B")
    check(f, all(code == 0 for code in exits), f"a replaced collector exited with {exits}")
    return f


CASES = {
    "many_partitions_kill9": (many_partitions_kill9,
                              "kill -9 under load on ≥ 96 partitions, default linger, replacement started"),
    "many_partitions_kill9_late": (many_partitions_kill9_late,
                                   "kill -9 while ClickHouse answers late, ≥ 96 partitions, no replacement"),
    "dead_letter_too_large": (dead_letter_too_large,
                              "3 and 5 MiB poison records, dead-letter topic at the broker default 1 MiB"),
    "spans_over_100_days": (spans_over_100_days, "one record's spans on 101 days among good records"),
    "fat_resource": (fat_resource, "one record: 100 × 4 KiB resource attributes × 10 000 spans"),
    "sigterm_broker_down": (sigterm_broker_down, "SIGTERM while the broker is down, then a new collector"),
    "batch_size_rollout": (batch_size_rollout, "batch settings rolled out under load (start new, SIGTERM old)"),
    "rolling_upgrade": (rolling_upgrade,
                        "the previous release and this one in one group: upgrade (SIGTERM, kill -9), staged rollback"),
    "processing_change": (processing_change,
                          "processing rules changed A → B by a kill -9 (answers held) and a rollout (SIGTERM)"),
}

# Cases that run on the runner's private Kafka (they stop it).
PRIVATE_KAFKA = {"sigterm_broker_down"}
