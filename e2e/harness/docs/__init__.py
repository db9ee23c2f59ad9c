"""What writes or checks docs/: the result documents from the runs' reports (results.py,
e2e/docs), docs/crd-reference.md from the CRD (crdref.py, e2e/crd-reference), every fenced block
and link of the documentation (docscheck.py, e2e/docs-check), and the install guide's OpenTelemetry
Collector configuration (otelcol_docs.py, e2e/kafka-exporter-check)."""
