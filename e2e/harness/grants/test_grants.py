"""Unit tests of grants.py (no engine): `python -m unittest discover -s e2e/harness/grants -t e2e`."""

import unittest

from harness.grants.grants import Privilege, covered, missing, parse_grants, parse_used

DOC = """
```sql
CREATE ROLE IF NOT EXISTS tracehouse_ddl;
GRANT CREATE DATABASE ON otel.* TO tracehouse_ddl;
GRANT CREATE TABLE, CREATE VIEW, ALTER TABLE, SELECT, INSERT ON otel.* TO tracehouse_ddl;
GRANT tracehouse_ddl TO tracehouse_migrator;
GRANT INSERT, SELECT ON otel.otel_traces TO tracehouse_writer;
```
"""


class ParseTest(unittest.TestCase):
    def test_used_privileges_lose_their_columns_and_split_on_commas(self):
        self.assertEqual(parse_used("SELECT(a, b), INSERT ON db.t"),
                         [Privilege("SELECT", "db", "t"), Privilege("INSERT", "db", "t")])
        self.assertEqual(parse_used("INSERT(`Events.Name`, x) ON db.`t`"), [Privilege("INSERT", "db", "t")])
        self.assertEqual(parse_used("TABLE ENGINE ON MergeTree"), [Privilege("TABLE ENGINE", "MergeTree", "*")])

    def test_a_line_that_is_not_a_privilege_is_an_error(self):
        with self.assertRaises(ValueError):
            parse_used("nonsense")

    def test_grants_are_read_by_role_and_role_grants_are_not_privileges(self):
        g = parse_grants(DOC)
        self.assertEqual(sorted(g), ["tracehouse_ddl", "tracehouse_writer"])
        self.assertIn(Privilege("ALTER TABLE", "otel", "*"), g["tracehouse_ddl"])
        self.assertEqual(g["tracehouse_writer"], [Privilege("INSERT", "otel", "otel_traces"),
                                                  Privilege("SELECT", "otel", "otel_traces")])


class CoverTest(unittest.TestCase):
    def setUp(self):
        self.g = parse_grants(DOC)

    def test_the_writer_may_insert_but_not_create(self):
        w = self.g["tracehouse_writer"]
        self.assertEqual(missing(["INSERT(a, b) ON otel.otel_traces"], w), [])
        self.assertEqual(missing(["CREATE TABLE ON otel.otel_traces"], w), ["CREATE TABLE ON otel.otel_traces"])
        self.assertEqual(missing(["INSERT(a) ON otel.other"], w), ["INSERT(a) ON otel.other"])

    def test_a_database_wildcard_and_a_group_cover_their_members(self):
        d = self.g["tracehouse_ddl"]
        self.assertEqual(missing(["ALTER ADD INDEX ON otel.otel_traces", "ALTER SETTINGS ON otel.x",
                                  "CREATE VIEW ON otel.v", "SELECT, INSERT ON otel.l"], d), [])
        self.assertEqual(missing(["ALTER ADD INDEX ON other.t"], d), ["ALTER ADD INDEX ON other.t"])
        self.assertEqual(missing(["DROP TABLE ON otel.t"], d), ["DROP TABLE ON otel.t"])

    def test_system_tables_listing_and_engines_need_no_grant_of_their_own(self):
        for entry in ["SELECT(name) ON system.tables", "SHOW TABLES ON *.*", "SHOW COLUMNS ON *.*",
                      "TABLE ENGINE ON MergeTree"]:
            self.assertTrue(all(covered(p, []) for p in parse_used(entry)), entry)

    def test_each_missing_entry_is_named_once(self):
        self.assertEqual(missing(["DROP TABLE ON a.b", "DROP TABLE ON a.b"], []), ["DROP TABLE ON a.b"])


if __name__ == "__main__":
    unittest.main()
