"""Unit tests of series.py's pure parts (no stack): `PYTHONPATH=e2e python3 -m unittest
harness.bench.test_series` from the repository root, in the bench venv (`$(e2e/lib/...) bench_venv`) for the plot test."""

import math
import tempfile
import unittest
from pathlib import Path

from harness.bench.series import (Series, collector_freshness, histogram_buckets, histogram_quantile,
                                  parse_arrivals, plot, plot_sweep)


class SeriesTest(unittest.TestCase):
    def test_rate_is_a_mean_over_the_window(self):
        s = Series()
        for i in range(9):  # 0.5 s apart, 1000 rows landing every second
            s.add(i * 0.5, (i // 2) * 1000, 0, 100.0)
        rates = s.spans_per_second(window=2.0)
        self.assertEqual(rates[0], 0.0)
        self.assertEqual(rates[8], 1000.0)  # (4000 - 2000) / 2 s

    def test_insert_rate_is_a_mean_and_unknown_stays_unknown(self):
        s = Series()
        for i in range(9):  # 4 INSERTs a second
            s.add(i * 0.5, 0, 0, 1.0, 2 * i)
        self.assertEqual(s.inserts_per_second()[8], 4.0)
        s.add(4.5, 0, 0, 1.0, None)
        self.assertIsNone(s.inserts_per_second()[9])
        self.assertEqual(s.to_json()["inserts"][-2:], [16, None])

    def test_histogram_quantile_matches_prometheus(self):
        samples = {'x_bucket{le="1.0"}': 50.0, 'x_bucket{le="2.0"}': 90.0,
                   'x_bucket{le="+Inf"}': 100.0, "x_sum": 120.0}
        b = histogram_buckets(samples, "x")
        self.assertEqual(b, [(1.0, 50.0), (2.0, 90.0), (math.inf, 100.0)])
        self.assertAlmostEqual(histogram_quantile(0.5, b), 1.0)
        self.assertAlmostEqual(histogram_quantile(0.7, b), 1.5)
        self.assertEqual(histogram_quantile(0.99, b), 2.0)  # in +Inf: the highest finite bound
        self.assertIsNone(histogram_quantile(0.5, [(math.inf, 0.0)]))
        f = collector_freshness(samples, "x")
        self.assertEqual((f["spans"], f["mean_s"]), (100, 1.2))

    def test_arrivals_answer_is_read_in_seconds(self):
        got = parse_arrivals("10\t[100000000,200000000,1500000000]\t2000000000\n")
        self.assertEqual(got, {"rows": 10, "p50_s": 0.1, "p90_s": 0.2, "p99_s": 1.5,
                               "max_s": 2.0})

    def test_plot_writes_a_png(self):
        # Needs matplotlib: run in the bench venv (e2e/test does); its absence is a failure.
        s = Series()
        for i in range(10):
            s.add(i * 0.5, i * 100, 10 - i, 50.0 + i)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "run.png"
            plot({"tracehouse": s}, path, "test", rate=200)
            self.assertEqual(path.read_bytes()[:8], b"\x89PNG\r\n\x1a\n")

    def test_plot_with_inserts_and_a_sweep_write_pngs(self):
        s = Series()
        for i in range(10):
            s.add(i * 0.5, i * 100, 10 - i, 50.0, i)
        leg = {"inserts_per_second": 3.0, "parts_per_minute": 180.0,
               "freshness_record": {"p50_s": 0.4, "p99_s": 1.1}}
        steps = [{"partitions": n, "tracehouse": leg, "rotel": {}} for n in (8, 64, 256)]
        with tempfile.TemporaryDirectory() as d:
            for name, draw in (("run.png", lambda p: plot({"tracehouse": s}, p, "t")),
                               ("sweep.png", lambda p: plot_sweep(steps, ["tracehouse", "rotel"],
                                                                  p, "t"))):
                path = Path(d) / name
                draw(path)
                self.assertEqual(path.read_bytes()[:8], b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    unittest.main()
