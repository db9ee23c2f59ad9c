"""The OpenTelemetry Collector configurations docs/install.md gives ("Producing spans"), and the
relay e2e/kafka-exporter-check runs from them: pure, unit-tested in test_otelcol_docs.py.

The check cannot reach MSK, so it keeps the documented `kafka` exporter as written (topic
settings, encoding, `partition_traces_by_id`, producer settings) and changes only where it
points: the stack's brokers, a topic of the check's own, no SASL or TLS. Its input is a topic
of OTLP records (the load generator's), read by the contrib kafka receiver in place of the
documented OTLP receiver, which needs an SDK to talk to.
"""

from __future__ import annotations

import copy

import yaml

from harness.docs.docscheck import blocks

PLAIN_MARKER = "# otelcol-config.yaml"


def documented(markdown: str, path: str = "docs/install.md") -> tuple[dict, dict]:
    """(the plain collector configuration, the `spec.config` of the OpenTelemetryCollector)."""
    plain = cr = None
    for b in blocks(path, markdown):
        if b.lang != "yaml":
            continue
        if b.text.lstrip().startswith(PLAIN_MARKER):
            plain = yaml.safe_load(b.text)
        for doc in yaml.safe_load_all(b.text):
            if isinstance(doc, dict) and doc.get("kind") == "OpenTelemetryCollector":
                cr = doc["spec"]["config"]
    if plain is None or cr is None:
        raise ValueError(f"{path}: the block starting {PLAIN_MARKER!r} or the OpenTelemetryCollector is missing")
    return plain, cr


def relay(config: dict, brokers: str, source_topic: str, topic: str, group: str) -> dict:
    """The documented exporter, pointed at `brokers`/`topic` without SASL or TLS, fed from
    `source_topic` by the kafka receiver."""
    exporter = copy.deepcopy(config["exporters"]["kafka"])
    exporter["brokers"] = [brokers]
    exporter.setdefault("traces", {})["topic"] = topic
    exporter.pop("auth", None)
    exporter.pop("tls", None)
    pipeline = config["service"]["pipelines"]["traces"]
    return {
        "receivers": {"kafka": {
            "brokers": [brokers], "group_id": group, "initial_offset": "earliest",
            "traces": {"topics": [source_topic], "encoding": "otlp_proto"},
        }},
        "processors": copy.deepcopy(config.get("processors", {})),
        "exporters": {"kafka": exporter},
        "service": {"pipelines": {"traces": {
            "receivers": ["kafka"], "processors": list(pipeline.get("processors", [])), "exporters": ["kafka"],
        }}},
    }
