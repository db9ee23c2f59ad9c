"""Unit tests of runner.py (no cargo, no stack): `python -m unittest discover -s e2e/harness/testbins -t e2e`."""

import io
import json
import tempfile
import time
import unittest
from pathlib import Path

from harness.testbins import runner
from harness.testbins.runner import (ALONE, DOC_TESTS, Job, also_job, counts_of, jobs_of, order,
                                     package_of, run_jobs, summary, test_executables)

REPO = Path("/r")


def artifact(src, exe, test=True, package_id="path+file:///r/collector#tracehouse-collector@0.1.0",
             manifest="/r/collector/Cargo.toml"):
    return json.dumps({"reason": "compiler-artifact", "package_id": package_id,
                       "manifest_path": manifest,
                       "target": {"src_path": src, "kind": ["test"], "name": Path(src).stem},
                       "profile": {"test": test}, "executable": exe})


class CargoMessagesTest(unittest.TestCase):
    def test_package_ids_of_every_form(self):
        self.assertEqual(package_of("path+file:///r/collector#tracehouse-collector@0.1.0"),
                         ("tracehouse-collector", "0.1.0"))
        self.assertEqual(package_of("path+file:///r/tracehouse-e2e#0.1.0"), ("tracehouse-e2e", "0.1.0"))
        self.assertEqual(package_of("tracehouse-e2e 0.1.0 (path+file:///r/e2e)"),
                         ("tracehouse-e2e", "0.1.0"))

    def test_test_executables_once_each_with_the_build_scripts_library_paths(self):
        lines = [
            "   Compiling something (not JSON)\n",
            json.dumps({"reason": "build-script-executed",
                        "linked_paths": ["native=/t/debug/build/rdkafka-sys-1/out/lib", "/t/plain"]}),
            artifact("/r/collector/tests/e2e_outage.rs", "/t/debug/deps/e2e_outage-1"),
            artifact("/r/collector/tests/e2e_outage.rs", "/t/debug/deps/e2e_outage-1"),  # again: fresh
            # a library built for a test, and an example (built by cargo test, never run): not tests
            json.dumps({"reason": "compiler-artifact", "profile": {"test": False}, "executable": None,
                        "package_id": "x 1 (y)", "manifest_path": "/r/x/Cargo.toml",
                        "target": {"src_path": "/r/x/src/lib.rs"}}),
            artifact("/r/collector/examples/demo.rs", "/t/debug/examples/demo-1", test=False),
            artifact("/r/e2e/src/lib.rs", "/t/debug/deps/tracehouse_e2e-2",
                     package_id="path+file:///r/e2e#tracehouse-e2e@0.1.0", manifest="/r/e2e/Cargo.toml"),
            json.dumps({"reason": "build-finished", "success": True}),
        ]
        exes, linked = test_executables(lines, repo=REPO)
        self.assertEqual([e["name"] for e in exes], ["collector/tests/e2e_outage.rs", "e2e/src/lib.rs"])
        self.assertEqual(exes[0], {"name": "collector/tests/e2e_outage.rs",
                                   "executable": "/t/debug/deps/e2e_outage-1",
                                   "package": "tracehouse-collector", "version": "0.1.0",
                                   "manifest_dir": "/r/collector"})
        self.assertEqual(linked, ["/t/debug/build/rdkafka-sys-1/out/lib", "/t/plain"])


class PlanTest(unittest.TestCase):
    def exes(self):
        return [{"name": n, "executable": f"/t/debug/deps/{Path(n).stem}-1", "package": "p",
                 "version": "0.1.0", "manifest_dir": f"/r/{n.split('/')[0]}"}
                for n in ["collector/tests/e2e_outage.rs", "operator/tests/e2e_lag.rs",
                          "operator/tests/e2e_eviction.rs", "operator/src/lib.rs"]]

    def test_each_binary_runs_as_cargo_runs_it_and_the_doc_tests_are_one_job_more(self):
        jobs = jobs_of(self.exes(), ["/t/native"], 4, ["--workspace", "--features", "stack-tests"],
                       base_env={"PATH": "/bin", "LD_LIBRARY_PATH": "/usr/local/lib"})
        lag = next(j for j in jobs if j.name == "operator/tests/e2e_lag.rs")
        self.assertEqual(lag.cmd, ["/t/debug/deps/e2e_lag-1", "--test-threads=4"])
        self.assertEqual(lag.cwd, Path("/r/operator"))
        self.assertEqual(lag.env["CARGO_MANIFEST_DIR"], "/r/operator")
        self.assertEqual(lag.env["LD_LIBRARY_PATH"], "/t/debug/deps:/t/native:/usr/local/lib")
        self.assertEqual(lag.env["PATH"], "/bin")
        self.assertEqual(lag.alone, "")
        outage = next(j for j in jobs if j.name == "collector/tests/e2e_outage.rs")
        self.assertEqual(outage.alone, ALONE["collector/tests/e2e_outage.rs"])
        self.assertEqual(jobs[-1].name, DOC_TESTS)
        self.assertEqual(jobs[-1].cmd, ["cargo", "test", "--workspace", "--features", "stack-tests",
                                        "--doc", "--", "--test-threads=4"])

    def test_longest_first_side_by_side_then_the_alone_ones(self):
        jobs = jobs_of(self.exes(), [], 4, [], base_env={})
        names = [j.name for j in order(jobs, {"operator/tests/e2e_lag.rs": 500.0})]
        self.assertEqual(names, ["operator/tests/e2e_lag.rs",          # its last run: 500 s
                                 "operator/tests/e2e_eviction.rs",     # EXPECTED_S
                                 DOC_TESTS, "operator/src/lib.rs",     # unknown: by name
                                 "collector/tests/e2e_outage.rs"])     # alone, last

    def test_a_command_beside_the_binaries_runs_from_the_repository_root_side_by_side(self):
        j = also_job("fault matrix (e2e/chaos)=e2e/chaos --seed 7", base_env={"A": "1"})
        self.assertEqual((j.name, j.cmd, j.cwd, j.env, j.alone),
                         ("fault matrix (e2e/chaos)", ["e2e/chaos", "--seed", "7"], runner.REPO, {"A": "1"}, ""))
        with self.assertRaises(SystemExit):
            also_job("no command")

    def test_every_alone_binary_names_a_reason_and_a_test_file_that_exists(self):
        repo = Path(__file__).resolve().parents[3]
        for name, reason in ALONE.items():
            self.assertTrue((repo / name).is_file(), name)
            self.assertGreater(len(reason), 10, name)


class CountsTest(unittest.TestCase):
    def test_test_results_are_summed_over_a_binarys_output(self):
        text = ("running 2 tests\ntest a ... ok\n"
                "test result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 1.00s\n"
                "test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 2 filtered out; finished in 0.1s\n")
        self.assertEqual(counts_of(text), {"passed": 5, "failed": 1, "ignored": 1})


def sh(name, script, alone=""):
    return Job(name=name, cmd=["sh", "-c", script], cwd=Path("."), alone=alone)


class RunTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.d = Path(self.dir.name)

    def spans(self, name):
        """(start, end) of a job that wrote its times to <name>.t."""
        a, b = (self.d / f"{name}.t").read_text().split()
        return float(a), float(b)

    def timed(self, name, seconds, extra="", alone=""):
        # Prints its lines slowly, so two jobs side by side would interleave if output were not
        # kept per job.
        script = (f"s=$(date +%s.%N); for i in 1 2 3; do echo {name}-line-$i; sleep {seconds / 3}; done; "
                  f"{extra} echo $s $(date +%s.%N) > {self.d}/{name}.t")
        return sh(name, script, alone)

    def test_side_by_side_up_to_the_limit_alone_ones_with_nothing_beside_them(self):
        jobs = [self.timed("a", 0.6), self.timed("b", 0.6), self.timed("c", 0.6),
                self.timed("x", 0.3, alone="restarts things")]
        out = io.StringIO()
        t0 = time.time()
        run_jobs(jobs, 2, self.d, out=out, poll=0.02)
        wall = time.time() - t0
        self.assertTrue(all(j.status == 0 for j in jobs))
        a, b, c, x = (self.spans(n) for n in "abcx")
        self.assertLess(max(a[0], b[0]), min(a[1], b[1]), "a and b ran side by side")
        self.assertGreaterEqual(c[0], min(a[1], b[1]) - 0.05, "c waited for a free slot")
        self.assertGreaterEqual(x[0], max(a[1], b[1], c[1]) - 0.05, "x started after all others")
        self.assertLess(wall, 0.6 * 4, "not one after another")
        text = out.getvalue()
        for n in "abcx":  # each job's lines together, between its own header and end
            block = text.split(f"==== {n}: ok in ")[1].split(f"==== end of {n} ====")[0]
            self.assertEqual([l for l in block.splitlines()[1:] if l], [f"{n}-line-{i}" for i in (1, 2, 3)])

    def test_nothing_starts_beside_an_alone_job(self):
        jobs = [self.timed("x", 0.4, alone="stops ClickHouse"), self.timed("a", 0.1), self.timed("b", 0.1)]
        run_jobs(jobs, 3, self.d, out=io.StringIO(), poll=0.02)
        x, a, b = (self.spans(n) for n in "xab")
        self.assertGreaterEqual(min(a[0], b[0]), x[1] - 0.05)

    def test_failures_are_reported_by_name_with_their_output(self):
        jobs = [sh("good", "echo fine"), sh("bad", "echo broken >&2; exit 3"),
                sh("killed", "kill -9 $$")]
        out = io.StringIO()
        run_jobs(jobs, 3, self.d, out=out, poll=0.02)
        self.assertEqual([j.status for j in jobs], [0, 3, -9])
        self.assertIn("==== bad: FAILED (exit 3) in", out.getvalue())
        self.assertIn("broken", out.getvalue())
        s = io.StringIO()
        self.assertEqual(summary(jobs, 1.0, 3, out=s), ["bad", "killed"])
        self.assertIn("FAILED: bad, killed", s.getvalue())
        self.assertIn("FAILED (signal 9)", s.getvalue())

    def test_the_last_runs_durations_are_kept_for_the_next_order(self):
        path = self.d / runner.DURATIONS_FILE
        jobs = [Job(name="a", cmd=[], cwd=Path("."), status=0, seconds=12.34),
                Job(name="b", cmd=[], cwd=Path("."), status=1, seconds=99.0)]
        runner.save_durations(path, jobs)
        self.assertEqual(runner.load_durations(path), {"a": 12.3})  # a failed run's is not kept
        self.assertEqual(runner.load_durations(self.d / "missing.json"), {})


if __name__ == "__main__":
    unittest.main()
