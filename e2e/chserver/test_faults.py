"""Unit tests of chserver's fault switches (faults.py): no network, no engine."""

from __future__ import annotations

import json
import os
import tempfile
import time
import unittest

from errors import CHError
from faults import Faults, Rule


class FaultsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "faults.json")
        self.faults = Faults(self.path)

    def tearDown(self):
        self.dir.cleanup()

    def write(self, rules):
        with open(self.path, "w", encoding="utf-8") as f:
            json.dump({"rules": rules}, f)

    def test_off_without_a_file_or_a_path(self):
        self.assertIsNone(Faults(None).rule_for("INSERT INTO db.t FORMAT Native"))
        self.assertIsNone(self.faults.rule_for("INSERT INTO db.t FORMAT Native"))

    def test_rules_apply_only_to_statements_that_match(self):
        self.write([{"match": "chaos_a", "delay_ms": 5}])
        self.assertIsNone(self.faults.rule_for("INSERT INTO other.t FORMAT Native"))
        self.assertEqual(self.faults.rule_for("INSERT INTO chaos_a.t FORMAT Native").delay_ms, 5)

    def test_a_rewritten_file_takes_effect_and_an_empty_one_clears(self):
        self.write([{"match": "chaos_a", "delay_ms": 5}])
        self.assertIsNotNone(self.faults.rule_for("INSERT INTO chaos_a.t"))
        self.write([{"match": "chaos_a", "delay_ms": 5000}])
        self.assertEqual(self.faults.rule_for("INSERT INTO chaos_a.t").delay_ms, 5000)
        open(self.path, "w").close()
        self.assertIsNone(self.faults.rule_for("INSERT INTO chaos_a.t"))

    def test_a_broken_file_means_no_fault(self):
        with open(self.path, "w") as f:
            f.write("{not json")
        self.assertIsNone(self.faults.rule_for("INSERT INTO chaos_a.t"))
        self.write([{"delay_ms": 5}])  # no match: refused as a whole
        self.assertIsNone(self.faults.rule_for("INSERT INTO chaos_a.t"))

    def test_error_refuses_after_reading_the_body(self):
        rule = Rule.parse({"match": "x", "error": {"code": 243, "name": "NOT_ENOUGH_SPACE"}})
        read = []
        chunks = (read.append(c) or c for c in [b"a", b"b"])
        with self.assertRaises(CHError) as cm:
            rule.before(b"", chunks)
        self.assertEqual((cm.exception.code, cm.exception.name), (243, "NOT_ENOUGH_SPACE"))
        self.assertEqual(read, [b"a", b"b"])

    def test_marker_refuses_only_data_that_holds_it_even_across_chunks(self):
        rule = Rule.parse({"match": "x", "reject_marker": "bad-gen"})
        head, rest = rule.before(b"\x01", iter([b"good", b"rows"]))
        self.assertEqual(head + b"".join(rest), b"\x01goodrows")
        with self.assertRaises(CHError) as cm:
            rule.before(b"", iter([b"..ba", b"d-ge", b"n.."]))
        self.assertEqual(cm.exception.code, 117)

    def test_delay_comes_after(self):
        rule = Rule.parse({"match": "x", "delay_ms": 50})
        t = time.monotonic()
        rule.after()
        self.assertGreaterEqual(time.monotonic() - t, 0.045)


if __name__ == "__main__":
    unittest.main()
