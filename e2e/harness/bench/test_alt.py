"""Unit tests of the tracehouse+alt leg's options and its place in the report's tables (no
stack): `python3 -m unittest discover -s e2e/harness/bench -t e2e -p 'test_*.py'` from the
repository root."""

import sys
import unittest
from unittest import mock

from harness.bench import cost
from harness.bench.options import ALT_LEG, parse
from harness.bench.report import table


class AltLegOptionsTest(unittest.TestCase):
    def parse(self, *argv):
        with mock.patch.object(sys, "argv", ["bench", "--out", "x.json", "--spans", "10", *argv]):
            return parse("bench", "otelcol.yaml")

    def test_the_alt_leg_runs_the_other_binary(self):
        a = self.parse("--legs", "tracehouse,tracehouse+alt,otelcol",
                       "--collector-bin-alt", "/opt/fat/tracehouse-collector")
        self.assertEqual(a.legs, ["tracehouse", ALT_LEG, "otelcol"])
        self.assertEqual(a.collector_bin_alt, "/opt/fat/tracehouse-collector")

    def test_the_leg_and_the_binary_go_together(self):
        for argv in (["--legs", "tracehouse,tracehouse+alt"],
                     ["--collector-bin-alt", "/opt/fat/tracehouse-collector"]):
            with self.subTest(argv), mock.patch("sys.stderr"), self.assertRaises(SystemExit):
                self.parse(*argv)

    def test_without_it_nothing_changes(self):
        self.assertIsNone(self.parse().collector_bin_alt)
        self.assertEqual(self.parse().alt_config_text, "")

    def test_the_alt_leg_can_differ_by_configuration_alone(self):
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write("batch:\n  backlog_max_bytes: 8388608")
            f.flush()
            a = self.parse("--legs", "tracehouse,tracehouse+alt", "--alt-config", f.name)
        self.assertIsNone(a.collector_bin_alt)
        self.assertEqual(a.alt_config_text, "batch:\n  backlog_max_bytes: 8388608\n")


class AltLegTableTest(unittest.TestCase):
    def test_the_alt_build_over_tracehouse_and_tracehouse_over_the_peer(self):
        legs = ["tracehouse", ALT_LEG, "otelcol"]
        self.assertEqual(cost.ratio_pairs(legs),
                         [(ALT_LEG, "tracehouse"), ("tracehouse", "otelcol")])
        rep = {"tracehouse": {"spans": 10, "spans_per_cpu_second": 200000},
               ALT_LEG: {"spans": 10, "spans_per_cpu_second": 220000},
               "otelcol": {"spans": 10, "spans_per_cpu_second": 25000}}
        md = table(rep, legs).splitlines()
        self.assertEqual(md[0], "| | tracehouse | tracehouse+alt | otelcol | "
                                "tracehouse+alt / tracehouse | tracehouse / otelcol |")
        row = next(line for line in md if line.startswith("| **spans per CPU-second**"))
        self.assertTrue(row.endswith("| 1.10× | 8.00× |"), row)


if __name__ == "__main__":
    unittest.main()
