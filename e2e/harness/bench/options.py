"""The command line of e2e/bench (bench.py's `main`) and the span profiles it maps to
tracehouse-loadgen settings."""

import argparse
import re
from pathlib import Path

# `tracehouse+processing`: tracehouse again, with the `processing:` block of --processing.
PROCESSING_LEG = "tracehouse+processing"
# `tracehouse+alt`: tracehouse again, run from the binary of --collector-bin-alt (another
# build of it: a build profile, a revision), so two builds meet in one run.
ALT_LEG = "tracehouse+alt"
LEGS = ("tracehouse", PROCESSING_LEG, ALT_LEG, "otelcol", "rotel")
# Issue 38's typical rule set (two drops, two redactions, a sampler at 10 %).
PROCESSING_DEFAULT = Path(__file__).resolve().parent / "processing-typical.yaml"


# tracehouse-loadgen settings per span profile. "full" and "light" give every span every
# attribute value kind, events and links; "full" is loadgen's default (about 1.08 KB of
# protobuf per span: 4 extra 32-byte text attributes, up to 2 events and 1 link), "light" is
# closer to an average instrumented span (about 0.7 KB: no extra attributes, at most 1 event,
# no links). "minimal" is shaped like `telemetrygen traces` spans (two short attributes
# besides loadgen's two verification keys, no events or links, resources with only
# service.name): the weight of span behind published collector figures such as the
# Rotel/OTel Collector benchmark's.
SPAN_PROFILES = {
    "full": [],
    "light": ["--extra-attributes", "0", "--attribute-bytes", "16", "--max-events", "1",
              "--max-links", "0"],
    "minimal": ["--shape", "minimal"],
}


def processing_block(text, source):
    """The `processing:` block of a YAML file (that key alone at the top level, the rest of the
    file its body), to append to the collector's config as it is; the collector validates
    the rules (`--print-config`) before the leg starts."""
    keys = re.findall(r"^([A-Za-z_][\w-]*)\s*:", text, re.M)
    if keys != ["processing"]:
        raise ValueError(f"{source}: a collector's `processing:` block and nothing else at the "
                         f"top level (found: {', '.join(keys) or 'no key'})")
    return text if text.endswith("\n") else text + "\n"


def parse(doc, otelcol_config):
    """The parsed, checked arguments (spans = rate x duration in live mode; the default
    per-leg timeout)."""
    ap = argparse.ArgumentParser(prog="bench", description=doc.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spans", type=int, help="spans to pre-fill the topic with")
    ap.add_argument("--rate", type=float,
                    help="live mode: produce at this many spans/s while each collector runs "
                         "(instead of pre-filling) and measure span end -> queryable")
    ap.add_argument("--duration", type=float, default=60,
                    help="live mode: seconds to produce for (default 60; spans = rate x duration)")
    ap.add_argument("--linger-ms", type=int,
                    help="tracehouse's batch.linger_ms (default: the collector's default, 2000); "
                         "a batch waits at most this long for more records, so it bounds freshness "
                         "at low rates")
    ap.add_argument("--no-attribute-keys", action="store_true",
                    help="JSON attributes: tracehouse leaves ResourceAttributesKeys/SpanAttributesKeys "
                         "to the server's defaults (empty), as Rotel does (the table keeps them)")
    ap.add_argument("--tracehouse-compression", choices=["lz4", "none"], default="lz4",
                    help="tracehouse's clickhouse.compression (default lz4, its default; the "
                         "peers compress with LZ4 whatever this says)")
    ap.add_argument("--collector-bin",
                    help="tracehouse-collector binary to run instead of the release build "
                         "(e.g. to compare two revisions)")
    ap.add_argument("--collector-bin-alt", metavar="PATH",
                    help="the tracehouse+alt leg: tracehouse with this other tracehouse-collector "
                         "binary, never built by the bench (e.g. another build profile: "
                         "$CARGO_TARGET_DIR/release-fat/tracehouse-collector), beside the "
                         "tracehouse leg's in one run")
    ap.add_argument("--alt-config", metavar="FILE",
                    help="the tracehouse+alt leg: YAML appended to its collector configuration "
                         "(top-level sections the bench does not write, e.g. `batch:` with "
                         "`backlog_max_bytes: 8388608`), to compare a setting beside the "
                         "tracehouse leg in one run; with or without --collector-bin-alt (without: "
                         "the tracehouse leg's binary)")
    ap.add_argument("--no-build", action="store_true",
                    help="use the release binaries already built (--collector-bin or "
                         "$CARGO_TARGET_DIR/release/, and tracehouse-loadgen beside it) without "
                         "building; the report records their sha256, since their commit is unknown")
    ap.add_argument("--out", required=True, help="JSON report file")
    ap.add_argument("--engine", choices=["null", "merge-tree"], default="merge-tree",
                    help="merge-tree (default): the product's own DDL (`tracehouse-collector "
                         "schema apply`: codecs, skip indexes, the trace-id lookup view, the "
                         "deduplication window); null: a parse diagnostic (nothing is stored, "
                         "no parts, no merges, no bytes on disk)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="run every leg this many times, the leg order rotated each repeat, and "
                         "report the medians (default 3; --repeats 1 for a quick look)")
    ap.add_argument("--settle-quiet", type=float, default=30,
                    help="after a leg, wait until no merge has run and no part has appeared for "
                         "this long (seconds, default 30); the server's CPU until then is the "
                         "leg's merge cost")
    ap.add_argument("--settle-timeout", type=float, default=900,
                    help="give up waiting for the parts to settle after this long (default 900 s)")
    ap.add_argument("--baseline-seconds", type=float, default=10,
                    help="before each leg, measure the server's and the broker's idle CPU and "
                         "the harness's own polling for this long per phase (default 10 s)")
    ap.add_argument("--no-optimize", action="store_true",
                    help="skip the OPTIMIZE … FINAL measured after settling")
    ap.add_argument("--attributes", choices=["json", "map"], default="json")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--partitions-sweep", metavar="N,N,…",
                    help="live mode: the same run at each of these partition counts, every leg "
                         "at each (e.g. 8,64,256); one JSON and one PNG of inserts/s, parts per "
                         "minute and freshness against the partition count")
    ap.add_argument("--own-clickhouse", action="store_true",
                    help="the default (kept for older commands): a chserver of this work tree's "
                         "own for the run (own port, data and state, removed at the end), so "
                         "its CPU and its system.events are the run's alone")
    ap.add_argument("--shared-clickhouse", action="store_true",
                    help="use the stack's chserver instead of one of the run's own (its CPU and "
                         "system.events then include whatever else uses it)")
    ap.add_argument("--shared-kafka", action="store_true",
                    help="use the stack's Kafka broker instead of one of the run's own (its CPU "
                         "then includes whatever else uses it, and a restart of it by other work "
                         "ends the run)")
    ap.add_argument("--span-profile", choices=sorted(SPAN_PROFILES), default="full",
                    help="loadgen span shape (default full: about 1.08 KB per span)")
    ap.add_argument("--legs", default="tracehouse,otelcol",
                    help="comma-separated, in run order, of tracehouse, tracehouse+processing, "
                         "tracehouse+alt, otelcol, rotel (default: tracehouse,otelcol)")
    ap.add_argument("--processing", metavar="FILE",
                    help="the tracehouse+processing leg: tracehouse with this collector "
                         "`processing:` block (a YAML file holding it alone; default "
                         "e2e/harness/bench/processing-typical.yaml, issue 38's typical rules). "
                         "The leg is verified on the rows the rules keep: rows written = spans "
                         "- spans the collector reports dropped or sampled out "
                         "(tracehouse_spans_processed_total), none twice, none out of range")
    ap.add_argument("--timeout", type=float, default=None,
                    help="deadline per leg in seconds (default: 300 + N/1000)")
    ap.add_argument("--stall", type=float, default=120,
                    help="end a leg whose lag is 0 and whose row count has not moved for this long")
    ap.add_argument("--keep", action="store_true", help="keep the topic and the databases")
    ap.add_argument("--stop-stack", action="store_true",
                    help="stop kafka and clickhouse at the end if this run started them")
    ap.add_argument("--otelcol-config", default=otelcol_config,
                    help="OpenTelemetry Collector config (default: e2e/otelcol/config.yaml)")
    a = ap.parse_args()
    a.legs = [x.strip() for x in a.legs.split(",") if x.strip()]
    if not a.legs or any(x not in LEGS for x in a.legs):
        ap.error(f"--legs: choose from {', '.join(LEGS)}")
    if len(set(a.legs)) != len(a.legs):
        ap.error("--legs: each leg once")
    if a.processing is not None and PROCESSING_LEG not in a.legs:
        ap.error(f"--processing is for the {PROCESSING_LEG} leg: add it to --legs")
    alt_given = a.collector_bin_alt is not None or a.alt_config is not None
    if (ALT_LEG in a.legs) != alt_given:
        ap.error(f"--collector-bin-alt or --alt-config, and the {ALT_LEG} leg, go together: "
                 "give the leg with one of them, or neither")
    a.alt_config_text = ""
    if a.alt_config is not None:
        try:
            a.alt_config_text = Path(a.alt_config).read_text()
        except OSError as e:
            ap.error(f"--alt-config: {e}")
        if a.alt_config_text and not a.alt_config_text.endswith("\n"):
            a.alt_config_text += "\n"
    if a.collector_bin_alt is not None:
        a.collector_bin_alt = str(Path(a.collector_bin_alt).resolve())
    a.processing_text = None
    if PROCESSING_LEG in a.legs:
        a.processing = str(Path(a.processing or PROCESSING_DEFAULT).resolve())
        try:
            a.processing_text = processing_block(Path(a.processing).read_text(), a.processing)
        except (OSError, ValueError) as e:
            ap.error(f"--processing: {e}")
    if a.rate is not None:
        if a.rate <= 0 or a.duration <= 0:
            ap.error("--rate and --duration must be positive")
        if a.spans is not None:
            ap.error("--spans is rate x duration in live mode; give one or the other")
        a.spans = round(a.rate * a.duration)
    if a.spans is None or a.spans <= 0:
        ap.error("--spans (pre-filled) or --rate (live) must be given and positive")
    if a.partitions_sweep is not None:
        try:
            a.partitions_sweep = [int(x) for x in a.partitions_sweep.split(",") if x.strip()]
        except ValueError:
            ap.error("--partitions-sweep: comma-separated partition counts, e.g. 8,64,256")
        if not a.partitions_sweep or min(a.partitions_sweep) < 1:
            ap.error("--partitions-sweep: comma-separated positive partition counts")
        if a.rate is None:
            ap.error("--partitions-sweep is a live-mode run: give --rate (and --duration)")
    if a.repeats < 1:
        ap.error("--repeats must be at least 1")
    if a.partitions_sweep is not None and a.repeats > 1:
        a.repeats = 1  # a sweep is one run per partition count
    if a.shared_clickhouse and a.own_clickhouse:
        ap.error("--shared-clickhouse and --own-clickhouse contradict each other")
    a.own_clickhouse = not a.shared_clickhouse
    a.own_kafka = not a.shared_kafka
    if a.timeout is None:
        a.timeout = 300 + a.spans / 1000

    return a
