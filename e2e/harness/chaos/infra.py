"""The chaos runner's PRIVATE infrastructure: a ClickHouse front (chserver over chdb) and, for the
broker-restart case, a single-node Kafka — started, stopped and restarted by the runner alone,
never the shared stack's components.

Each is the shared stack's own component script (`e2e/stack up|down|restart <component>`,
i.e. lib/clickhouse.sh and lib/kafka.sh) run with a state directory and ports of its own
(`TRACEHOUSE_STATE`, `TRACEHOUSE_*_PORT`): the same install, configuration and readiness
checks, separate data, logs and pid files, so nothing of the shared stack is touched. The
private chserver runs with `CHSERVER_FAULTS` set, so the runner can flip its fault switches
(e2e/chserver/faults.py) by rewriting one JSON file.
"""

import json
import os
import shutil
import time

from harness.procs import BenchError, run, say
from harness.stack import E2E, STATE, free_port


def free_ports(n):
    """`n` distinct free ports (each also has the stack's TLS listeners to move off the
    shared stack's fixed ones)."""
    ports = []
    while len(ports) < n:
        p = free_port()
        if p not in ports:
            ports.append(p)
    return ports

CHAOS_STATE = STATE / "chaos"


class Private:
    """One private component, driven through e2e/stack with its own state and ports."""

    component = ""

    def __init__(self, run_dir, name):
        self.state = run_dir / name
        self.env = dict(os.environ, TRACEHOUSE_STATE=str(self.state))

    def stack(self, *args, timeout=240):
        log = self.state / "stack.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        run([str(E2E / "stack"), *args, self.component], timeout=timeout, env=self.env, log=log)
        return time.monotonic() - t0

    def up(self):
        return self.stack("up")

    def down(self):
        return self.stack("down")

    def restart(self):
        return self.stack("restart")

    def log(self):
        return self.state / "logs" / f"{self.component}.log"

    def remove(self):
        """Stop it and delete its state (only after every case passed)."""
        try:
            self.down()
        finally:
            shutil.rmtree(self.state, ignore_errors=True)


class PrivateClickHouse(Private):
    component = "clickhouse"

    def __init__(self, run_dir, name="clickhouse"):
        super().__init__(run_dir, name)
        self.port, tls, mtls = free_ports(3)
        self.faults_file = self.state / "faults.json"
        self.env.update(TRACEHOUSE_CLICKHOUSE_PORT=str(self.port),
                        TRACEHOUSE_CLICKHOUSE_TLS_PORT=str(tls),
                        TRACEHOUSE_CLICKHOUSE_MTLS_PORT=str(mtls),
                        CHSERVER_FAULTS=str(self.faults_file))
        self.url = f"http://127.0.0.1:{self.port}"
        self.user = "tracehouse"

    @property
    def password(self):
        return (self.state / "clickhouse" / "password").read_text().strip()

    def up(self):
        self.state.mkdir(parents=True, exist_ok=True)
        self.set_faults([])
        took = super().up()
        say(f"private chserver on {self.url} (state {self.state})")
        return took

    def set_faults(self, rules):
        """Replace the fault rules (an empty list: no fault). Written atomically."""
        tmp = self.faults_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"rules": rules}))
        os.replace(tmp, self.faults_file)

    def client_env(self):
        return {"CLICKHOUSE_URL": self.url, "CLICKHOUSE_USER": self.user,
                "CLICKHOUSE_PASSWORD": self.password}


class PrivateKafka(Private):
    component = "kafka"

    def __init__(self, run_dir, name="kafka"):
        super().__init__(run_dir, name)
        self.port, self.controller_port, sasl_ssl, mtls = free_ports(4)
        self.env.update(TRACEHOUSE_KAFKA_PORT=str(self.port),
                        TRACEHOUSE_KAFKA_CONTROLLER_PORT=str(self.controller_port),
                        TRACEHOUSE_KAFKA_SASL_SSL_PORT=str(sasl_ssl),
                        TRACEHOUSE_KAFKA_MTLS_PORT=str(mtls))
        self.brokers = f"127.0.0.1:{self.port}"

    def up(self):
        took = super().up()
        say(f"private kafka on {self.brokers} (state {self.state})")
        return took


def wait_for(what, check, timeout, interval=0.25):
    """Poll check() until it returns a truthy value; that value, or BenchError past the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        v = check()
        if v:
            return v
        if time.monotonic() > deadline:
            raise BenchError(f"{what}: not within {timeout:.0f}s")
        time.sleep(interval)
