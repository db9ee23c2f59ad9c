"""Unit tests of the query benchmark's pure parts (no stack): parameter draws, rendering per
layout, the readers' macro expansion, percentiles, the report."""

import random
import unittest

from harness.querybench.layouts import LAYOUTS, parse_layouts, sql_str
from harness.querybench.queries import QUERIES, anchored, draw_all, tokens
from harness.querybench.readers import (MacroError, dashboard_for, dashboard_queries, expand_macros,
                                        interpolate, reader_queries)
from harness.querybench.report import markdown
from harness.querybench.stats import percentile, summarize

CATALOG = {
    "tmin_ms": 1_793_491_200_000, "tmax_ms": 1_793_491_200_000 + 26 * 3_600_000,
    "traces": [("0af7651916cd43dd8448eb211c80319c", 1_793_491_260_000),
               ("b7ad6b7169203331", 1_793_491_500_000)],
    "digests": ["q1ZC0x8x3lRkZ2bqGZ3YNg==", "it's \\ odd"],
    "services": ["frontend", "cart"], "span_names": ["GET /api/cart", "redis GET"],
    "tokens": ["cart", "redis"],
    "anchor": {"trace_id": "0af7651916cd43dd8448eb211c80319c", "ts_ms": 1_793_491_260_100,
               "service": "cart", "root_service": "frontend", "span_name": "GET /api/cart",
               "digest": "q1ZC0x8x3lRkZ2bqGZ3YNg==", "status": "503"},
}


class Draws(unittest.TestCase):
    def test_same_seed_same_parameters_for_every_layout(self):
        a = draw_all(random.Random(7), CATALOG, 5)
        b = draw_all(random.Random(7), CATALOG, 5)
        self.assertEqual(a, b)
        self.assertEqual(set(a), {q.name for q in QUERIES})
        self.assertTrue(all(len(v) == 5 for v in a.values()))

    def test_windows_lie_inside_the_data(self):
        for draws in draw_all(random.Random(1), CATALOG, 50).values():
            for p in draws:
                if "from" in p:
                    self.assertGreaterEqual(p["from"], CATALOG["tmin_ms"])
                    self.assertLessEqual(p["to"], CATALOG["tmax_ms"])


class Rendering(unittest.TestCase):
    def test_every_query_renders_for_every_layout(self):
        params = draw_all(random.Random(1), CATALOG, 1)
        for layout in LAYOUTS.values():
            for q in QUERIES:
                sqls = q.render(layout, "db", params[q.name][0])
                self.assertTrue(sqls, q.name)
                for sql in sqls:
                    self.assertIn("`db`.`otel_traces", sql)
                    self.assertNotIn("{", sql.replace("{t}", ""))

    def test_attribute_predicates_follow_the_layout(self):
        self.assertEqual(LAYOUTS["map"].attr_equals("k", "v"), "SpanAttributes['k'] = 'v'")
        self.assertEqual(LAYOUTS["map_buckets"].attr_equals("k", "v"), "SpanAttributes['k'] = 'v'")
        self.assertEqual(LAYOUTS["map_items"].attr_equals("k", "v"), "has(SpanAttributeItems, 'k=v')")
        self.assertEqual(LAYOUTS["json"].attr_equals("a.b", "v"), "toString(SpanAttributes.`a.b`) = 'v'")

    def test_values_are_escaped(self):
        self.assertEqual(sql_str("it's \\"), "it\\'s \\\\")
        self.assertIn("'it\\'s \\\\ odd'", LAYOUTS["map"].attr_equals("k", "it's \\ odd"))

    def test_layout_ddl_is_additive(self):
        for layout in LAYOUTS.values():
            for sql in layout.ddl("db"):
                self.assertTrue(sql.startswith("ALTER TABLE `db`.`otel_traces` "), sql)
                self.assertRegex(sql, r" (ADD COLUMN IF NOT EXISTS|ADD INDEX IF NOT EXISTS|"
                                      r"ADD PROJECTION IF NOT EXISTS|MODIFY SETTING) ")

    def test_parse_layouts(self):
        self.assertEqual([x.name for x in parse_layouts("map,json")], ["map", "json"])
        with self.assertRaises(ValueError):
            parse_layouts("map,nope")


class Readers(unittest.TestCase):
    def test_macros_expand_as_the_plugin_backend_does(self):
        sql = "SELECT $__timeInterval(Timestamp) t, count() / $__interval_s FROM x WHERE $__timeFilter(Timestamp)"
        self.assertEqual(
            expand_macros(sql, 1_000_500, 2_000_900, 60_000),
            "SELECT toStartOfInterval(toDateTime(Timestamp), INTERVAL 60 second) t, count() / 60 "
            "FROM x WHERE Timestamp >= toDateTime(1000) AND Timestamp <= toDateTime(2000)")
        with self.assertRaises(MacroError):
            expand_macros("SELECT $__nope", 0, 1, 1000)

    def test_variables_interpolate(self):
        v = {"database": "d", "service": ["a", "b'c"]}
        self.assertEqual(interpolate("`${database}` IN (${service:singlequote})", v),
                         "`d` IN ('a','b\\'c')")
        with self.assertRaises(MacroError):
            interpolate("${missing}", v)

    def test_anchored_windows_hold_the_anchor(self):
        a = CATALOG["anchor"]
        for name, p in anchored(CATALOG).items():
            if "from" in p:
                self.assertTrue(p["from"] <= a["ts_ms"] <= p["to"], name)
        self.assertEqual(anchored(CATALOG)["latest_by_name_token"]["token"], "cart")
        self.assertEqual(tokens("oteldemo.CartService/GetCart"), ["oteldemo", "cartservice", "getcart"])

    def test_every_dashboard_query_renders_without_macros_left(self):
        for layout in LAYOUTS.values():
            name, dash = dashboard_for(layout)
            self.assertGreaterEqual(len(dashboard_queries(dash)), 10, name)
            shapes = reader_queries(layout, "db", CATALOG, QUERIES)
            for reader, title, sqls in shapes:
                for sql in sqls:
                    self.assertNotIn("$", sql, f"{reader} / {title}")


class Stats(unittest.TestCase):
    def test_percentile_interpolates(self):
        self.assertEqual(percentile([1, 2, 3, 4], 50), 2.5)
        self.assertEqual(percentile([5], 99), 5)
        self.assertIsNone(percentile([], 50))
        self.assertAlmostEqual(percentile(list(range(1, 101)), 95), 95.05)

    def test_summary_and_report(self):
        s = [{"ms": float(i), "server_ms": 1.0, "rows_read": 10, "bytes_read": 100, "rows": 1}
             for i in range(1, 11)]
        summ = summarize(s)
        self.assertEqual(summ["n"], 10)
        self.assertEqual(summ["p50_ms"], 5.5)
        lay = {"summary": "", "readers": {"checked": 3, "failures": []},
               "ingest": {"rows": 10, "exact": True, "spans_per_cpu_second": 1000,
                          "server_cpu_us_per_span": 2.0, "merge_wall_seconds": 1.0,
                          "server_cpu_seconds_merge": 0.5, "bytes_on_disk": 2048,
                          "bytes_per_span": 204.8, "index_bytes": 100},
               "queries": {q.name: {"warm": summ, "cold": summ} for q in QUERIES}}
        result = {"layouts": {"map": lay, "json": lay}, "run": {
            "spans": 10, "iterations": 10, "cold_iterations": 10, "server_version": "26.9",
            "date": "today", "git": "abc", "command": "e2e/querybench --spans 10",
            "machine": {"cpus": 2, "cpu_model": "x", "memory_gib": 8},
            "data": {"otlp_bytes": 1000, "services_seen": 2, "span_names": 2,
                     "mean_spans_per_trace": 30, "hours": 26},
            "queries": {q.name: {} for q in QUERIES}}}
        md = markdown(result)
        self.assertIn("| trace_by_id | 5.5 / 9.6 / 9.9 | 5.5 / 9.6 / 9.9 | map 1.0× |", md)


if __name__ == "__main__":
    unittest.main()
