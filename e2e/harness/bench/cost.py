"""What a span costs the whole system, per leg of e2e/bench: the collector process, the ClickHouse
server (while the leg inserts, then its background merges until the parts settle) and the Kafka
broker, each net of what the process spends anyway (its idle CPU and the harness's own polling,
measured in a baseline before the leg, as a rate, and taken off over the same durations);
chserver's own request handling, calibrated per INSERT and per byte; OPTIMIZE … FINAL apart;
`system.events` deltas; parts; bytes on disk after settling and the keys columns' share.

Pure computation and rendering only (standard library: e2e/docs imports it): costio.py does
the sampling and the queries, bench.py runs the legs.
"""

import math
import re
import statistics

# system.events counters shown per span in the table (the report keeps every non-zero delta).
# Names as ClickHouse 26.9 (chdb) has them.
EVENTS = [
    ("InsertedRows", "rows inserted (views included)", 1, ""),
    ("MergeTreeDataWriterRows", "rows written into new parts (views' tables included)", 1, ""),
    ("MergeTreeDataWriterUncompressedBytes", "bytes written into new parts, uncompressed", 1, " B"),
    ("MergeTreeDataWriterCompressedBytes", "bytes written into new parts, compressed", 1, " B"),
    ("MergeTreeDataWriterSortingBlocksMicroseconds", "sorting blocks on insert", 1, " µs"),
    ("MergedRows", "rows read by merges", 1, ""),
    ("MergedUncompressedBytes", "bytes read by merges, uncompressed", 1, " B"),
    ("MergeTotalMilliseconds", "merges' wall time, summed over merges (not CPU)", 1000, " µs"),
    ("OSWriteBytes", "bytes written to disk (OS)", 1, " B"),
]

# The keys columns of the JSON table and the skip indexes built over them.
KEYS_COLUMNS = ("ResourceAttributesKeys", "SpanAttributesKeys")
KEYS_INDEXES = ("idx_res_attr_keys", "idx_span_attr_keys")


# ---------------------------------------------------------------- the legs compared

def ratio_pairs(legs):
    """The ratio columns of a report's tables, as (numerator, denominator) legs: tracehouse
    over every peer, and a variant of tracehouse (`tracehouse+processing`) over tracehouse,
    so that a figure above 1 is what the variant adds."""
    if "tracehouse" not in legs:
        return []
    return [(q, "tracehouse") if q.startswith("tracehouse+") else ("tracehouse", q)
            for q in legs if q != "tracehouse"]


# ---------------------------------------------------------------- processing rules

PROCESSED = "tracehouse_spans_processed_total"
REMOVED = ("dropped", "sampled_out")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def spans_processed(samples):
    """What each processing rule did, from the collector's /metrics samples
    ({series: value}): {rule: {"dropped", "sampled_out", "redacted"}}, in the order the
    series came; {} without rules (or without a scrape)."""
    out = {}
    for key, value in (samples or {}).items():
        if not key.startswith(PROCESSED + "{"):
            continue
        labels = dict(_LABEL.findall(key[len(PROCESSED):]))
        rule, outcome = labels.get("rule"), labels.get("outcome")
        if rule is None or outcome is None:
            continue
        out.setdefault(rule, {"dropped": 0, "sampled_out": 0, "redacted": 0})[outcome] = int(value)
    return out


def spans_removed(processed):
    """Spans the rules kept out of the table on purpose (dropped or sampled out)."""
    return sum(c.get(k, 0) for c in (processed or {}).values() for k in REMOVED)


def judge_processed(spans, processed, verify):
    """A leg with processing rules, judged on the rows the rules keep: every row found is a
    span produced (none out of range), none is stored twice, and rows + the spans the
    collector reports dropped or sampled out = the spans produced (so the spans verify finds
    missing are exactly as many as the rules removed). (exact, {figures for the report})."""
    removed = spans_removed(processed)
    rows, missing = verify.get("rows_found"), verify.get("lost")
    figures = {"spans_removed_by_rules": removed, "rows_expected": spans - removed,
               "processing_rules": processed,
               "removed_share": round(removed / spans, 4) if spans else None}
    exact = (processed is not None and rows is not None and missing is not None
             and verify.get("duplicates") == 0 and not verify.get("out_of_range")
             and rows == spans - removed and missing == removed)
    return exact, figures


# ---------------------------------------------------------------- repeats

def rotate(legs, repeat):
    """The leg order of repeat `repeat` (0-based): rotated by one each repeat, so no leg always
    runs first (on a cold cache) or last (after the others' parts)."""
    k = repeat % len(legs) if legs else 0
    return list(legs[k:]) + list(legs[:k])


def median_or_none(values):
    xs = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
          and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(xs) if xs else None


def median_of_repeats(runs):
    """One leg's figures over its repeats: every number the median of the repeats (numbers
    in nested dicts too), `verified` only if every repeat was, anything else as the first
    repeat had it; the repeats themselves under "repeats" (series dropped but the first's)."""
    if len(runs) == 1:
        return dict(runs[0])

    def merge(items):
        first = items[0]
        if isinstance(first, bool):
            return all(bool(x) for x in items)
        if isinstance(first, (int, float)) or (first is None and any(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in items)):
            m = median_or_none(items)
            if m is None:
                return None
            if isinstance(m, float) and m.is_integer() and all(
                    isinstance(x, int) for x in items if x is not None):
                return int(m)
            return round(m, 6) if isinstance(m, float) else m
        if isinstance(first, dict):
            keys = list(first) + [k for it in items[1:] if isinstance(it, dict)
                                  for k in it if k not in first]
            return {k: merge([it.get(k) if isinstance(it, dict) else None for it in items])
                    for k in dict.fromkeys(keys)}
        return first

    out = merge(runs)
    out["verified"] = all(r.get("verified") for r in runs)
    out["series"] = runs[0].get("series")
    out["repeats"] = [{k: v for k, v in r.items() if k != "series"} for r in runs]
    return out


# ---------------------------------------------------------------- CPU

def rate(cpu0, cpu1, seconds):
    """CPU-seconds per second between two readings (None when one is missing)."""
    if cpu0 is None or cpu1 is None or not seconds or seconds <= 0:
        return None
    return (cpu1 - cpu0) / seconds


def net(cpu_seconds, per_second, seconds):
    """CPU over a window with the baseline rate over the same duration taken off."""
    if cpu_seconds is None:
        return None
    return cpu_seconds - (per_second or 0.0) * (seconds or 0.0)


def least_squares_2(points):
    """Least squares of c = a·x + b·y over (x, y, c) points: (a, b), or None when the points
    cannot separate the two (fewer than two, or collinear). The calibrations' one fit."""
    sxx = sum(x * x for x, _, _ in points)
    sxy = sum(x * y for x, y, _ in points)
    syy = sum(y * y for _, y, _ in points)
    sxc = sum(x * c for x, _, c in points)
    syc = sum(y * c for _, y, c in points)
    det = sxx * syy - sxy * sxy
    if len(points) < 2 or abs(det) < 1e-9 * max(sxx * syy, 1):
        return None
    return (sxc * syy - syc * sxy) / det, (syc * sxx - sxc * sxy) / det


def fit_insert_and_byte(points):
    """cpu = a·inserts + b·bytes over (inserts, bytes, cpu_seconds) points:
    {"per_insert_us", "per_mib_ms"}, or None when the points cannot separate the two."""
    fit = least_squares_2(points)
    if fit is None:
        return None
    a, b = fit
    return {"per_insert_us": round(a * 1e6, 1), "per_mib_ms": round(b * 2**20 * 1e3, 3)}


def chserver_share(calibration, inserts, body_bytes):
    """CPU-seconds chserver's own request path takes for `inserts` INSERTs carrying
    `body_bytes` (as chserver counted them), by the calibration; None without one."""
    if not calibration or inserts is None:
        return None
    return (calibration["per_insert_us"] * 1e-6 * inserts
            + calibration["per_mib_ms"] * 1e-3 * (body_bytes or 0) / 2**20)


def per_span_us(cpu_seconds, spans):
    if cpu_seconds is None or not spans:
        return None
    return round(cpu_seconds / spans * 1e6, 2)


def leg_cost(spans, collector_cpu, server, broker, baseline, calibration, inserts,
             body_bytes, optimize=None, harness_blocks=None):
    """The leg's bill in CPU µs per span.

    server: {"insert_cpu", "insert_s", "settle_cpu", "settle_s"} — CPU-seconds of the
    ClickHouse process from the collector's start until it stopped (inserts, and merges that
    ran meanwhile) and from then until the parts settled, and the two durations;
    broker: {"cpu", "seconds"} over the leg (the collector's start until it stopped);
    baseline: rates in CPU-seconds per second: "server_poll" (idle + the harness's progress
    polls), "server_settle" (idle + the settle polls), "server_idle", "broker_poll";
    optimize: {"cpu", "seconds"} of OPTIMIZE … FINAL after settling, or None;
    harness_blocks: blocks the harness's own freshness view wrote (live mode), estimated at
    the calibration's cost of one small part each and taken off with chserver's path."""
    b = baseline or {}
    ins = net(server.get("insert_cpu"), b.get("server_poll"), server.get("insert_s"))
    mer = net(server.get("settle_cpu"), b.get("server_settle"), server.get("settle_s"))
    kaf = net(broker.get("cpu"), b.get("broker_poll"), broker.get("seconds"))
    ch = None if ins is None else ins + (mer or 0.0)
    own = chserver_share(calibration, inserts, body_bytes)
    view = None
    if harness_blocks and calibration and calibration.get("per_part_us") is not None:
        view = harness_blocks * max(calibration["per_part_us"], 0.0) * 1e-6
    parts = [collector_cpu, ch, kaf]
    total = None if any(x is None for x in parts) else sum(parts)
    out = {
        "collector_us": per_span_us(collector_cpu, spans),
        "clickhouse_insert_us": per_span_us(ins, spans),
        "clickhouse_merge_us": per_span_us(mer, spans),
        "clickhouse_us": per_span_us(ch, spans),
        "kafka_us": per_span_us(kaf, spans),
        "system_us": per_span_us(total, spans),
        "chserver_own_us": per_span_us(own, spans),
        "harness_view_us": per_span_us(view, spans),
        "system_less_chserver_us": per_span_us(
            None if total is None or own is None else total - own - (view or 0.0), spans),
        "optimize_final_us": None,
    }
    if optimize:
        out["optimize_final_us"] = per_span_us(
            net(optimize.get("cpu"), b.get("server_idle"), optimize.get("seconds")), spans)
    return out


def pooled_baseline(baselines):
    """One baseline for a run: for each rate, the median over the legs' baselines that have
    it (None when none do)."""
    keys = dict.fromkeys(k for b in baselines if b for k in b)
    out = {k: median_or_none([b.get(k) for b in baselines if b]) for k in keys}
    return {k: (round(v, 5) if isinstance(v, float) else v) for k, v in out.items()} or None


# ---------------------------------------------------------------- the server's tables

def events_delta(before, after):
    """Non-zero differences of two `system.events` snapshots ({name: value})."""
    if before is None or after is None:
        return None
    out = {}
    for k, v in after.items():
        d = v - before.get(k, 0)
        if d:
            out[k] = d
    return out


def parse_events(tsv):
    out = {}
    for line in tsv.splitlines():
        if line.strip():
            name, value = line.split("\t")
            out[name] = int(value)
    return out


def parse_settle_probe(tsv):
    """(merges running, parts signature) from settle_probe's answer."""
    merges, parts, newest, blocks = tsv.strip().split("\t")
    return int(merges), (int(parts), newest, int(blocks))


class Settler:
    """Parts have settled when no merge has been running and the active parts have not
    changed for `quiet` seconds (a merge that ends makes a new part, so it restarts the
    clock)."""

    def __init__(self, quiet):
        self.quiet = quiet
        self.since = None
        self.last = None

    def observe(self, t, merges, signature):
        """True once settled (at time t)."""
        if merges or signature != self.last or self.since is None:
            self.since = t
            self.last = signature
            return False
        return t - self.since >= self.quiet


def disk_figures(spans, tables, wide_bytes, keys_columns_bytes, keys_indexes_bytes,
                 parts_active):
    """Bytes on disk per span over the product's tables ({table: bytes_on_disk}) and the keys
    columns' share: their compressed data and marks as a share of the wide parts of
    otel_traces (`wide_bytes`: a compact part keeps every column in one file, so columns
    cannot be told apart there), plus their skip indexes as a share of every byte."""
    total = sum(tables.values()) if tables else None
    col_share = keys_columns_bytes / wide_bytes if wide_bytes and keys_columns_bytes is not None \
        else None
    idx_share = keys_indexes_bytes / total if total and keys_indexes_bytes is not None else None
    share = None if col_share is None and idx_share is None else (col_share or 0) + (idx_share or 0)
    return {
        "bytes_on_disk": total,
        "bytes_on_disk_by_table": tables,
        "bytes_on_disk_per_span": round(total / spans, 1) if total is not None and spans else None,
        "wide_parts_bytes": wide_bytes,
        "keys_columns_bytes": keys_columns_bytes,
        "keys_indexes_bytes": keys_indexes_bytes,
        "keys_columns_share_of_wide_parts": None if col_share is None else round(col_share, 4),
        "keys_indexes_share": None if idx_share is None else round(idx_share, 4),
        "keys_share": None if share is None else round(share, 4),
        "parts_active_after_settling": parts_active,
    }


# ---------------------------------------------------------------- the table

def _fmt(v, unit="", digits=None):
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "**NO**"
    if isinstance(v, float):
        if digits is not None:
            v = f"{v:,.{digits}f}"
        else:
            v = f"{v:,.2f}" if abs(v) < 10 else f"{v:,.1f}" if abs(v) < 1000 else f"{v:,.0f}"
    elif isinstance(v, int):
        v = f"{v:,}"
    return f"{v}{unit}"


def _pct(v):
    return "—" if v is None else f"{v * 100:.1f} %"


def _get(r, path):
    for k in path.split("."):
        if not isinstance(r, dict):
            return None
        r = r.get(k)
    return r


COST_ROWS = [
    ("collector process", "cost.collector_us", " µs"),
    ("ClickHouse, while the leg ran (inserts, merges meanwhile)", "cost.clickhouse_insert_us", " µs"),
    ("ClickHouse, after it until parts settled (merges)", "cost.clickhouse_merge_us", " µs"),
    ("Kafka broker", "cost.kafka_us", " µs"),
    ("**system CPU per span**", "cost.system_us", " µs"),
    ("of it, chserver's own request path (calibrated)", "cost.chserver_own_us", " µs"),
    ("of it, the harness's freshness view (live mode, estimated)", "cost.harness_view_us", " µs"),
    ("system CPU per span less chserver's path (and the harness's view)",
     "cost.system_less_chserver_us", " µs"),
    ("OPTIMIZE … FINAL afterwards (apart, not in the sum)", "cost.optimize_final_us", " µs"),
]


SUMMARY_PATHS = ("cost.collector_us", "cost.clickhouse_insert_us", "cost.clickhouse_merge_us",
                 "cost.kafka_us", "cost.system_us", "cost.chserver_own_us", "cost.harness_view_us",
                 "cost.system_less_chserver_us")


def cost_table(report, legs, summary=False):
    """The per-leg bill in one table: CPU µs per span per process and in all, INSERTs, parts,
    bytes on disk, the system.events deltas per span; tracehouse's ratio to each peer (and a
    variant of tracehouse's to tracehouse, `ratio_pairs`). Per span is per span read: a leg
    whose processing rules removed spans shows the rows it wrote on a line of its own.
    summary: the CPU lines, INSERTs, parts and bytes on disk only."""
    pairs = ratio_pairs(legs)
    head = "| per span | " + " | ".join(legs) + "".join(f" | {x} / {y}" for x, y in pairs) + " |"
    lines = [head, "|---|" + "---:|" * (len(legs) + len(pairs))]

    def row(label, values, unit="", ratio=True, fmt=None):
        cells = [(fmt or _fmt)(v) if fmt else _fmt(v, unit) for v in values]
        for a, b in pairs:
            x, y = values[legs.index(a)], values[legs.index(b)]
            ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                     for v in (x, y))
            cells.append(f"{x / y:.2f}×" if ratio and ok else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    for label, path, unit in COST_ROWS:
        values = [_get(report[leg], path) for leg in legs]
        if path == "cost.harness_view_us" and all(v is None for v in values):
            continue  # pre-filled runs have no freshness view
        if not summary or path in SUMMARY_PATHS:
            row(label, values, unit)
    if any("spans_removed_by_rules" in report[leg] for leg in legs):
        row("rows written (spans less those the processing rules removed)",
            [report[leg].get("rows_found") for leg in legs])
    row("INSERT statements", [report[leg].get("inserts") for leg in legs])
    row("parts created (blocks written)", [report[leg].get("insert_blocks") for leg in legs])
    row("rows per part created", [_get(report[leg], "cost.rows_per_part") for leg in legs])
    if summary:
        row("**bytes on disk per span** (after settling)",
            [_get(report[leg], "disk.bytes_on_disk_per_span") for leg in legs], " B")
        return "\n".join(lines)
    row("active parts after settling", [_get(report[leg], "disk.parts_active_after_settling")
                                         for leg in legs])
    row("seconds until parts settled", [_get(report[leg], "settle.seconds") for leg in legs], " s")
    row("**bytes on disk per span** (after settling)",
        [_get(report[leg], "disk.bytes_on_disk_per_span") for leg in legs], " B")
    row("of it, the keys columns and their indexes",
        [_get(report[leg], "disk.keys_share") for leg in legs], ratio=False, fmt=_pct)
    busy = []
    for leg in legs:
        r = report[leg]
        other, wall = r.get("other_processes_cpu_seconds"), r.get("wall_seconds")
        busy.append(round(other / wall, 2) if isinstance(other, (int, float)) and wall else None)
    if any(v is not None for v in busy):
        row("everything else on the machine meanwhile (cores busy; not in the figures)", busy,
            ratio=False)
    for name, label, scale, unit in EVENTS:
        vals = []
        for leg in legs:
            d = _get(report[leg], "events")
            n = report[leg].get("spans")
            vals.append(None if d is None or not n else round(d.get(name, 0) * scale / n, 2))
        if any(v for v in vals):
            row(f"{label} (`{name}`)", vals, unit)
    return "\n".join(lines)


def cost_note(run):
    """How the figures above were taken: repeats, baselines, calibration, settling."""
    c = run.get("cost_method") or {}
    cal = c.get("calibration") or {}
    parts = []
    reps = run.get("repeats") or 1
    parts.append(f"median of {reps} repeat{'s' if reps != 1 else ''}"
                 + (", the leg order rotated each repeat" if reps > 1 else ""))
    if c.get("baseline_seconds"):
        parts.append(f"idle CPU and the harness's polling measured for {c['baseline_seconds']:g} s "
                     "before each leg"
                     + (", pooled over the run (median)" if c.get("baseline_pooled") else "")
                     + ", and taken off over the leg's own durations")
    if c.get("settle_quiet_seconds") is not None:
        parts.append(f"settled: no `system.merges` row and no new part for "
                     f"{c['settle_quiet_seconds']:g} s")
    if cal.get("per_insert_us") is not None:
        parts.append(f"chserver's own path calibrated at {cal['per_insert_us']:,.0f} µs per INSERT "
                     f"and {cal['per_mib_ms']:,.2f} ms per MiB of body (one-row and 8 MiB INSERTs "
                     "into a Null table: an upper bound, the engine's own per-query work included)")
    return "; ".join(parts) + "."
