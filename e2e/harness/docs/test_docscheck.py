"""Unit tests of docscheck.py: `python -m unittest discover -s e2e/harness/docs -t e2e`."""

import unittest

from harness.docs.docscheck import Block, Crd, anchor, blocks, broken_links, check_yaml, openapi_to_jsonschema, shell_text

CRD = Crd.load({"spec": {
    "group": "example.dev", "names": {"kind": "Pipe"},
    "versions": [{"name": "v1", "schema": {"openAPIV3Schema": {
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}}},
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "minimum": 1},
                "note": {"type": "string", "nullable": True},
                "qty": {"x-kubernetes-int-or-string": True},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            }},
        },
    }}}],
}})
VALUES_KEYS = {"image", "collector", "networkPolicy"}

MARKDOWN = """# Title

```yaml
a: 1
```

- a list item with an indented block:

  ```bash
  echo hi
  ```

````sh
```not a fence inside```
````
"""


def block(text, lang="yaml"):
    return Block("doc.md", 1, lang, text)


class BlocksTest(unittest.TestCase):
    def test_fences_their_language_line_and_indented_bodies(self):
        got = blocks("doc.md", MARKDOWN)
        self.assertEqual([(b.lang, b.line) for b in got], [("yaml", 3), ("bash", 9), ("sh", 13)])
        self.assertEqual(got[1].text, "echo hi\n")
        self.assertEqual(got[2].text, "```not a fence inside```\n")

    def test_placeholders_become_words_and_redirections_stay(self):
        self.assertEqual(shell_text("kubectl describe tp <name> -n <ns>"),
                         "kubectl describe tp PLACEHOLDER_name -n PLACEHOLDER_ns")
        self.assertEqual(shell_text("cat <<EOF >out\nx\nEOF"), "cat <<EOF >out\nx\nEOF")


class SchemaTest(unittest.TestCase):
    def test_nullable_int_or_string_and_strict_objects(self):
        s = openapi_to_jsonschema({"type": "object", "properties": {
            "a": {"type": "string", "nullable": True}, "q": {"x-kubernetes-int-or-string": True}}})
        self.assertEqual(s["properties"]["a"]["type"], ["string", "null"])
        self.assertIn({"type": "string"}, s["properties"]["q"]["anyOf"])
        self.assertIs(s["additionalProperties"], False)

    def test_a_valid_pipeline_passes(self):
        v = check_yaml(block("apiVersion: example.dev/v1\nkind: Pipe\nmetadata: {name: p, namespace: x}\n"
                             "spec: {size: 2, note: null, qty: 1Gi, labels: {a: b}}\n"), CRD, VALUES_KEYS)
        self.assertEqual(v.findings, [])
        self.assertEqual(len(v.pipelines), 1)

    def test_a_typo_a_bound_and_a_missing_field_are_each_named(self):
        v = check_yaml(block("apiVersion: example.dev/v1\nkind: Pipe\nmetadata: {name: toolong}\n"
                             "spec: {sise: 2}\n---\napiVersion: example.dev/v1\nkind: Pipe\n"
                             "spec: {size: 0}\n"), CRD, VALUES_KEYS)
        text = "\n".join(str(f) for f in v.findings)
        self.assertIn("'sise' was unexpected", text)
        self.assertIn("'size' is a required property", text)
        self.assertIn("metadata.name", text)
        self.assertIn("spec.size: 0 is less than the minimum of 1", text)
        self.assertEqual(v.pipelines, [])

    def test_an_unserved_version_is_an_error(self):
        v = check_yaml(block("apiVersion: example.dev/v9\nkind: Pipe\nspec: {size: 1}\n"), CRD, VALUES_KEYS)
        self.assertIn("not served", str(v.findings[0]))


class ClassifyTest(unittest.TestCase):
    def test_values_files_are_those_with_only_chart_keys(self):
        v = check_yaml(block("image: {repository: r}\ncollector: {}\n"), CRD, VALUES_KEYS)
        self.assertEqual(len(v.values_files), 1)
        other = check_yaml(block("receivers: {otlp: {}}\nexporters: {}\n"), CRD, VALUES_KEYS)
        self.assertEqual((other.values_files, other.findings), ([], []))
        secret = check_yaml(block("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"), CRD, VALUES_KEYS)
        self.assertEqual((secret.values_files, secret.findings, secret.pipelines), ([], [], []))

    def test_yaml_that_does_not_parse_is_a_finding(self):
        v = check_yaml(block("a: [1, 2\n"), CRD, VALUES_KEYS)
        self.assertIn("does not parse as YAML", str(v.findings[0]))


class LinksTest(unittest.TestCase):
    FILES = {
        "docs/a.md": "# Install on a cluster\n## 4. Producing spans: the `kafka` exporter\n```sh\n# not a heading\n```\n",
        "README.md": "x",
    }

    def read(self, p):
        if p not in self.FILES:
            raise OSError(p)
        return self.FILES[p]

    def test_anchors_are_githubs(self):
        self.assertEqual(anchor("4. Producing spans: the `kafka` exporter"), "4-producing-spans-the-kafka-exporter")

    def test_missing_files_and_headings_are_named_and_the_rest_pass(self):
        text = ("[ok](a.md#install-on-a-cluster) [ok2](../README.md) [web](https://x.y/z#q) [self](#nope) "
                "[gone](b.md) [bad](a.md#not-a-heading) `[in code](missing.md)`\n"
                "```\n[in a block](missing.md)\n```\n")
        got = broken_links("docs/a.md", text, read=self.read)
        self.assertEqual(len(got), 3, got)
        self.assertTrue(got[0].startswith("#nope"))
        self.assertIn("b.md: docs/b.md does not exist", got[1])
        self.assertIn("has no heading #not-a-heading", got[2])


if __name__ == "__main__":
    unittest.main()
