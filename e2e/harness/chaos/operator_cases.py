"""The fault matrix's cases through the operator: the gateway is a Deployment the operator
running on the shared stack's Kubernetes makes from a TracePipeline in a namespace of the case's
own (topic on the case's Kafka, database on the runner's private chserver, which the operator
migrates itself). Load from `tracehouse-loadgen produce`, judged by `tracehouse-loadgen verify`
as every other case, plus the operator's own promises.

- `operator_rebalance`: the gateway scaled 1 → 4 → 2 → 1 through the scale subresource
  (`kubectl scale tracepipeline`, i.e. spec.replicas.count) under load.
- `operator_batch_rollout` (issue 30): the collector's batch settings (`maxRecords`,
  `maxBytes`, `lingerMs`) changed in the TracePipeline under load; the operator rolls the
  gateway's Deployment to the new config (new pods start, old ones get SIGTERM).
- `operator_kill`: the leading operator replica's process killed (-9) right after a spec change,
  while it reconciles; the pipeline converges each time, the schema ledger has every migration
  exactly once, and once converged the operator writes nothing over quiet windows.

Both need the shared stack's Kubernetes and its operator (also with --private-kafka: the gateway
pods reach the private broker on loopback). Killing the operator also delays, but does not
break, other users' pipelines on the stack: a standby (or the restarted process) takes over.
"""

import os
import random
import signal
import time

from harness.chaos.cases import Failed, check, exact
from confluent_kafka.admin import AdminClient, NewTopic
from harness.chaos.infra import wait_for
from harness.chaos.kube import Kubectl, PodMemory, Pipeline, is_collector_process
from harness.procs import BenchError, say

REQUEUE_S = 10  # the requeue period config/local gives the stack's operator


def figures(w, recover_s, mem, **extra):
    lost, dup, rep = w.lost_duplicated()
    f = {"lost": lost, "duplicated": dup, "recover_s": round(recover_s, 1),
         "peak_rss_mib": round(mem.peak_mib(), 1), **extra}
    return f, rep


def create_topic(w, partitions):
    admin = AdminClient({"bootstrap.servers": w.brokers, "log_level": 2})
    for f in admin.create_topics([NewTopic(w.topic, partitions, 1)], operation_timeout=30).values():
        f.result(timeout=40)


def require_operator(kube):
    if not any(p.ready for p in kube.operator_pods()):
        raise BenchError("the operator is not running on the shared stack (tracehouse-system/"
                         "tracehouse-operator has no ready pod): `e2e/stack up` starts it")


def pipeline_world(w, partitions):
    """The topic, then a namespace with the Secret and a TracePipeline (not applied yet)."""
    kube = Kubectl()
    require_operator(kube)
    create_topic(w, partitions)
    tp = Pipeline(kube, w)
    w.also(f"namespace {tp.ns} (TracePipeline {tp.name})", tp.delete)
    say(f"{w.case}: namespace {tp.ns}, topic {w.topic} ({partitions} partitions), database {w.database}")
    return kube, tp


def converged(tp, replicas, generation=None):
    """The pipeline's status when it is Ready for its current generation with `replicas`
    ready gateway pods, all running the status' config hash; else None."""
    obj = tp.get()
    s = obj.get("status") or {}
    gen = obj["metadata"].get("generation")
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in s.get("conditions") or [])
    if not (ready and s.get("observedGeneration") == gen and (generation is None or gen >= generation)
            and s.get("desiredReplicas") == replicas and s.get("readyReplicas") == replicas):
        return None
    pods = tp.all_pods()
    if tp.deployment_replicas() != [replicas] or len(pods) != replicas or not all(
            p.ready and p.config_hash == s.get("configHash") and p.pid and is_collector_process(p.pid)
            for p in pods):
        return None
    return s


def wait_converged(tp, replicas, timeout, generation=None):
    return wait_for(f"TracePipeline {tp.ns}/{tp.name} Ready with {replicas} gateway pods",
                    lambda: converged(tp, replicas, generation), timeout, 1.0)


# ------------------------------------------------------------------ rebalance storm through the operator

def operator_rebalance(ctx, w):
    """The gateway scaled 1 → 4 → 2 → 1 by `kubectl scale tracepipeline` while loading: the
    operator sizes the Deployment, the Deployment adds pods or SIGTERMs them."""
    rate, hold, steps = 3000, ctx.p["rebalance_hold_s"], [1, 4, 2, 1]
    kube, tp = pipeline_world(w, 8)
    mem = PodMemory(tp)
    try:
        tp.apply()  # 8 partitions / 4 per replica: 2 replicas until the first scale
        wait_converged(tp, 2, 240)
        tp.scale(steps[0])
        wait_converged(tp, steps[0], 240)
        # Each step lasts `hold` seconds from its scale command (longer if the gateway takes
        # longer to follow); the load lasts about as long as the steps.
        spans = rate * hold * len(steps)
        prod = w.produce_bg(w.gen("load"), spans, partitions=8, rate=rate)
        follow, t_step = [], time.monotonic()
        for n in steps[1:]:
            time.sleep(max(0.0, t_step + hold - time.monotonic()))
            t_step = time.monotonic()
            tp.scale(n)
            wait_converged(tp, n, 240)
            follow.append(round(time.monotonic() - t_step, 1))
        time.sleep(max(0.0, t_step + hold - time.monotonic()))
        w.wait_produced(prod)
        t0 = time.monotonic()
        w.wait_rows(spans, ctx.p["catch_up_s"])
        recover = time.monotonic() - t0
        time.sleep(3)
        restarts = sum(p.restarts for p in tp.pods())
    finally:
        mem.stop()
    f, rep = figures(w, recover, mem, steps="→".join(map(str, steps)), hold_s=hold,
                     follow_s=follow, gateway_processes=len(mem.peak_kib), pod_restarts=restarts)
    exact(f, rep)
    check(f, restarts == 0, f"gateway containers restarted {restarts} times")
    return f


# ------------------------------------------------------------------ the operator killed mid-reconcile

def leading_process(kube, timeout=120):
    """(pod, host pid) of the leading operator replica, once one leads with a live process."""
    def leading():
        name = kube.leader()
        pod = next((p for p in kube.operator_pods() if p.name == name), None)
        return pod and pod.pid and pod.ready and (pod.name, pod.pid)
    return wait_for("an operator replica leading with a live process", leading, timeout, 0.2)


def ledger(w):
    """{version: rows} of the schema ledger of the case's traces table: its migrations only
    (version 0 records setting changes, e.g. the deduplication window raised when lingerMs
    changes)."""
    text = w.ch_client.query(
        f"SELECT version, count() FROM `{w.database}`.tracehouse_schema_migrations "
        "WHERE target = 'otel_traces' AND version > 0 GROUP BY version ORDER BY version FORMAT TSV")
    return {int(v): int(n) for v, n in (line.split("\t") for line in text.split("\n") if line.strip())}


def left_behind(w, tp):
    """What the killed leader had done of the change, read right after the kill: the ledger's
    rows, the schema lock's last record, the status' observed generation, the Deployment's
    replicas (evidence that the kill fell mid-reconcile, not after it)."""
    try:
        rows = sum(ledger(w).values())
    except BenchError:
        rows = 0  # no ledger table yet
    try:
        lock = w.ch_client.query(
            f"SELECT kind, holder FROM `{w.database}`.tracehouse_schema_lock "
            "WHERE scope = 'otel_traces' ORDER BY epoch DESC LIMIT 1 FORMAT TSV").strip().replace("\t", " ")
    except BenchError:
        lock = ""  # no lock table yet
    status = tp.get().get("status") or {}
    return {"ledger_rows": rows, "schema_lock": lock or None,
            "observed_generation": status.get("observedGeneration"),
            "deployment_replicas": tp.deployment_replicas()}


def settled_operator(kube, timeout=180):
    """Every operator replica ready with a live process and one of them leading: the replicas'
    (name, pid, restarts), sorted."""
    def settled():
        pods = kube.operator_pods()
        ok = pods and all(p.ready and p.pid for p in pods) and kube.leader() in {p.name for p in pods}
        return ok and sorted((p.name, p.pid, p.restarts) for p in pods)
    return wait_for("every operator replica ready and one leading", settled, timeout, 1.0)


def quiet_windows(kube, tp, secs, tries):
    """Watches the converged pipeline over windows of `secs`: its footprint (every object's
    resourceVersion and managed-field times, its Events) must not change in any of them, and
    the operator's write counter must stay flat over at least one. The counter counts every
    pipeline's writes (other users of the stack write too), so a window where it moved is
    tried again, up to `tries` times; a window where an operator replica restarted does not
    count. Returns [(writes delta, reconciliations delta) per window], the last one flat."""
    windows, first = [], tp.footprint()
    for _ in range(tries):
        replicas = settled_operator(kube)
        c0 = kube.operator_counters()
        time.sleep(secs)
        c1 = kube.operator_counters()
        fp = tp.footprint()
        if fp != first:
            changed = {k: (first.get(k), fp.get(k)) for k in set(first) | set(fp) if first.get(k) != fp.get(k)}
            return windows, f"the operator wrote to the converged pipeline: {changed}"
        if settled_operator(kube) != replicas or set(c0) != set(c1):
            windows.append(("replica restarted", None))
            continue
        writes = sum(c1[k][1] - c0[k][1] for k in c0)
        recs = sum(c1[k][0] - c0[k][0] for k in c0)
        windows.append((writes, recs))
        if writes == 0:
            return windows, None
    return windows, "the operator's write counter moved in every window"


def operator_kill(ctx, w):
    """kill -9 of the leading operator replica right after each spec change (the first: the
    pipeline's creation, while the schema is migrated); converges every time."""
    kills, rate, per_round_s = ctx.p["operator_kills"], 1000, 10
    rng = random.Random(ctx.seed)
    kube, tp = pipeline_world(w, 4)
    mem = PodMemory(tp)
    spec = tp.spec["spec"]
    rounds, prods = [], []
    try:
        for i in range(kills):
            # What the change makes the operator write: round 0 the schema, the ConfigMap, the
            # Deployment...; then alternately the collector's config (a rollout) and the size.
            if i > 0 and i % 2 == 1:
                spec["collector"]["batch"]["lingerMs"] = 500 + 10 * i
            elif i > 0:
                spec["replicas"]["partitionsPerReplica"] = 2 if spec["replicas"]["partitionsPerReplica"] == 4 else 4
            replicas = 4 // spec["replicas"]["partitionsPerReplica"]
            prods.append(w.produce_bg(w.gen(f"round{i}"), rate * per_round_s, partitions=4, seed=i + 1,
                                      rate=rate))
            # Found before the change, so the kill lands `delay` after it: the operator's logs
            # show the objects and status of a change written within ~0.1 s of it, the five
            # migrations of a new pipeline within ~1 s (`at_kill` says where each kill fell).
            pod, pid = leading_process(kube)
            tp.apply()
            delay = rng.uniform(0.0, 0.3) if i > 0 else rng.uniform(0.0, 1.0)
            time.sleep(delay)
            os.kill(pid, signal.SIGKILL)
            t_kill = time.monotonic()
            generation = tp.get()["metadata"]["generation"]
            at_kill = left_behind(w, tp)
            wait_converged(tp, replicas, 360, generation)
            took = time.monotonic() - t_kill
            rounds.append({"killed": pod, "after_s": round(delay, 2), "converged_s": round(took, 1),
                           "at_kill": at_kill})
            say(f"operator_kill: kill {i + 1}/{kills}: {pod} (pid {pid}) {delay:.2f}s after the change "
                f"(generation {generation}; left behind {at_kill}); converged {took:.1f}s later with "
                f"{replicas} gateway pods")
        status = wait_converged(tp, replicas, 120)
        schema_version = status.get("schemaVersion")
        rows = ledger(w)
        for p in prods:
            w.wait_produced(p)
        t0 = time.monotonic()
        w.wait_rows(w.expected(), ctx.p["catch_up_s"])
        catch_up = time.monotonic() - t0
        # The load consumed and committed: status.lag (written at every reconcile while it
        # changes) has come to rest, so a quiet window can only be broken by a needless write.
        wait_for("status.lag at 0 records",
                 lambda: (tp.get().get("status") or {}).get("lag", {}).get("records") == 0, 120, 1.0)
        windows, noisy = quiet_windows(kube, tp, max(ctx.p["quiet_s"], 2 * REQUEUE_S + 5), 5)
        time.sleep(3)
    finally:
        mem.stop()
    recover = max(r["converged_s"] for r in rounds)
    f, rep = figures(w, recover, mem, kills=kills, rounds=rounds, schema_version=schema_version,
                     ledger=rows, quiet_windows=windows, catch_up_s=round(catch_up, 1),
                     recover_mean_s=round(sum(r["converged_s"] for r in rounds) / len(rounds), 1))
    exact(f, rep)
    check(f, schema_version and sorted(rows) == list(range(1, schema_version + 1))
          and all(n == 1 for n in rows.values()),
          f"schema ledger (version: rows) {rows}, status schemaVersion {schema_version}")
    check(f, noisy is None, f"{noisy}; windows (writes, reconciliations): {windows}")
    check(f, windows[-1][1] >= 1, f"the operator did not reconcile during the quiet window: {windows}")
    return f


# ------------------------------------------------------------------ batch settings rolled out through the operator

BATCH_SETTINGS = [{"maxRecords": 20, "maxBytes": 1048576, "lingerMs": 200},
                  {"maxRecords": 2000, "maxBytes": 8388608, "lingerMs": 3000}]


def operator_batch_rollout(ctx, w):
    """spec.collector.batch switched between small and large batches (quick 1, full 4 times)
    under 3 000 spans/s on 8 partitions, 2 gateway pods: each change is a rollout of the
    Deployment the operator owns, so the batches of one partition are cut by two settings
    across its owners."""
    rate, hold, rollouts = 3000, ctx.p["rollout_hold_s"], ctx.p["rollouts"]
    kube, tp = pipeline_world(w, 8)
    mem = PodMemory(tp)
    batch = tp.spec["spec"]["collector"].setdefault("batch", {})
    try:
        batch.update(BATCH_SETTINGS[0])
        tp.apply()  # 8 partitions / 4 per replica: 2 gateway pods
        wait_converged(tp, 2, 240)
        spans = int(rate * hold * (rollouts + 1.5))
        prod = w.produce_bg(w.gen("load"), spans, partitions=8, rate=rate)
        w.wait_rows(1, 120)
        follow = []
        for i in range(rollouts):
            time.sleep(hold)
            batch.update(BATCH_SETTINGS[(i + 1) % 2])
            tp.apply()
            generation = tp.get()["metadata"]["generation"]
            t0 = time.monotonic()
            wait_converged(tp, 2, 240, generation)
            follow.append(round(time.monotonic() - t0, 1))
            say(f"operator_batch_rollout: rollout {i + 1}/{rollouts} to {BATCH_SETTINGS[(i + 1) % 2]} "
                f"converged in {follow[-1]} s")
        w.wait_produced(prod)
        t0 = time.monotonic()
        w.wait_rows(spans, ctx.p["catch_up_s"])
        recover = time.monotonic() - t0
        time.sleep(5)
        restarts = sum(p.restarts for p in tp.pods())
    finally:
        mem.stop()
    f, rep = figures(w, recover, mem, rollouts=rollouts, hold_s=hold, follow_s=follow,
                     gateway_processes=len(mem.peak_kib), pod_restarts=restarts)
    exact(f, rep)
    check(f, restarts == 0, f"gateway containers restarted {restarts} times")
    return f


CASES = {
    "operator_batch_rollout": (operator_batch_rollout,
                               "batch settings rolled out through the operator under load"),
    "operator_rebalance": (operator_rebalance,
                           "rebalance storm through the operator: kubectl scale tp 1→4→2→1 under load"),
    "operator_kill": (operator_kill, "the leading operator replica kill -9'd right after spec changes"),
}
