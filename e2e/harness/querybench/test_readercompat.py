"""Unit tests of the reader check's pure parts (no stack): the migration list read from
`schema print`, the cases, the verdicts, what fails a case, the PR #50878 fixture's statements."""

import unittest

from harness.procs import BenchError
from harness.querybench.readercompat import (PR50878_DDL, Case, cases, fixture_statements,
                                             migration_versions, opt_in_versions, problems, shapes_for)
from harness.querybench.readers import judge, needs_lookup
from harness.querybench.test_querybench import CATALOG

PRINTED = """-- tracehouse traces schema for otel.otel_traces (migrations 1..3)

CREATE DATABASE IF NOT EXISTS `otel`;

-- 0001 create_traces_table
CREATE TABLE IF NOT EXISTS `otel`.`otel_traces` (x String);

-- 0002 create_trace_id_ts_table
CREATE TABLE IF NOT EXISTS `otel`.`otel_traces_trace_id_ts` (x String);

-- 0003 create_trace_id_ts_view (nothing to do for this engine)
"""

LOOKUP_SQL = ["SELECT min(Start) FROM `db`.`otel_traces_trace_id_ts` WHERE TraceId = 'a'"]
PLAIN_SQL = ["SELECT count() FROM `db`.`otel_traces`"]
# As `schema print` shows opt-in migrations with the default options (migrations.rs `script`).
PRINTED_OPT_IN = PRINTED.replace("(migrations 1..3)", "(migrations 1..5)") + """
-- 0004 add_attribute_items (opt-in layout attribute_items: not asked for)

-- 0005 bucketed_map_serialization (opt-in layout map_serialization=Buckets: not asked for)
"""

UNKNOWN = "clickhouse: Code: 60. DB::Exception: Unknown table expression identifier (UNKNOWN_TABLE)"


class Versions(unittest.TestCase):
    def test_the_migration_list_is_read_from_schema_print(self):
        self.assertEqual(migration_versions(PRINTED), [
            (1, "create_traces_table"), (2, "create_trace_id_ts_table"),
            (3, "create_trace_id_ts_view")])

    def test_a_gap_or_nothing_is_refused(self):
        with self.assertRaises(BenchError):
            migration_versions("-- 0001 a\n-- 0003 c\n")
        with self.assertRaises(BenchError):
            migration_versions("CREATE DATABASE x;")

    def test_every_variant_at_every_version_and_the_adopted_tables(self):
        cs = cases(migration_versions(PRINTED))
        self.assertEqual([c.name for c in cs], ["map_v1", "map_v2", "map_v3", "json_v1",
                                                "json_v2", "json_v3", "json_v3_no_keys",
                                                "map_pr50878_adopted"])
        no_keys = cs[6]
        self.assertEqual((no_keys.keys, no_keys.version, no_keys.up_to, no_keys.read_as),
                         (False, 3, None, ("json_nokeys",)))
        self.assertTrue(all(c.keys for c in cs if c is not no_keys))
        # The latest is applied as the operator applies it: without --up-to.
        self.assertEqual([(c.up_to, c.version) for c in cs[:3]], [(1, 1), (2, 2), (None, 3)])
        adopted = cs[-1]
        self.assertEqual((adopted.fixture, adopted.version, adopted.read_as),
                         (PR50878_DDL, 3, ("map", "map_items")))


    def test_opt_in_layouts_are_cases_on_the_latest_map_table_not_versions(self):
        printed = PRINTED_OPT_IN
        opt_in = opt_in_versions(printed)
        self.assertEqual(opt_in, {4: "attribute_items", 5: "map_serialization=Buckets"})
        cs = cases(migration_versions(printed), opt_in)
        self.assertEqual([c.name for c in cs], [
            "map_v1", "map_v2", "map_v5", "json_v1", "json_v2", "json_v5", "json_v5_no_keys",
            "map_v5_attribute_items", "map_v5_map_serialization", "map_v5_all_layouts",
            "map_pr50878_adopted"])
        # The last plain version is the whole list applied (the opt-ins recorded, not run).
        self.assertEqual([(c.up_to, c.version) for c in cs[:3]], [(1, 1), (2, 2), (None, 5)])
        by = {c.name: c for c in cs}
        self.assertEqual((by["map_v5_attribute_items"].opt_in,
                          by["map_v5_attribute_items"].read_as),
                         (("--attribute-items",), ("map", "map_items")))
        self.assertEqual((by["map_v5_map_serialization"].opt_in,
                          by["map_v5_map_serialization"].read_as), (("--map-serialization", "buckets"), ("map",)))
        self.assertEqual((by["map_v5_all_layouts"].opt_in, by["map_v5_all_layouts"].read_as),
                         (("--attribute-items", "--map-serialization", "buckets"), ("map", "map_items")))
        # An opt-in case is at the latest version: nothing may be "n/a" there.
        self.assertTrue(all(c.version == 5 for c in cs if c.opt_in))
        self.assertEqual(opt_in_versions(PRINTED), {})


class Verdicts(unittest.TestCase):
    def test_a_reader_works_when_it_runs_and_returns_rows(self):
        self.assertEqual(judge(PLAIN_SQL, 3, None, lookup_ready=False), "ok")
        self.assertEqual(judge(PLAIN_SQL, 0, None, lookup_ready=True), "fail")
        self.assertEqual(judge(PLAIN_SQL, 0, UNKNOWN, lookup_ready=False), "fail")

    def test_a_lookup_reader_is_not_applicable_only_where_there_is_no_lookup_table(self):
        self.assertTrue(needs_lookup(LOOKUP_SQL))
        self.assertFalse(needs_lookup(PLAIN_SQL))
        self.assertEqual(judge(LOOKUP_SQL, 0, UNKNOWN, lookup_ready=False), "n/a")
        self.assertEqual(judge(LOOKUP_SQL, 0, None, lookup_ready=False), "n/a")
        self.assertEqual(judge(LOOKUP_SQL, 0, None, lookup_ready=True), "fail")
        self.assertEqual(judge(LOOKUP_SQL, 0, UNKNOWN, lookup_ready=True), "fail")
        # Another error is a failure even without the lookup table.
        self.assertEqual(judge(LOOKUP_SQL, 0, "clickhouse: Code: 47. DB::Exception: Unknown "
                               "identifier", lookup_ready=False), "fail")

    def test_the_real_shapes_that_need_the_lookup_table(self):
        shapes = shapes_for(Case("map_v5", "map"), "db", {"map": CATALOG})
        needing = sorted(name for _, _, name, sqls in shapes if needs_lookup(sqls))
        self.assertEqual(needing, ["Trace / A", "Trace spans / A", "trace_by_id"])

    def test_the_items_layout_adds_only_the_shapes_it_renders_differently(self):
        one = shapes_for(Case("a", "map"), "db", {"map": CATALOG})
        both = shapes_for(Case("b", "map", read_as=("map", "map_items")), "db",
                          {"map": CATALOG, "map_items": CATALOG})
        added = [(lay, name) for lay, _, name, _ in both[len(one):]]
        self.assertEqual(added, [("map_items", "attr_equals_rare"),
                                 ("map_items", "attr_equals_common")])

    def test_a_json_table_without_keys_columns_is_read_without_them(self):
        shapes = shapes_for(Case("j", "json", read_as=("json_nokeys",), keys=False), "db",
                            {"json_nokeys": CATALOG})
        sql = " ".join(s for _, _, _, sqls in shapes for s in sqls)
        self.assertNotIn("AttributesKeys", sql)
        self.assertIn("JSONAllPaths(SpanAttributes)", sql)
        # The shape that asks for a key no span carries wants no rows: not a reader check.
        self.assertNotIn("spans_with_absent_key", [name for _, _, name, _ in shapes])


class Problems(unittest.TestCase):
    def answer(self, verdict, query="q"):
        return {"layout": "map", "reader": "r", "query": query, "rows": 0,
                "error": None, "verdict": verdict}

    def test_n_a_is_allowed_below_the_latest_version_only(self):
        old, new = Case("map_v1", "map", 1, 1), Case("map_v3", "map", None, 3)
        self.assertEqual(problems(old, 3, False, 10, 10, [self.answer("n/a")]), [])
        self.assertEqual(len(problems(new, 3, True, 10, 10, [self.answer("n/a")])), 1)
        self.assertIn("no trace-id lookup table", problems(new, 3, False, 10, 10, [])[0])

    def test_a_failed_answer_or_an_inexact_load_fails_every_case(self):
        old = Case("map_v1", "map", 1, 1)
        self.assertEqual(problems(old, 3, False, 10, 10, [self.answer("fail", "facet")]),
                         ["map_v1: map / r / facet: 0 rows"])
        self.assertEqual(problems(old, 3, False, 9, 10, []), ["map_v1: 9 rows, 10 spans were loaded"])

    def test_the_adopted_tables_may_have_nothing_not_applicable(self):
        adopted = Case("x", "map", None, 3, PR50878_DDL)
        self.assertEqual(len(problems(adopted, 3, True, 1, 1, [self.answer("n/a")])), 1)


class Fixture(unittest.TestCase):
    def test_the_pr50878_fixture_is_three_statements_for_the_database(self):
        stmts = fixture_statements(PR50878_DDL.read_text(), "d")
        self.assertEqual(len(stmts), 3)
        self.assertTrue(stmts[0].startswith("CREATE TABLE IF NOT EXISTS `d`.`otel_traces` ("))
        self.assertIn("SimpleAggregateFunction(min, DateTime)", stmts[1])
        self.assertTrue(stmts[2].startswith("CREATE MATERIALIZED VIEW"))
        self.assertFalse(any("{db}" in s or s.lstrip().startswith("--") for s in stmts))


if __name__ == "__main__":
    unittest.main()
