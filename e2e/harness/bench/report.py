"""Markdown tables of a bench report (e2e/harness/bench/bench.py): the per-leg figures with
tracehouse's ratio to every other leg, and, in live mode, span end -> queryable per leg; a
partition sweep's inserts, parts and freshness per leg and partition count; what each column
group and each INSERT cost the server (e2e/column-cost). Standard library only (e2e/docs)."""

from harness.bench.cost import ratio_pairs

# How each leg wrote into ClickHouse, as the server counted it (inserts.py); shown only for
# reports that have them, so older reports render as they did.
INSERT_ROWS = [("INSERT statements (server's count)", "inserts", ""),
               ("blocks written (parts created)", "insert_blocks", ""),
               ("INSERTs per second", "inserts_per_second", ""),
               ("parts created per minute", "parts_per_minute", ""),
               ("rows per INSERT", "rows_per_insert", "")]


def fmt(v, unit=""):
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "**NO**"
    if isinstance(v, float):
        v = f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
    elif isinstance(v, int):
        v = f"{v:,}"
    return f"{v}{unit}"


def table(report, legs):
    rows = [("spans", "spans", ""), ("verified (no loss, no duplicates)", "verified", ""),
            ("lost / duplicated", None, ""), ("CPU-seconds (collector process)", "cpu_seconds", " s"),
            ("wall time to all rows in + lag 0", "wall_seconds", " s"),
            ("**spans per CPU-second**", "spans_per_cpu_second", ""),
            ("MB of OTLP per CPU-second", "otlp_mb_per_cpu_second", ""),
            ("spans per second (wall)", "spans_per_second", ""),
            ("MB/s to ClickHouse (request bytes as sent)", "mb_per_second", ""),
            ("bytes to ClickHouse per span", "bytes_to_clickhouse_per_span", " B"),
            ("ClickHouse server CPU per span", "clickhouse_server_cpu_us_per_span", " µs"),
            ("peak RSS (VmHWM)", "peak_rss_mib", " MiB")]
    if any("insert_blocks" in report[leg] or "inserts" in report[leg] for leg in legs):
        rows += INSERT_ROWS
    processing = [leg for leg in legs if "spans_removed_by_rules" in report[leg]]
    if processing:
        # A leg with processing rules writes fewer rows than it reads (its "lost" are spans
        # neither written nor removed by a rule); its figures per span are per span read.
        rows[3:3] = [("spans removed by the rules (dropped, sampled out)", "spans_removed_by_rules", ""),
                     ("rows written (verified: spans − removed)", "rows_found", "")]
    # tracehouse's ratio to every other leg (a variant of tracehouse: its ratio to tracehouse).
    pairs = ratio_pairs(legs)
    head = "| | " + " | ".join(legs) + "".join(f" | {x} / {y}" for x, y in pairs) + " |"
    lines = [head, "|---|" + "---:|" * (len(legs) + len(pairs))]
    for label, key, unit in rows:
        cells = []
        for leg in legs:
            r = report[leg]
            if key is None:
                cells.append(f"{fmt(r.get('lost'))} / {fmt(r.get('duplicates'))}")
            elif key == "spans_removed_by_rules":  # none without rules
                cells.append(fmt(r.get(key, 0 if r.get("verified") else None), unit))
            else:
                cells.append(fmt(r.get(key), unit))
        for pair in pairs:
            x, y = (report[leg].get(key) if key else None for leg in pair)
            ratio = f"{x / y:.2f}×" if isinstance(x, (int, float)) and isinstance(y, (int, float)) \
                and not isinstance(x, bool) and y and key != "spans" else ""
            cells.append(ratio)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def freshness_table(report, legs, rate):
    """Live mode: span end -> queryable per leg (ClickHouse's stamp), over the span of each
    record that ended as it was sent and over every span, and, for tracehouse, its own
    histogram (span end -> insert acknowledged, every span)."""
    lines = [f"| produced at {rate:,.0f} spans/s | p50 | p90 | p99 | max | collector histogram "
             "p50 / p99 |", "|---|---:|---:|---:|---:|---:|"]
    for leg in legs:
        c = report[leg].get("freshness_collector") or {}
        own = f"{fmt(c.get('p50_s'), ' s')} / {fmt(c.get('p99_s'), ' s')}" if c else ""
        for key, what, hist in (("freshness_record", "a record's last span (ended as sent)", ""),
                                ("freshness_clickhouse", "every span", own)):
            f = report[leg].get(key) or {}
            lines.append(f"| {leg}, {what}: span end → queryable | {fmt(f.get('p50_s'), ' s')} | "
                         f"{fmt(f.get('p90_s'), ' s')} | {fmt(f.get('p99_s'), ' s')} | "
                         f"{fmt(f.get('max_s'), ' s')} | {hist} |")
    return "\n".join(lines)


def sweep_table(report, legs):
    """A partition sweep: one row per partition count and leg — delivery, INSERT statements,
    blocks, inserts/s, parts per minute, rows per insert, span end → queryable of a record's
    last span (p50 / p99), ClickHouse server CPU per span."""
    lines = ["| partitions | leg | verified | INSERTs | blocks (parts) | INSERTs/s | parts/min | "
             "rows/INSERT | span end → queryable p50 | p99 | server CPU/span |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for step in report["sweep"]:
        for leg in legs:
            r = step.get(leg) or {}
            f = r.get("freshness_record") or {}
            lines.append(
                f"| {step['partitions']} | {leg} | {fmt(r.get('verified'))} | "
                f"{fmt(r.get('inserts'))} | {fmt(r.get('insert_blocks'))} | "
                f"{fmt(r.get('inserts_per_second'))} | {fmt(r.get('parts_per_minute'))} | "
                f"{fmt(r.get('rows_per_insert'))} | {fmt(f.get('p50_s'), ' s')} | "
                f"{fmt(f.get('p99_s'), ' s')} | "
                f"{fmt(r.get('clickhouse_server_cpu_us_per_span'), ' µs')} |")
    return "\n".join(lines)


def column_cost_table(result):
    """An e2e/column-cost report (column_cost.py) as one table: CPU per span against every column at the same batch size,
    INSERTs, parts, merge cost; then the fit."""
    base = next((c for c in result["cases"] if c["case"] == "every column"), None)
    lines = ["| case | columns | rows per INSERT | INSERTs | parts | server CPU per span | vs every "
             "column | merge to one part, per span |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in result["cases"]:
        ratio = ""
        if base and c.get("cpu_us_per_span") and base.get("cpu_us_per_span") \
                and c["rows_per_insert"] == base["rows_per_insert"]:
            ratio = f"{c['cpu_us_per_span'] / base['cpu_us_per_span']:.2f}×"
        lines.append(f"| {c['case']} | {c['columns']} | {fmt(c['rows_per_insert'])} | "
                     f"{fmt(c['inserts'])} | {fmt(c.get('parts'))} | "
                     f"{fmt(c.get('cpu_us_per_span'), ' µs')} | {ratio} | "
                     f"{fmt(c.get('merge_cpu_us_per_span'), ' µs')} |")
    fit = result.get("fit")
    if fit:
        lines += ["", f"Least-squares fit over the batch sizes (every column): one INSERT costs "
                      f"the server **{fmt(fit['per_insert_us'])} µs** of CPU, one row "
                      f"**{fmt(fit['per_row_us'])} µs**."]
    floor = result.get("floor")
    if floor:
        lines += ["", f"Floor, through the same path: a one-row INSERT into a one-column "
                      f"MergeTree costs **{fmt(floor['per_insert_us'])} µs** "
                      f"({fmt(floor['inserts'])} INSERTs)."]
    return "\n".join(lines)
