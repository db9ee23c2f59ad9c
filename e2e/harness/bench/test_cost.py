"""Unit tests of cost.py (what a span costs the system: subtractions, the calibration fit,
medians of repeats, settling, bytes on disk, the table) and of the new options (no stack):
`python3 -m unittest discover -s e2e/harness/bench -t e2e -p 'test_*.py'` from the repository root."""

import sys
import unittest
from unittest import mock

from harness.bench import cost
from harness.bench.options import parse, processing_block


class RotateTest(unittest.TestCase):
    def test_each_leg_leads_once_in_three_repeats(self):
        legs = ["tracehouse", "otelcol", "rotel"]
        orders = [cost.rotate(legs, r) for r in range(3)]
        self.assertEqual(orders[0], legs)
        self.assertEqual(orders[1], ["otelcol", "rotel", "tracehouse"])
        self.assertEqual(orders[2], ["rotel", "tracehouse", "otelcol"])
        self.assertEqual(sorted(o[0] for o in orders), sorted(legs))
        self.assertEqual(cost.rotate(legs, 3), legs)


class MedianTest(unittest.TestCase):
    def test_numbers_are_medians_nested_too_and_verified_needs_every_repeat(self):
        runs = [{"spans": 10, "verified": True, "cpu_seconds": 3.0, "lost": 0,
                 "cost": {"system_us": 30.0, "collector_us": 5.0}, "series": {"t": [1]},
                 "database": "a"},
                {"spans": 10, "verified": False, "cpu_seconds": 1.0, "lost": 0,
                 "cost": {"system_us": 10.0, "collector_us": None}, "series": {"t": [2]},
                 "database": "b"},
                {"spans": 10, "verified": True, "cpu_seconds": 2.0, "lost": 0,
                 "cost": {"system_us": 20.0, "collector_us": 7.0}, "series": {"t": [3]},
                 "database": "c"}]
        m = cost.median_of_repeats(runs)
        self.assertEqual(m["cpu_seconds"], 2.0)
        self.assertEqual(m["cost"]["system_us"], 20.0)
        self.assertEqual(m["cost"]["collector_us"], 6.0)  # the repeats that have it
        self.assertFalse(m["verified"])
        self.assertEqual(m["database"], "a")
        self.assertEqual(m["series"], {"t": [1]})
        self.assertEqual(len(m["repeats"]), 3)
        self.assertNotIn("series", m["repeats"][0])

    def test_integers_stay_integers_with_an_even_count(self):
        m = cost.median_of_repeats([{"lost": 0, "inserts": 4, "verified": True},
                                    {"lost": 0, "inserts": 6, "verified": True}])
        self.assertIsInstance(m["lost"], int)
        self.assertEqual(m["inserts"], 5)
        m = cost.median_of_repeats([{"inserts": 4}, {"inserts": 5}])
        self.assertEqual(m["inserts"], 4.5)

    def test_one_repeat_is_itself(self):
        r = {"spans": 1, "verified": True, "series": {}}
        self.assertEqual(cost.median_of_repeats([r]), r)


class CpuTest(unittest.TestCase):
    def test_net_takes_the_baseline_rate_off_over_the_window(self):
        self.assertAlmostEqual(cost.net(10.0, 0.05, 40.0), 8.0)
        self.assertIsNone(cost.net(None, 0.05, 40.0))
        self.assertEqual(cost.net(3.0, None, 10.0), 3.0)
        self.assertAlmostEqual(cost.rate(1.0, 2.5, 3.0), 0.5)
        self.assertIsNone(cost.rate(None, 2.5, 3.0))

    def test_fit_separates_per_insert_and_per_byte(self):
        # 4 ms per INSERT, 1 ms per MiB.
        mib = 2 ** 20
        pts = [(200, 400, 200 * 0.004 + 400 / mib * 0.001),
               (4, 32 * mib, 4 * 0.004 + 32 * 0.001)]
        fit = cost.fit_insert_and_byte(pts)
        self.assertAlmostEqual(fit["per_insert_us"], 4000.0, places=0)
        self.assertAlmostEqual(fit["per_mib_ms"], 1.0, places=2)
        self.assertIsNone(cost.fit_insert_and_byte([(1, 10, 1.0)]))
        self.assertIsNone(cost.fit_insert_and_byte([(1, 10, 1.0), (2, 20, 2.0)]))  # collinear

    def test_chserver_share(self):
        cal = {"per_insert_us": 4000.0, "per_mib_ms": 2.0}
        self.assertAlmostEqual(cost.chserver_share(cal, 10, 2 * 2 ** 20), 0.044)
        self.assertIsNone(cost.chserver_share(None, 10, 0))
        self.assertIsNone(cost.chserver_share(cal, None, 0))

    def test_leg_cost_sums_the_processes_net_of_their_baselines(self):
        got = cost.leg_cost(
            1000, 0.010,
            {"insert_cpu": 0.05, "insert_s": 10.0, "settle_cpu": 0.02, "settle_s": 30.0},
            {"cpu": 0.03, "seconds": 10.0},
            {"server_poll": 0.002, "server_settle": 0.0005, "server_idle": 0.001,
             "broker_poll": 0.001},
            {"per_insert_us": 1000.0, "per_mib_ms": 0.0}, 5, 0,
            {"cpu": 0.011, "seconds": 1.0})
        self.assertEqual(got["collector_us"], 10.0)
        self.assertEqual(got["clickhouse_insert_us"], 30.0)   # 0.05 - 0.002·10
        self.assertEqual(got["clickhouse_merge_us"], 5.0)     # 0.02 - 0.0005·30
        self.assertEqual(got["clickhouse_us"], 35.0)
        self.assertEqual(got["kafka_us"], 20.0)               # 0.03 - 0.001·10
        self.assertEqual(got["system_us"], 65.0)
        self.assertEqual(got["chserver_own_us"], 5.0)         # 5 INSERTs · 1 ms
        self.assertEqual(got["system_less_chserver_us"], 60.0)
        self.assertEqual(got["optimize_final_us"], 10.0)      # 0.011 - 0.001·1

    def test_the_harness_view_is_estimated_per_block_and_taken_off_with_chserver(self):
        got = cost.leg_cost(1000, 0.01, {"insert_cpu": 0.05, "insert_s": 1.0},
                            {"cpu": 0.0, "seconds": 1.0}, None,
                            {"per_insert_us": 1000.0, "per_mib_ms": 0.0, "per_part_us": 2000.0},
                            5, 0, harness_blocks=5)
        self.assertEqual(got["system_us"], 60.0)
        self.assertEqual(got["chserver_own_us"], 5.0)
        self.assertEqual(got["harness_view_us"], 10.0)
        self.assertEqual(got["system_less_chserver_us"], 45.0)
        self.assertNotIn("freshness view (live", cost.cost_table(REPORT, ["tracehouse", "otelcol"]))

    def test_a_missing_process_leaves_the_sum_unknown(self):
        got = cost.leg_cost(1000, None, {"insert_cpu": 0.05, "insert_s": 1.0},
                            {"cpu": 0.03, "seconds": 1.0}, None, None, 1, 0)
        self.assertIsNone(got["system_us"])
        self.assertIsNone(got["chserver_own_us"])
        self.assertEqual(got["clickhouse_us"], 50.0)  # no settle window: inserts alone


class PooledBaselineTest(unittest.TestCase):
    def test_median_per_rate_over_the_legs(self):
        got = cost.pooled_baseline([{"broker_poll": 0.07, "server_poll": 0.02, "seconds": 10},
                                    {"broker_poll": 0.02, "server_poll": 0.03, "seconds": 10},
                                    None,
                                    {"broker_poll": 0.01, "server_poll": 0.01, "seconds": 10}])
        self.assertEqual(got, {"broker_poll": 0.02, "server_poll": 0.02, "seconds": 10})
        self.assertIsNone(cost.pooled_baseline([None]))


class EventsTest(unittest.TestCase):
    def test_parse_and_delta_keep_what_moved(self):
        before = cost.parse_events("InsertedRows\t10\nMergedRows\t5\nQuery\t3\n")
        after = cost.parse_events("InsertedRows\t110\nMergedRows\t5\nQuery\t9\nMerge\t2\n")
        self.assertEqual(cost.events_delta(before, after),
                         {"InsertedRows": 100, "Query": 6, "Merge": 2})
        self.assertIsNone(cost.events_delta(None, after))


class SettlerTest(unittest.TestCase):
    def test_settles_after_quiet_without_merges_or_new_parts(self):
        s = cost.Settler(30)
        a, b = (3, "t1", 7), (2, "t2", 7)
        self.assertFalse(s.observe(0, 1, a))
        self.assertFalse(s.observe(10, 0, a))   # merge ended at 10 s: the clock starts
        self.assertFalse(s.observe(35, 0, b))   # a new part: starts again
        self.assertFalse(s.observe(64, 0, b))
        self.assertTrue(s.observe(65, 0, b))

    def test_a_running_merge_restarts_the_clock(self):
        s = cost.Settler(5)
        sig = (1, "t", 1)
        s.observe(0, 0, sig)
        self.assertFalse(s.observe(4, 1, sig))
        self.assertFalse(s.observe(8, 0, sig))
        self.assertTrue(s.observe(9, 0, sig))

    def test_parse_settle_probe(self):
        self.assertEqual(cost.parse_settle_probe("0\t4\t2026-11-28 19:00:00\t12\n"),
                         (0, (4, "2026-11-28 19:00:00", 12)))


class DiskTest(unittest.TestCase):
    def test_per_span_and_keys_share(self):
        d = cost.disk_figures(1000, {"otel_traces": 180_000, "otel_traces_trace_id_ts": 20_000},
                              100_000, 10_000, 4_000, 3)
        self.assertEqual(d["bytes_on_disk"], 200_000)
        self.assertEqual(d["bytes_on_disk_per_span"], 200.0)
        self.assertEqual(d["keys_columns_share_of_wide_parts"], 0.1)
        self.assertEqual(d["keys_indexes_share"], 0.02)
        self.assertEqual(d["keys_share"], 0.12)
        self.assertEqual(d["parts_active_after_settling"], 3)

    def test_compact_parts_only_leave_the_columns_share_unknown(self):
        d = cost.disk_figures(10, {"otel_traces": 1000}, 0, 0, 10, 1)
        self.assertIsNone(d["keys_columns_share_of_wide_parts"])
        self.assertEqual(d["keys_share"], 0.01)


REPORT = {
    "tracehouse": {"spans": 1000, "inserts": 10, "insert_blocks": 20,
                   "cost": {"collector_us": 5.0, "clickhouse_insert_us": 30.0,
                            "clickhouse_merge_us": 10.0, "kafka_us": 5.0, "system_us": 50.0,
                            "chserver_own_us": 4.0, "system_less_chserver_us": 46.0,
                            "optimize_final_us": 12.0, "rows_per_part": 50.0},
                   "disk": {"bytes_on_disk_per_span": 150.0, "keys_share": 0.05,
                            "parts_active_after_settling": 2},
                   "settle": {"seconds": 41.0},
                   "events": {"MergedRows": 2000, "MergeTotalMilliseconds": 3}},
    "otelcol": {"spans": 1000, "inserts": 5, "insert_blocks": 5,
                "cost": {"collector_us": 60.0, "clickhouse_insert_us": 30.0,
                         "clickhouse_merge_us": -0.5, "kafka_us": 10.0, "system_us": 100.0},
                "disk": {"bytes_on_disk_per_span": 160.0, "keys_share": 0.06},
                "events": {"MergedRows": 1000}},
}


class CostTableTest(unittest.TestCase):
    def test_rows_ratios_and_events(self):
        md = cost.cost_table(REPORT, ["tracehouse", "otelcol"])
        lines = md.splitlines()
        self.assertEqual(lines[0], "| per span | tracehouse | otelcol | tracehouse / otelcol |")
        self.assertIn("| **system CPU per span** | 50.0 µs | 100.0 µs | 0.50× |", md)
        self.assertIn("| collector process | 5.00 µs | 60.0 µs | 0.08× |", md)
        # A negative net figure (noise) gets no ratio.
        self.assertIn("| ClickHouse, after it until parts settled (merges) | 10.0 µs | -0.50 µs |  |",
                      md)
        self.assertIn("| of it, the keys columns and their indexes | 5.0 % | 6.0 % |  |", md)
        self.assertIn("| rows read by merges (`MergedRows`) | 2.00 | 1.00 | 2.00× |", md)
        self.assertIn("| merges' wall time, summed over merges (not CPU) (`MergeTotalMilliseconds`) "
                      "| 3.00 µs | 0.00 µs |  |", md)
        self.assertIn("| **bytes on disk per span** (after settling) | 150.0 B | 160.0 B | 0.94× |", md)
        self.assertNotIn("InsertedRows", md)  # no leg moved it
        self.assertNotIn("everything else", md)  # no leg recorded it
        rep = {leg: dict(REPORT[leg], other_processes_cpu_seconds=30.0, wall_seconds=60.0)
               for leg in REPORT}
        self.assertIn("| everything else on the machine meanwhile (cores busy; not in the figures) "
                      "| 0.50 | 0.50 |  |", cost.cost_table(rep, ["tracehouse", "otelcol"]))

    def test_a_leg_without_cost_shows_dashes(self):
        rep = {"tracehouse": REPORT["tracehouse"], "rotel": {"spans": 1000, "verified": False}}
        md = cost.cost_table(rep, ["tracehouse", "rotel"])
        self.assertIn("| **system CPU per span** | 50.0 µs | — |  |", md)

    def test_note_names_repeats_baseline_settling_calibration(self):
        note = cost.cost_note({"repeats": 3, "cost_method": {
            "baseline_seconds": 10, "settle_quiet_seconds": 30,
            "calibration": {"per_insert_us": 4063.3, "per_mib_ms": 1.36}}})
        self.assertIn("median of 3 repeats, the leg order rotated", note)
        self.assertIn("10 s before each leg", note)
        self.assertIn("no new part for 30 s", note)
        self.assertIn("4,063 µs per INSERT and 1.36 ms per MiB", note)
        self.assertTrue(cost.cost_note({}).startswith("median of 1 repeat;")
                        or cost.cost_note({}).startswith("median of 1 repeat."))


METRICS = {
    'tracehouse_spans_processed_total{rule="health-checks",outcome="dropped"}': 0.0,
    'tracehouse_spans_processed_total{rule="health-checks",outcome="sampled_out"}': 0.0,
    'tracehouse_spans_processed_total{rule="health-checks",outcome="redacted"}': 0.0,
    'tracehouse_spans_processed_total{outcome="dropped",rule="cart-internal"}': 12.0,
    'tracehouse_spans_processed_total{rule="user-ids",outcome="redacted"}': 1000.0,
    'tracehouse_spans_processed_total{rule="keep-a-tenth",outcome="sampled_out"}': 850.0,
    "tracehouse_spans_decoded_total": 138.0,
}


class ProcessingTest(unittest.TestCase):
    def test_what_each_rule_did_whatever_the_label_order(self):
        p = cost.spans_processed(METRICS)
        self.assertEqual(list(p), ["health-checks", "cart-internal", "user-ids", "keep-a-tenth"])
        self.assertEqual(p["cart-internal"], {"dropped": 12, "sampled_out": 0, "redacted": 0})
        self.assertEqual(p["user-ids"]["redacted"], 1000)
        self.assertEqual(cost.spans_removed(p), 862)  # redactions remove nothing
        self.assertEqual(cost.spans_processed(None), {})
        self.assertEqual(cost.spans_removed({}), 0)

    def test_judged_on_the_rows_the_rules_keep(self):
        p = cost.spans_processed(METRICS)
        ok = {"rows_found": 138, "lost": 862, "duplicates": 0, "out_of_range": 0}
        exact, figures = cost.judge_processed(1000, p, ok)
        self.assertTrue(exact)
        self.assertEqual(figures["rows_expected"], 138)
        self.assertEqual(figures["spans_removed_by_rules"], 862)
        self.assertEqual(figures["removed_share"], 0.862)
        # One span too few, one stored twice, one the collector did not account for: not exact.
        for bad in ({"rows_found": 137, "lost": 863}, {"rows_found": 139, "duplicates": 1},
                    {"rows_found": 138, "out_of_range": 1}):
            self.assertFalse(cost.judge_processed(1000, p, dict(ok, **bad))[0], bad)
        self.assertFalse(cost.judge_processed(1000, None, ok)[0])  # no scrape, no verdict

    def test_a_variant_of_tracehouse_is_compared_to_tracehouse(self):
        self.assertEqual(cost.ratio_pairs(["tracehouse", "tracehouse+processing", "otelcol"]),
                         [("tracehouse+processing", "tracehouse"), ("tracehouse", "otelcol")])
        self.assertEqual(cost.ratio_pairs(["otelcol", "rotel"]), [])
        rep = {"tracehouse": dict(REPORT["tracehouse"], rows_found=1000),
               "tracehouse+processing": dict(REPORT["tracehouse"], rows_found=150,
                                             spans_removed_by_rules=850,
                                             cost=dict(REPORT["tracehouse"]["cost"],
                                                       collector_us=5.5))}
        md = cost.cost_table(rep, ["tracehouse", "tracehouse+processing"], summary=True)
        self.assertEqual(md.splitlines()[0], "| per span | tracehouse | tracehouse+processing | "
                                             "tracehouse+processing / tracehouse |")
        self.assertIn("| collector process | 5.00 µs | 5.50 µs | 1.10× |", md)
        self.assertIn("| rows written (spans less those the processing rules removed) | 1,000 | "
                      "150 | 0.15× |", md)


class OptionsTest(unittest.TestCase):
    def _parse(self, *argv):
        with mock.patch.object(sys, "argv", ["bench", *argv]):
            return parse("bench", "config.yaml")

    def test_defaults_measure_what_a_user_pays(self):
        a = self._parse("--spans", "10", "--out", "x.json")
        self.assertEqual(a.engine, "merge-tree")
        self.assertEqual(a.repeats, 3)
        self.assertEqual(a.settle_quiet, 30)
        self.assertTrue(a.own_clickhouse)

    def test_shared_clickhouse_and_one_repeat(self):
        a = self._parse("--spans", "10", "--out", "x.json", "--shared-clickhouse", "--repeats", "1")
        self.assertFalse(a.own_clickhouse)
        self.assertEqual(a.repeats, 1)

    def test_a_sweep_is_one_repeat(self):
        a = self._parse("--rate", "10", "--duration", "1", "--partitions-sweep", "1,2",
                        "--out", "x.json")
        self.assertEqual(a.repeats, 1)

    def test_the_processing_leg_takes_the_typical_rules_by_default(self):
        a = self._parse("--spans", "10", "--out", "x.json",
                        "--legs", "tracehouse,tracehouse+processing")
        self.assertTrue(a.processing.endswith("processing-typical.yaml"))
        self.assertTrue(a.processing_text.startswith("# Read by e2e/bench"))
        self.assertIn("\nprocessing:\n  rules:\n", a.processing_text)
        self.assertIsNone(self._parse("--spans", "10", "--out", "x.json").processing_text)

    def test_processing_without_its_leg_or_with_more_than_the_block(self):
        with mock.patch("sys.stderr"), self.assertRaises(SystemExit):
            self._parse("--spans", "10", "--out", "x.json", "--processing", "p.yaml")
        with self.assertRaises(ValueError):
            processing_block("processing:\n  rules: []\nkafka:\n  brokers: x\n", "p.yaml")
        self.assertEqual(processing_block("# a rule\nprocessing:\n  rules: []", "p.yaml"),
                         "# a rule\nprocessing:\n  rules: []\n")

    def test_bad_repeats(self):
        with mock.patch("sys.stderr"), self.assertRaises(SystemExit):
            self._parse("--spans", "10", "--out", "x.json", "--repeats", "0")


if __name__ == "__main__":
    unittest.main()
