"""What the bench talks to: the local stack (its addresses from `e2e/stack env`), ClickHouse over
HTTP, Kafka (offsets through confluent-kafka's admin client; the group's final state through the
Kafka CLI), the collectors' metrics endpoints, and the revision of the repository under test.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from harness import E2E, REPO
from harness.procs import BenchError, run

CACHE = Path(os.environ.get("TRACEHOUSE_CACHE", Path.home() / ".cache" / "tracehouse"))
STATE = Path(os.environ.get("TRACEHOUSE_STATE", CACHE / "state"))
KAFKA_LIB = CACHE / "kafka-4.1.1" / "lib"
KAFKA_TIMEOUT = 10  # seconds for one offsets request, broker lookup included


# ---------------------------------------------------------------- ClickHouse over HTTP

class ClickHouse:
    def __init__(self, url, user, password):
        self.url, self.user, self.password = url.rstrip("/"), user, password

    def query(self, sql, timeout=60):
        req = urllib.request.Request(self.url + "/", data=sql.encode(), method="POST", headers={
            "X-ClickHouse-User": self.user, "X-ClickHouse-Key": self.password})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            raise BenchError(f"clickhouse: {e.read().decode(errors='replace').strip()[:500]}")
        except (urllib.error.URLError, OSError) as e:
            raise BenchError(f"clickhouse: {e}")

    def count(self, table):
        return int(self.query(f"SELECT count() FROM {table}", timeout=30).strip())

    def insert_stats(self):
        """chserver's INSERT counts per database and table (`GET /chserver/inserts`), or None
        from a chserver without them (one started before they existed)."""
        req = urllib.request.Request(self.url + "/chserver/inserts", headers={
            "X-ClickHouse-User": self.user, "X-ClickHouse-Key": self.password})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise BenchError(f"clickhouse /chserver/inserts: HTTP {e.code}")
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise BenchError(f"clickhouse /chserver/inserts: {e}")


class OwnClickHouse:
    """A chserver of the run's own, started from this work tree by the stack's own component
    script (`e2e/stack up clickhouse`, lib/clickhouse.sh) with a state directory and ports of
    its own, and removed at the end: its CPU is the run's alone (the shared one also serves
    whatever else runs on the machine), and it counts INSERTs as this work tree's chserver
    does."""

    def __init__(self, run_dir):
        self.state = run_dir / "clickhouse-own"
        ports = []
        while len(ports) < 3:
            p = free_port()
            if p not in ports:
                ports.append(p)
        self.port = ports[0]
        self.env = dict(os.environ, TRACEHOUSE_STATE=str(self.state),
                        TRACEHOUSE_CLICKHOUSE_PORT=str(ports[0]),
                        TRACEHOUSE_CLICKHOUSE_TLS_PORT=str(ports[1]),
                        TRACEHOUSE_CLICKHOUSE_MTLS_PORT=str(ports[2]))
        self.env.pop("CHSERVER_FAULTS", None)

    def _stack(self, verb):
        self.state.mkdir(parents=True, exist_ok=True)
        run([str(E2E / "stack"), verb, "clickhouse"], timeout=300, env=self.env,
            log=self.state / "stack.log")

    def up(self):
        self._stack("up")
        return {"CLICKHOUSE_URL": f"http://127.0.0.1:{self.port}", "CLICKHOUSE_USER": "tracehouse",
                "CLICKHOUSE_PASSWORD": (self.state / "clickhouse" / "password").read_text().strip()}

    @property
    def pid_file(self):
        return self.state / "pids" / "clickhouse.pid"

    @property
    def log(self):
        return self.state / "logs" / "clickhouse.log"

    def remove(self):
        try:
            self._stack("down")
        finally:
            shutil.rmtree(self.state / "clickhouse", ignore_errors=True)


class OwnKafka:
    """A Kafka broker of the run's own (single-node KRaft), started by the stack's own component
    script (`e2e/stack up kafka`, lib/kafka.sh) with a state directory and ports of its own, as
    the stack starts its second cluster, and removed at the end: its CPU is the run's alone (the
    stack's broker also serves whatever else runs on the machine, and may be restarted by it)."""

    def __init__(self, run_dir):
        self.state = run_dir / "kafka-own"
        ports = []
        while len(ports) < 4:
            p = free_port()
            if p not in ports:
                ports.append(p)
        self.port = ports[0]
        self.env = dict(os.environ, TRACEHOUSE_STATE=str(self.state),
                        TRACEHOUSE_KAFKA_PORT=str(ports[0]),
                        TRACEHOUSE_KAFKA_CONTROLLER_PORT=str(ports[1]),
                        TRACEHOUSE_KAFKA_SASL_SSL_PORT=str(ports[2]),
                        TRACEHOUSE_KAFKA_MTLS_PORT=str(ports[3]))

    def _stack(self, verb):
        self.state.mkdir(parents=True, exist_ok=True)
        run([str(E2E / "stack"), verb, "kafka"], timeout=300, env=self.env,
            log=self.state / "stack.log")

    def up(self):
        self._stack("up")
        brokers = f"127.0.0.1:{self.port}"
        # A fresh broker has no __consumer_offsets yet: a consumer group of the Kafka CLI makes
        # it (and its coordinator) before the bench's admin client asks for any group's offsets
        # (librdkafka 2.16 has crashed this process on a fresh broker otherwise).
        kafka_java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", brokers,
                   "--create", "--topic", "bench-warm-up", "--partitions", "1",
                   "--replication-factor", "1")
        kafka_java("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server",
                   brokers, "--topic", "bench-warm-up", "--group", "bench-warm-up",
                   "--from-beginning", "--timeout-ms", "3000", timeout=120)
        return {"KAFKA_BROKERS": brokers}

    @property
    def pid_file(self):
        return self.state / "pids" / "kafka.pid"

    def remove(self):
        try:
            self._stack("down")
        finally:
            shutil.rmtree(self.state / "kafka", ignore_errors=True)


# ---------------------------------------------------------------- Kafka

class Kafka:
    """A group's committed offsets and the partitions' end offsets, read every few hundred
    milliseconds without starting a JVM per check, through confluent-kafka's admin client
    (librdkafka): ListOffsets (latest) and OffsetFetch."""

    def __init__(self, brokers):
        # librdkafka's own log lines (a refused connection while a broker restarts, …) stay
        # quiet: failed polls are counted and reported by the bench itself.
        self.admin = AdminClient({"bootstrap.servers": brokers, "client.id": "tracehouse-bench",
                                  "log_level": 2})

    @staticmethod
    def _result(future, what):
        try:
            return future.result(timeout=KAFKA_TIMEOUT + 5)
        except (KafkaException, FutureTimeout) as e:
            raise BenchError(f"kafka {what}: {e or 'timed out'}") from None

    def end_offsets(self, topic, partitions):
        futures = self.admin.list_offsets(
            {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
            request_timeout=KAFKA_TIMEOUT)
        # Every future is waited for, even after one failed: librdkafka has aborted the process
        # (an assertion in rd_kafka_enq_once) when futures of a failed ListOffsets were left.
        out, error = {}, None
        for tp, f in futures.items():
            try:
                out[tp.partition] = self._result(f, f"ListOffsets partition {tp.partition}").offset
            except BenchError as e:
                error = error or e
        if error:
            raise error
        return out

    def wait_leaders(self, topic, partitions, timeout=60):
        """Wait until every partition of a new topic has a leader in the broker's metadata, and
        a moment more, before its offsets are asked for: ListOffsets against partitions without
        a leader yet has crashed librdkafka (2.16) in this process, intermittently."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                md = self.admin.list_topics(topic, timeout=KAFKA_TIMEOUT)
                t = md.topics.get(topic)
                if t is not None and t.error is None and len(t.partitions) >= partitions and all(
                        p.leader >= 0 and p.error is None for p in t.partitions.values()):
                    time.sleep(2)
                    return
            except KafkaException:
                pass
            time.sleep(0.5)
        raise BenchError(f"kafka: partitions of {topic} have no leader after {timeout}s")

    def committed(self, group, topic, partitions):
        """Committed offset per partition (-1: nothing committed)."""
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p)
                                                       for p in range(partitions)])
        futures = self.admin.list_consumer_group_offsets([request], request_timeout=KAFKA_TIMEOUT)
        out = {}
        for tp in self._result(futures[group], "OffsetFetch").topic_partitions:
            out[tp.partition] = tp.offset if tp.error is None and tp.offset >= 0 else -1
        return out

    def partition_count(self, topic):
        """Partitions of the topic as the broker's metadata has them (0: no such topic)."""
        try:
            md = self.admin.list_topics(topic, timeout=KAFKA_TIMEOUT)
        except KafkaException as e:
            raise BenchError(f"kafka metadata of {topic}: {e}") from None
        t = md.topics.get(topic)
        return len(t.partitions) if t is not None and t.error is None else 0

    def assigned_partitions(self, group):
        """Partitions the group's members hold now (0 while it is still joining)."""
        futures = self.admin.describe_consumer_groups([group], request_timeout=KAFKA_TIMEOUT)
        d = self._result(futures[group], "DescribeGroups")
        return sum(len(m.assignment.topic_partitions) for m in d.members
                   if m.assignment is not None)

    def close(self):
        self.admin = None


def kafka_java(*args, timeout=120):
    cmd = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
           f"-Dlog4j.configuration=file:{STATE / 'kafka' / 'log4j.properties'}",
           "-cp", f"{KAFKA_LIB}/*", *args]
    return run(cmd, timeout=timeout, check=False)


def group_describe(brokers, group):
    """The Kafka CLI's view of the group (authoritative, used once per leg after the run)."""
    r = kafka_java("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                   "--bootstrap-server", brokers, "--describe", "--group", group)
    lags, text = {}, r.stdout.decode(errors="replace")
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0] == group and f[2].isdigit():
            lags[int(f[2])] = int(f[5]) if f[5].lstrip("-").isdigit() else None
    return lags, text


# ---------------------------------------------------------------- helpers

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kafka_and_clickhouse_running():
    """Whether `e2e/stack status` shows both Kafka and ClickHouse running."""
    st = run([str(E2E / "stack"), "status", "kafka", "clickhouse"], timeout=60).stdout.decode()
    return len(re.findall(r"^(kafka|clickhouse)\s+running", st, re.M)) == 2


def new_run(kind):
    """A run id (UTC time and pid) and its state directory, `$STATE/<kind>/<id>`, created."""
    from datetime import datetime, timezone
    run_id = datetime.now(timezone.utc).strftime("%Y%m%d_%H%M%S") + f"_{os.getpid()}"
    d = STATE / kind / run_id
    d.mkdir(parents=True, exist_ok=True)
    return run_id, d


def stack_env():
    out = run([str(E2E / "stack"), "env"], timeout=60).stdout.decode()
    env = {}
    for line in out.splitlines():
        m = re.match(r"export (\w+)=(.*)$", line.strip())
        if m:
            env[m.group(1)] = m.group(2).strip("'\"")
    for k in ("KAFKA_BROKERS", "CLICKHOUSE_URL", "CLICKHOUSE_USER", "CLICKHOUSE_PASSWORD"):
        if not env.get(k):
            raise BenchError(f"`e2e/stack env` gave no {k}")
    return env


def metrics_scrape(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                samples[name] = float(value)
            except ValueError:
                pass
    return samples


def metric_sum(samples, prefix):
    return sum(v for k, v in (samples or {}).items() if k == prefix or k.startswith(prefix + "{"))



def git_revision():
    """HEAD of the work tree the binaries were built from, '+dirty' with local changes."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return head + ("+dirty" if dirty else "") if head else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def log_tail_errors(path, offset, limit=20):
    """Lines of a log written after offset that report failures (for the chserver log)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    keep = [ln for ln in text.splitlines()
            if re.search(r"failed|error|exception|traceback", ln, re.I)]
    return keep[:limit]

