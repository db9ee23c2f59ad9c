"""e2e/docs [--check]: the result documents under docs/ kept current from the JSON reports the
runners write — e2e/bench, e2e/column-cost and e2e/querybench into e2e/bench-results/, e2e/chaos into
e2e/chaos-results/ (copied there from $TRACEHOUSE_STATE/chaos/report-<profile>.json).

A document is hand-written prose around generated blocks. A block names its kind and its report

    <!-- generated: chaos e2e/chaos-results/quick-2026-11-26.json -->
    …
    <!-- end generated -->

and `e2e/docs` rewrites what lies between the two markers (each alone on its line) — the run's
date, commit and command, then its tables — and nothing else. Kinds: `bench` (an e2e/bench
report, a partition sweep's too), `cost` (an e2e/bench report's system cost per span alone, for
a summary), `chaos` (an e2e/chaos report), `querybench` (an e2e/querybench result),
`columncost` (an e2e/column-cost report). To add a run: copy its JSON beside the others,
put a marker where its table belongs, run `e2e/docs`, commit both.

With --check nothing is written: it fails naming each stale document, each marker whose report
is missing, and each report under e2e/*-results/ that no document shows (e2e/test runs it).
Pure Python of the standard library, so the check needs no venv and no stack.
"""

import json
import os
import re
import sys
from pathlib import Path

from harness import REPO
from harness.bench import cost, report
from harness.querybench import report as querybench_report

DOCS = "docs"
RESULTS = ("e2e/bench-results", "e2e/chaos-results")
# A marker counts only at the start of a line: prose may quote one in backticks.
BLOCK = re.compile(r"^(<!-- generated: (\S+) (\S+) -->\n)(.*?)^(<!-- end generated -->)",
                   re.S | re.M)
OPEN = re.compile(r"^<!-- generated: ", re.M)
LEGS = ("tracehouse", "tracehouse+processing", "tracehouse+alt", "otelcol", "rotel")


class DocError(Exception):
    """A document that cannot be rendered: an unknown kind, a missing report, a marker left
    open. The message names the document and the line."""


def _when(iso):
    """`2026-11-26T14:59:51+00:00` → `2026-11-26 14:59 UTC`."""
    m = re.match(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d)", iso or "")
    return f"{m[1]} {m[2]} UTC" if m else str(iso)


def _num(v):
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _value(v, nested=False):
    """A case's extra figure as short text: dicts as `k v, k v` (in parentheses when nested),
    lists joined with `/`, lists of records counted (they stay in the report)."""
    if isinstance(v, dict):
        text = ", ".join(f"{k} {_value(x, True)}" for k, x in v.items())
        return f"({text})" if nested else text
    if isinstance(v, list):
        if v and all(isinstance(x, dict) for x in v):
            return f"{len(v)} entries (in the report)"
        return "/".join(" ".join(map(_value, x)) if isinstance(x, list) else _value(x, True)
                        for x in v)
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return _num(v)


# What every case row has; the rest of a row is the case's own figures (the notes column).
CASE_COMMON = {"case", "title", "world", "lost", "duplicated", "recover_s", "peak_rss_mib",
               "passed", "took_s", "kept", "error"}


def _unit(v, unit):
    """A measured figure as the report has it (35.0 stays 35.0)."""
    return "–" if v in (None, "-") else f"{v} {unit}"


def chaos_block(rep, source):
    """An e2e/chaos report: when, which revision, the command, then one row per case."""
    cases = rep["cases"]
    passed = sum(bool(c.get("passed")) for c in cases)
    lines = [f"**{_when(rep['started'])}**, revision `{rep['revision']}`, {rep['profile']} "
             f"profile, seed {rep['seed']}, {_num(rep['took_s'])} s: **{passed} of "
             f"{len(cases)} passed**. Report: [`{source}`]({_rel(source)}).", "",
             "```", rep["command"], "```", "",
             "| case | result | lost | duplicated | time to recover | peak RSS | took | notes |",
             "|---|---|---|---|---|---|---|---|"]
    for c in cases:
        notes = "; ".join(f"{k} {_value(v)}" for k, v in c.items() if k not in CASE_COMMON)
        lines.append(f"| {c['case']} | {'pass' if c.get('passed') else '**FAIL**'} | "
                     f"{_value(c.get('lost', '–'))} | {_value(c.get('duplicated', '–'))} | "
                     f"{_unit(c.get('recover_s'), 's')} | {_unit(c.get('peak_rss_mib'), 'MiB')} | "
                     f"{_unit(c.get('took_s'), 's')} | {notes} |")
    failed = [c for c in cases if not c.get("passed")]
    if failed:
        lines += ["", "Failed:", ""]
        lines += [f"- {c['case']}: {' '.join(str(c.get('error', '')).split())}" for c in failed]
    return "\n".join(lines)


def bench_block(rep, source):
    """An e2e/bench report: when, which commit, the machine, the command, the per-leg table
    and, in live mode, span end → queryable; the run's PNG if it was kept beside the JSON."""
    run = rep["run"]
    if "sweep" in rep:
        return sweep_block(rep, source)
    legs = [leg for leg in LEGS if leg in rep]
    m = run.get("machine", {})
    lines = [f"**{_when(run['date'])}**, commit `{run['git']}`, {m.get('cpus')} CPUs "
             f"({m.get('cpu_model')}), {_num(m.get('memory_gib'))} GiB; {run.get('mode')} mode, "
             f"`{run.get('span_profile')}` spans, {run.get('attributes')} attributes, "
             f"{run.get('engine')} engine, {run.get('partitions')} partitions. Report: "
             f"[`{source}`]({_rel(source)}).{_binaries(run)}", "", "```", run["command"], "```", "",
             report.table(rep, legs)]
    if "cost_method" in run:
        lines += ["", f"What a span costs the system, per process ({run.get('engine')} engine"
                  + (", a parse diagnostic: nothing is stored" if run.get("engine") == "null" else "")
                  + "): CPU µs per span, " + cost.cost_note(run), "", cost.cost_table(rep, legs)]
    if run.get("mode") == "live":
        lines += ["", report.freshness_table(rep, legs, run["rate_spans_per_second"])]
    png = Path(source).with_suffix(".png")
    if (REPO / png).exists():
        lines += ["", f"![rows/s, lag and RSS of each leg]({_rel(png)})"]
    return "\n".join(lines)


def cost_block(rep, source):
    """The top summary of an e2e/bench report: one line on the run, then what a span costs the
    system per process (cost.cost_table's summary rows); the full tables are its `bench` block."""
    run = rep["run"]
    legs = [leg for leg in LEGS if leg in rep]
    what = (f"live {run['rate_spans_per_second']:,.0f} spans/s for {_num(run['duration_seconds'])} s"
            if run.get("mode") == "live" else f"pre-filled {rep[legs[0]]['spans']:,} spans")
    lines = [f"**{what}, `{run.get('span_profile')}` spans, {run.get('attributes')} table, "
             f"{run.get('engine')} engine** — {_when(run['date'])}, commit `{run['git']}`, "
             f"{cost.cost_note(run).split(';')[0]}. Report: [`{source}`]({_rel(source)})."
             f"{_binaries(run)}",
             "", "```", run["command"], "```", "", cost.cost_table(rep, legs, summary=True)]
    return "\n".join(lines)


def _binaries(run):
    """How the binaries came about, when they were not built from the commit the run names."""
    pre = run.get("prebuilt_binaries")
    if not pre:
        return ""
    names = ", ".join(f"{k} sha256 `{v['sha256'][:12]}…` (built {_when(v.get('built'))})"
                      for k, v in pre.items())
    return f" Binaries built earlier (`--no-build`), not necessarily from that commit: {names}."


def sweep_block(rep, source):
    """An e2e/bench --partitions-sweep report: when, which commit, the command, one row per
    partition count and leg, the PNG if kept beside the JSON."""
    run = rep["run"]
    m = run.get("machine", {})
    legs = [leg for leg in LEGS if any(leg in step for step in rep["sweep"])]
    lines = [f"**{_when(run['date'])}**, commit `{run['git']}`, {m.get('cpus')} CPUs "
             f"({m.get('cpu_model')}), {_num(m.get('memory_gib'))} GiB; partition sweep "
             f"{', '.join(map(str, run['partitions_sweep']))} at "
             f"{run['rate_spans_per_second']:,.0f} spans/s for {_num(run['duration_seconds'])} s, "
             f"`{run.get('span_profile')}` spans, {run.get('attributes')} attributes, "
             f"{run.get('engine')} engine, {run.get('clickhouse', 'the stack' + chr(39) + 's chserver')}. "
             f"Report: [`{source}`]({_rel(source)}).{_binaries(run)}", "", "```", run["command"],
             "```", "",
             report.sweep_table(rep, legs)]
    png = Path(source).with_suffix(".png")
    if (REPO / png).exists():
        lines += ["", f"![inserts/s, parts per minute and freshness against partitions]({_rel(png)})"]
    return "\n".join(lines)


def columncost_block(rep, source):
    """An e2e/column-cost report: when, which commit, the command, the cases and the fit."""
    run = rep["run"]
    m = run.get("machine", {})
    lines = [f"**{_when(run['date'])}**, commit `{run['git']}`, {m.get('cpus')} CPUs "
             f"({m.get('cpu_model')}), {_num(m.get('memory_gib'))} GiB; {run['spans']:,} "
             f"`{run['span_profile']}` spans, {run['attributes']} attributes, median of "
             f"{run['repeats']}. Report: [`{source}`]({_rel(source)}).{_binaries(run)}", "", "```",
             run["command"], "```", "", report.column_cost_table(rep)]
    return "\n".join(lines)


def querybench_block(result, source):
    """An e2e/querybench result, as querybench_report renders it (the style of
    docs/querybench.md)."""
    run = result["run"]
    lines = ["```", run["command"], "```", "", querybench_report.markdown(result), "",
             f"Report: [`{source}`]({_rel(source)})."]
    png = Path(source).with_suffix(".png")
    if (REPO / png).exists():
        lines += ["", f"![p50 per query and layout, {run['spans']:,} spans]({_rel(png)})"]
    return "\n".join(lines)


KINDS = {"bench": bench_block, "chaos": chaos_block, "querybench": querybench_block,
         "columncost": columncost_block, "cost": cost_block}


def _rel(path):
    """A repository path as a link from a document under docs/."""
    return os.path.relpath(REPO / path, REPO / DOCS).replace(os.sep, "/")


def render(text, name, load):
    """The document with every generated block rewritten; `load(path)` reads a report.
    Returns (text, the reports it shows)."""
    used = []

    def one(m):
        kind, source = m[2], m[3]
        line = text.count("\n", 0, m.start()) + 1
        if kind not in KINDS:
            raise DocError(f"{name}:{line}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
        try:
            rep = load(source)
        except (OSError, ValueError) as e:
            raise DocError(f"{name}:{line}: cannot read {source}: {e}") from e
        used.append(source)
        return f"{m[1]}\n{KINDS[kind](rep, source)}\n\n{m[5]}"

    out = BLOCK.sub(one, text)
    if len(OPEN.findall(text)) != len(BLOCK.findall(text)):
        raise DocError(f"{name}: a `<!-- generated: KIND REPORT -->` marker without its "
                       "`<!-- end generated -->`")
    return out, used


def _load(path):
    return json.loads((REPO / path).read_text())


def main(argv):
    check = argv[1:] == ["--check"]
    if argv[1:] not in ([], ["--check"]):
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    stale, shown, problems = [], set(), []
    for doc in sorted((REPO / DOCS).glob("*.md")):
        name = doc.relative_to(REPO).as_posix()
        old = doc.read_text()
        try:
            new, used = render(old, name, _load)
        except DocError as e:
            problems.append(str(e))
            continue
        shown.update(used)
        if new != old:
            stale.append(name)
            if not check:
                doc.write_text(new)
                print(f"wrote {name}")
    for d in RESULTS:
        for rep in sorted((REPO / d).glob("*.json")):
            path = rep.relative_to(REPO).as_posix()
            if path not in shown:
                problems.append(f"{path} is in no document under {DOCS}/: put a "
                                "`<!-- generated: KIND PATH -->` block where its table belongs")
    for p in problems:
        print(f"e2e/docs: {p}", file=sys.stderr)
    if check and stale:
        print(f"e2e/docs --check: stale: {', '.join(stale)}; run e2e/docs and commit",
              file=sys.stderr)
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
