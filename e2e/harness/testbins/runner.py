"""The `cargo test` step of e2e/test, with the test binaries run side by side.

    python -m harness.testbins.runner [--jobs 3] [--test-threads 4] [--also NAME=COMMAND]…
                                      [--only TEXT]… [--list] -- CARGO_TEST_ARGS…

`cargo test` runs its test binaries one after another. The stack tests spend most of their time
waiting on the stack (rollouts, resyncs, deliveries, deadlines), so one binary at a time left the
two cores of the CI machine mostly idle for twenty minutes. This runner

1. builds every test binary once, as `cargo test CARGO_TEST_ARGS --no-run` does (progress and
   diagnostics on stderr as usual), and takes the test executables from cargo's JSON messages;
2. runs them JOBS at a time, the longest first (the durations of the last run, kept in the
   target directory; else EXPECTED_S; else by name), each as `cargo test` would: from its
   package's directory, with CARGO_MANIFEST_DIR and the package's name and version in its
   environment, the build's library paths on LD_LIBRARY_PATH, and `--test-threads N`. The
   doc tests are one job more: `cargo test CARGO_TEST_ARGS --doc`, and so is each command of
   `--also NAME=COMMAND` (e2e/test: the fault matrix's quick profile);
3. then runs the binaries of ALONE one at a time, nothing else running: each disturbs the shared
   stack for the others (the reason is beside each);
4. prints each binary's output whole when it ends (never interleaved with another's), with its
   result and duration; at the end a table of the durations, the tests counted over every
   binary, and the binaries that failed by name. Exit status 1 when any failed, cargo's when
   the build failed.

Which binaries to run, and with which features, is cargo's: CARGO_TEST_ARGS are the arguments
`cargo test` would get (e2e/test passes `--workspace --locked --features stack-tests`).
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import REPO
from harness.procs import CHILDREN, _die_with_parent, run_main

# The test binaries that must have the stack to themselves, by source path (relative to the
# repository), with the reason. Everything else runs side by side: each test works in a
# namespace, topic and database of its own and leaves the shared components as they are.
ALONE = {
    "collector/tests/e2e_outage.rs":
        "stops the stack's ClickHouse (`e2e/stack down clickhouse`) under load for a minute",
    "e2e/tests/clickhouse_restart.rs":
        "restarts the stack's ClickHouse (`e2e/stack restart clickhouse`)",
    "e2e/tests/helm_chart.rs":
        "uninstalls, reinstalls, upgrades and rolls back the stack's operator release "
        "(no operator for a while; a CRD change on the cluster)",
    "operator/tests/e2e_namespaced.rs":
        "upgrades the stack's operator release to watch two namespaces of its own: no other "
        "pipeline is reconciled until it puts the release back",
    "operator/tests/e2e_uninstall.rs":
        "scales the stack's operator to 0 replicas",
    "operator/tests/e2e_pipeline.rs":
        "kill -9s the leading operator replica, and asserts the operator's write counter (summed "
        "over every pipeline) stays flat for 25 s, which another test's pipeline would move",
    "collector/schema/tests/lock_release.rs":
        "timing: a lock taken back in under 3 s and the next apply in under 8 s, on the shared "
        "ClickHouse, which other binaries' inserts slow down",
    "operator/tests/schema_deadline.rs":
        "timing: the next schema step in under 8 s on the shared ClickHouse",
}

# Seconds each binary of 10 s or more took alone on the stack (`--jobs 1`, 2026-11-29), for
# the order only (longest first) in a target directory without a run of its own yet: a run
# writes DURATIONS_FILE there, which wins.
EXPECTED_S = {
    "operator/tests/e2e_eviction.rs": 285,
    "operator/tests/e2e_autoscale.rs": 218,
    "operator/tests/e2e_gateway_health.rs": 136,
    "operator/tests/e2e_dashboards.rs": 70,
    "operator/tests/e2e_tls.rs": 67,
    "operator/tests/e2e_schema_mode.rs": 52,
    "operator/tests/kafka_security.rs": 51,
    "collector/tests/e2e_delivery.rs": 45,
    "operator/tests/e2e_lag.rs": 44,
    "operator/tests/e2e_skew.rs": 27,
    "operator/tests/e2e_offsets_retention.rs": 26,
    "collector/tests/e2e_proxy.rs": 24,
    "collector/tests/e2e_logs.rs": 24,
    "operator/tests/kafka_oauth.rs": 22,
    "operator/tests/e2e_strimzi.rs": 17,
    "operator/tests/e2e_errors.rs": 16,
    "collector/tests/e2e_oauth.rs": 15,
    "e2e/tests/k8s_node_agent.rs": 11,
    # e2e/test's --also: the quick fault matrix alone took 404 s in the cold CI run of 2026-11-28.
    "fault matrix, quick profile (e2e/chaos)": 404,
}

DURATIONS_FILE = "testbins-durations.json"

DOC_TESTS = "doc tests (cargo test --doc)"


def say(msg):
    print(f"[testbins] {time.strftime('%H:%M:%S')} {msg}", flush=True)


@dataclass
class Job:
    name: str                       # the target's source path, relative to the repository
    cmd: list
    cwd: Path
    env: dict = field(default_factory=dict)
    alone: str = ""                 # why it runs alone; "" when it runs side by side
    # filled by run_jobs
    status: int = None
    seconds: float = 0.0
    counts: dict = field(default_factory=dict)


# ---------------------------------------------------------------- cargo's messages

def package_of(package_id):
    """(name, version) from a cargo package id: `path+file:///r/collector#tracehouse-collector@0.1.0`,
    `path+file:///r/e2e#0.1.0` (the directory is the name) or the older `name 0.1.0 (source)`."""
    if "#" in package_id:
        url, frag = package_id.rsplit("#", 1)
        if "@" in frag:
            name, version = frag.rsplit("@", 1)
        else:
            name, version = url.rstrip("/").rsplit("/", 1)[-1], frag
        return name, version
    name, version = package_id.split(" ")[:2]
    return name, version


def test_executables(lines, repo=REPO):
    """The test executables in cargo's `--message-format=json` lines, in build order, once each:
    dicts with name (source path relative to repo), executable, package, version, manifest_dir;
    and the native library directories build scripts asked to link from."""
    found, seen, linked = [], set(), []
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") == "build-script-executed":
            for p in msg.get("linked_paths", []):
                p = p.split("=", 1)[1] if "=" in p else p
                if p not in linked:
                    linked.append(p)
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("profile", {}).get("test"):
            continue
        exe = msg.get("executable")
        if not exe or exe in seen:
            continue
        seen.add(exe)
        src = Path(msg["target"]["src_path"])
        try:
            name = str(src.relative_to(repo))
        except ValueError:
            name = str(src)
        package, version = package_of(msg["package_id"])
        found.append({"name": name, "executable": exe, "package": package, "version": version,
                      "manifest_dir": str(Path(msg["manifest_path"]).parent)})
    return found, linked


def build(cargo_args):
    """Runs the `--no-run` build; returns (status, executables, linked paths)."""
    cmd = ["cargo", "test", *cargo_args, "--no-run", "--message-format=json-render-diagnostics"]
    say(" ".join(cmd))
    p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
    lines = list(p.stdout)
    status = p.wait()
    exes, linked = test_executables(lines)
    return status, exes, linked


# ---------------------------------------------------------------- the plan

def jobs_of(exes, linked, test_threads, cargo_args, base_env=None):
    """One job per test executable, run as `cargo test` runs it, and one for the doc tests."""
    base_env = dict(os.environ if base_env is None else base_env)
    jobs = []
    for e in exes:
        deps = str(Path(e["executable"]).parent)
        libs = [deps, *linked, *filter(None, base_env.get("LD_LIBRARY_PATH", "").split(":"))]
        env = dict(base_env,
                   CARGO_MANIFEST_DIR=e["manifest_dir"],
                   CARGO_MANIFEST_PATH=str(Path(e["manifest_dir"]) / "Cargo.toml"),
                   CARGO_PKG_NAME=e["package"],
                   CARGO_PKG_VERSION=e["version"],
                   LD_LIBRARY_PATH=":".join(libs))
        jobs.append(Job(name=e["name"], cmd=[e["executable"], f"--test-threads={test_threads}"],
                        cwd=Path(e["manifest_dir"]), env=env, alone=ALONE.get(e["name"], "")))
    jobs.append(Job(name=DOC_TESTS,
                    cmd=["cargo", "test", *cargo_args, "--doc", "--",
                         f"--test-threads={test_threads}"],
                    cwd=REPO, env=base_env))
    return jobs


def also_job(spec, base_env=None):
    """A job of `--also NAME=COMMAND`: COMMAND (shell words) from the repository root."""
    name, sep, command = spec.partition("=")
    if not sep or not name.strip() or not command.strip():
        raise SystemExit(f"--also wants NAME=COMMAND, not {spec!r}")
    return Job(name=name.strip(), cmd=shlex.split(command), cwd=REPO,
               env=dict(os.environ if base_env is None else base_env))


def order(jobs, durations):
    """Side-by-side jobs first, longest first (known durations, else EXPECTED_S, else 0; then
    by name); the alone ones after them, in name order."""
    def expected(j):
        return durations.get(j.name, EXPECTED_S.get(j.name, 0))
    together = sorted((j for j in jobs if not j.alone), key=lambda j: (-expected(j), j.name))
    alone = sorted((j for j in jobs if j.alone), key=lambda j: j.name)
    return together + alone


# ---------------------------------------------------------------- running

RESULT = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored; "
                    r"(\d+) measured; (\d+) filtered out")


def counts_of(text):
    """Tests passed, failed, ignored over every `test result:` line of a binary's output."""
    total = {"passed": 0, "failed": 0, "ignored": 0}
    for line in text.splitlines():
        m = RESULT.match(line.strip())
        if m:
            for k, v in zip(("passed", "failed", "ignored"), m.groups()):
                total[k] += int(v)
    return total


def describe(status):
    if status == 0:
        return "ok"
    if status < 0:
        return f"FAILED (signal {-status})"
    return f"FAILED (exit {status})"


def spawn(job, log):
    """Starts a job in a process group of its own (stopped with the runner: harness.procs's
    run_main stops every child on the way out), stdout and stderr into log."""
    with open(log, "wb") as f:
        p = subprocess.Popen(job.cmd, cwd=job.cwd, env=job.env or None, stdout=f,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, preexec_fn=_die_with_parent)
    CHILDREN.append(p)
    return p


def run_jobs(jobs, parallel, logdir, out=sys.stdout, poll=0.2):
    """Runs jobs in the given order: those without `alone` up to `parallel` at once, each
    `alone` one only when nothing else runs (and nothing starts beside it). Fills each job's
    status, seconds and counts; prints each job's output whole when it ends."""
    pending = list(jobs)
    running = {}  # Popen -> (job, started, log path)
    while pending or running:
        while pending:
            j = pending[0]
            if any(r[0].alone for r in running.values()):
                break
            if j.alone and running:
                break
            if not j.alone and len(running) >= parallel:
                break
            pending.pop(0)
            log = Path(logdir) / f"{len(jobs) - len(pending):03d}.log"
            note = f" — alone: {j.alone}" if j.alone else f" ({len(running) + 1} running)"
            print(f"[testbins] {time.strftime('%H:%M:%S')} start {j.name}{note}", file=out,
                  flush=True)
            p = spawn(j, log)
            running[p] = (j, time.monotonic(), log)
        for p in [p for p in running if p.poll() is not None]:
            j, started, log = running.pop(p)
            j.status, j.seconds = p.returncode, time.monotonic() - started
            CHILDREN.remove(p)  # ended; what it started is its own business, as under cargo
            text = log.read_bytes().decode("utf-8", "replace")
            j.counts = counts_of(text)
            head = f"{j.name}: {describe(j.status)} in {j.seconds:.1f} s"
            out.write(f"\n==== {head} ====\n{text}")
            if text and not text.endswith("\n"):
                out.write("\n")
            out.write(f"==== end of {j.name} ====\n\n")
            out.flush()
        if running:
            time.sleep(poll)
    return jobs


def summary(jobs, wall, parallel, out=sys.stdout):
    """The durations table and the totals; returns the names of the failed jobs."""
    failed = [j.name for j in jobs if j.status != 0]
    tot = {k: sum(j.counts.get(k, 0) for j in jobs) for k in ("passed", "failed", "ignored")}
    out.write(f"[testbins] {len(jobs)} test binaries in {wall:.0f} s ({parallel} side by side, "
              f"{sum(1 for j in jobs if j.alone)} alone; {sum(j.seconds for j in jobs):.0f} s "
              f"one after another): {tot['passed']} tests passed, {tot['failed']} failed, "
              f"{tot['ignored']} ignored\n")
    out.write("  seconds  result              binary\n")
    for j in sorted(jobs, key=lambda j: -j.seconds):
        out.write(f"  {j.seconds:7.1f}  {describe(j.status):18}  {j.name}"
                  f"{'  (alone)' if j.alone else ''}\n")
    if failed:
        out.write(f"[testbins] FAILED: {', '.join(failed)}\n")
    out.flush()
    return failed


def durations_path(exes):
    """The durations file, in the target directory (target/debug/deps/<exe> → target)."""
    if not exes:
        return None
    return Path(exes[0]["executable"]).parents[2] / DURATIONS_FILE


def load_durations(path):
    try:
        return json.loads(path.read_text()) if path else {}
    except (OSError, ValueError):
        return {}


def save_durations(path, jobs):
    if not path:
        return
    known = load_durations(path)
    known.update({j.name: round(j.seconds, 1) for j in jobs if j.status == 0})
    try:
        path.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("TEST_JOBS", "3")),
                    help="binaries run side by side (default $TEST_JOBS or 3)")
    ap.add_argument("--test-threads", type=int, default=int(os.environ.get("TEST_THREADS", "4")),
                    help="--test-threads of each binary (default $TEST_THREADS or 4)")
    ap.add_argument("--only", action="append", default=[],
                    help="run only the binaries whose source path contains TEXT (repeatable)")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=COMMAND",
                    help="one more job beside the test binaries (never beside an alone one): "
                    "COMMAND run from the repository root, reported as NAME (repeatable)")
    ap.add_argument("--list", action="store_true", help="build, print the plan, run nothing")
    ap.add_argument("cargo_args", nargs="*", help="after --: the arguments of `cargo test`")
    a = ap.parse_args(argv)

    started = time.monotonic()
    status, exes, linked = build(a.cargo_args)
    if status != 0:
        say(f"cargo test --no-run failed (exit {status})")
        return status
    say(f"built in {time.monotonic() - started:.0f} s: {len(exes)} test binaries")
    path = durations_path(exes)
    jobs = jobs_of(exes, linked, a.test_threads, a.cargo_args) + [also_job(x) for x in a.also]
    jobs = order(jobs, load_durations(path))
    if a.only:
        jobs = [j for j in jobs if any(t in j.name for t in a.only)]
    if a.list:
        for j in jobs:
            print(f"{'alone  ' if j.alone else 'shared '} {j.name}"
                  + (f"  — {j.alone}" if j.alone else ""))
        return 0
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="testbins-") as logdir:
        run_jobs(jobs, a.jobs, logdir)
    failed = summary(jobs, time.monotonic() - t0, a.jobs)
    save_durations(path, jobs)
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
