"""Unit tests of crdref.py: `python -m unittest discover -s e2e/harness/docs -t e2e`."""

import unittest

from harness.docs.crdref import HEADER, anchor, constraints, render, sections, type_of

CRD = {
    "spec": {
        "group": "example.dev", "scope": "Namespaced",
        "names": {"kind": "Thing", "plural": "things", "shortNames": ["th"]},
        "versions": [{
            "name": "v1",
            "additionalPrinterColumns": [{"name": "Ready", "jsonPath": ".status.ready", "type": "string"}],
            "schema": {"openAPIV3Schema": {
                "description": "A thing.",
                "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "format": "int32", "minimum": 1.0, "maximum": 10.0,
                                 "description": "How big."},
                        "mode": {"type": "string", "enum": ["A", "B"], "default": "A"},
                        "inner": {"type": "object", "description": "Nested.",
                                  "x-kubernetes-validations": [{"rule": "self.a > 0", "message": "a must be positive"}],
                                  "properties": {"a": {"type": "integer"}}},
                        "affinity": {"type": "object", "properties": {"nodeAffinity": {"type": "object"}}},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "quantity": {"x-kubernetes-int-or-string": True},
                    }},
                    "status": {"type": "object", "properties": {"ready": {"type": "string"}}},
                },
            }},
        }],
    },
}


class RenderTest(unittest.TestCase):
    def test_the_file_says_it_is_generated_and_how_to_regenerate_it(self):
        out = render(CRD)
        self.assertTrue(out.startswith(HEADER))
        self.assertIn("run e2e/crd-reference and commit", HEADER)

    def test_every_object_gets_a_table_and_kubernetes_types_are_linked_not_expanded(self):
        self.assertEqual([p for p, _ in sections(CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
                                                 ["properties"]["spec"], "spec")], ["spec", "spec.inner"])
        out = render(CRD)
        self.assertIn("### `spec.inner`", out)
        self.assertNotIn("nodeAffinity", out)
        self.assertIn("[Affinity](https://kubernetes.io/docs/reference/kubernetes-api/", out)
        self.assertIn("([fields](#specinner))", out)

    def test_required_defaults_bounds_enums_and_rules_reach_the_row(self):
        out = render(CRD)
        self.assertIn("| `size` | integer (int32) |  | How big. **Required.** Range 1 to 10. |", out)
        self.assertIn('| `mode` | string | `"A"` | One of `A`, `B`. |', out)
        self.assertIn("- Rule: a must be positive", out)
        self.assertIn("| Ready | `.status.ready` | 0 |", out)

    def test_types_read_as_a_user_writes_them(self):
        self.assertEqual(type_of("labels", {"type": "object", "additionalProperties": {"type": "string"}}),
                         "map[string]string")
        self.assertEqual(type_of("q", {"x-kubernetes-int-or-string": True}), "integer or string")
        self.assertEqual(type_of("xs", {"type": "array", "items": {"type": "string"}}), "[]string")
        self.assertEqual(constraints({"minLength": 1, "maxLength": 5}), ["Length 1 to 5."])

    def test_anchors_match_github_headings(self):
        self.assertEqual(anchor("spec.collector.env[]"), "speccollectorenv")
        self.assertEqual(anchor("spec.clickhouse.schema"), "specclickhouseschema")


if __name__ == "__main__":
    unittest.main()
