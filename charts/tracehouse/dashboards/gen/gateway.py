"""The Gateway dashboard: the collectors of every pipeline, per pipeline and per pod.

Collector series come from the pods' /metrics (collector/src/metrics.rs); the pipeline's
partitions, replicas and limits from the operator's per-pipeline series
(operator/src/metrics.rs), which carry the pipeline's `namespace` and `pipeline` labels.

Not yet here: the autoscaler's decisions (scale up/down and why). The operator exports no
such metric yet; their panel belongs in the "Lag and scaling" row once it does.
"""

from grafana_foundation_sdk.builders import dashboard

from common import PIPE_SEL, RATE, SEL, base, prom, prometheus_variables, stat_panel, thresholds, ts

BY_PIPE = "namespace, pipeline"
BY_POD = "namespace, pipeline, pod"

# Spans written (decoded and kept) and spans a processing rule dropped or sampled out, per
# pipeline: dropped and sampled-out spans are not in spans_decoded.
WRITTEN = f"sum by ({BY_PIPE}) (rate(tracehouse_spans_decoded_total{{{SEL}}}[{RATE}]))"
REMOVED = (f"sum by ({BY_PIPE}) (rate(tracehouse_spans_processed_total"
           f"{{{SEL}, outcome=~\"dropped|sampled_out\"}}[{RATE}]))")


def p50_p99(histogram):
    """The p50 and p99 per pipeline of a collector histogram (its `_bucket` series)."""
    return [
        prom(f"histogram_quantile({q}, sum by ({BY_PIPE}, le) "
             f"(rate({histogram}_bucket{{{SEL}}}[{RATE}])))", f"{{{{pipeline}}}} p{label}", ref)
        for q, label, ref in (("0.5", "50", "A"), ("0.99", "99", "B"))
    ]


def build() -> dashboard.Dashboard:
    d = base(
        "tracehouse / Gateway",
        "tracehouse-gateway",
        "Gateway collectors: Kafka → ClickHouse throughput, lag, back-pressure, inserts, memory and CPU.",
        ["gateway"],
    )
    for v in prometheus_variables("tracehouse_inserts_total"):
        d = d.with_variable(v)

    d = d.with_row(dashboard.Row("Overview"))
    d = d.with_panel(stat_panel(
        "Spans inserted /s", "cps",
        [prom(f"sum(rate(tracehouse_rows_inserted_total{{{SEL}}}[{RATE}]))", "inserted")],
        description="Rows ClickHouse acknowledged per second, all selected pods.",
    ))
    d = d.with_panel(stat_panel(
        "Max time lag", "s",
        [prom(f"max(tracehouse_consumer_lag_seconds{{{SEL}}})", "lag")],
        description="Age of the oldest record not yet acknowledged by ClickHouse, worst partition.",
        steps=thresholds((None, "green"), (30, "yellow"), (120, "red")),
    ))
    d = d.with_panel(stat_panel(
        "Paused partitions", "short",
        [prom(f"sum(tracehouse_paused_partitions{{{SEL}}})", "paused")],
        description="Partitions paused because the in-flight budget is used up (back-pressure).",
        steps=thresholds((None, "green"), (1, "yellow")),
    ))
    d = d.with_panel(stat_panel(
        "Insert errors /s", "cps",
        [prom(f"sum(rate(tracehouse_insert_errors_total{{{SEL}}}[{RATE}]))", "errors")],
        description="Failed insert attempts per second, every reason.",
        steps=thresholds((None, "green"), (0.01, "red")),
    ))
    d = d.with_panel(ts(
        "Spans consumed and inserted /s", "cps",
        [
            prom(f"sum by ({BY_PIPE}) (rate(tracehouse_spans_decoded_total{{{SEL}}}[{RATE}]))",
                 "{{namespace}}/{{pipeline}} decoded", "A"),
            prom(f"sum by ({BY_PIPE}) (rate(tracehouse_rows_inserted_total{{{SEL}}}[{RATE}]))",
                 "{{namespace}}/{{pipeline}} inserted", "B"),
        ],
        description="Spans decoded from Kafka records and rows acknowledged by ClickHouse, per pipeline.",
    ))
    d = d.with_panel(ts(
        "Spans inserted /s per pod", "cps",
        [prom(f"sum by ({BY_POD}) (rate(tracehouse_rows_inserted_total{{{SEL}}}[{RATE}]))", "{{pod}}")],
        description="Rows acknowledged by ClickHouse per second, per collector pod.",
    ))
    d = d.with_panel(ts(
        "Records consumed /s per topic", "cps",
        [prom(f"sum by ({BY_PIPE}, topic) (rate(tracehouse_records_consumed_total{{{SEL}}}[{RATE}]))",
              "{{pipeline}} {{topic}}")],
        description="Kafka records consumed per second.",
    ))
    d = d.with_panel(ts(
        "Bytes from Kafka and to ClickHouse /s", "Bps",
        [
            prom(f"sum by ({BY_PIPE}) (rate(tracehouse_bytes_consumed_total{{{SEL}}}[{RATE}]))",
                 "{{pipeline}} from Kafka", "A"),
            prom(f"sum by ({BY_PIPE}) (rate(tracehouse_bytes_inserted_total{{{SEL}}}[{RATE}]))",
                 "{{pipeline}} to ClickHouse (compressed)", "B"),
        ],
        description="Record payload bytes consumed and compressed insert bytes ClickHouse acknowledged.",
    ))

    d = d.with_row(dashboard.Row("Processing"))
    d = d.with_panel(ts(
        "Spans dropped, sampled out and redacted /s by rule", "cps",
        [prom(f"sum by (rule, outcome) (rate(tracehouse_spans_processed_total{{{SEL}}}[{RATE}]))",
              "{{rule}} {{outcome}}")],
        description="What each processing rule (spec.processing.rules) did per second: dropped and "
                    "sampled_out spans are not written; redacted spans are written with an attribute "
                    "removed, masked or hashed. Rules of the same name in several selected pipelines "
                    "add up. No data: no selected pipeline has rules.",
        stack=True,
    ))
    d = d.with_panel(ts(
        "Share of incoming spans written", "percentunit",
        [prom(f"{WRITTEN} / ({WRITTEN} + ({REMOVED} or {WRITTEN} * 0))", "{{namespace}}/{{pipeline}}")],
        description="Spans written ÷ spans that came in (written + dropped + sampled out), per "
                    "pipeline: the rest were dropped or sampled out by the pipeline's processing "
                    "rules. 1 = every span is written (always so without rules); redacted spans "
                    "are written.",
    ))

    d = d.with_row(dashboard.Row("Lag and scaling"))
    d = d.with_panel(ts(
        "Lag (records) per partition", "short",
        [prom(f"max by ({BY_PIPE}, topic, partition) (tracehouse_consumer_lag_records{{{SEL}}})",
              "{{pipeline}} {{topic}}/{{partition}}")],
        description="High watermark − committed offset, per partition (the autoscaler's input).",
        steps=thresholds((None, "green"), (100000, "yellow"), (1000000, "red")),
    ))
    d = d.with_panel(ts(
        "Lag (seconds) per partition", "s",
        [prom(f"max by ({BY_PIPE}, topic, partition) (tracehouse_consumer_lag_seconds{{{SEL}}})",
              "{{pipeline}} {{topic}}/{{partition}}")],
        description="Age of the oldest record not yet acknowledged by ClickHouse, per partition.",
        steps=thresholds((None, "green"), (30, "yellow"), (120, "red")),
    ))
    d = d.with_panel(ts(
        "Replicas vs partitions", "short",
        [
            prom(f"max by ({BY_PIPE}) (tracehouse_operator_pipeline_partitions{{{PIPE_SEL}}})",
                 "{{pipeline}} topic partitions", "A"),
            prom(f"max by ({BY_PIPE}) (tracehouse_operator_pipeline_desired_replicas{{{PIPE_SEL}}})",
                 "{{pipeline}} desired replicas", "B"),
            prom(f"count by ({BY_PIPE}) (tracehouse_assigned_partitions{{{SEL}}})",
                 "{{pipeline}} running collectors", "C"),
            prom(f"sum by ({BY_PIPE}) (tracehouse_assigned_partitions{{{SEL}}})",
                 "{{pipeline}} partitions assigned", "D"),
        ],
        description="The topic's partitions and the replicas the operator wants (operator), against the "
                    "collectors that run and the partitions they hold (collectors).",
    ))
    d = d.with_panel(ts(
        "Paused partitions per pod", "short",
        [prom(f"sum by ({BY_POD}) (tracehouse_paused_partitions{{{SEL}}})", "{{pod}}")],
        description="Partitions paused for back-pressure: the pod's in-flight budget is full, "
                    "usually because ClickHouse inserts are slow or failing.",
        steps=thresholds((None, "green"), (1, "yellow")),
    ))
    d = d.with_panel(ts(
        "Intake held per pod", "percentunit",
        [prom(f"sum by ({BY_POD}) (rate(tracehouse_intake_held_seconds_total{{{SEL}}}[{RATE}]))",
              "{{pod}}")],
        description="Share of the time the pod took no records because its in-flight budget was "
                    "spent: a hold of up to 1 s while inserts are acknowledged, before any "
                    "partition is paused. Brief holds are normal on a backlog; held most of the "
                    "time together with paused partitions, ClickHouse is the bottleneck.",
    ))

    d = d.with_row(dashboard.Row("Inserts"))
    d = d.with_panel(ts(
        "Insert latency p50 / p99", "s",
        p50_p99("tracehouse_insert_duration_seconds"),
        description="Latency of successful inserts into ClickHouse.",
        steps=thresholds((None, "green"), (5, "yellow"), (30, "red")),
    ))
    d = d.with_panel(ts(
        "Span freshness p50 / p99 (span end → insert acknowledged)", "s",
        p50_p99("tracehouse_span_freshness_seconds"),
        description="How old spans are when ClickHouse acknowledges their insert, from each span's end "
                    "time: Kafka and producer delay, consumer lag, the batch linger (batch.linger_ms) "
                    "and the insert itself. Clock skew between the applications and the gateway shows "
                    "here too.",
        steps=thresholds((None, "green"), (10, "yellow"), (60, "red")),
    ))
    d = d.with_panel(ts(
        "Batch size (rows) p50 / p99", "short",
        p50_p99("tracehouse_batch_rows"),
        description="Rows per insert. Small batches mean many parts for ClickHouse to merge.",
    ))
    d = d.with_panel(ts(
        "Batch size (bytes) average", "bytes",
        [prom(f"sum by ({BY_PIPE}) (rate(tracehouse_batch_bytes_sum{{{SEL}}}[{RATE}])) / "
              f"sum by ({BY_PIPE}) (rate(tracehouse_batch_bytes_count{{{SEL}}}[{RATE}]))", "{{pipeline}}")],
        description="Compressed bytes per insert.",
    ))
    d = d.with_panel(ts(
        "Inserts /s and in flight", "short",
        [
            prom(f"sum by ({BY_PIPE}) (rate(tracehouse_inserts_total{{{SEL}}}[{RATE}]))", "{{pipeline}} inserts/s", "A"),
            prom(f"sum by ({BY_PIPE}) (tracehouse_inflight_inserts{{{SEL}}})", "{{pipeline}} in flight", "B"),
        ],
        description="Inserts acknowledged per second, and inserts in flight now.",
    ))
    d = d.with_panel(ts(
        "Insert retries and errors by reason /s", "cps",
        [
            prom(f"sum by ({BY_PIPE}, reason) (rate(tracehouse_insert_retries_total{{{SEL}}}[{RATE}]))",
                 "{{pipeline}} retry {{reason}}", "A"),
            prom(f"sum by ({BY_PIPE}, reason) (rate(tracehouse_insert_errors_total{{{SEL}}}[{RATE}]))",
                 "{{pipeline}} error {{reason}}", "B"),
            prom(f"sum by ({BY_PIPE}) (rate(tracehouse_commit_errors_total{{{SEL}}}[{RATE}]))",
                 "{{pipeline}} offset commit errors", "C"),
        ],
        description="unreachable: network; server_busy: retried (timeouts, memory, too many parts); "
                    "rejected_data: split and retried; config_or_access: table, database, user or grants.",
        steps=thresholds((None, "green"), (0.01, "red")),
    ))
    d = d.with_panel(ts(
        "Poison and dead-lettered records /s", "cps",
        [
            prom(f"sum by ({BY_PIPE}, reason) (rate(tracehouse_records_skipped_total{{{SEL}}}[{RATE}]))",
                 "{{pipeline}} skipped {{reason}}", "A"),
            prom(f"sum by ({BY_PIPE}) (rate(tracehouse_records_dead_lettered_total{{{SEL}}}[{RATE}]))",
                 "{{pipeline}} dead-lettered", "B"),
        ],
        description="Records that could not be decoded or inserted and were committed past; with a "
                    "dead-letter topic they are copied there first.",
        steps=thresholds((None, "green"), (0.01, "yellow")),
    ))

    d = d.with_row(dashboard.Row("Memory and CPU"))
    d = d.with_panel(ts(
        "RSS vs memory limit", "bytes",
        [
            prom(f"max by ({BY_POD}) (tracehouse_process_resident_memory_bytes{{{SEL}}})", "{{pod}} RSS", "A"),
            prom(f"max by ({BY_PIPE}) (tracehouse_operator_pipeline_memory_limit_bytes{{{PIPE_SEL}}})",
                 "{{pipeline}} limit", "B"),
        ],
        description="Resident memory of each collector against the container memory limit of its pipeline.",
    ))
    d = d.with_panel(ts(
        "In-flight bytes vs budget", "bytes",
        [
            prom(f"max by ({BY_POD}) (tracehouse_inflight_bytes{{{SEL}}})", "{{pod}} in flight", "A"),
            prom(f"max by ({BY_PIPE}) (tracehouse_operator_pipeline_inflight_budget_bytes{{{PIPE_SEL}}})",
                 "{{pipeline}} budget", "B"),
        ],
        description="Record bytes held between Kafka and ClickHouse; at the budget, partitions pause.",
    ))
    d = d.with_panel(ts(
        "CPU per pod", "percentunit",
        [prom(f"sum by ({BY_POD}) (rate(tracehouse_process_cpu_seconds_total{{{SEL}}}[{RATE}]))", "{{pod}}")],
        description="CPU-seconds per second used by each collector process (1 = one core).",
    ))
    return d
