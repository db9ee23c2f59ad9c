"""The chaos runner's thin shell over `kubectl` on the shared stack's Kubernetes (its
KUBECONFIG): a namespace of the case's own with the Secret and TracePipeline a gateway needs,
the scale subresource, the gateway pods as the node agent runs them (their host pids, so their
resident memory can be read from /proc), and the operator's own pods, Lease and /metrics.

No decision lives here: the cases (operator_cases.py) say what to wait for and what counts.
"""

import json
import os
import secrets
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import namedtuple
from pathlib import Path

from harness import REPO
from harness.procs import BenchError, proc_status_kib
from harness.stack import stack_env

# Where `e2e/stack up` runs the operator (as operator/tests/common/mod.rs has it).
OPERATOR_NAMESPACE = "tracehouse-system"
OPERATOR_NAME = "tracehouse-operator"
OPERATOR_METRICS_PORT = 8080
OPERATOR_SELECTOR = "app.kubernetes.io/name=tracehouse-operator"
PIPELINE_LABEL = "tracehouse.dev/pipeline"
CONFIG_HASH_ANNOTATION = "tracehouse.dev/config-hash"
SAMPLE = REPO / "config" / "samples" / "local" / "tracepipeline.yaml"

# A live pod as the node agent runs it: `pid` is the host pid of its program (None while it
# waits), `config_hash` the gateway's config-hash annotation (None for the operator's pods).
PodRow = namedtuple("PodRow", "name pid ip ready restarts config_hash")


def kubeconfig():
    return stack_env().get("KUBECONFIG") or os.environ.get("KUBECONFIG")


class Kubectl:
    def __init__(self):
        self.env = dict(os.environ, KUBECONFIG=kubeconfig() or "")
        if not self.env["KUBECONFIG"]:
            raise BenchError("no KUBECONFIG: the operator cases need the shared stack (`e2e/stack up`)")

    def run(self, *args, stdin=None, timeout=60, check=True):
        r = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True,
                           timeout=timeout, env=self.env)
        if check and r.returncode != 0:
            raise BenchError(f"kubectl {' '.join(args)}: {r.stderr.strip()[-800:]}")
        return r

    def json(self, *args):
        return json.loads(self.run(*args, "-o", "json").stdout)

    def apply(self, obj, manager="tracehouse-chaos"):
        """Server-side apply as the user (not the operator's field manager)."""
        self.run("apply", "--server-side", "--force-conflicts", f"--field-manager={manager}",
                 "-f", "-", stdin=json.dumps(obj))

    # -- the operator --------------------------------------------------------------------

    def operator_pods(self):
        """Live operator pods: [PodRow]."""
        pods = self.json("-n", OPERATOR_NAMESPACE, "get", "pods", "-l", OPERATOR_SELECTOR)["items"]
        return [pod_row(p) for p in pods if not p["metadata"].get("deletionTimestamp")]

    def leader(self):
        """The name of the pod holding the operator's Lease (None when nobody does)."""
        lease = self.json("-n", OPERATOR_NAMESPACE, "get", "lease", OPERATOR_NAME)
        return (lease.get("spec") or {}).get("holderIdentity")

    def operator_counters(self):
        """{pod name: (reconciliations, writes)} read from each live operator pod's /metrics."""
        out = {}
        for pod in self.operator_pods():
            if not pod.ip:
                continue
            text = http_text(f"http://{pod.ip}:{OPERATOR_METRICS_PORT}/metrics")
            if text is None:
                continue
            out[pod.name] = (metric_total(text, "tracehouse_operator_reconciliations_total"),
                         metric_total(text, "tracehouse_operator_writes_total"))
        return out


def pod_row(p):
    status = p.get("status") or {}
    cs = (status.get("containerStatuses") or [{}])[0]
    cid = cs.get("containerID") or ""
    pid = int(cid[len("process://"):]) if cid.startswith("process://") else None
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
    return PodRow(p["metadata"]["name"], pid, status.get("podIP"), ready, cs.get("restartCount", 0),
                  (p["metadata"].get("annotations") or {}).get(CONFIG_HASH_ANNOTATION))


def http_text(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode()
    except (urllib.error.URLError, OSError):
        return None


def metric_total(text, name):
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if not line.startswith("#") and (line.startswith(name + " ") or line.startswith(name + "{")))


def is_collector_process(pid):
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return args[0].endswith(b"tracehouse-collector") and len(args) > 1 and args[1] == b"run"


class Pipeline:
    """One TracePipeline in a namespace of its own, pointed at a chaos World's topic, group
    and database (on the runner's private chserver, which the operator migrates itself)."""

    def __init__(self, kube, world, name="chaos"):
        self.kube, self.world, self.name = kube, world, name
        self.ns = f"chaos-{world.case.replace('_', '-')}-{secrets.token_hex(3)}"
        self.kube.run("create", "namespace", self.ns)
        ch = world.ch
        self.kube.run("-n", self.ns, "create", "secret", "generic", "tracehouse-clickhouse",
                      f"--from-literal=username={ch.user}", f"--from-literal=password={ch.password}")
        tp = json.loads(self.kube.run("create", "--dry-run=client", "-o", "json",
                                      "-f", str(SAMPLE)).stdout)
        tp["metadata"] = {"name": name, "namespace": self.ns}
        spec = tp["spec"]
        # The sample sizes the gateway with the autoscaler; these cases size it themselves.
        spec.pop("autoscaling", None)
        spec["kafka"].update(bootstrapServers=world.brokers, topics=[world.topic],
                             consumerGroup=world.group)
        spec["clickhouse"].update(endpoint=ch.url, database=world.database)
        self.spec = tp

    def apply(self):
        self.kube.apply(self.spec)

    def get(self):
        return self.kube.json("-n", self.ns, "get", "tracepipeline", self.name)

    def scale(self, n):
        self.kube.run("-n", self.ns, "scale", f"tracepipeline/{self.name}", f"--replicas={n}")

    def pods(self):
        """Live gateway pods: [PodRow]."""
        pods = self.kube.json("-n", self.ns, "get", "pods", "-l", f"{PIPELINE_LABEL}={self.name}")["items"]
        return [pod_row(p) for p in pods if not p["metadata"].get("deletionTimestamp")]

    def all_pods(self):
        """Every gateway pod, terminating ones included: [PodRow]."""
        pods = self.kube.json("-n", self.ns, "get", "pods", "-l", f"{PIPELINE_LABEL}={self.name}")["items"]
        return [pod_row(p) for p in pods]

    def deployment_replicas(self):
        ds = self.kube.json("-n", self.ns, "get", "deployments", "-l", f"{PIPELINE_LABEL}={self.name}")["items"]
        return [d["spec"].get("replicas") for d in ds]

    def footprint(self):
        """What any write of the operator for this pipeline changes: resourceVersions and the
        operator's managed-fields times of the pipeline and its objects, and the Event count."""
        objs = self.kube.json("-n", self.ns, "get", "tracepipeline,deployment,configmap,service,pdb")["items"]
        fp = {}
        for o in objs:
            md = o["metadata"]
            if md["name"] == "kube-root-ca.crt":
                continue
            fp[f"{o['kind']}/{md['name']}"] = (md.get("resourceVersion"), sorted(
                (f.get("manager"), f.get("operation"), f.get("subresource"), f.get("time"))
                for f in md.get("managedFields") or []))
        fp["events"] = len(self.kube.json("-n", self.ns, "get", "events")["items"])
        return fp

    def delete(self):
        """The pipeline first (its finalizer stops the gateway while the topic and database
        still exist), then the namespace."""
        self.kube.run("-n", self.ns, "delete", "tracepipeline", self.name, "--wait=true",
                      "--timeout=120s", timeout=150, check=False)
        self.kube.run("delete", "namespace", self.ns, "--wait=false", check=False)


class PodMemory:
    """Peak resident memory (VmHWM) of a pipeline's gateway processes, by host pid, sampled in
    the background (pods looked up every 2 s, /proc read every 0.5 s) until `stop`."""

    def __init__(self, pipeline):
        self.pipeline, self.peak_kib, self._on = pipeline, {}, True
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        pids, refresh = [], 0.0
        while self._on:
            if time.monotonic() >= refresh:
                try:
                    pids = [p.pid for p in self.pipeline.all_pods() if p.pid and is_collector_process(p.pid)]
                except (BenchError, subprocess.TimeoutExpired, ValueError):
                    pass
                refresh = time.monotonic() + 2
            for pid in pids:
                try:
                    kib = max(proc_status_kib(pid, "VmHWM"), proc_status_kib(pid, "VmRSS"))
                except OSError:
                    continue
                self.peak_kib[pid] = max(self.peak_kib.get(pid, 0), kib)
            time.sleep(0.5)

    def stop(self):
        self._on = False
        self._thread.join(timeout=10)

    def peak_mib(self):
        return max(self.peak_kib.values(), default=0) / 1024
