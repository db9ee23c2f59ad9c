"""Unit tests of otelcol_docs.py: `python -m unittest discover -s e2e/harness/docs -t e2e`."""

import unittest

from harness import REPO
from harness.docs.otelcol_docs import documented, relay

DOC = '''
```yaml
# otelcol-config.yaml: OTLP in, Kafka out
receivers: {otlp: {protocols: {grpc: {}}}}
processors: {batch: {timeout: 1s}}
exporters:
  kafka:
    brokers: [far:9096]
    traces: {topic: otlp_spans, encoding: otlp_proto}
    partition_traces_by_id: true
    producer: {compression: lz4}
    auth: {sasl: {mechanism: SCRAM-SHA-512}}
    tls: {insecure: false}
service: {pipelines: {traces: {receivers: [otlp], processors: [batch], exporters: [kafka]}}}
```

```yaml
apiVersion: opentelemetry.io/v1beta1
kind: OpenTelemetryCollector
spec:
  config: {exporters: {kafka: {brokers: [far:9096]}}}
```
'''


class OtelcolDocsTest(unittest.TestCase):
    def test_both_documented_configurations_are_found(self):
        plain, cr = documented(DOC)
        self.assertTrue(plain["exporters"]["kafka"]["partition_traces_by_id"])
        self.assertEqual(cr["exporters"]["kafka"]["brokers"], ["far:9096"])

    def test_a_document_without_them_is_an_error(self):
        with self.assertRaises(ValueError):
            documented("```yaml\na: 1\n```\n")

    def test_the_relay_keeps_the_exporter_and_changes_only_where_it_points(self):
        plain, _ = documented(DOC)
        r = relay(plain, "127.0.0.1:19092", "src", "dst", "g")
        k = r["exporters"]["kafka"]
        self.assertEqual(k["brokers"], ["127.0.0.1:19092"])
        self.assertEqual(k["traces"], {"topic": "dst", "encoding": "otlp_proto"})
        self.assertTrue(k["partition_traces_by_id"])
        self.assertEqual(k["producer"], {"compression": "lz4"})
        self.assertNotIn("auth", k)
        self.assertNotIn("tls", k)
        self.assertEqual(r["receivers"]["kafka"]["traces"]["topics"], ["src"])
        self.assertEqual(r["service"]["pipelines"]["traces"]["processors"], ["batch"])
        self.assertIn("SCRAM-SHA-512", str(plain), "the documented one is left as it is")

    def test_the_install_guides_operator_resource_exports_as_its_plain_configuration(self):
        path = REPO / "docs" / "install.md"
        plain, cr = documented(path.read_text())
        self.assertEqual(plain["exporters"], cr["exporters"])
        self.assertEqual(plain["service"], cr["service"])


if __name__ == "__main__":
    unittest.main()
