"""promtool unit tests of every alert in alerts.py: for each, a pipeline (or pod) in trouble
that must fire once the `for` period has passed — and not before — next to a healthy one
that must stay quiet. The expected annotations are rendered from the alert's own templates
(only `{{ $labels.X }}` is used in them), so a test fails if a label the text names is missing.
"""

import re

import alerts

NS = "shop"
# Series labels as the scrape configuration gives them.
SICK = {"namespace": NS, "pipeline": "orders", "pod": "orders-gateway-1"}
WELL = {"namespace": NS, "pipeline": "payments", "pod": "payments-gateway-1"}
OPERATOR_POD = {"pod": "tracehouse-operator-0"}


def series(name: str, labels: dict, values: str) -> dict:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def both(name: str, sick: str, well: str, extra: dict | None = None, pod: bool = True) -> list[dict]:
    """The same metric for the sick and the well pipeline."""
    out = []
    for base, values in ((SICK, sick), (WELL, well)):
        labels = dict(base) if pod else {**{k: base[k] for k in ("namespace", "pipeline")}, **OPERATOR_POD}
        out.append(series(name, {**labels, **(extra or {})}, values))
    return out


def pipe(extra: dict | None = None) -> dict:
    return {"namespace": NS, "pipeline": "orders", **(extra or {})}


def pod(extra: dict | None = None) -> dict:
    return {"namespace": NS, "pipeline": "orders", "pod": SICK["pod"], **(extra or {})}


PARTITION = {"topic": "otlp_spans", "partition": "0"}

# alert → (input series, [(eval time, labels of the alerts expected then)])
CASES: dict[str, tuple[list[dict], list[tuple[str, list[dict]]]]] = {
    "TracehouseTimeLagHigh": (
        both("tracehouse_consumer_lag_seconds", "300x30", "5x30", PARTITION),
        [("5m", []), ("15m", [pipe()])],
    ),
    "TracehouseLagGrowingWhileInsertsFail": (
        # Lag grows on both; only `orders` has failing inserts.
        both("tracehouse_consumer_lag_records", "0+1000x30", "0+1000x30", PARTITION)
        + both("tracehouse_insert_errors_total", "0+60x30", "0x30", {"reason": "unreachable"}),
        [("2m", []), ("20m", [pipe()])],
    ),
    "TracehouseInsertErrors": (
        both("tracehouse_insert_errors_total", "0+60x30", "0x30", {"reason": "server_busy"})
        + both("tracehouse_inserts_total", "0+60x30", "0+60x30"),
        [("5m", []), ("20m", [pipe()])],
    ),
    "TracehouseRecordsDeadLettered": (
        both("tracehouse_records_dead_lettered_total", "0 0 0 5 5 5 5 5", "0x7"),
        [("2m", []), ("5m", [pipe()])],
    ),
    "TracehousePoisonRecords": (
        both("tracehouse_records_skipped_total", "0 0 0 3 3 3 3 3", "0x7", {"reason": "decode_error"}),
        [("2m", []), ("5m", [pipe({"reason": "decode_error"})])],
    ),
    "TracehouseMemoryNearLimit": (
        both("tracehouse_process_resident_memory_bytes", "960000000x20", "300000000x20")
        + both("tracehouse_operator_pipeline_memory_limit_bytes", "1000000000x20", "1000000000x20", pod=False),
        [("2m", []), ("10m", [pod()])],
    ),
    "TracehousePartitionsPausedLong": (
        # `payments` pauses now and then (normal back-pressure), `orders` never resumes.
        both("tracehouse_paused_partitions", "0x9 2x40", " ".join(["2", "0"] * 25)),
        # Paused from minute 10: 15 minutes of pauses by minute 25, then `for` 5m.
        [("20m", []), ("27m", []), ("31m", [pod()])],
    ),
    "TracehouseReplayNearDedupWindow": (
        # `orders` writes a replicated table (3 600 s window) and has a batch in flight for 40
        # minutes, then committed; `payments` a plain MergeTree (0: no time bound), never alerts.
        both("tracehouse_dedup_window_seconds", "3600x60", "0x60")
        + both("tracehouse_oldest_in_flight_seconds", "0+60x40 0x20", "0+60x60", PARTITION),
        # Over half the window from minute 31, then `for` 5m; quiet again once committed.
        [("30m", []), ("37m", [pipe()]), ("50m", [])],
    ),
    "TracehousePipelineNotReady": (
        both("tracehouse_operator_pipeline_condition", "0x20", "1x20", {"condition": "Ready"}, pod=False)
        + both("tracehouse_operator_pipeline_condition", "1x20", "1x20", {"condition": "SchemaReady"}, pod=False),
        [("5m", []), ("15m", [pipe()])],
    ),
    "TracehouseCommittedOffsetsExpiring": (
        # `orders` stopped long enough to reach stage 1 at minute 5, stage 2 at minute 15;
        # `payments` consumes. Fires once the 5-minute `for` has passed.
        both("tracehouse_operator_pipeline_offsets_retention_stage", "0x4 1x10 2x10", "0x25", pod=False),
        [("4m", []), ("8m", []), ("11m", [pipe()]), ("20m", [pipe()])],
    ),
    "TracehouseOperatorDown": (
        # Scraped for 4 minutes, then gone: absent once the 5-minute lookback has passed
        # (9m), firing 5 minutes later.
        [series("tracehouse_operator_reconciliations_total", OPERATOR_POD, "1 2 3 4 5")],
        [("5m", []), ("12m", []), ("16m", [{}])],
    ),
    "TracehouseNoCollectors": (
        # Both pipelines want replicas; only `payments` has a collector scraped.
        both("tracehouse_operator_pipeline_desired_replicas", "2x20", "1x20", pod=False)
        + [series("tracehouse_process_start_time_seconds", WELL, "1000x20")],
        [("5m", []), ("15m", [pipe()])],
    ),
    "TracehouseCollectorRestarts": (
        both("tracehouse_process_start_time_seconds", "1000 1000 1000 1300 1300 1300", "1000x5"),
        [("2m", []), ("4m", [pod()])],
    ),
}


def render(template: str, labels: dict) -> str:
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)


def tests(rules_file: str) -> dict:
    by_name = {a.name: a for a in alerts.ALERTS}
    missing = set(by_name) - set(CASES)
    if missing:
        raise SystemExit(f"alerts without promtool tests: {sorted(missing)}")
    out = []
    for name, (inputs, evals) in CASES.items():
        a = by_name[name]
        out.append({
            "name": name,
            "interval": "1m",
            "input_series": inputs,
            "alert_rule_test": [
                {
                    "eval_time": t,
                    "alertname": name,
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": a.severity, **labels},
                            "exp_annotations": {
                                "summary": render(a.summary, labels),
                                "description": render(a.description, labels),
                                "runbook": render(a.runbook, labels),
                                "runbook_url": f"{alerts.RUNBOOK_BASE}#{a.name.lower()}",
                            },
                        }
                        for labels in expected
                    ],
                }
                for t, expected in evals
            ],
        })
    return {"rule_files": [rules_file], "evaluation_interval": "1m", "tests": out}
