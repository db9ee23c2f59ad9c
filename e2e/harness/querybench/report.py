"""The benchmark's outputs from its result JSON, pure but for the PNG file: the markdown tables
(ingest per layout; warm p50/p95/p99 per query and layout; cold p50 with rows and bytes read;
where the run measured it, the server's CPU per query; where it had a JSON layout with the
`*AttributesKeys` columns and one without, what the keys columns buy the key shapes and what
they cost per span and on disk), which e2e/docs also puts into docs/querybench.md, and the PNG
(warm and cold p50 per query, one bar per layout, log scale). A report of an earlier run, without
those figures, renders as it did."""


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


def _has_cpu(result):
    return any("server_cpu_p50_ms" in (lay["queries"][q]["warm"] or {})
               for lay in result["layouts"].values() for q in lay["queries"])


def _cpu_cell(summary):
    if not summary or summary.get("server_cpu_p50_ms") is None:
        return "–"
    cell = f"{summary['server_cpu_p50_ms']:.1f}"
    if summary.get("server_cpu_disturbed"):
        cell += f" ({summary['server_cpu_disturbed']}/{summary['n']} disturbed)"
    return cell


def cpu_table(result):
    """Server CPU per query (warm p50), one column per layout."""
    names = list(result["layouts"])
    lines = ["| query | " + " | ".join(f"{n} ms" for n in names) + " |",
             "|---|" + "---|" * len(names)]
    for q in result["run"]["queries"]:
        cells = [_cpu_cell(result["layouts"][n]["queries"][q]["warm"]) for n in names]
        lines.append(f"| {q} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def keys_pair(result):
    """(with, without): a JSON layout with the keys columns and one without, if the run had
    both (reports record `attributes` and `keys` per layout since the keys shapes exist)."""
    lays = result["layouts"].items()
    with_ = [n for n, lay in lays if lay.get("attributes") == "json" and lay.get("keys")]
    without = [n for n, lay in lays if lay.get("attributes") == "json" and lay.get("keys") is False]
    return (with_[0], without[0]) if with_ and without else None


def keys_queries(result):
    return [q for q, meta in result["run"]["queries"].items() if "keys" in meta.get("tags", ())]


def _ratio(a, b):
    if a is None or b is None:
        return "–"
    if not b:
        return "– (nothing read with keys)" if a else "–"
    return f"{a / b:.1f}×"


def keys_readers_table(result, pair):
    """The key shapes on every layout: warm p50 wall, server CPU, and what the cold run read;
    the last column divides the table without keys columns by the one with them."""
    with_, without = pair
    names = [with_, without] + [n for n in result["layouts"] if n not in pair]
    lines = ["| query | " + " | ".join(f"{n}: warm p50 ms · server CPU ms · cold rows read · "
                                       "bytes read" for n in names)
             + f" | {without} ÷ {with_}: server CPU · bytes read |",
             "|---|" + "---|" * (len(names) + 1)]
    for q in keys_queries(result):
        cells = []
        for n in names:
            w, c = (result["layouts"][n]["queries"][q][m] for m in ("warm", "cold"))
            cells.append(f"{w['p50_ms']:.1f} · {_cpu_cell(w)} · {_fmt_rows(c['rows_read_p50'])} · "
                         f"{_fmt_bytes(c['bytes_read_p50'])}")
        a, b = (result["layouts"][n]["queries"][q] for n in (without, with_))
        cpu = _ratio(a["warm"].get("server_cpu_p50_ms"), b["warm"].get("server_cpu_p50_ms"))
        read = _ratio(a["cold"]["bytes_read_p50"], b["cold"]["bytes_read_p50"])
        lines.append(f"| {q} | " + " | ".join(cells) + f" | {cpu} · {read} |")
    return "\n".join(lines)


def _per_span(seconds, rows):
    return None if seconds is None or not rows else seconds / rows * 1e6


def keys_cost_table(result, pair):
    """What the keys columns cost: the two JSON layouts' ingest side by side."""
    with_, without = pair
    a, b = (result["layouts"][n]["ingest"] for n in pair)
    keys = a.get("keys") or {}
    disk = a["bytes_on_disk"] or 0

    def diff(x, y, digits=1, unit=""):
        return "–" if x is None or y is None else f"{x - y:+.{digits}f}{unit}"

    ins = (a["server_cpu_us_per_span"], b["server_cpu_us_per_span"])
    mrg = (_per_span(a["server_cpu_seconds_merge"], a["rows"]),
           _per_span(b["server_cpu_seconds_merge"], b["rows"]))
    lines = [f"| | {with_} (keys columns) | {without} | difference |", "|---|---:|---:|---:|",
             f"| server CPU µs/span, insert | {_v(ins[0])} | {_v(ins[1])} | {diff(*ins)} |",
             f"| server CPU µs/span, merge (OPTIMIZE FINAL) | {_v(mrg[0])} | {_v(mrg[1])} | "
             f"{diff(*mrg)} |",
             f"| collector spans/CPU-s | {a['spans_per_cpu_second'] or '–':,} | "
             f"{b['spans_per_cpu_second'] or '–':,} | |",
             f"| on disk, B/span | {a['bytes_per_span']} | {b['bytes_per_span']} | "
             f"{diff(a['bytes_per_span'], b['bytes_per_span'])} |"]
    for col, c in sorted(keys.get("columns", {}).items()):
        lines.append(f"| {col} on disk (data + marks; read uncompressed) | "
                     f"{_fmt_bytes(c['bytes'])} ({100 * c['bytes'] / disk:.2f} %; "
                     f"{_fmt_bytes(c['uncompressed_bytes'])}) | – | |" if disk else
                     f"| {col} on disk | {_fmt_bytes(c['bytes'])} | – | |")
    if keys:
        share = 100 * (keys["columns_bytes"] + keys["index_bytes"]) / disk if disk else None
        lines.append(f"| their bloom filters (idx_*_attr_keys) | {_fmt_bytes(keys['index_bytes'])}"
                     " | – | |")
        lines.append(f"| keys columns and bloom filters, share of the bytes on disk | "
                     f"{_v(share, 2)} % | – | |")
    return "\n".join(lines)


def markdown(result):
    parts = [header(result), "", "Ingest (through tracehouse-collector; merge = OPTIMIZE FINAL):",
             "", ingest_table(result), "",
             "Warm (wall time at the client, one warm-up run first):", "", warm_table(result),
             "", "Cold (ClickHouse caches dropped before each run; p50 of rows and bytes the "
             "server read):", "", cold_table(result)]
    if _has_cpu(result):
        parts += ["", "Server CPU per query (warm p50 of the engine's query threads, "
                  "`system.events` around each execution; p50 over the undisturbed draws, "
                  "those during which the server started other queries or merges counted "
                  "apart):", "", cpu_table(result)]
    pair = keys_pair(result)
    if pair and keys_queries(result):
        parts += ["", f"The keys columns, what they buy: the attribute-key shapes, {pair[0]} "
                  f"reading `*AttributesKeys`, {pair[1]} `JSONAllPaths` or the path, Map "
                  "tables their keys subcolumn or `mapContains`:", "",
                  keys_readers_table(result, pair), "",
                  f"The keys columns, what they cost ({pair[0]} against {pair[1]}, loaded from "
                  "the same topic in this run):", "", keys_cost_table(result, pair)]
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
