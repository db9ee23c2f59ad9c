"""The Prometheus alert rules, one definition each: its expression is built from one or more
*signals* (the PromQL that measures something) and a condition on them. The rules file gets
the full expressions; the stack test evaluates every signal and requires at least one series
after a load, which proves each metric name and label the alert reads. Whether each alert
fires when it should and stays quiet when healthy is proven by promtool's unit tests in
charts/tracehouse/rules/tracehouse-alerts.test.yaml.
"""

from dataclasses import dataclass, field

@dataclass
class Alert:
    name: str
    expr: str
    signals: list[str]
    duration: str
    severity: str
    summary: str
    description: str
    runbook: str
    labels: dict[str, str] = field(default_factory=dict)


BY = "namespace, pipeline"

TIME_LAG = f"max by ({BY}) (tracehouse_consumer_lag_seconds)"
LAG_GROWTH = f"sum by ({BY}) (deriv(tracehouse_consumer_lag_records[10m]))"
INSERT_ERRORS = f"sum by ({BY}) (rate(tracehouse_insert_errors_total[5m]))"
INSERTS = f"sum by ({BY}) (rate(tracehouse_inserts_total[5m]))"
DEAD_LETTERED = f"sum by ({BY}) (increase(tracehouse_records_dead_lettered_total[10m]))"
SKIPPED = f"sum by ({BY}, reason) (increase(tracehouse_records_skipped_total[10m]))"
MEMORY_RATIO = (
    f"max by ({BY}, pod) (tracehouse_process_resident_memory_bytes)"
    f" / on ({BY}) group_left max by ({BY}) (tracehouse_operator_pipeline_memory_limit_bytes)"
)
PAUSED = f"max by ({BY}, pod) (min_over_time(tracehouse_paused_partitions[15m]))"
READY = f'max by ({BY}) (tracehouse_operator_pipeline_condition{{condition="Ready"}})'
RESTARTS = f"sum by ({BY}, pod) (changes(tracehouse_process_start_time_seconds[30m]))"
OPERATOR_UP = "tracehouse_operator_reconciliations_total"
WANTED = f"max by ({BY}) (tracehouse_operator_pipeline_desired_replicas)"
COLLECTORS = f"max by ({BY}) (tracehouse_process_start_time_seconds)"
IN_FLIGHT_AGE = f"max by ({BY}) (tracehouse_oldest_in_flight_seconds)"
WINDOW_SECONDS = f"max by ({BY}) (tracehouse_dedup_window_seconds)"
RETENTION_STAGE = f"max by ({BY}) (tracehouse_operator_pipeline_offsets_retention_stage)"

# Where each alert's `runbook_url` points (an anchor per alert: its lower-case name); the
# chart's prometheusRule.runbookBaseUrl replaces it.
RUNBOOK_BASE = "https://github.com/tracehouse/tracehouse/blob/main/charts/tracehouse/dashboards/README.md"

ALERTS = [
    Alert(
        "TracehouseTimeLagHigh",
        f"{TIME_LAG} > 120",
        [TIME_LAG],
        "10m",
        "warning",
        "Pipeline {{ $labels.namespace }}/{{ $labels.pipeline }} is more than 2 minutes behind",
        "The oldest record not yet in ClickHouse has waited more than 2 minutes for 10 minutes.",
        "Check the Gateway dashboard: if inserts fail, see TracehouseInsertErrors; if replicas are at "
        "spec.replicas.max or equal the partitions, raise them or add partitions; if partitions are "
        "paused, ClickHouse is slower than the load.",
    ),
    Alert(
        "TracehouseLagGrowingWhileInsertsFail",
        f"({LAG_GROWTH} > 0) and on ({BY}) ({INSERT_ERRORS} > 0)",
        [LAG_GROWTH, INSERT_ERRORS],
        "5m",
        "critical",
        "Pipeline {{ $labels.namespace }}/{{ $labels.pipeline }}: lag grows while inserts fail",
        "The records lag has grown for 5 minutes and ClickHouse inserts are failing: nothing is lost "
        "(offsets are committed only after ClickHouse acknowledges), but data is late and Kafka "
        "retention is the limit.",
        "Read the `reason` of tracehouse_insert_errors_total: unreachable → network/ClickHouse down; "
        "config_or_access → table, database, user or grants (kubectl describe tp shows SchemaReady); "
        "server_busy → ClickHouse overloaded (too many parts, memory).",
    ),
    Alert(
        "TracehouseInsertErrors",
        f"{INSERT_ERRORS} / ({INSERT_ERRORS} + {INSERTS}) > 0.05",
        [f"{INSERT_ERRORS} / ({INSERT_ERRORS} + {INSERTS})"],
        "10m",
        "warning",
        "Pipeline {{ $labels.namespace }}/{{ $labels.pipeline }}: more than 5% of inserts fail",
        "More than 5% of insert attempts into ClickHouse have failed for 10 minutes; they are retried.",
        "Read the `reason` label on the Gateway dashboard (Insert retries and errors) and the collector "
        "logs (`reason`, `code`): fix ClickHouse availability, credentials or the table.",
    ),
    Alert(
        "TracehouseRecordsDeadLettered",
        f"{DEAD_LETTERED} > 0",
        [DEAD_LETTERED],
        "0m",
        "warning",
        "Pipeline {{ $labels.namespace }}/{{ $labels.pipeline }} dead-lettered records",
        "Records that could not be decoded or inserted were copied to the dead-letter topic and "
        "committed past.",
        "Consume the dead-letter topic (kcat -C -t <deadLetterTopic>; headers carry the reason) and "
        "fix the producer (encoding, size) or the table; replay the records if they matter.",
    ),
    Alert(
        "TracehousePoisonRecords",
        f"{SKIPPED} > 0",
        [SKIPPED],
        "0m",
        "info",
        "Pipeline {{ $labels.namespace }}/{{ $labels.pipeline }} skipped records ({{ $labels.reason }})",
        "Records were skipped (not decodable, oversized or rejected by ClickHouse) and committed past.",
        "The `reason` says why; the collector logs the offsets (rate-limited). Set "
        "spec.kafka.deadLetterTopic to keep a copy of such records.",
    ),
    Alert(
        "TracehouseMemoryNearLimit",
        f"{MEMORY_RATIO} > 0.9",
        [MEMORY_RATIO],
        "5m",
        "warning",
        "Collector {{ $labels.namespace }}/{{ $labels.pod }} uses more than 90% of its memory limit",
        "The collector's resident memory has been above 90% of the container memory limit for 5 minutes; "
        "the kernel kills it at the limit.",
        "Lower spec.collector.maxInflightBytes (the budget the collector pauses at) or raise "
        "spec.collector.resources.limits.memory; a budget well under the limit leaves room for "
        "librdkafka's buffers and the encoders.",
    ),
    Alert(
        "TracehousePartitionsPausedLong",
        f"{PAUSED} > 0",
        [PAUSED],
        "5m",
        "warning",
        "Collector {{ $labels.namespace }}/{{ $labels.pod }} has kept partitions paused for 20 minutes",
        "Back-pressure: the in-flight budget has stayed full, so the collector stopped fetching from some "
        "partitions. ClickHouse is accepting inserts slower than Kafka delivers records.",
        "Look at insert latency and errors on the Gateway dashboard; scale ClickHouse, or give the "
        "collectors more replicas or a larger budget.",
    ),
    Alert(
        "TracehouseReplayNearDedupWindow",
        f"{IN_FLIGHT_AGE} / on ({BY}) ({WINDOW_SECONDS} > 0) > 0.5",
        [IN_FLIGHT_AGE, WINDOW_SECONDS],
        "5m",
        "warning",
        "Pipeline {{ $labels.namespace }}/{{ $labels.pipeline }} has a batch in flight for over half "
        "the table's deduplication time window",
        "A batch sent but not yet committed has been in flight for more than half of "
        "replicated_deduplication_window_seconds (replicated and Cloud tables keep a token only that "
        "long). If its collector dies and the batch is replayed after the window, its rows are stored "
        "twice.",
        "Find why the insert does not complete (TracehouseInsertErrors, the Gateway dashboard's insert "
        "latency); if batches legitimately take that long, raise the table's "
        "replicated_deduplication_window_seconds (ALTER TABLE … MODIFY SETTING).",
    ),
    Alert(
        "TracehousePipelineNotReady",
        f"{READY} == 0",
        [READY],
        "10m",
        "critical",
        "TracePipeline {{ $labels.namespace }}/{{ $labels.pipeline }} is not Ready",
        "The operator has reported the pipeline not Ready for 10 minutes.",
        "kubectl describe tracepipeline -n {{ $labels.namespace }} {{ $labels.pipeline }}: the "
        "condition that is False (SchemaReady, KafkaReachable, GatewayAvailable) has the reason and "
        "message; the Operator dashboard shows reconcile errors by reason.",
    ),
    Alert(
        "TracehouseCommittedOffsetsExpiring",
        f"{RETENTION_STAGE} >= 1",
        [RETENTION_STAGE],
        "5m",
        "warning",
        "TracePipeline {{ $labels.namespace }}/{{ $labels.pipeline }} has been stopped for most of "
        "the broker's offsets.retention.minutes",
        "Nothing has consumed the pipeline's topics (paused, or no ready gateway pod) for 80 % or "
        "more of the broker's offsets.retention.minutes (stage 2: past it). Once the consumer group's "
        "committed offsets expire, the collectors restart from auto.offset.reset and the batch cuts "
        "recorded with them are gone.",
        "kubectl describe tracepipeline -n {{ $labels.namespace }} {{ $labels.pipeline }}: the "
        "Consuming condition says why nothing consumes and since when; resume it (spec.paused: "
        "false, or fix what keeps the gateway unready) before the offsets expire, or raise the "
        "broker's offsets.retention.minutes.",
    ),
    Alert(
        "TracehouseCollectorRestarts",
        f"{RESTARTS} > 0",
        [RESTARTS],
        "0m",
        "warning",
        "Collector {{ $labels.namespace }}/{{ $labels.pod }} restarted in the last 30 minutes",
        "The collector process started again in the same pod (a crash, an OOM kill or a failed "
        "liveness probe). Batches in flight are replayed, deduplicated, so nothing is lost.",
        "kubectl describe pod (Last State: reason and exit code; OOMKilled → see "
        "TracehouseMemoryNearLimit) and the collector logs before the restart.",
    ),
]


ALERTS += [
    Alert(
        "TracehouseOperatorDown",
        f"absent({OPERATOR_UP})",
        [OPERATOR_UP],
        "5m",
        "critical",
        "No tracehouse operator is running",
        "No operator replica has been scraped for 5 minutes: no pipeline is reconciled (no "
        "migrations, scaling or failure reports); running collectors keep delivering.",
        "kubectl -n <release namespace> get deploy,pods -l app.kubernetes.io/name=tracehouse-operator; "
        "kubectl describe the pods (image pull, crash, scheduling) and check that Prometheus scrapes "
        "them (metrics.podMonitor or metrics.serviceMonitor).",
    ),
    Alert(
        "TracehouseNoCollectors",
        f"({WANTED} > 0) unless on ({BY}) {COLLECTORS}",
        [WANTED, COLLECTORS],
        "10m",
        "critical",
        "Pipeline {{ $labels.namespace }}/{{ $labels.pipeline }} has no running collector",
        "The operator wants gateway replicas for the pipeline, but no collector of it has been "
        "scraped for 10 minutes: nothing is consumed, the lag grows.",
        "kubectl describe tracepipeline -n {{ $labels.namespace }} {{ $labels.pipeline }}: "
        "GatewayAvailable names a failing pod (ImagePullBackOff, CrashLoopBackOff, OOMKilled, "
        "Unschedulable); if the pods run, check that Prometheus scrapes them (metrics.podMonitor.gatewayPods).",
    ),
]


def rules() -> dict:
    return {
        "groups": [
            {
                "name": "tracehouse",
                "rules": [
                    {
                        "alert": a.name,
                        "expr": a.expr,
                        **({"for": a.duration} if a.duration != "0m" else {}),
                        "labels": {"severity": a.severity, **a.labels},
                        "annotations": {
                            "summary": a.summary,
                            "description": a.description,
                            "runbook": a.runbook,
                            "runbook_url": f"{RUNBOOK_BASE}#{a.name.lower()}",
                        },
                    }
                    for a in ALERTS
                ],
            }
        ]
    }


def signals() -> list[dict]:
    return [{"alert": a.name, "signals": a.signals} for a in ALERTS]
