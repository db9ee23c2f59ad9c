"""Unit tests of inserts.py, report.py's insert rows and sweep table, and the sweep's options
(no stack): `python3 -m unittest discover -s e2e/harness/bench -t e2e -p 'test_*.py'` from the
repository root."""

import sys
import unittest
from unittest import mock

from harness.bench.inserts import blocks_query, insert_figures, parse_blocks, table_stats
from harness.bench.options import parse
from harness.bench.report import sweep_table, table

# rows: the engine's written_rows, views included (twice the spans here).
SNAPSHOT = {"bench_1_tracehouse": {"otel_traces": {"inserts": 120, "failed": 1, "rows": 120000,
                                                   "body_bytes": 9}}}


class InsertFiguresTest(unittest.TestCase):
    def test_rates_over_the_window_and_sizes_per_insert(self):
        st = table_stats(SNAPSHOT, "bench_1_tracehouse", "otel_traces")
        got = insert_figures(st, 240, 30.0, 60000)
        self.assertEqual(got["inserts"], 120)
        self.assertEqual(got["failed_inserts"], 1)
        self.assertEqual(got["inserts_per_second"], 4.0)
        self.assertEqual(got["parts_per_minute"], 480.0)
        self.assertEqual(got["rows_per_insert"], 500.0)
        self.assertEqual(got["insert_written_rows"], 120000)
        self.assertEqual(got["blocks_per_insert"], 2.0)

    def test_a_table_that_got_nothing_counts_zero_and_an_old_server_none(self):
        self.assertEqual(table_stats(SNAPSHOT, "other", "otel_traces")["inserts"], 0)
        self.assertIsNone(table_stats(None, "x", "otel_traces"))
        got = insert_figures(None, 12, 60.0, 100)
        self.assertEqual((got["inserts"], got["inserts_per_second"], got["rows_per_insert"]),
                         (None, None, None))
        self.assertEqual(got["parts_per_minute"], 12.0)

    def test_blocks_are_the_highest_block_number_or_zero_without_parts(self):
        self.assertEqual(parse_blocks("57\t3\n"), 57)
        self.assertEqual(parse_blocks("0\t0\n"), 0)
        self.assertIn("database = 'db' AND table = 'otel_traces'", blocks_query("db", "otel_traces"))


LEG = {"spans": 100, "verified": True, "inserts": 10, "insert_blocks": 12,
       "inserts_per_second": 2.0, "parts_per_minute": 144.0, "rows_per_insert": 10.0,
       "freshness_record": {"p50_s": 0.5, "p99_s": 1.25},
       "clickhouse_server_cpu_us_per_span": 7.5}


class ReportTest(unittest.TestCase):
    def test_insert_rows_only_for_reports_that_have_them(self):
        md = table({"tracehouse": LEG, "rotel": dict(LEG, inserts=5)}, ["tracehouse", "rotel"])
        self.assertIn("| INSERT statements (server's count) | 10 | 5 | 2.00× |", md)
        self.assertIn("| parts created per minute | 144 | 144 | 1.00× |", md)
        old = {k: v for k, v in LEG.items() if "insert" not in k and k != "parts_per_minute"}
        self.assertNotIn("INSERT", table({"tracehouse": old}, ["tracehouse"]))

    def test_sweep_table_has_a_row_per_partition_count_and_leg(self):
        rep = {"sweep": [{"partitions": 8, "tracehouse": LEG, "rotel": LEG},
                         {"partitions": 256, "tracehouse": dict(LEG, verified=False),
                          "rotel": {}}]}
        md = sweep_table(rep, ["tracehouse", "rotel"]).splitlines()
        self.assertEqual(len(md), 2 + 4)
        self.assertEqual(md[2], "| 8 | tracehouse | yes | 10 | 12 | 2.00 | 144 | 10.00 | 0.50 s | "
                                "1.25 s | 7.50 µs |")
        self.assertTrue(md[4].startswith("| 256 | tracehouse | **NO** |"))
        self.assertEqual(md[5], "| 256 | rotel | — | — | — | — | — | — | — | — | — |")


class SweepOptionsTest(unittest.TestCase):
    def parse(self, *argv):
        with mock.patch.object(sys, "argv", ["bench", "--out", "x.json", *argv]):
            return parse("bench", "otelcol.yaml")

    def test_partition_counts_are_read(self):
        a = self.parse("--rate", "5000", "--duration", "15", "--partitions-sweep", "8,64,256")
        self.assertEqual((a.partitions_sweep, a.spans), ([8, 64, 256], 75000))

    def test_a_sweep_is_live_and_counts_are_positive(self):
        for argv in (["--spans", "10", "--partitions-sweep", "8"],
                     ["--rate", "10", "--partitions-sweep", "8,0"],
                     ["--rate", "10", "--partitions-sweep", "eight"]):
            with self.subTest(argv), mock.patch("sys.stderr"), self.assertRaises(SystemExit):
                self.parse(*argv)


if __name__ == "__main__":
    unittest.main()
