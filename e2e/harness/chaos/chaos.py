"""e2e/chaos: the fault matrix of issue 17, run on real processes; prints a table, writes JSON.

    e2e/chaos                 the quick profile (every case, short durations, a few kills)
    e2e/chaos --full          the long one (20 kills, a 30-minute ClickHouse outage, …)
    e2e/chaos --case kill9 --case reject     only these cases
    e2e/chaos --json out.json                where the JSON report goes
    e2e/chaos --private-kafka                every case on a private Kafka too

Faults are injected only into processes the runner starts itself: the collectors, a private
chserver (its own port and data directory, fault switches in e2e/chserver/faults.py) and, for the
broker-restart and broker-down cases, a private single-node Kafka. The shared stack's Kafka carries the other
cases' topics (random names); nothing else of the shared stack is stopped, slowed or restarted,
but for the one exception below.

The operator cases (operator_cases.py: operator_rebalance, operator_kill, operator_batch_rollout)
need the shared stack's Kubernetes and the operator it runs, also with --private-kafka: they make a TracePipeline
in a namespace of their own, and operator_kill kill -9s the operator's leading replica (the node
agent restarts it, a standby takes over meanwhile; other pipelines on the stack wait, none breaks).

The production cases (production_cases.py, issue 30) add many partitions at the default linger,
a dead-letter topic at Kafka's default message size, hostile but valid records, SIGTERM with the
broker away and a batch-size rollout.

Every case cleans up its topics and database (and namespace) after passing and keeps them
(printing their names) after failing; the exit status is 0 only when every case passed.
"""

import argparse
import json
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from harness.chaos.cases import CASES as COLLECTOR_CASES
from harness.chaos.cases import WITHOUT_WORLD, Failed
from harness.chaos.infra import CHAOS_STATE, PrivateClickHouse, PrivateKafka
from harness.procs import run_main, say, stop_all
from harness.stack import git_revision, stack_env
from harness.chaos.world import World
from harness.chaos.operator_cases import CASES as OPERATOR_CASES
from harness.chaos.production_cases import CASES as PRODUCTION_CASES
from harness.chaos.production_cases import PRIVATE_KAFKA

CASES = {**COLLECTOR_CASES, **OPERATOR_CASES, **PRODUCTION_CASES}

# Cases the quick profile (the one e2e/test runs) leaves to the full one: their invariant has
# its home in a Rust stack test that runs on every e2e/test (kill9: collector/tests/e2e_delivery.rs;
# outage: e2e_outage.rs; the operator's rebalance and kill: operator/tests), and the matrix owns
# their randomised and long runs; or they are the long production cases (≥ 96 partitions, a
# broker down) that take a minute or more each; or fuzz_guided, whose libFuzzer build alone takes
# minutes on a cold cache (the seeded `fuzz` case stays quick). `--case NAME` runs any of them in
# either profile.
FULL_ONLY = {"kill9", "outage", "operator_rebalance", "operator_kill", "many_partitions_kill9",
             "many_partitions_kill9_late", "sigterm_broker_down", "fuzz_guided",
             # builds the previous release once (several minutes, its own target directory)
             "rolling_upgrade",
             # waits out two session timeouts (the kill -9'd member's, then the members
             # SIGTERM'd while the group still waited for it): about 90 s
             "processing_change"}

PROFILES = {
    "quick": {"kills": 3, "catch_up_s": 240, "slow_delay_ms": 3000, "slow_s": 20,
              "outage_s": 60, "outage_rate": 1500, "kafka_load_s": 25, "space_s": 12, "fuzz_s": 10,
              "rebalance_hold_s": 10, "operator_kills": 3, "quiet_s": 25,
              # production_cases.py (issue 30)
              "mp_partitions": 96, "mp_rate": 2000, "mp_kills": 1, "late_rate": 2000,
              "late_delay_ms": 4000, "late_s": 3, "stall_bound_s": 60, "fat_spans": 10000,
              "broker_down_s": 15, "rollout_hold_s": 8, "rollouts": 1},
    "full": {"kills": 20, "catch_up_s": 900, "slow_delay_ms": 5000, "slow_s": 120,
             "outage_s": 1800, "outage_rate": 500, "kafka_load_s": 90, "space_s": 60, "fuzz_s": 600,
             "rebalance_hold_s": 60, "operator_kills": 10, "quiet_s": 60,
             "mp_partitions": 128, "mp_rate": 4000, "mp_kills": 5, "late_rate": 4000,
             "late_delay_ms": 4000, "late_s": 5, "stall_bound_s": 120, "fat_spans": 10000,
             "broker_down_s": 60, "rollout_hold_s": 20, "rollouts": 4},
}


class Context:
    def __init__(self, profile, seed, run_dir, private_kafka):
        self.p, self.seed, self.run_dir = PROFILES[profile], seed, run_dir
        self.logdir = run_dir / "logs"
        self.ch = PrivateClickHouse(run_dir)
        self._kafka = None
        self.private_kafka = private_kafka
        self.brokers = None if private_kafka else stack_env()["KAFKA_BROKERS"]

    @property
    def kafka(self):
        if self._kafka is None:
            self._kafka = PrivateKafka(self.run_dir)
            self._kafka.up()
        return self._kafka

    def close(self, keep):
        for comp in (self._kafka, self.ch):
            if comp is None:
                continue
            try:
                if keep:
                    comp.down()
                    say(f"kept: private {comp.component} state in {comp.state}")
                else:
                    comp.remove()
            except Exception as e:  # noqa: BLE001
                say(f"stopping private {comp.component}: {e}")


def run_case(ctx, name):
    fn, title = CASES[name]
    brokers = ctx.kafka.brokers if name in {"kafka_restart", *PRIVATE_KAFKA} else ctx.brokers
    t0 = time.monotonic()
    row = {"case": name, "title": title}
    w = None
    try:
        if name not in WITHOUT_WORLD:
            # The operator migrates its pipelines' databases itself.
            w = World(name, brokers, ctx.ch, ctx.logdir, schema=name not in OPERATOR_CASES)
            row.update(world=w.name)
        row.update(fn(ctx, w))
        row["passed"] = True
    except Failed as e:
        row.update(e.figures, passed=False, error=str(e)[:2000])
    except Exception as e:  # noqa: BLE001 - a broken case is a failed case, the others still run
        row.update(passed=False, error=f"{type(e).__name__}: {e}"[:2000])
        traceback.print_exc()
    finally:
        if ctx.ch.faults_file.exists():
            ctx.ch.set_faults([])
        if w is not None:
            row.setdefault("peak_rss_mib", round(w.peak_rss_mib(), 1))
            if not row["passed"]:
                row["kept"] = {"topics": [w.topic, w.dlq], "database": w.database,
                               "clickhouse": ctx.ch.url, "logs": str(w.logdir),
                               "also": [what for what, _ in w.cleanups]}
            w.close(row["passed"])
    row["took_s"] = round(time.monotonic() - t0, 1)
    say(f"{name}: {'PASS' if row['passed'] else 'FAIL'} in {row['took_s']}s "
        + json.dumps({k: v for k, v in row.items() if k not in ('case', 'title')}))
    return row


def table(rows):
    head = f"{'case':<28} {'result':<6} {'lost':>6} {'dup':>6} {'recover s':>10} {'peak RSS MiB':>13} {'took s':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['case']:<28} {'PASS' if r['passed'] else 'FAIL':<6} {str(r.get('lost', '-')):>6} "
                     f"{str(r.get('duplicated', '-')):>6} {str(r.get('recover_s', '-')):>10} "
                     f"{str(r.get('peak_rss_mib', '-')):>13} {r['took_s']:>7}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="the long profile (default: quick)")
    ap.add_argument("--case", action="append", choices=list(CASES), help="run only this case (repeatable)")
    ap.add_argument("--json", help="where to write the JSON report (default: $STATE/chaos/report-<profile>.json)")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--private-kafka", action="store_true",
                    help="every case on the runner's private Kafka (the operator cases still need "
                    "the shared stack's Kubernetes and operator)")
    args = ap.parse_args()
    profile = "full" if args.full else "quick"
    names = args.case or [n for n in CASES if args.full or n not in FULL_ONLY]
    started = datetime.now(timezone.utc)
    run_dir = CHAOS_STATE / started.strftime("%Y%m%dT%H%M%S")
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    say(f"profile {profile}, seed {args.seed}, cases {', '.join(names)}; logs {run_dir / 'logs'}")
    t0 = time.monotonic()
    rows = []
    ctx = Context(profile, args.seed, run_dir, args.private_kafka)
    try:
        ctx.ch.up()
        if ctx.private_kafka:
            ctx.brokers = ctx.kafka.brokers
        for name in names:
            rows.append(run_case(ctx, name))
    finally:
        stop_all()
        ctx.close(keep=not rows or not all(r["passed"] for r in rows))
    took = time.monotonic() - t0
    report = {"profile": profile, "seed": args.seed, "revision": git_revision(),
              "started": started.isoformat(timespec="seconds"), "took_s": round(took, 1),
              "command": "e2e/chaos" + (" --full" if args.full else "")
              + "".join(f" --case {n}" for n in args.case or [])
              + (" --private-kafka" if args.private_kafka else ""),
              "passed": all(r["passed"] for r in rows), "cases": rows}
    out = Path(args.json or CHAOS_STATE / f"report-{profile}.json")
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(rows))
    print(f"\n{profile} profile: {sum(r['passed'] for r in rows)}/{len(rows)} passed in {took:.0f}s; "
          f"report {out}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    run_main(main)
