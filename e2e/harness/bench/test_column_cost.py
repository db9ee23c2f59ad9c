"""Unit tests of column_cost.py's pure parts and its table (no stack; the bench's venv, since
column_cost.py reuses the bench's runner): `python3 -m unittest discover -s e2e/harness/bench -t
e2e -p 'test_*.py'` from the repository root."""

import unittest

from harness.bench.column_cost import (GROUPS, cuts, fit_per_insert, parse, schema_statements,
                                       variant_columns)
from harness.bench.report import column_cost_table

COLUMNS = ["Timestamp", "TraceId", "ResourceAttributes", "ResourceAttributesKeys",
           "SpanAttributes", "SpanAttributesKeys", "Events.Timestamp", "Events.Name",
           "Events.Attributes", "Links.TraceId", "EventsCount"]


class VariantTest(unittest.TestCase):
    def test_a_nested_group_takes_its_subcolumns_only(self):
        self.assertEqual(variant_columns(COLUMNS, GROUPS["events"]),
                         [c for c in COLUMNS if not c.startswith("Events.")])
        self.assertIn("EventsCount", variant_columns(COLUMNS, GROUPS["events"]))

    def test_attribute_groups_take_their_key_arrays_too(self):
        got = variant_columns(COLUMNS, GROUPS["span attributes"])
        self.assertNotIn("SpanAttributes", got)
        self.assertNotIn("SpanAttributesKeys", got)
        self.assertIn("ResourceAttributesKeys", got)


class CutsAndFitTest(unittest.TestCase):
    def test_cuts_cover_every_row_once(self):
        self.assertEqual(cuts(10, None), [(0, 10)])
        self.assertEqual(cuts(10, 4), [(0, 4), (4, 8), (8, 10)])
        self.assertEqual(cuts(3, 100), [(0, 3)])

    def test_fit_finds_the_cost_of_an_insert_and_of_a_row(self):
        # 2 ms per INSERT, 5 µs per row.
        points = [(i, 20000, i * 0.002 + 20000 * 5e-6) for i in (1, 4, 20, 200)]
        self.assertEqual(fit_per_insert(points), {"per_insert_us": 2000.0, "per_row_us": 5.0})

    def test_fit_needs_points_that_separate_the_two(self):
        self.assertIsNone(fit_per_insert([(1, 100, 1.0)]))
        self.assertIsNone(fit_per_insert([(1, 100, 1.0), (2, 200, 2.0)]))


class SchemaStatementsTest(unittest.TestCase):
    def test_database_renamed_and_comments_dropped(self):
        ddl = ("-- schema for `x`\nCREATE DATABASE IF NOT EXISTS `x`;\n-- 0001\n"
               "CREATE TABLE `x`.`t` (a UInt8) ENGINE = MergeTree ORDER BY a;\n"
               "CREATE MATERIALIZED VIEW `x`.`v` TO `x`.`u` AS SELECT a FROM `x`.`t`;\n")
        self.assertEqual(schema_statements(ddl, "m1"), [
            "CREATE DATABASE IF NOT EXISTS `m1`",
            "CREATE TABLE `m1`.`t` (a UInt8) ENGINE = MergeTree ORDER BY a",
            "CREATE MATERIALIZED VIEW `m1`.`v` TO `m1`.`u` AS SELECT a FROM `m1`.`t`"])


class TableTest(unittest.TestCase):
    def test_ratio_only_against_every_column_at_the_same_batch_size(self):
        base = {"case": "every column", "columns": 30, "rows_per_insert": 5000, "inserts": 4,
                "parts": 4, "cpu_us_per_span": 10.0}
        md = column_cost_table({"cases": [
            base, dict(base, case="without events", columns=27, cpu_us_per_span=8.0),
            dict(base, rows_per_insert=100, inserts=200, parts=200, cpu_us_per_span=30.0,
                 merge_cpu_us_per_span=4.0)],
            "fit": {"per_insert_us": 2000.0, "per_row_us": 5.0},
            "floor": {"per_insert_us": 900.0, "inserts": 200}})
        self.assertIn("| without events | 27 | 5,000 | 4 | 4 | 8.00 µs | 0.80× | — |", md)
        self.assertIn("| every column | 30 | 100 | 200 | 200 | 30.00 µs |  | 4.00 µs |", md)
        self.assertIn("one INSERT costs the server **2,000 µs** of CPU, one row **5.00 µs**", md)
        self.assertIn("one-column MergeTree costs **900 µs** (200 INSERTs)", md)


class OptionsTest(unittest.TestCase):
    def test_batch_sizes(self):
        self.assertEqual(parse(["--out", "x", "--batch-sizes", "all,100"]).batch_sizes, [None, 100])


if __name__ == "__main__":
    unittest.main()
