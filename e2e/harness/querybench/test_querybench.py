"""Unit tests of the query benchmark's pure parts (no stack): parameter draws, rendering per
layout, the readers' macro expansion, percentiles, the report."""

import random
import unittest

from harness.querybench.ingest import _config
from harness.querybench.layouts import LAYOUTS, parse_layouts, sql_str
from harness.querybench.queries import ABSENT_KEY, HAS_KEYS, QUERIES, anchored, draw_all, tokens
from harness.querybench.readers import (MacroError, dashboard_for, dashboard_queries, expand_macros,
                                        interpolate, reader_queries)
from harness.querybench.report import keys_pair, markdown
from harness.querybench.stats import percentile, server_cpu, summarize

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

    def test_key_shapes_use_the_keys_columns_only_where_the_table_has_them(self):
        with_keys, without, mp = LAYOUTS["json"], LAYOUTS["json_nokeys"], LAYOUTS["map"]
        self.assertEqual((with_keys.keys, without.keys, mp.keys), (True, False, False))
        self.assertEqual(with_keys.has_key("k"), "has(SpanAttributesKeys, 'k')")
        self.assertEqual(without.has_key("a.b"), "SpanAttributes.`a.b` IS NOT NULL")
        self.assertEqual(mp.has_key("it's"), "mapContains(SpanAttributes, 'it\\'s')")
        self.assertEqual([lay.keys_of("Resource") for lay in (with_keys, without, mp)],
                         ["ResourceAttributesKeys", "JSONAllPaths(ResourceAttributes)",
                          "ResourceAttributes.keys"])
        params = draw_all(random.Random(1), CATALOG, 3)
        by = {q.name: q for q in QUERIES}
        for name in ("keys_of_service", "top_span_keys", "spans_with_key", "spans_with_absent_key"):
            self.assertIn("keys", by[name].tags)
            p = params[name][0]
            self.assertIn("AttributesKeys", by[name].render(with_keys, "db", p)[0])
            for lay in (without, mp):
                self.assertNotIn("AttributesKeys", by[name].render(lay, "db", p)[0], lay.name)
        self.assertTrue(all(p["key"] in HAS_KEYS for p in params["spans_with_key"]))
        self.assertTrue(all(p["key"] == ABSENT_KEY for p in params["spans_with_absent_key"]))
        self.assertEqual([q.name for q in QUERIES if "no_rows" in q.tags], ["spans_with_absent_key"])

    def test_a_json_table_without_keys_columns_is_made_and_filled_without_them(self):
        self.assertEqual(LAYOUTS["json_nokeys"].schema_flags, ("--no-attribute-keys",))
        self.assertEqual([LAYOUTS[n].schema_flags for n in ("json", "map")], [(), ()])
        self.assertEqual([LAYOUTS[n].attribute_keys for n in ("json", "json_nokeys", "map")],
                         [True, False, True])
        env = {"KAFKA_BROKERS": "k:9092", "CLICKHOUSE_URL": "http://c:8123"}
        off = _config(env, "t", "g", "db", "json", 9000, attribute_keys=False)
        self.assertIn("  attributes: json\n  attribute_keys: false\n", off)
        self.assertNotIn("attribute_keys", _config(env, "t", "g", "db", "json", 9000))

    def test_the_earlier_queries_draw_what_they_drew_before_the_key_shapes(self):
        # New shapes are drawn after the earlier ones, so a seed draws the same parameters
        # for the earlier shapes as in the recorded runs.
        earlier = [q for q in QUERIES if "keys" not in q.tags]
        self.assertEqual(QUERIES[:len(earlier)], earlier)
        a = draw_all(random.Random(3), CATALOG, 4, earlier)
        b = draw_all(random.Random(3), CATALOG, 4)
        self.assertEqual(a, {k: b[k] for k in a})

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
        # A report without server CPU or keys figures renders as it did.
        self.assertNotIn("Server CPU", md)
        self.assertNotIn("keys columns", md)
        self.assertIsNone(keys_pair(result))

    def test_server_cpu_p50_leaves_out_disturbed_samples(self):
        s = [{"server_cpu_us": 1000 * i, "disturbed": i > 3} for i in range(1, 6)]
        self.assertEqual(server_cpu(s), {"server_cpu_p50_ms": 2.0, "server_cpu_disturbed": 2})
        self.assertEqual(server_cpu([{"server_cpu_us": 5000, "disturbed": True}]),
                         {"server_cpu_p50_ms": 5.0, "server_cpu_disturbed": 1})
        self.assertEqual(server_cpu([{"ms": 1}]), {})

    def test_keys_report_puts_the_json_tables_side_by_side(self):
        def summ(ms, cpu_us, read):
            return summarize([{"ms": ms, "server_ms": ms, "rows_read": read, "bytes_read": 10 * read,
                               "rows": 1, "server_cpu_us": cpu_us, "disturbed": False}])

        def lay(attributes, keys, cpu_us, read, insert_us, key_info):
            return {"summary": "", "attributes": attributes, "keys": keys,
                    "readers": {"checked": 1, "failures": []},
                    "ingest": {"rows": 1000, "exact": True, "spans_per_cpu_second": 1000,
                               "server_cpu_us_per_span": insert_us, "merge_wall_seconds": 1.0,
                               "server_cpu_seconds_merge": 0.02, "bytes_on_disk": 200_000,
                               "bytes_per_span": 200.0, "index_bytes": 100, "keys": key_info},
                    "queries": {q.name: {"warm": summ(2.0, cpu_us, read),
                                         "cold": summ(3.0, cpu_us, read)} for q in QUERIES}}
        keys = {"columns": {"SpanAttributesKeys": {"bytes": 1000, "uncompressed_bytes": 90_000},
                            "ResourceAttributesKeys": {"bytes": 1000, "uncompressed_bytes": 90_000}},
                "columns_bytes": 2000, "index_bytes": 2000}
        result = {"layouts": {"map": lay("map", False, 3000, 400, 20.0, None),
                              "json": lay("json", True, 1000, 100, 30.0, keys),
                              "json_nokeys": lay("json", False, 8000, 2000, 24.0, None)},
                  "run": {"spans": 1000, "iterations": 1, "cold_iterations": 1,
                          "server_version": "26.9", "date": "today", "git": "abc",
                          "command": "e2e/querybench", "machine": {"cpus": 2, "cpu_model": "x",
                                                                   "memory_gib": 8},
                          "data": {"otlp_bytes": 1000, "services_seen": 2, "span_names": 2,
                                   "mean_spans_per_trace": 30, "hours": 26},
                          "queries": {q.name: {"tags": list(q.tags)} for q in QUERIES}}}
        self.assertEqual(keys_pair(result), ("json", "json_nokeys"))
        md = markdown(result)
        self.assertIn("| query | map ms | json ms | json_nokeys ms |\n|---|---|---|---|\n"
                      "| trace_by_id | 3.0 | 1.0 | 8.0 |", md)
        self.assertIn("| top_span_keys | 2.0 · 1.0 · 100 · 1.0 kB | 2.0 · 8.0 · 2.0 k · 20.0 kB | "
                      "2.0 · 3.0 · 400 · 4.0 kB | 8.0× · 20.0× |", md)
        self.assertNotIn("| trace_by_id | 2.0 ·", md)  # only the key shapes in the keys table
        self.assertIn("| server CPU µs/span, insert | 30.0 | 24.0 | +6.0 |", md)
        self.assertIn("| server CPU µs/span, merge (OPTIMIZE FINAL) | 20.0 | 20.0 | +0.0 |", md)
        self.assertIn("| SpanAttributesKeys on disk (data + marks; read uncompressed) | 1.0 kB "
                      "(0.50 %; 90.0 kB) | – | |", md)
        self.assertIn("| keys columns and bloom filters, share of the bytes on disk | 2.00 % |", md)


if __name__ == "__main__":
    unittest.main()
