"""Unit tests of results.py (no stack, no venv needed): `PYTHONPATH=e2e python3 -m unittest
harness.docs.test_results` from the repository root."""

import unittest

from harness.docs.results import DocError, bench_block, chaos_block, columncost_block, cost_block, render

CHAOS = {"profile": "quick", "seed": 7, "revision": "abc1234", "took_s": 512.9,
         "started": "2026-11-26T15:19:16+00:00", "command": "e2e/chaos --case kill9",
         "passed": False,
         "cases": [{"case": "kill9", "title": "t", "world": "w", "lost": 0, "duplicated": 0,
                    "recover_s": 30.7, "peak_rss_mib": 115.4, "kills": 3, "catch_up_s": 4.0,
                    "skipped": {"decode_error": 2.0}, "follow_s": [6.8, 1.4],
                    "targets": {"a": {"runs": 5}}, "passed": True, "took_s": 101.6},
                   {"case": "fuzz", "title": "t", "lost": "-", "duplicated": "-",
                    "recover_s": "-", "peak_rss_mib": "-", "rounds": [{"a": 1}, {"a": 2}],
                    "passed": False, "error": "panicked\n  at x", "took_s": 3.0}]}

LEG = {"spans": 1000, "verified": True, "lost": 0, "duplicates": 0, "cpu_seconds": 1.0,
       "spans_per_cpu_second": 1000, "peak_rss_mib": 50.0,
       "freshness_record": {"p50_s": 0.99, "p90_s": 1.49, "p99_s": 1.82, "max_s": 2.09},
       "freshness_clickhouse": {"p50_s": 1.5, "p90_s": 2.4, "p99_s": 3.1, "max_s": 4.0}}
BENCH = {"tracehouse": LEG, "otelcol": dict(LEG, spans_per_cpu_second=250),
         "run": {"date": "2026-11-24T21:39:14+00:00", "git": "7e1d041", "mode": "live",
                 "command": "e2e/bench --rate 60000 --duration 60", "span_profile": "minimal",
                 "attributes": "json", "engine": "null", "partitions": 8,
                 "rate_spans_per_second": 60000.0,
                 "machine": {"cpus": 2, "cpu_model": "EPYC", "memory_gib": 23.5}}}


class ChaosBlockTest(unittest.TestCase):
    def test_says_when_which_revision_and_the_command(self):
        md = chaos_block(CHAOS, "e2e/chaos-results/x.json")
        self.assertIn("**2026-11-26 15:19 UTC**, revision `abc1234`, quick profile", md)
        self.assertIn("**1 of 2 passed**", md)
        self.assertIn("```\ne2e/chaos --case kill9\n```", md)
        self.assertIn("(../e2e/chaos-results/x.json)", md)

    def test_a_case_row_carries_its_own_figures_as_notes(self):
        md = chaos_block(CHAOS, "x.json")
        self.assertIn("| kill9 | pass | 0 | 0 | 30.7 s | 115.4 MiB | 101.6 s | "
                      "kills 3; catch_up_s 4; skipped decode_error 2; follow_s 6.8/1.4; "
                      "targets a (runs 5) |", md)
        self.assertIn("| fuzz | **FAIL** | - | - | – | – | 3.0 s | rounds 2 entries", md)

    def test_a_failed_case_is_listed_with_its_error_on_one_line(self):
        self.assertIn("- fuzz: panicked at x", chaos_block(CHAOS, "x.json"))


class BenchBlockTest(unittest.TestCase):
    def test_a_report_with_costs_gets_the_system_table_and_its_method(self):
        rep = {"tracehouse": dict(LEG, cost={"system_us": 40.0}),
               "otelcol": dict(LEG, cost={"system_us": 80.0}),
               "run": dict(BENCH["run"], engine="merge-tree", repeats=3,
                           cost_method={"baseline_seconds": 10, "settle_quiet_seconds": 30})}
        md = bench_block(rep, "e2e/bench-results/none.json")
        self.assertIn("What a span costs the system, per process (merge-tree engine): CPU µs "
                      "per span, median of 3 repeats, the leg order rotated", md)
        self.assertIn("| **system CPU per span** | 40.0 µs | 80.0 µs | 0.50× |", md)
        self.assertNotIn("What a span costs", bench_block(BENCH, "x.json"))  # older reports

    def test_the_cost_summary_block(self):
        rep = {"tracehouse": dict(LEG, cost={"system_us": 40.0, "kafka_us": 3.0},
                                  disk={"bytes_on_disk_per_span": 150.0}),
               "otelcol": dict(LEG, cost={"system_us": 80.0, "kafka_us": 6.0},
                               disk={"bytes_on_disk_per_span": 160.0}),
               "run": dict(BENCH["run"], engine="merge-tree", repeats=1, duration_seconds=60.0,
                           cost_method={"settle_quiet_seconds": 30})}
        md = cost_block(rep, "e2e/bench-results/none.json")
        self.assertIn("**live 60,000 spans/s for 60 s, `minimal` spans, json table, merge-tree "
                      "engine** — 2026-11-24 21:39 UTC, commit `7e1d041`, median of 1 repeat.", md)
        self.assertIn("| **system CPU per span** | 40.0 µs | 80.0 µs | 0.50× |", md)
        self.assertIn("| **bytes on disk per span** (after settling) | 150.0 B | 160.0 B | 0.94× |", md)
        self.assertNotIn("OPTIMIZE", md)

    def test_every_leg_and_the_ratio_in_the_order_tracehouse_otelcol_rotel(self):
        md = bench_block(BENCH, "e2e/bench-results/none.json")
        self.assertIn("**2026-11-24 21:39 UTC**, commit `7e1d041`", md)
        self.assertIn("| | tracehouse | otelcol | tracehouse / otelcol |", md)
        self.assertIn("| **spans per CPU-second** | 1,000 | 250 | 4.00× |", md)

    def test_a_processing_leg_shows_what_the_rules_removed_and_its_ratio_to_tracehouse(self):
        rep = {"tracehouse": dict(LEG, rows_found=1000),
               "tracehouse+processing": dict(LEG, rows_found=150, spans_removed_by_rules=850,
                                             spans_per_cpu_second=900),
               "run": BENCH["run"]}
        md = bench_block(rep, "e2e/bench-results/none.json")
        self.assertIn("| | tracehouse | tracehouse+processing | tracehouse+processing / tracehouse |",
                      md)
        self.assertIn("| spans removed by the rules (dropped, sampled out) | 0 | 850 |  |", md)
        self.assertIn("| rows written (verified: spans − removed) | 1,000 | 150 | 0.15× |", md)
        self.assertIn("| **spans per CPU-second** | 1,000 | 900 | 0.90× |", md)

    def test_live_mode_adds_span_end_to_queryable(self):
        md = bench_block(BENCH, "e2e/bench-results/none.json")
        self.assertIn("| tracehouse, a record's last span (ended as sent): span end → queryable "
                      "| 0.99 s | 1.49 s | 1.82 s | 2.09 s |", md)
        self.assertNotIn("![", md)  # no PNG beside a report that does not exist


SWEEP_LEG = {"verified": True, "inserts": 112, "insert_blocks": 112, "inserts_per_second": 7.0,
             "parts_per_minute": 419.0, "rows_per_insert": 669.6,
             "freshness_record": {"p50_s": 0.61, "p99_s": 1.23}}
SWEEP = {"sweep": [{"partitions": 8, "tracehouse": SWEEP_LEG, "rotel": SWEEP_LEG}],
         "run": dict(BENCH["run"], partitions=None, partitions_sweep=[8], duration_seconds=15.0,
                     rate_spans_per_second=5000.0, engine="merge-tree",
                     command="e2e/bench --rate 5000 --partitions-sweep 8",
                     prebuilt_binaries={"tracehouse-collector": {
                         "sha256": "82d2a6e3935a" + "0" * 52, "built": "2026-11-26T17:12:00+00:00"}})}


class SweepAndColumnCostBlockTest(unittest.TestCase):
    def test_a_sweep_has_a_row_per_partition_count_and_leg_and_names_prebuilt_binaries(self):
        md = bench_block(SWEEP, "e2e/bench-results/none.json")
        self.assertIn("partition sweep 8 at 5,000 spans/s for 15 s", md)
        self.assertIn("| 8 | rotel | yes | 112 | 112 | 7.00 | 419 | 670 | 0.61 s | 1.23 s | — |", md)
        self.assertIn("tracehouse-collector sha256 `82d2a6e3935a…` (built 2026-11-26 17:12 UTC)", md)

    def test_column_cost(self):
        rep = {"cases": [{"case": "every column", "columns": 24, "rows_per_insert": 5000,
                          "inserts": 4, "parts": 4, "cpu_us_per_span": 29.31}],
               "fit": None, "run": {"date": "2026-11-26T17:24:09+00:00", "git": "1155b87",
                                    "machine": {"cpus": 2}, "spans": 20000,
                                    "span_profile": "full", "attributes": "json", "repeats": 3,
                                    "command": "e2e/column-cost --out x.json"}}
        md = columncost_block(rep, "e2e/bench-results/none.json")
        self.assertIn("20,000 `full` spans, json attributes, median of 3", md)
        self.assertIn("| every column | 24 | 5,000 | 4 | 4 | 29.31 µs | 1.00× | — |", md)


DOC = """# Title

Prose that stays, quoting a marker: `<!-- generated: chaos q.json -->`.

<!-- generated: chaos r.json -->
old table
<!-- end generated -->

More prose.
"""


class RenderTest(unittest.TestCase):
    def test_only_the_blocks_change_and_a_second_run_changes_nothing(self):
        out, used = render(DOC, "d.md", lambda p: CHAOS)
        self.assertEqual(used, ["r.json"])
        self.assertNotIn("old table", out)
        self.assertTrue(out.startswith("# Title\n\nProse that stays, quoting a marker: `<!-- "
                                       "generated: chaos q.json -->`.\n\n<!-- generated: chaos "
                                       "r.json -->\n\n**2026-11-26"))
        self.assertTrue(out.endswith("\n\n<!-- end generated -->\n\nMore prose.\n"))
        self.assertEqual(render(out, "d.md", lambda p: CHAOS)[0], out)

    def test_an_unknown_kind_names_the_document_and_line(self):
        with self.assertRaisesRegex(DocError, r"d.md:5: unknown kind 'nope'"):
            render(DOC.replace("chaos", "nope"), "d.md", lambda p: CHAOS)

    def test_a_missing_report_names_it(self):
        def missing(p):
            raise FileNotFoundError(p)
        with self.assertRaisesRegex(DocError, r"d.md:5: cannot read r.json"):
            render(DOC, "d.md", missing)

    def test_a_marker_left_open_is_refused(self):
        with self.assertRaisesRegex(DocError, "without its"):
            render(DOC.replace("<!-- end generated -->", ""), "d.md", lambda p: CHAOS)


if __name__ == "__main__":
    unittest.main()
