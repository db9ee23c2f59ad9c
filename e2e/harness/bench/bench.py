#!/usr/bin/env python3
"""e2e/bench — tracehouse-collector side by side with the OpenTelemetry Collector and Rotel.

    e2e/bench --spans N --out FILE [--engine merge-tree|null] [--attributes json|map]
              [--span-profile full|light|minimal] [--repeats 3]
              [--partitions 8] [--legs tracehouse,otelcol,rotel] [--timeout SECONDS] [--keep]
              [--collector-bin PATH]
    e2e/bench --rate SPANS_PER_SECOND [--duration 60] --out FILE [the options above]
    e2e/bench --rate R --duration S --partitions-sweep 8,64,256 --out FILE [the options above]
    e2e/bench --spans N --legs tracehouse,tracehouse+processing [--processing FILE] --out FILE
    (a chserver of the run's own, from this work tree, unless --shared-clickhouse;
    --no-build: the release binaries already built, their sha256 in the report)

What a span costs the system (cost.py, costio.py), per leg, in one table: CPU µs per span of
the collector process, of the ClickHouse server while the leg ran and then until its parts
settled (no system.merges row and no new part for --settle-quiet 30 s), and of the Kafka broker
(a JVM on this machine) over the leg, each net of a baseline measured before the leg (the
process idle, and with the harness polling as it does during the leg and while settling, taken
off over the same durations); chserver's own request path, calibrated at the start of the run
(one-row and 8 MiB INSERTs into a Null table) per INSERT and per MiB, shown as its own line;
OPTIMIZE … FINAL measured apart; system.events deltas; parts created and rows per part; bytes
on disk per span after settling and the keys columns' share. The engine is MergeTree with the
product's own DDL by default (`tracehouse-collector schema apply`: codecs, skip indexes, the
trace-id lookup view, the deduplication window); --engine null is a parse diagnostic. Every
leg runs --repeats times (default 3), the leg order rotated each repeat; the report has the
medians and each repeat.

On the local stack (started with `e2e/stack up kafka clickhouse` if it is not running; it is
left running afterwards, since other work may share it — `--stop-stack` stops it at the end
if this run started it):

1. builds the release binaries (tracehouse-collector, tracehouse-loadgen) and, cached in
   $TRACEHOUSE_CACHE, the OpenTelemetry Collector (e2e/lib/otelcol.sh); Rotel is the release
   binary provided beside the repository (`$ROTEL_BIN`, default ../shared/peers/rotel/rotel,
   built from streamfold/rotel 0.2.1 — its README there says how);
2. pre-fills a fresh topic (8 partitions) with N numbered spans (`tracehouse-loadgen produce`,
   otlp_proto, lz4);
3. for each leg, into a fresh database whose table is created by
   `tracehouse-collector schema apply` (the same DDL for every leg): starts the collector with
   a fresh consumer group and waits until every row is in ClickHouse and the group's committed
   lag is 0; measures the collector process (CPU-seconds = utime+stime from /proc/<pid>/stat
   taken right before it is stopped, peak RSS = VmHWM, bytes sent to ClickHouse), stops it,
   and verifies delivery with `tracehouse-loadgen verify`.

With the Null engine nothing is stored, so each database also gets a MergeTree table fed by a
materialized view that keeps only `loadgen.id` and `loadgen.seq` of every inserted span;
verification and the progress count read that table. The view runs in the server, for both legs
alike. A leg that lost or duplicated spans is reported with verified=false and no speed.

`tracehouse+processing` (issue 38) is tracehouse again with the `processing:` block of
--processing (default processing-typical.yaml beside this file: two drops, two redactions, a
sampler at 10 %), so one run prices the rules against the same spans without them; the legs
rotate like the others. Its figures per span are per span read. It is verified on the rows
the rules keep: the rows written equal the spans produced less the spans the collector reports
dropped or sampled out (tracehouse_spans_processed_total, scraped from its /metrics before it
is stopped), verify's missing spans are exactly that many, none is stored twice and none is out
of range; the report keeps what each rule did.

The ClickHouse server's share is reported per leg too: its CPU-seconds per span and the bytes
each collector sent per span, for the same table (Rotel leaves the `*AttributesKeys` columns
empty; the others fill them).

With --rate R (live mode), nothing is pre-filled: each leg gets a fresh topic, its collector
starts first, and once its consumer group holds every partition `tracehouse-loadgen produce
--rate R --end-at-clock` writes R·duration spans at R spans/s while it runs (each record's
spans end as it is sent). The leg ends when the producer is done and every row is in with lag
0. Freshness, span end → queryable, is measured outside the collector by the server: a
materialized view on otel_traces stamps every row with the time its block was written
(series.arrivals_ddl); p50/p90/p99/max of that are reported over all rows and over the span of
each record that ended as the record was sent (what the pipeline adds), and, for
tracehouse, the same quantiles of its own `tracehouse_span_freshness_seconds` histogram
(span end → insert acknowledged) scraped from /metrics at the end.

How each leg wrote into ClickHouse is measured by the server, the same way for every leg
(inserts.py): INSERT statements into otel_traces as chserver counted them, the blocks (parts)
they made from system.parts, inserts per second, parts per minute, rows per insert.
--partitions-sweep runs the live mode once per partition count (every leg at each) and draws
inserts/s, parts per minute and freshness against the partition count.

In both modes every leg is sampled every 0.5 s (rows visible, consumer lag, RSS, INSERT statements) and the
series are drawn into a PNG beside the JSON (FILE with .png; series.py).

Prints a markdown table (with tracehouse's ratio to every other leg) and writes JSON:
{"tracehouse": {...}, "otelcol": {...}, "rotel": {...}, "run": {...}}.
Artifacts (logs, configs, verify reports) go to $TRACEHOUSE_STATE/bench/<run-id>/.
Every wait has a deadline; child processes are stopped on any exit.

This is the runner; beside it, `options.py` (the command line, span profiles), `procs.py` (child
processes, /proc measurements), `stack.py` (the stack's addresses, ClickHouse, Kafka offsets
through confluent-kafka), `series.py` (the sampled series, freshness, the PNG) and `report.py`
(the markdown tables). `e2e/bench` runs it
in a venv of its own with the pinned packages of requirements.txt (e2e/lib/bench.sh).
"""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from harness.bench.options import ALT_LEG, PROCESSING_LEG, SPAN_PROFILES, parse
from harness.procs import (BenchError, SocketBytes, loadavg, machine, machine_busy_seconds, proc_cpu_seconds,
                           proc_status_kib, run, run_main, say, spawn, stop, stop_all)
from harness.bench.inserts import blocks_query, insert_figures, parse_blocks, table_stats
from harness.bench import cost
from harness.bench import costio
from harness.bench.report import freshness_table, sweep_table, table
from harness.bench.series import (Series, arrivals_ddl, arrivals_query, record_arrivals_query, collector_freshness, parse_arrivals,
                                  plot, plot_sweep)
from harness.stack import (E2E, REPO, STATE, ClickHouse, Kafka, OwnClickHouse, OwnKafka, free_port, git_revision, group_describe,
                           kafka_and_clickhouse_running, kafka_java, log_tail_errors, metric_sum, metrics_scrape,
                           new_run, stack_env)

def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


POLL = 0.25  # seconds between progress samples
LIVE_SPANS_PER_RECORD = 100  # live mode: spans per Kafka record (loadgen's default, made explicit)
ROTEL_DEFAULT = REPO.parent / "shared" / "peers" / "rotel" / "rotel"


def slug(leg):
    """A leg's name as it goes into topic, group and database names (`tracehouse+processing`
    → `tracehouse_processing`: `+` is not allowed in Kafka's names)."""
    return leg.replace("+", "_")


# ---------------------------------------------------------------- the bench

class Bench:
    def __init__(self, args):
        self.args = args
        self.run_id, self.dir = new_run("bench")
        self.topic = f"bench-{self.run_id}"
        self.generator = f"bench-{self.run_id}"
        self.topics = []  # every topic this run made, deleted at the end
        self.series = {}  # leg -> Series
        self.stack_started = False
        self.databases = []
        self.env = None
        self.ch = None
        self.kafka = None
        self.own_ch = None  # --own-clickhouse: this run's chserver
        self.own_kafka = None  # --own-kafka: this run's broker
        self.bin_dir = self.dir / "bin"  # --no-build: copies of the binaries
        self.step = ""  # a partition sweep: "_p<partitions>" in this step's names
        self._no_insert_stats = False  # the chserver has no INSERT count: stop asking
        self.rep = ""  # repeats: "_r<k>" in this repeat's names
        self.product_tables = {}  # db -> the tables the product's schema made (not the harness's)
        self.calibration = None  # chserver's own cost per INSERT and per byte (costio.calibrate)

    # -- setup

    def ensure_stack(self):
        if not kafka_and_clickhouse_running():
            say("starting the local stack (kafka, clickhouse)")
            self.stack_started = True
            run([str(E2E / "stack"), "up", "kafka", "clickhouse"], timeout=900, capture=False)
        self.env = stack_env()
        if self.args.own_clickhouse:
            say("starting a chserver of this run's own (--own-clickhouse)")
            self.own_ch = OwnClickHouse(self.dir)
            self.env.update(self.own_ch.up())
        if getattr(self.args, "own_kafka", False):
            say("starting a Kafka broker of this run's own")
            self.own_kafka = OwnKafka(self.dir)
            self.env.update(self.own_kafka.up())
        self.ch = ClickHouse(self.env["CLICKHOUSE_URL"], self.env["CLICKHOUSE_USER"],
                             self.env["CLICKHOUSE_PASSWORD"])
        self.ch.query("SELECT 1")
        self.kafka = Kafka(self.env["KAFKA_BROKERS"])
        self.ch_port = int(re.search(r":(\d+)", self.env["CLICKHOUSE_URL"].split("//", 1)[1]).group(1))

    def build(self):
        target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
        self.git = git_revision()
        self.collector = Path(self.args.collector_bin or target / "release" / "tracehouse-collector")
        self.loadgen = target / "release" / "tracehouse-loadgen"
        # The tracehouse+alt leg's binary: used as it is, never built here.
        self.collector_alt = Path(self.args.collector_bin_alt) if self.args.collector_bin_alt else None
        if self.collector_alt is not None:
            if not os.access(self.collector_alt, os.X_OK):
                raise BenchError(f"--collector-bin-alt: {self.collector_alt} is not there")
            alt_dir = self.bin_dir / "alt"  # the same file name as the tracehouse leg's
            alt_dir.mkdir(parents=True, exist_ok=True)
            src, self.collector_alt = self.collector_alt, alt_dir / self.collector_alt.name
            shutil.copy2(src, self.collector_alt)
            self.alt_binary = {"from": str(src), "sha256": file_sha256(self.collector_alt),
                               "built": datetime.fromtimestamp(self.collector_alt.stat().st_mtime,
                                                               timezone.utc).isoformat(timespec="seconds")}
            say(f"{ALT_LEG}: {src} (sha256 {self.alt_binary['sha256'][:12]})")
        if self.args.no_build:
            # Binaries built earlier, perhaps from another revision (the report records their
            # digests, not a commit): copied first, so a build meanwhile cannot swap them.
            self.bin_dir.mkdir(exist_ok=True)
            for attr in ("collector", "loadgen"):
                src = getattr(self, attr)
                if not os.access(src, os.X_OK):
                    raise BenchError(f"--no-build: {src} is not there; build it or drop --no-build")
                dst = self.bin_dir / src.name
                shutil.copy2(src, dst)
                setattr(self, attr, dst)
            self.prebuilt = {b.name: {"from": str(src), "sha256": file_sha256(b),
                                      "built": datetime.fromtimestamp(b.stat().st_mtime, timezone.utc)
                                      .isoformat(timespec="seconds")}
                             for b, src in ((self.collector, self.args.collector_bin
                                             or target / "release" / "tracehouse-collector"),
                                            (self.loadgen, target / "release" / "tracehouse-loadgen"))}
            digests = ", ".join(f"{k} {v['sha256'][:12]}" for k, v in self.prebuilt.items())
            say(f"--no-build: {digests}")
        else:
            self.prebuilt = None
            run([str(E2E / "setup")], timeout=1800, log=self.dir / "setup.log")  # build deps (idempotent)
            say("cargo build --release -p tracehouse-collector -p tracehouse-loadgen "
                f"(log: {self.dir / 'build.log'})")
            run(["cargo", "build", "--release", "--locked", "-p", "tracehouse-collector",
                 "-p", "tracehouse-loadgen"], timeout=3600, log=self.dir / "build.log")
        if "otelcol" in self.args.legs:
            say("OpenTelemetry Collector (built once, cached in $TRACEHOUSE_CACHE)")
            script = (f'source "{E2E}/lib/common.sh"; source "{E2E}/lib/otelcol.sh"; '
                      'otelcol_install; otelcol_bin')
            r = subprocess.run(["bash", "-c", script], stdout=subprocess.PIPE, timeout=1800)
            if r.returncode != 0:
                raise BenchError("building the OpenTelemetry Collector failed (see above)")
            self.otelcol = Path(r.stdout.decode().strip().splitlines()[-1])
        if "rotel" in self.args.legs:
            self.rotel = Path(os.environ.get("ROTEL_BIN", ROTEL_DEFAULT))
            if not os.access(self.rotel, os.X_OK):
                raise BenchError(f"Rotel binary not found at {self.rotel}: set ROTEL_BIN to a release "
                                 "build of streamfold/rotel (cargo build --release --no-default-features "
                                 "--features rdkafka --bin rotel)")

    def produce(self):
        a = self.args
        if a.rate:
            return  # live mode: each leg produces into a topic of its own while it runs
        say(f"producing {a.spans} spans into topic {self.topic} ({a.partitions} partitions, "
            "otlp_proto, lz4)")
        cmd = [str(self.loadgen), "produce", "--brokers", self.env["KAFKA_BROKERS"],
               "--topic", self.topic, "--partitions", str(a.partitions), "--spans", str(a.spans),
               "--encoding", "otlp_proto", "--compression", "lz4", "--seed", "1",
               "--generator-id", self.generator, *SPAN_PROFILES[a.span_profile]]
        self.topics.append(self.topic)
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, timeout=max(600, a.spans / 2000))
        except subprocess.TimeoutExpired:
            raise BenchError("tracehouse-loadgen produce did not finish in time")
        if r.returncode != 0:
            raise BenchError(f"tracehouse-loadgen produce exited with {r.returncode}")
        self.produced = json.loads(r.stdout)
        (self.dir / "produce.json").write_bytes(r.stdout)
        if self.produced["spans"] != a.spans:
            raise BenchError(f"produced {self.produced['spans']} spans, asked for {a.spans}")
        got = self.kafka.partition_count(self.topic)
        if got != a.partitions:
            raise BenchError(f"topic {self.topic} has {got} partitions, not {a.partitions}")
        self.end = self.kafka.end_offsets(self.topic, a.partitions)
        say(f"topic holds {sum(self.end.values())} records, "
            f"{self.produced['bytes'] / 1e6:.1f} MB of OTLP before Kafka's lz4")

    def prepare_database(self, leg):
        a = self.args
        db = f"bench_{self.run_id}_{slug(leg)}{self.step}{self.rep}"
        self.databases.append(db)
        run([str(self.collector), "schema", "apply", "--database", db, "--engine", a.engine,
             "--attributes", a.attributes, "--clickhouse-url", self.env["CLICKHOUSE_URL"],
             "--user", self.env["CLICKHOUSE_USER"]], timeout=300,
            env={**os.environ, **self.env}, log=self.dir / f"{leg}-schema.log")
        # What the product stores, before the harness adds tables of its own (bytes on disk).
        self.product_tables[db] = costio.product_tables(self.ch, db)
        if a.attributes == "json":
            id_expr = "toString(SpanAttributes.loadgen.id)"
            seq_expr = "toString(SpanAttributes.loadgen.seq)"
        else:
            id_expr = "SpanAttributes['loadgen.id']"
            seq_expr = "SpanAttributes['loadgen.seq']"
        if a.rate:
            for sql in arrivals_ddl(db, f"toUInt64OrZero({seq_expr})"):
                self.ch.query(sql)
        if a.engine == "null":
            self.ch.query(f"CREATE TABLE `{db}`.delivered (SpanAttributes Map(String, String)) "
                          "ENGINE = MergeTree ORDER BY tuple()")
            self.ch.query(f"CREATE MATERIALIZED VIEW `{db}`.delivered_mv TO `{db}`.delivered AS "
                          f"SELECT map('loadgen.id', {id_expr}, 'loadgen.seq', {seq_expr}) "
                          f"AS SpanAttributes FROM `{db}`.otel_traces")
            return db, "delivered", "map"
        return db, "otel_traces", a.attributes

    # -- one leg

    def start_tracehouse(self, db, group, mport, leg="tracehouse"):
        cfg = self.dir / f"{leg}.yaml"
        # Connection settings only (and --linger-ms, --no-attribute-keys, --tracehouse-compression
        # when given; the --processing block for the tracehouse+processing leg); batching,
        # concurrency and limits are the collector's defaults (printed to
        # <leg>-effective-config.yaml).
        cfg.write_text(
            f"kafka:\n  brokers: \"{self.env['KAFKA_BROKERS']}\"\n  topics: [\"{self.topic}\"]\n"
            f"  group_id: \"{group}\"\n  encoding: otlp_proto\n"
            f"clickhouse:\n  url: \"{self.env['CLICKHOUSE_URL']}\"\n  database: \"{db}\"\n"
            f"  table: otel_traces\n  attributes: {self.args.attributes}\n"
            + ("  attribute_keys: false\n" if self.args.no_attribute_keys else "")
            + ("  compression: none\n" if self.args.tracehouse_compression == "none" else "")
            + f"metrics_addr: \"127.0.0.1:{mport}\"\n"
            + (f"batch:\n  linger_ms: {self.args.linger_ms}\n" if self.args.linger_ms is not None
               else "")
            + (self.args.processing_text if leg == PROCESSING_LEG else "")
            + (self.args.alt_config_text if leg == ALT_LEG else ""))
        env = {**os.environ, **self.env}
        binary = (self.collector_alt or self.collector) if leg == ALT_LEG else self.collector
        eff = run([str(binary), "run", "--config", str(cfg), "--print-config"],
                  timeout=60, env=env)
        (self.dir / f"{leg}-effective-config.yaml").write_bytes(eff.stdout)
        return spawn([str(binary), "run", "--config", str(cfg)],
                     self.dir / f"{leg}.log", env=env)

    def start_tracehouse_processing(self, db, group, mport):
        return self.start_tracehouse(db, group, mport, leg=PROCESSING_LEG)

    def start_otelcol(self, db, group, mport):
        env = {**os.environ, **self.env, "BENCH_TOPIC": self.topic, "BENCH_GROUP": group,
               "BENCH_DATABASE": db, "BENCH_METRICS_PORT": str(mport),
               "BENCH_OTEL_JSON": "true" if self.args.attributes == "json" else "false"}
        shutil.copy(self.args.otelcol_config, self.dir / "otelcol-config.yaml")
        return spawn([str(self.otelcol), "--config", str(self.args.otelcol_config)],
                     self.dir / "otelcol.log", env=env)

    def start_rotel(self, db, group, mport):
        # The flags of ../shared/peers/rotel/README.md: our topic and table, at-least-once with
        # a 60 s request timeout like the OpenTelemetry Collector leg, and the batch size that
        # was best for the span weight (50 000 for 240-byte spans, 20 000 for heavier ones).
        del mport  # this build has no Prometheus exporter
        batch = "50000" if self.args.span_profile == "minimal" else "20000"
        cmd = [str(self.rotel), "start",
               "--receiver", "kafka", "--kafka-receiver-brokers", self.env["KAFKA_BROKERS"],
               "--kafka-receiver-traces", "--kafka-receiver-traces-topic", self.topic,
               "--kafka-receiver-format", "protobuf",
               "--kafka-receiver-group-id", group, "--kafka-receiver-client-id", group,
               "--kafka-receiver-auto-offset-reset", "earliest",
               "--exporter", "clickhouse", "--clickhouse-exporter-endpoint", self.env["CLICKHOUSE_URL"],
               "--clickhouse-exporter-database", db, "--clickhouse-exporter-table-prefix", "otel",
               "--clickhouse-exporter-compression", "lz4",
               "--clickhouse-exporter-async-insert", "false",
               "--clickhouse-exporter-user", self.env["CLICKHOUSE_USER"],
               "--clickhouse-exporter-request-timeout", "60s",
               "--batch-max-size", batch, "--batch-timeout", "200ms"]
        if self.args.attributes == "json":
            cmd.append("--clickhouse-exporter-enable-json")
        (self.dir / "rotel-command.txt").write_text(" ".join(cmd) + "\n")
        env = {**os.environ, **self.env,
               "ROTEL_CLICKHOUSE_EXPORTER_PASSWORD": self.env["CLICKHOUSE_PASSWORD"]}
        return spawn(cmd, self.dir / "rotel.log", env=env)

    def start_live_topic(self, leg):
        """Live mode: a fresh topic and generator id for this leg."""
        a = self.args
        self.topic = self.generator = f"bench-{self.run_id}-{slug(leg)}{self.step}{self.rep}"
        self.topics.append(self.topic)
        kafka_java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                   self.env["KAFKA_BROKERS"], "--create", "--topic", self.topic,
                   "--partitions", str(a.partitions), "--replication-factor", "1")
        # The broker creates topics on first use too (auto.create.topics.enable, num.partitions
        # 8): a create that failed must not turn into an 8-partition run.
        got = self.kafka.partition_count(self.topic)
        if got != a.partitions:
            raise BenchError(f"topic {self.topic} has {got} partitions, not {a.partitions} "
                             "(see the broker's log)")
        self.kafka.wait_leaders(self.topic, a.partitions)
        self.end = {q: 0 for q in range(a.partitions)}

    def start_live_producer(self, leg, group, p, t0):
        """Live mode: once the collector's group holds every partition (or after 60 s), start
        producing at the fixed rate."""
        a = self.args
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and p.poll() is None:
            try:
                if self.kafka.assigned_partitions(group) >= a.partitions:
                    break
            except BenchError:
                pass
            time.sleep(POLL)
        else:
            say(f"{leg}: the group did not report all {a.partitions} partitions assigned; "
                "producing anyway")
        say(f"{leg}: producing {a.spans} spans at {a.rate:g} spans/s "
            f"({time.monotonic() - t0:.1f}s after start)")
        cmd = [str(self.loadgen), "produce", "--brokers", self.env["KAFKA_BROKERS"],
               "--topic", self.topic, "--partitions", str(a.partitions), "--spans", str(a.spans),
               "--rate", str(a.rate), "--end-at-clock", "--quiet",
               "--spans-per-record", str(LIVE_SPANS_PER_RECORD),
               "--encoding", "otlp_proto", "--compression", "lz4", "--seed", "1",
               "--generator-id", self.generator, *SPAN_PROFILES[a.span_profile]]
        return spawn(cmd, self.dir / f"{leg}{self.rep}-produce.json")

    def run_leg(self, leg):
        a = self.args
        n = a.spans
        if a.rate:
            self.start_live_topic(leg)
        db, table, verify_attrs = self.prepare_database(leg)
        group = f"bench-{self.run_id}-{slug(leg)}{self.step}{self.rep}"
        mport = free_port()
        ch_log = self.own_ch.log if self.own_ch else STATE / "logs" / "clickhouse.log"
        ch_log_offset = ch_log.stat().st_size if ch_log.exists() else 0
        ch_pid, kafka_pid = self._stack_pid("clickhouse"), self._stack_pid("kafka")
        res = {"spans": n, "database": db, "consumer_group": group,
               "log": str(self.dir / f"{leg}.log"), "repeat": self.rep.lstrip("_r") or "1"}
        # The server's and the broker's CPU when nothing runs, and with the harness polling as
        # it does during the leg and while parts settle: taken off the leg's figures.
        if a.baseline_seconds > 0:
            say(f"{leg}: baseline ({a.baseline_seconds:g} s idle, polling, settle polling)")
            res["baseline"] = costio.baseline(
                lambda: self._poll(db, table, group, live=bool(a.rate), inserts=True),
                lambda: self.ch.query(costio.settle_probe(db)),
                ch_pid, kafka_pid, a.baseline_seconds, POLL)
        events0 = costio.events(self.ch)
        ch_cpu0, kafka_cpu0 = self._cpu_or_none(ch_pid), self._cpu_or_none(kafka_pid)
        busy0, load0 = machine_busy_seconds(), loadavg()
        sock = SocketBytes(self.ch_port)
        say(f"{leg}: starting (database {db}, group {group})")

        t0 = time.monotonic()
        start = {"tracehouse": self.start_tracehouse,
                 PROCESSING_LEG: self.start_tracehouse_processing,
                 ALT_LEG: lambda db, group, mport: self.start_tracehouse(db, group, mport, leg=ALT_LEG),
                 "otelcol": self.start_otelcol, "rotel": self.start_rotel}[leg]
        p = start(db, group, mport)
        loader = self.start_live_producer(leg, group, p, t0) if a.rate else None
        t_load = time.monotonic()
        series = self.series[leg] = Series()
        deadline = t0 + a.timeout
        rows, lag, last_change, last_rows, last_print = 0, None, t0, -1, t0
        count_errors, last_error = 0, None
        outcome = None
        t_rows_in = None  # when every row was first seen in ClickHouse
        # The rows to wait for: every span, or (processing rules) every span less those the
        # collector reports it dropped or sampled out, read from its /metrics once the
        # committed lag is 0 (every record is in by then, and so are its counts).
        target = n
        processing = leg == PROCESSING_LEG
        try:
            while True:
                now = time.monotonic()
                if p.poll() is not None:
                    outcome = f"the collector exited with code {p.returncode} after {now - t0:.1f}s"
                    break
                if loader is not None and loader.poll() not in (None, 0):
                    outcome = f"tracehouse-loadgen produce exited with code {loader.returncode}"
                    break
                if now > deadline:
                    outcome = f"not done within --timeout {a.timeout}s"
                    break
                sock.sample(p.pid)
                try:
                    rows = self.ch.count(f"`{db}`.`{table}`")
                except BenchError as e:  # reported with the progress line, and in the JSON
                    count_errors, last_error = count_errors + 1, str(e)
                try:
                    if loader is not None:  # live: the end moves
                        self.end = self.kafka.end_offsets(self.topic, a.partitions)
                    committed = self.kafka.committed(group, self.topic, a.partitions)
                    lag = sum(self.end[q] - max(committed.get(q, -1), 0) for q in self.end)
                except BenchError as e:  # the message names Kafka and the request
                    count_errors, last_error, lag = count_errors + 1, str(e), None
                if rows != last_rows:
                    last_rows, last_change = rows, now
                if processing and lag == 0:
                    removed = cost.spans_removed(cost.spans_processed(metrics_scrape(mport)))
                    target = n - removed
                if rows >= n and t_rows_in is None:
                    t_rows_in = now
                if series.due(now - t0):
                    try:
                        rss = proc_status_kib(p.pid, "VmRSS") / 1024
                    except OSError:
                        rss = None
                    series.add(now - t0, rows, lag, rss, self._inserts_so_far(db))
                if rows >= target and lag == 0 and (loader is None or loader.poll() == 0):
                    outcome = "done"
                    break
                # Lag 0 but rows stopped short of N for a while: the rest is not coming.
                if lag == 0 and now - last_change > a.stall and (loader is None or loader.poll() == 0):
                    outcome = f"stalled: committed lag 0 but {rows}/{target} rows after {a.stall}s"
                    break
                if now - last_print >= 5:
                    last_print = now
                    if last_error:
                        say(f"{leg}: polling failed {count_errors} times so far: {last_error}")
                        last_error = None
                    try:
                        say(f"{leg}: {now - t0:6.1f}s rows {rows}/{target} lag {lag} records, "
                            f"cpu {proc_cpu_seconds(p.pid):.1f}s, "
                            f"rss {proc_status_kib(p.pid, 'VmRSS') / 1024:.0f} MiB")
                    except OSError:
                        pass
                time.sleep(POLL)
            t_done = time.monotonic()
            if processing and outcome == "done":
                t_rows_in = last_change  # when the rows reached the count the rules leave
            alive = p.poll() is None
            if alive:  # measure right before stopping
                sock.sample(p.pid)
                cpu = proc_cpu_seconds(p.pid)
                hwm_kib = proc_status_kib(p.pid, "VmHWM")
                metrics = metrics_scrape(mport)
            else:
                cpu, hwm_kib, metrics = None, None, None
        finally:
            code = stop(p)
            if loader is not None:
                stop(loader)
        # The leg's window for the server and the broker ends when the collector has stopped
        # (its last inserts and commits on the way out included).
        t_stopped = time.monotonic()
        ch_cpu1, kafka_cpu1 = self._cpu_or_none(ch_pid), self._cpu_or_none(kafka_pid)
        busy1, load1 = machine_busy_seconds(), loadavg()
        # Then the server's merges until the parts settle: no merge and no new part for
        # --settle-quiet seconds (a Null table makes no parts: nothing to wait for).
        if a.engine == "merge-tree":
            say(f"{leg}: waiting for the parts to settle (no merge, no new part for "
                f"{a.settle_quiet:g} s)")
            res["settle"] = costio.settle(self.ch, db, a.settle_quiet, a.settle_timeout)
            if not res["settle"]["settled"]:
                say(f"{leg}: parts did not settle within {a.settle_timeout:g} s")
        else:
            res["settle"] = {"seconds": 0.0, "settled": True, "probe_errors": 0,
                             "note": "null engine: no parts to settle"}
        t_settled = time.monotonic()
        ch_cpu2 = self._cpu_or_none(ch_pid)
        pids_after = (self._stack_pid("clickhouse"), self._stack_pid("kafka"))
        events1 = costio.events(self.ch)
        res["events"] = cost.events_delta(events0, events1)
        if a.engine == "merge-tree":
            try:
                res["disk"] = costio.disk(self.ch, db, self.product_tables.get(db, []), n)
            except (BenchError, ValueError) as e:
                res["disk"] = {"error": str(e)}
        res["cpu_windows"] = {
            "leg_seconds": round(t_stopped - t0, 3), "settle_seconds": round(t_settled - t_stopped, 3),
            "server_leg_cpu": None if ch_cpu0 is None or ch_cpu1 is None else round(ch_cpu1 - ch_cpu0, 3),
            "server_settle_cpu": None if ch_cpu1 is None or ch_cpu2 is None else round(ch_cpu2 - ch_cpu1, 3),
            "broker_leg_cpu": None if kafka_cpu0 is None or kafka_cpu1 is None
            else round(kafka_cpu1 - kafka_cpu0, 3)}
        wall = t_done - t0
        if loader is not None:
            try:
                text = (self.dir / f"{leg}{self.rep}-produce.json").read_text()
                self.produced = json.loads(text[text.index("{"):])
            except (OSError, ValueError):
                self.produced = None
            res["produced"] = self.produced
        if a.rate:
            # The freshness view is the harness's, not the product's: its blocks (one per block
            # inserted into otel_traces) are in the server's figures, for every leg alike per
            # block, so a leg that inserts more often pays more of it.
            try:
                res["harness_arrivals_blocks"] = parse_blocks(self.ch.query(blocks_query(db, "arrivals")))
            except (BenchError, ValueError):
                res["harness_arrivals_blocks"] = None
            try:
                res["freshness_clickhouse"] = parse_arrivals(self.ch.query(arrivals_query(db)))
                res["freshness_record"] = parse_arrivals(
                    self.ch.query(record_arrivals_query(db, LIVE_SPANS_PER_RECORD)))
            except (BenchError, ValueError) as e:
                res["freshness_clickhouse"] = {"error": str(e)}
            if leg in ("tracehouse", PROCESSING_LEG, ALT_LEG):
                res["freshness_collector"] = collector_freshness(metrics)
        res["series"] = series.to_json()
        ch_cpu = ch_cpu1 - ch_cpu0 if ch_cpu0 is not None and ch_cpu1 is not None else None
        kafka_cpu = kafka_cpu1 - kafka_cpu0 \
            if kafka_cpu0 is not None and kafka_cpu1 is not None else None
        # Whatever else ran on the machine meanwhile (this harness, builds and tests of others):
        # noise to report.
        other = busy1 - busy0 - (cpu or 0) - (ch_cpu or 0) - (kafka_cpu or 0)
        say(f"{leg}: {outcome} after {wall:.1f}s; stopped (exit code {code})")
        if other / max(wall, 1e-9) > 0.25:
            say(f"{leg}: note: other processes used {other:.1f} CPU-seconds during this leg "
                f"({other / wall:.2f} cores): the machine was not quiet")

        final_lags, describe = group_describe(self.env["KAFKA_BROKERS"], group)
        (self.dir / f"{leg}-group.txt").write_text(describe)
        verify = self.verify(leg, db, table, verify_attrs)
        if processing:
            # Judged on the rows the rules keep (cost.judge_processed): "lost" is then what is
            # neither written nor removed by a rule; verify's own count of missing spans is kept.
            processed = cost.spans_processed(metrics) if metrics else None
            exact, figures = cost.judge_processed(n, processed, verify)
            res.update(figures)
            res["verify_missing"] = verify.get("lost")
            if verify.get("lost") is not None and processed is not None:
                verify["lost"] = verify["lost"] - figures["spans_removed_by_rules"]
            verify["exact"] = exact
        # Rates over the time rows were arriving: from the producer's start (pre-filled: the
        # collector's) until every row was in, not the wait for the last offset commit. Rows
        # per INSERT: the rows written (fewer than the spans when rules removed some).
        written = res.get("rows_expected", n) if processing else n
        res.update(self.insert_accounting(
            db, (t_rows_in or t_done) - (t_load if a.rate else t0), written))
        if a.engine == "merge-tree" and not a.no_optimize:
            try:
                say(f"{leg}: OPTIMIZE … FINAL (measured apart)")
                res["optimize_final"] = {k: round(v, 3) if v is not None else None for k, v in
                                         costio.optimize_final(self.ch, db, self.product_tables.get(db, []),
                                                               ch_pid).items()}
            except BenchError as e:
                res["optimize_final"] = {"error": str(e)}
        if a.rate and not a.keep:  # a topic per leg: the broker keeps fewer partitions open
            self.delete_topic(self.topic)
        if not a.keep:  # no background merges of this leg's parts during the next leg
            self.drop_database(db)

        res.update({
            "outcome": outcome,
            "cpu_seconds": round(cpu, 3) if cpu is not None else None,
            "wall_seconds": round(wall, 3),
            "peak_rss_mib": round(hwm_kib / 1024, 1) if hwm_kib is not None else None,
            "bytes_to_clickhouse": sock.total,
            "clickhouse_connections": len(sock.by_inode),
            "final_group_lag": sum(v for v in final_lags.values() if v is not None)
            if final_lags and None not in final_lags.values() else None,
            "rows_counted": rows,
            "clickhouse_server_cpu_seconds": round(ch_cpu, 2) if ch_cpu is not None else None,
            "kafka_broker_cpu_seconds": round(kafka_cpu, 2) if kafka_cpu is not None else None,
            "other_processes_cpu_seconds": round(other, 2),
            "loadavg_1m": [load0, load1],
            "exit_code": code,
            "harness_poll_errors": count_errors,
        })
        res.update(verify)
        if leg in ("tracehouse", PROCESSING_LEG, ALT_LEG) and metrics:
            res["collector_metrics"] = {
                "rows_inserted_total": metric_sum(metrics, "tracehouse_rows_inserted_total"),
                "bytes_inserted_total": metric_sum(metrics, "tracehouse_bytes_inserted_total"),
                "inserts_total": metric_sum(metrics, "tracehouse_inserts_total"),
                "insert_retries_total": metric_sum(metrics, "tracehouse_insert_retries_total"),
                "records_skipped_total": metric_sum(metrics, "tracehouse_records_skipped_total"),
                "spans_decoded_total": metric_sum(metrics, "tracehouse_spans_decoded_total"),
            }
        elif leg == "otelcol" and metrics:
            res["collector_metrics"] = {
                k: metric_sum(metrics, k) for k in (
                    "otelcol_receiver_accepted_spans", "otelcol_receiver_refused_spans",
                    "otelcol_receiver_failed_spans", "otelcol_exporter_sent_spans",
                    "otelcol_exporter_send_failed_spans", "otelcol_exporter_enqueue_failed_spans")}
        errors = log_tail_errors(ch_log, ch_log_offset)
        if errors:
            res["clickhouse_log_errors"] = errors
        res["verified"] = bool(outcome == "done" and verify.get("exact")
                               and res["final_group_lag"] == 0 and cpu is not None)
        # The stack is shared: a restart of a component or failed polls during the leg make
        # its timings meaningless, even when delivery was exact.
        disturbed = []
        for name, before, after, used in zip(("clickhouse", "kafka"), (ch_pid, kafka_pid),
                                             pids_after, (ch_cpu, kafka_cpu)):
            if before != after or used is None:
                disturbed.append(f"{name} was restarted during the leg (pid {before} -> {after})")
        if count_errors:
            disturbed.append(f"{count_errors} progress polls failed (ClickHouse or Kafka unreachable)")
        if disturbed:
            res["disturbed"] = sorted(set(disturbed))
            say(f"{leg}: DISTURBED, no speeds reported: {'; '.join(res['disturbed'])}")
        res["cost_counts"] = bool(res["verified"] and not disturbed
                                  and res["settle"].get("settled"))
        self.bill(res, res.get("baseline"))
        if res["verified"] and not disturbed:
            res["spans_per_cpu_second"] = round(n / cpu) if cpu > 0 else None
            res["otlp_mb_per_cpu_second"] = (round(self.produced["bytes"] / cpu / 1e6, 1)
                                             if cpu > 0 and self.produced else None)
            res["spans_per_second"] = round(n / wall)
            res["mb_per_second"] = round(sock.total / wall / 1e6, 2)
            res["bytes_to_clickhouse_per_span"] = round(sock.total / n, 1)
            res["clickhouse_server_cpu_us_per_span"] = (round(ch_cpu / n * 1e6, 2)
                                                        if ch_cpu is not None else None)
        else:
            # A leg that lost, duplicated, did not finish or was disturbed gets no speed.
            res["spans_per_cpu_second"] = None
            res["otlp_mb_per_cpu_second"] = None
            res["spans_per_second"] = None
            res["mb_per_second"] = None
        res.pop("exact", None)
        return res

    def bill(self, res, baseline):
        """The leg's system cost per span (cost.leg_cost) with this baseline, into "cost" when
        the leg counts (verified, undisturbed, settled), else "cost_unverified"."""
        w = res["cpu_windows"]
        n = res["spans"]
        bill = cost.leg_cost(
            n, res.get("cpu_seconds"),
            {"insert_cpu": w["server_leg_cpu"], "insert_s": w["leg_seconds"],
             "settle_cpu": w["server_settle_cpu"], "settle_s": w["settle_seconds"]},
            {"cpu": w["broker_leg_cpu"], "seconds": w["leg_seconds"]}, baseline,
            self.calibration, res.get("inserts"), res.get("insert_body_bytes"),
            res.get("optimize_final") if "cpu" in (res.get("optimize_final") or {}) else None,
            res.get("harness_arrivals_blocks"))
        blocks = res.get("insert_blocks")
        rows = res.get("rows_expected", n)  # processing rules: the rows written
        bill["rows_per_part"] = round(rows / blocks, 1) if blocks else None
        res.pop("cost", None)
        res.pop("cost_unverified", None)
        res["cost" if res.get("cost_counts") else "cost_unverified"] = bill

    def _poll(self, db, table, group, live, inserts):
        """What the leg's loop asks the server and the broker at each step (the row count, the
        end offsets in live mode, the group's committed offsets; and, every other step, the
        INSERT count the series keep): the baseline repeats it with no collector running."""
        self._polls = getattr(self, "_polls", 0) + 1
        for f in (lambda: self.ch.count(f"`{db}`.`{table}`"),
                  lambda: self.kafka.end_offsets(self.topic, self.args.partitions) if live else None,
                  lambda: self.kafka.committed(group, self.topic, self.args.partitions)):
            try:
                f()
            except BenchError:
                pass
        if inserts and self._polls % 2 == 0:
            self._inserts_so_far(db)

    def _inserts_so_far(self, db):
        """INSERT statements into the leg's otel_traces so far (for the series), None if unknown."""
        if self._no_insert_stats:
            return None
        try:
            st = table_stats(self.ch.insert_stats(), db, "otel_traces")
        except BenchError:
            return None
        if st is None:
            self._no_insert_stats = True  # a chserver without the count: do not ask again
            return None
        return st["inserts"]

    def insert_accounting(self, db, window_s, spans):
        """The leg's inserts as the server saw them (inserts.py): statements from chserver's
        count, blocks from system.parts of otel_traces (MergeTree) or of the verification view's
        table (Null engine)."""
        try:
            stats = table_stats(self.ch.insert_stats(), db, "otel_traces")
        except BenchError as e:
            say(f"insert counts: {e}")
            stats = None
        table = "otel_traces" if self.args.engine == "merge-tree" else "delivered"
        try:
            blocks = parse_blocks(self.ch.query(blocks_query(db, table)))
        except (BenchError, ValueError) as e:
            say(f"blocks of {db}.{table}: {e}")
            blocks = None
        out = insert_figures(stats, blocks, window_s, spans)
        out["insert_body_bytes"] = stats.get("body_bytes") if stats else None
        out["insert_blocks_source"] = f"system.parts of {table}"
        return out

    def delete_topic(self, topic):
        kafka_java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                   self.env["KAFKA_BROKERS"], "--delete", "--topic", topic)
        if topic in self.topics:
            self.topics.remove(topic)

    def verify(self, leg, db, table, attrs):
        cmd = [str(self.loadgen), "verify", "--clickhouse-url", self.env["CLICKHOUSE_URL"],
               "--database", db, "--table", table, "--attributes", attrs,
               "--generator-id", self.generator, "--expected", str(self.args.spans),
               "--timeout-seconds", "600"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=900,
                           env={**os.environ, **self.env})
        (self.dir / f"{leg}-verify.txt").write_bytes(r.stderr + r.stdout)
        if r.returncode not in (0, 3, 4, 5, 6):
            return {"exact": False, "lost": None, "duplicates": None,
                    "verify_error": r.stderr.decode(errors="replace").strip()[-500:]}
        g = json.loads(r.stdout)["generators"][0]
        return {"exact": r.returncode == 0, "lost": g["missing"], "duplicates": g["duplicated"],
                "out_of_range": g["out_of_range"], "rows_found": g["rows"]}

    def _stack_pid(self, component):
        path = STATE / "pids" / f"{component}.pid"
        if component == "clickhouse" and self.own_ch:
            path = self.own_ch.pid_file
        if component == "kafka" and self.own_kafka:
            path = self.own_kafka.pid_file
        try:
            return int(path.read_text())
        except (OSError, ValueError):
            return None

    @staticmethod
    def _cpu_or_none(pid):
        try:
            return proc_cpu_seconds(pid) if pid else None
        except OSError:
            return None

    # -- teardown

    def drop_database(self, db):
        try:
            self.ch.query(f"DROP DATABASE IF EXISTS `{db}` SYNC", timeout=120)
        except BenchError as e:
            say(f"could not drop {db}: {e}")

    def cleanup(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # finish cleaning up first
            signal.signal(sig, signal.SIG_IGN)
        stop_all()
        if not (self.ch and self.databases) and not self.topics:
            pass
        elif self.args.keep:
            say(f"kept topics {', '.join(self.topics)} and databases {', '.join(self.databases)} "
                "(--keep)")
        else:
            for db in self.databases:
                self.drop_database(db)
            for topic in self.topics if self.env and not self.own_kafka else []:  # (own: removed)
                kafka_java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                           self.env["KAFKA_BROKERS"], "--delete", "--topic", topic)
            say(f"cleaned up: topics {', '.join(self.topics) or '-'}, "
                f"databases {', '.join(self.databases) or '-'}")
        if self.kafka:  # before its broker goes
            self.kafka.close()
            self.kafka = None
        if self.own_ch:
            self.own_ch.remove()
        if self.own_kafka:
            self.own_kafka.remove()
        # --no-build's copies of the binaries (~120 MB): their digests are in the report.
        shutil.rmtree(self.bin_dir, ignore_errors=True)
        if self.kafka:
            self.kafka.close()
        if self.stack_started and self.args.stop_stack:
            say("stopping the stack this run started (--stop-stack)")
            subprocess.run([str(E2E / "stack"), "down", "kafka", "clickhouse"], timeout=300)
        elif self.stack_started:
            say("the stack this run started stays up (e2e/stack down stops it)")


def run_legs(b, a):
    """Every leg --repeats times, the order rotated each repeat (cost.rotate): {leg: the
    medians of its repeats, the repeats under "repeats"}; a leg that failed says why."""
    runs = {leg: [] for leg in a.legs}
    for r in range(a.repeats):
        b.rep = f"_r{r + 1}" if a.repeats > 1 else ""
        order = cost.rotate(a.legs, r)
        if a.repeats > 1:
            say(f"repeat {r + 1} of {a.repeats}: {', '.join(order)}")
        for leg in order:
            try:
                runs[leg].append(b.run_leg(leg))
            except BenchError as e:
                say(f"{leg}: error: {e}")
                runs[leg].append({"spans": a.spans, "verified": False, "error": str(e),
                                  **{k: None for k in ("cpu_seconds", "wall_seconds",
                                                       "spans_per_cpu_second", "mb_per_second",
                                                       "otlp_mb_per_cpu_second",
                                                       "peak_rss_mib", "lost", "duplicates")}})
    b.rep = ""
    # Idle CPU is the process's, not the leg's: one baseline for the run, the median of every
    # leg's (a spike in one 10 s window, a GC in the broker, other users of the shared broker,
    # would otherwise land on one leg alone).
    done = [r for leg in a.legs for r in runs[leg] if "cpu_windows" in r]
    b.pooled_baseline = cost.pooled_baseline([r.get("baseline") for r in done])
    for r in done:
        b.bill(r, b.pooled_baseline)
    return {leg: cost.median_of_repeats(runs[leg]) for leg in a.legs}


def main():
    a = parse(__doc__, str(E2E / "otelcol" / "config.yaml"))

    a.otelcol_config = str(Path(a.otelcol_config).resolve())
    a.out = str(Path(a.out).resolve())
    os.chdir(REPO)
    b = Bench(a)
    say(f"run {b.run_id}: {a.spans} spans"
        + (f" at {a.rate:g}/s (live)" if a.rate else "") + f", engine {a.engine}, {a.attributes} attributes, "
        f"{a.partitions} partitions; artifacts in {b.dir}")
    report = {}
    try:
        b.ensure_stack()
        b.build()
        say("calibrating chserver's own cost per INSERT and per byte")
        b.calibration = costio.calibrate(b.ch, b.env, b._stack_pid("clickhouse"))
        if a.partitions_sweep:
            # The same live run at each partition count, every leg, one after the other; each
            # step's artifacts in a folder of its own.
            run_dir, report["sweep"] = b.dir, []
            for count in a.partitions_sweep:
                a.partitions, b.step, b.dir = count, f"_p{count}", run_dir / f"p{count}"
                b.dir.mkdir(exist_ok=True)
                say(f"sweep: {count} partitions")
                report["sweep"].append({"partitions": count, **run_legs(b, a)})
            a.partitions, b.dir = None, run_dir
        else:
            b.produce()
            report.update(run_legs(b, a))
    finally:
        b.cleanup()

    report["run"] = {
        "id": b.run_id,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": "e2e/bench " + " ".join(sys.argv[1:]),
        "git": getattr(b, "git", None),
        "engine": a.engine,
        "attributes": a.attributes,
        "span_profile": a.span_profile,
        "partitions": a.partitions,
        "partitions_sweep": a.partitions_sweep,
        "mode": "live" if a.rate else "pre-filled",
        "clickhouse": "own chserver of the run" if a.own_clickhouse
                      else "the stack's chserver (--shared-clickhouse)",
        "kafka": "own broker of the run" if a.own_kafka else "the stack's broker (--shared-kafka)",
        "collector_bin": a.collector_bin,
        "collector_bin_alt": getattr(b, "alt_binary", None),
        "alt_config": a.alt_config_text or None,
        "prebuilt_binaries": getattr(b, "prebuilt", None),
        "tracehouse_linger_ms": a.linger_ms,
        "tracehouse_attribute_keys": not a.no_attribute_keys,
        "tracehouse_compression": a.tracehouse_compression,
        "processing": ({"file": os.path.relpath(a.processing, REPO), "block": a.processing_text,
                        "verification": "rows written = spans - spans the collector reports "
                                        "dropped or sampled out (tracehouse_spans_processed_total "
                                        "from its /metrics, scraped before it is stopped), no "
                                        "span stored twice, none out of range; lost = spans "
                                        "neither written nor removed by a rule"}
                       if a.processing_text else None),
        "rate_spans_per_second": a.rate,
        "duration_seconds": a.duration if a.rate else None,
        "topic_records": sum(b.end.values()) if getattr(b, "end", None) else None,
        "otlp_bytes": b.produced["bytes"] if getattr(b, "produced", None) else None,
        "otelcol_versions": {"builder": "v0.155.0", "kafkareceiver": "v0.155.0",
                             "batchprocessor": "v0.155.0", "clickhouseexporter": "v0.149.0"},
        "rotel": ({"binary": str(b.rotel), "version": "0.2.1 (streamfold/rotel 9ff0ed0)",
                   "columns": "leaves ResourceAttributesKeys and SpanAttributesKeys empty"}
                  if "rotel" in a.legs else None),
        "notes": "cpu_seconds: utime+stime of the collector process, read right before it is "
                 "stopped; wall_seconds: start of the process until every row is in ClickHouse "
                 "and the group's committed lag is 0; mb_per_second: bytes the process sent to "
                 "ClickHouse's HTTP port (TCP bytes_acked of its sockets: request headers + "
                 "compressed bodies) per wall second; peak_rss_mib: VmHWM. "
                 "Null engine: verified through a materialized view into a MergeTree table. "
                 "inserts: INSERT statements into otel_traces as chserver counted them "
                 "(GET /chserver/inserts); insert_blocks: max(max_block_number) over "
                 "system.parts of otel_traces (merge-tree) or of the verification view's "
                 "table (null): blocks written, one per partition a block spans; rates over "
                 "insert_window_seconds (live: producer start until every row was in; "
                 "pre-filled: collector start until every row was in).",
        "artifacts": str(b.dir),
        "repeats": a.repeats,
        "cost_method": {
            "calibration": b.calibration,
            "baseline_seconds": a.baseline_seconds,
            "baseline_pooled": getattr(b, "pooled_baseline", None),
            "settle_quiet_seconds": a.settle_quiet if a.engine == "merge-tree" else None,
            "optimize_final": not a.no_optimize and a.engine == "merge-tree",
            "notes": "system CPU per span = collector process + ClickHouse server + Kafka broker "
                     "(utime+stime from /proc). ClickHouse: from the collector's start until it "
                     "stopped, then until the parts settled (no system.merges row and no new "
                     "active part for settle_quiet_seconds); broker: from the collector's start "
                     "until it stopped (live: the producer's requests are in it, the same for "
                     "every leg). Each net of a baseline measured before every leg and pooled "
                     "over the run (the median of the legs' baselines, baseline_pooled): the process's "
                     "CPU per second idle, with the harness polling as during the leg "
                     "(server_poll, broker_poll) and as while settling (server_settle), times "
                     "the window's length. chserver's own path: calibrated per INSERT and per "
                     "MiB of body (costio.calibrate), applied to the leg's INSERTs and body bytes "
                     "as chserver counted them; it is inside the ClickHouse figure, and an upper "
                     "bound. OPTIMIZE … FINAL of the product's tables after settling, net of the "
                     "idle CPU, is not in the sum. events: system.events deltas of the run's own "
                     "chserver from before the leg until settled (the harness's polls included). "
                     "Bytes on disk: active parts of the product's tables after settling; the keys "
                     "columns' share counts their compressed data and marks and their bloom-filter "
                     "indexes. With repeats, every figure is the median of the repeats."},
    }
    Path(a.out).write_text(json.dumps(report, indent=2) + "\n")
    png = Path(a.out).with_suffix(".png")
    if a.partitions_sweep:
        return sweep_summary(report, a, b, png)
    title = (f"{a.spans:,} spans, {a.span_profile} profile, "
             + (f"produced live at {a.rate:,.0f}/s" if a.rate else "pre-filled")
             + f", {a.engine} engine — {report['run']['date']} ({b.git})")
    try:
        plot(b.series, png, title, rate=a.rate)
        report["run"]["png"] = str(png)
        Path(a.out).write_text(json.dumps(report, indent=2) + "\n")
    except Exception as e:  # the figures stand without the picture
        say(f"could not draw {png}: {e}")
    md = table(report, a.legs)
    per_span = b.produced["bytes"] / a.spans if getattr(b, "produced", None) else float("nan")
    print(f"\n{a.spans:,} spans ({a.span_profile} profile, "
          f"{per_span:.0f} B of OTLP each), {a.engine} engine, "
          f"{a.attributes} attributes, "
          f"{a.partitions} partitions — {report['run']['date']}, "
          f"{report['run']['machine']['cpus']} CPUs, {report['run']['machine']['memory_gib']} GiB\n")
    print(md)
    print(f"\nWhat a span costs the system ({a.engine} engine"
          + (", a parse diagnostic: nothing stored" if a.engine == "null" else "") + "):\n")
    print(cost.cost_table(report, a.legs))
    print(f"\n{cost.cost_note(report['run'])}")
    if a.rate:
        print(f"\n{freshness_table(report, a.legs, a.rate)}")
    for leg in a.legs:
        r = report[leg]
        notes = ([] if r.get("outcome") in (None, "done") else [r["outcome"]]) \
            + r.get("disturbed", []) + ([r["error"]] if r.get("error") else [])
        if notes:
            print(f"\n{leg}: " + "; ".join(notes))
    print(f"\nJSON: {a.out}")
    return 0 if all(report[leg]["verified"] for leg in a.legs) else 1


def sweep_summary(report, a, b, png):
    """A sweep's PNG (inserts/s, parts per minute, freshness against the partition count) and
    its table; 0 when every leg of every step was verified."""
    title = (f"{a.spans:,} spans per leg at {a.rate:,.0f}/s, {a.span_profile} profile, "
             f"{a.engine} engine — {report['run']['date']} ({b.git})")
    try:
        plot_sweep(report["sweep"], a.legs, png, title)
        report["run"]["png"] = str(png)
        Path(a.out).write_text(json.dumps(report, indent=2) + "\n")
    except Exception as e:  # the figures stand without the picture
        say(f"could not draw {png}: {e}")
    print(f"\nPartition sweep: {a.spans:,} spans per leg produced at {a.rate:,.0f} spans/s "
          f"({a.span_profile} profile), {a.engine} engine — {report['run']['date']}\n")
    print(sweep_table(report, a.legs))
    failed = [f"{leg} at {step['partitions']} partitions" for step in report["sweep"]
              for leg in a.legs if not step[leg].get("verified")]
    if failed:
        print("\nnot verified: " + ", ".join(failed))
    print(f"\nJSON: {a.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
