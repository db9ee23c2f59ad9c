"""The benchmark's outputs from its result JSON, pure but for the PNG file: the markdown tables
(ingest per layout; warm p50/p95/p99 per query and layout; cold p50 with rows and bytes read),
which e2e/docs also puts into docs/querybench.md, and the PNG (warm and cold p50 per query, one
bar per layout, log scale)."""


def _fmt_bytes(n):
    if n is None:
        return "–"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _fmt_rows(n):
    if n is None:
        return "–"
    if n >= 1e6:
        return f"{n / 1e6:.2f} M"
    if n >= 1e3:
        return f"{n / 1e3:.1f} k"
    return str(n)


def _v(x, digits=1):
    return "–" if x is None else f"{x:.{digits}f}"


def header(result):
    r = result["run"]
    d = r["data"]
    m = r["machine"]
    return (f"{r['spans']:,} spans ({d['otlp_bytes'] / r['spans']:.0f} B of OTLP each), "
            f"{d['services_seen']} services, {d['span_names']} span names, mean "
            f"{d['mean_spans_per_trace']} spans per trace, {d['hours']} h of timestamps; "
            f"{r['iterations']} warm / {r['cold_iterations']} cold draws per query; "
            f"ClickHouse {r['server_version']}; {m['cpus']} CPUs ({m['cpu_model']}), "
            f"{m['memory_gib']} GiB — {r['date']}, commit {r['git']}")


def ingest_table(result):
    lines = ["| layout | rows | collector spans/CPU-s | server CPU µs/span (insert) | "
             "merge: wall s / server CPU s | on disk | B/span | skip-index bytes | "
             "reader queries ok | load avg (queries) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, lay in result["layouts"].items():
        i, rd = lay["ingest"], lay["readers"]
        ok = rd["checked"] - len(rd["failures"])
        lines.append(
            f"| {name} | {i['rows']:,}{'' if i['exact'] else ' (NOT EXACT)'} | "
            f"{i['spans_per_cpu_second'] or '–':,} | {_v(i['server_cpu_us_per_span'])} | "
            f"{_v(i['merge_wall_seconds'])} / {_v(i['server_cpu_seconds_merge'])} | "
            f"{_fmt_bytes(i['bytes_on_disk'])} | {i['bytes_per_span']} | "
            f"{_fmt_bytes(i['index_bytes'])} | {ok}/{rd['checked']} | "
            + "–".join(f"{x:.1f}" for x in lay.get("loadavg_1m_queries", [])) + " |")
    return "\n".join(lines)


def _best_vs_map(result, q, mode="warm"):
    lays = result["layouts"]
    if "map" not in lays or len(lays) < 2:
        return None
    base = lays["map"]["queries"][q][mode]["p50_ms"]
    best_name, best = min(((n, l["queries"][q][mode]["p50_ms"]) for n, l in lays.items()),
                          key=lambda x: x[1])
    return best_name, base / best if best else None


def warm_table(result):
    names = list(result["layouts"])
    lines = ["| query | " + " | ".join(f"{n} p50 / p95 / p99 ms" for n in names)
             + " | best p50 vs map |",
             "|---|" + "---|" * (len(names) + 1)]
    for q in result["run"]["queries"]:
        cells = []
        for n in names:
            w = result["layouts"][n]["queries"][q]["warm"]
            cells.append(f"{w['p50_ms']:.1f} / {w['p95_ms']:.1f} / {w['p99_ms']:.1f}")
        best = _best_vs_map(result, q)
        b = f"{best[0]} {best[1]:.1f}×" if best and best[1] else "–"
        lines.append(f"| {q} | " + " | ".join(cells) + f" | {b} |")
    return "\n".join(lines)


def cold_table(result):
    names = list(result["layouts"])
    lines = ["| query | " + " | ".join(f"{n}: cold p50 ms · rows read · bytes read"
                                       for n in names) + " |",
             "|---|" + "---|" * len(names)]
    for q in result["run"]["queries"]:
        cells = []
        for n in names:
            c = result["layouts"][n]["queries"][q]["cold"]
            cells.append(f"{c['p50_ms']:.1f} · {_fmt_rows(c['rows_read_p50'])} · "
                         f"{_fmt_bytes(c['bytes_read_p50'])}")
        lines.append(f"| {q} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def failures(result):
    out = []
    for name, lay in result["layouts"].items():
        for f in lay["readers"]["failures"]:
            out.append(f"- {name}: {f['reader']} / {f['query']}: {f['error']}")
    return "\n".join(out)


def markdown(result):
    parts = [header(result), "", "Ingest (through tracehouse-collector; merge = OPTIMIZE FINAL):",
             "", ingest_table(result), "",
             "Warm (wall time at the client, one warm-up run first):", "", warm_table(result),
             "", "Cold (ClickHouse caches dropped before each run; p50 of rows and bytes the "
             "server read):", "", cold_table(result)]
    disturbed = [f"- {n}: the server went away {lay['server_reconnects']} times while its queries "
                 "ran (restarted by other work on the shared stack; samples around it ran on "
                 "empty caches)" for n, lay in result["layouts"].items()
                 if lay.get("server_reconnects")]
    if disturbed:
        parts += ["", "Disturbed:", "", *disturbed]
    f = failures(result)
    if f:
        parts += ["", "Reader queries that failed:", "", f]
    return "\n".join(parts)


def plot(result, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["layouts"])
    queries = list(result["run"]["queries"])
    fig, axes = plt.subplots(2, 1, figsize=(14, 9), sharex=True)
    width = 0.8 / max(len(names), 1)
    for ax, mode in zip(axes, ("warm", "cold")):
        for i, n in enumerate(names):
            vals = [result["layouts"][n]["queries"][q][mode]["p50_ms"] for q in queries]
            ax.bar([x + i * width for x in range(len(queries))], vals, width, label=n)
        ax.set_yscale("log")
        ax.set_ylabel(f"{mode} p50 (ms, log)")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0].legend(ncol=len(names))
    axes[1].set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(queries))])
    axes[1].set_xticklabels(queries, rotation=35, ha="right")
    r = result["run"]
    fig.suptitle(f"otel_traces query latency per layout — {r['spans']:,} spans, "
                 f"{r['date']} ({r['git']})")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
