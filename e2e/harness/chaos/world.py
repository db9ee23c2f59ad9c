"""One chaos case's world: its topic, dead-letter topic, group and database (random names), the
load generator's produce and verify (the `tracehouse-loadgen` binary), the real collector
binary as child processes (kill -9, SIGTERM, metrics, resident memory sampled in the
background), and the cleanup: everything deleted after a pass (with what a case added through
`also`, such as a Kubernetes namespace), kept (names printed) after a failure.
"""

import json
import os
import secrets
import signal
import subprocess
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import REPO
from harness.chaos.infra import wait_for
from harness.procs import BenchError, proc_status_kib, run, say, spawn, stop
from harness.stack import ClickHouse, Kafka, free_port, metric_sum, metrics_scrape

# One home for the collector configurations of the stack tests and the matrix.
CONFIGS = REPO / "collector" / "tests" / "configs"


def bin_path(name):
    target = os.environ.get("CARGO_TARGET_DIR") or str(REPO / "target")
    return str(Path(os.environ.get("TRACEHOUSE_BIN_DIR", Path(target) / "debug")) / name)


class Collector:
    """The collector binary as a child process, with its peak resident memory."""

    def __init__(self, world, args, name, binary=None):
        self.world, self.name = world, name
        self.binary = binary or bin_path("tracehouse-collector")
        self.port = free_port()
        self.log = world.logdir / f"{name}.log"
        env = dict(os.environ, **world.env, RUST_LOG="info,librdkafka=warn")
        cmd = [self.binary, "run", "--topic", world.topic,
               "--group-id", world.group, "--database", world.database,
               "--table", "otel_traces", "--metrics-addr", f"127.0.0.1:{self.port}",
               "--dead-letter-topic", world.dlq, "--shutdown-deadline-ms", "8000", *args]
        self.proc = spawn(cmd, self.log, env=env)
        self.started = time.monotonic()
        self.peak_rss_kib = 0
        self.rss = []  # (monotonic seconds, VmRSS KiB)

    @property
    def alive(self):
        return self.proc.poll() is None

    def sample(self):
        if not self.alive:
            return
        try:
            rss = proc_status_kib(self.proc.pid, "VmRSS")
            hwm = proc_status_kib(self.proc.pid, "VmHWM")
        except OSError:
            return
        self.peak_rss_kib = max(self.peak_rss_kib, hwm, rss)
        self.rss.append((time.monotonic(), rss))

    def metrics(self):
        return metrics_scrape(self.port) or {}

    def metric(self, prefix):
        return metric_sum(self.metrics(), prefix)

    def kill9(self):
        self.sample()
        stop_now(self.proc)

    def stop(self, grace=20.0):
        self.sample()
        return stop(self.proc, grace=grace)


def stop_now(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait(timeout=10)
    stop(p, grace=1)  # forgets it


class World:
    def __init__(self, case, brokers, clickhouse, logdir, attributes="map", schema=True):
        suffix = secrets.token_hex(3)
        self.case = case
        self.name = f"chaos_{case}_{suffix}"
        self.topic, self.dlq = self.name, f"{self.name}_dlq"
        self.group, self.database = f"{self.name}_group", self.name
        self.brokers, self.ch = brokers, clickhouse
        self.env = {"KAFKA_BROKERS": brokers, **clickhouse.client_env()}
        self.attributes = attributes
        self.logdir = Path(logdir) / self.name
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.collectors = []
        self.generators = {}  # generator id -> spans produced
        self.ch_client = ClickHouse(clickhouse.url, clickhouse.user, clickhouse.password)
        self._sampling = True
        self._sampler = threading.Thread(target=self._sample_loop, daemon=True)
        self._sampler.start()
        self.cleanups = []  # (what is kept after a failure, how to remove it after a pass)
        if schema:  # else the case's own applier (the operator) migrates the database
            self.apply_schema()

    def apply_schema(self, partitions=None):
        """`tracehouse-collector schema apply` on the case's database; with `partitions`, the
        deduplication window sized for them (`--partitions`), also on an existing table."""
        extra = ["--partitions", str(partitions)] if partitions else []
        run([bin_path("tracehouse-collector"), "schema", "apply", "--database", self.database,
             "--table", "otel_traces", "--attributes", self.attributes, *extra], timeout=120,
            env=dict(os.environ, **self.env), log=self.logdir / "schema.log")

    def dedup_window(self):
        """The traces table's non_replicated_deduplication_window, as its CREATE statement on
        the server says (0: not set)."""
        text = self.ch_client.query(
            "SELECT extract(create_table_query, 'non_replicated_deduplication_window = (\\d+)') "
            f"FROM system.tables WHERE database = '{self.database}' AND name = 'otel_traces' "
            "FORMAT TSV").strip()
        return int(text or 0)

    def gen(self, label):
        return f"{self.name}_{label}"

    # -- load --------------------------------------------------------------------------------

    def produce_cmd(self, generator, spans, partitions=4, seed=1, rate=None, encoding="otlp_proto",
                    brokers=None, extra=()):
        """`extra`: more `tracehouse-loadgen produce` flags (a record shape, hostile or not)."""
        self.generators[generator] = spans
        cmd = [bin_path("tracehouse-loadgen"), "produce", "--brokers", brokers or self.brokers,
               "--topic", self.topic, "--partitions", str(partitions), "--spans", str(spans),
               "--generator-id", generator, "--seed", str(seed), "--encoding", encoding,
               "-X", "enable.idempotence=true", "--quiet"]
        if rate:
            cmd += ["--rate", str(rate)]
        return cmd + list(extra)

    def produce(self, generator, spans, **kw):
        """Produce and wait."""
        run(self.produce_cmd(generator, spans, **kw), timeout=600, log=self.logdir / "produce.log")

    def produce_bg(self, generator, spans, **kw):
        """Produce in the background (a Popen; `wait_produced` it)."""
        return spawn(self.produce_cmd(generator, spans, **kw), self.logdir / "produce.log")

    def wait_produced(self, p, timeout=900):
        try:
            code = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BenchError("loadgen produce did not finish in time")
        stop(p, grace=1)
        if code != 0:
            raise BenchError(f"loadgen produce exited with {code}; log {self.logdir / 'produce.log'}")

    def create_topic(self, name, partitions, config=None):
        """Creates a topic (`config`: topic-level settings, e.g. max.message.bytes)."""
        admin = AdminClient({"bootstrap.servers": self.brokers, "log_level": 2})
        new = NewTopic(name, partitions, 1, config=dict(config or {}))
        for f in admin.create_topics([new], operation_timeout=30).values():
            f.result(timeout=40)

    def committed_lag(self, partitions):
        """Records between the group's committed offsets and the partitions' ends, read from
        Kafka (not from the collector): 0 once every record was committed."""
        k = Kafka(self.brokers)
        try:
            ends = k.end_offsets(self.topic, partitions)
            done = k.committed(self.group, self.topic, partitions)
        finally:
            k.close()
        return sum(end - max(done.get(p, -1), 0) for p, end in ends.items())

    def produce_raw(self, payloads, partition=0):
        p = Producer({"bootstrap.servers": self.brokers, "message.max.bytes": 33554432,
                      "log_level": 2})
        for payload in payloads:
            p.produce(self.topic, value=payload, partition=partition)
        if p.flush(30) != 0:
            raise BenchError("raw records were not all produced")

    # -- judging ----------------------------------------------------------------------------

    def expected(self):
        return sum(self.generators.values())

    def count(self):
        try:
            return self.ch_client.count(f"`{self.database}`.otel_traces")
        except BenchError:
            return -1

    def wait_rows(self, rows, timeout):
        """Seconds until the table holds at least `rows` rows."""
        t0 = time.monotonic()
        wait_for(f"{rows} rows in {self.database}", lambda: self.count() >= rows, timeout, 0.5)
        return time.monotonic() - t0

    def verify(self, generators=None):
        """loadgen verify over the given {generator: expected} (default: all produced)."""
        gens = generators or self.generators
        cmd = [bin_path("tracehouse-loadgen"), "verify", "--database", self.database,
               "--attributes", self.attributes]
        for g, n in gens.items():
            cmd += ["--generator-id", g, "--expected", str(n)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, **self.env))
        if r.returncode not in (0, 3, 4, 5, 6):
            raise BenchError(f"loadgen verify failed ({r.returncode}): {r.stderr[-500:]}")
        report = json.loads(r.stdout)
        return {g["generator_id"]: g for g in report["generators"]}

    def lost_duplicated(self, generators=None):
        rep = self.verify(generators)
        return (sum(g["missing"] for g in rep.values()),
                sum(g["duplicated"] + g["out_of_range"] for g in rep.values()), rep)

    def group_members(self):
        admin = AdminClient({"bootstrap.servers": self.brokers, "log_level": 2})
        f = admin.describe_consumer_groups([self.group], request_timeout=10)[self.group]
        g = f.result(timeout=15)
        return len(g.members), str(g.state)

    def dead_letters(self, expect, timeout=30):
        """The dead-letter topic's records: [(headers dict, payload length)]."""
        c = Consumer({"bootstrap.servers": self.brokers, "group.id": self.name + "_dlq_reader",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "log_level": 2})
        out = []
        try:
            topic = c.list_topics(self.dlq, timeout=10).topics.get(self.dlq)
            parts = sorted(topic.partitions) if topic is not None and not topic.error else [0]
            c.assign([TopicPartition(self.dlq, p, 0) for p in parts])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and len(out) < expect:
                m = c.poll(0.5)
                if m is None or m.error():
                    continue
                headers = {k: (v or b"").decode(errors="replace") for k, v in (m.headers() or [])}
                out.append((headers, len(m.value() or b"")))
            # a little longer, to see any record beyond those expected
            end = time.monotonic() + 2
            while time.monotonic() < end:
                m = c.poll(0.5)
                if m is not None and not m.error():
                    headers = {k: (v or b"").decode(errors="replace") for k, v in (m.headers() or [])}
                    out.append((headers, len(m.value() or b"")))
        finally:
            c.close()
        return out

    # -- collectors -------------------------------------------------------------------------

    def start_collector(self, *args, binary=None):
        """A collector of this world's group; `binary`: another build (the previous release)."""
        c = Collector(self, list(args), f"collector-{len(self.collectors)}", binary)
        self.collectors.append(c)
        return c

    def _sample_loop(self):
        while self._sampling:
            for c in list(self.collectors):
                c.sample()
            time.sleep(0.25)

    def peak_rss_mib(self):
        return max((c.peak_rss_kib for c in self.collectors), default=0) / 1024

    def collector_logs(self):
        return [str(c.log) for c in self.collectors]

    # -- the end ----------------------------------------------------------------------------

    def also(self, what, remove):
        """Something more the case made: removed (first) after a pass, `what` printed after a
        failure."""
        self.cleanups.append((what, remove))

    def close(self, passed):
        self._sampling = False
        for c in self.collectors:
            if c.alive:
                c.stop(grace=10)
        if not passed:
            say(f"{self.case}: kept for a look: topics {self.topic}, {self.dlq}; database "
                f"{self.database} on {self.ch.url}; logs {self.logdir}"
                + "".join(f"; {what}" for what, _ in self.cleanups))
            return
        for what, remove in reversed(self.cleanups):
            try:
                remove()
            except Exception as e:  # noqa: BLE001
                say(f"{self.case}: cleanup of {what}: {e}")
        admin = AdminClient({"bootstrap.servers": self.brokers, "log_level": 2})
        try:
            for f in admin.delete_topics([self.topic, self.dlq], operation_timeout=30).values():
                try:
                    f.result(timeout=40)
                except Exception:  # noqa: BLE001 - a topic never made (no dead letter) is fine
                    pass
            admin.delete_consumer_groups([self.group, self.name + "_dlq_reader"])
        except Exception as e:  # noqa: BLE001
            say(f"{self.case}: topic cleanup: {e}")
        try:
            self.ch_client.query(f"DROP DATABASE IF EXISTS `{self.database}`")
        except BenchError as e:
            say(f"{self.case}: database cleanup: {e}")
