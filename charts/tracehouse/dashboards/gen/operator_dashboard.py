"""The Operator dashboard: the controller's work and errors, and every pipeline's conditions
and schema version (operator/src/metrics.rs)."""

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from common import (PIPE_SEL, PROMETHEUS, RATE, base, prom, prometheus_variables, stat_panel,
                    table_panel, thresholds, ts)


def variables() -> list:
    return prometheus_variables("tracehouse_operator_pipeline_condition", pods=False)


def build() -> dashboard.Dashboard:
    d = base(
        "tracehouse / Operator",
        "tracehouse-operator",
        "The tracehouse operator: reconciles, errors by reason, API writes, leadership, and each "
        "TracePipeline's conditions and schema version.",
        ["operator"],
    )
    for v in variables():
        d = d.with_variable(v)

    d = d.with_row(dashboard.Row("Pipelines"))
    d = d.with_panel(stat_panel(
        "Pipelines not Ready", "short",
        [prom(f'count(max by (namespace, pipeline) (tracehouse_operator_pipeline_condition{{{PIPE_SEL}, condition="Ready"}}) == 0) or vector(0)',
              "not ready")],
        description="TracePipelines whose Ready condition is not True.",
        steps=thresholds((None, "green"), (1, "red")),
    ))
    d = d.with_panel(table_panel(
        "Pipeline conditions", [
            prom(f"max by (namespace, pipeline, condition) (tracehouse_operator_pipeline_condition{{{PIPE_SEL}}})",
                 "{{namespace}}/{{pipeline}} {{condition}}").instant().format(PromQueryFormat.TABLE),
        ],
        description="1 = the condition is True (Ready, SchemaReady, KafkaReachable, GatewayAvailable); 0 = "
                    "False or Unknown. `kubectl describe tp` gives the reason and message.",
        w=12, datasource=PROMETHEUS,
    ))
    d = d.with_panel(ts(
        "Schema version per pipeline", "none",
        [prom(f"max by (namespace, pipeline) (tracehouse_operator_pipeline_schema_version{{{PIPE_SEL}}})",
              "{{namespace}}/{{pipeline}}")],
        description="Latest schema migration recorded for each pipeline's traces table.",
        w=12, minimum=None,
    ))

    d = d.with_row(dashboard.Row("Autoscaling"))
    d = d.with_panel(ts(
        "Time lag per pipeline", "s",
        [prom(f"max by (namespace, pipeline) (tracehouse_operator_pipeline_lag_seconds{{{PIPE_SEL}}})",
              "{{namespace}}/{{pipeline}}")],
        description="Age of the oldest record the gateway has not written, as the autoscaler read it "
                    "(pipelines with spec.autoscaling); it scales out above spec.autoscaling.targetLagSeconds.",
        w=8, steps=thresholds((None, "green"), (30, "yellow"), (120, "red")),
    ))
    d = d.with_panel(ts(
        "Incoming spans /s and records behind", "short",
        [
            prom(f"max by (namespace, pipeline) (tracehouse_operator_pipeline_incoming_spans_per_second{{{PIPE_SEL}}})",
                 "{{namespace}}/{{pipeline}} spans/s in", "A"),
            prom(f"max by (namespace, pipeline) (tracehouse_operator_pipeline_lag_records{{{PIPE_SEL}}})",
                 "{{namespace}}/{{pipeline}} records behind", "B"),
        ],
        description="What the autoscaler measures from Kafka: the incoming rate and the consumer group's backlog.",
        w=8,
    ))
    d = d.with_panel(ts(
        "Autoscaler decisions by reason /s", "ops",
        [prom(f"sum by (direction, reason) (rate(tracehouse_operator_autoscale_decisions_total[{RATE}]))",
              "{{direction}} {{reason}}")],
        description="One decision per sample: up, down or hold, and why (LagAboveTarget, LoadDeclined, "
                    "Cooldown, Stabilizing, ScaleSubresource, ...). `kubectl describe tp` shows the ScaledUp/"
                    "ScaledDown Events with their numbers.",
        w=8,
    ))

    d = d.with_row(dashboard.Row("Controller"))
    d = d.with_panel(ts(
        "Reconciles /s", "ops",
        [prom(f"sum by (pod) (rate(tracehouse_operator_reconciliations_total[{RATE}]))", "{{pod}}")],
        description="Reconciliations started per second, per operator replica (only the leader reconciles).",
        w=8,
    ))
    d = d.with_panel(ts(
        "Reconcile errors by reason /s", "ops",
        [prom(f"sum by (kind) (rate(tracehouse_operator_reconcile_errors_total[{RATE}]))", "{{kind}}")],
        description="Failed reconciliations by error kind (operator/src/error.rs metric_label).",
        w=8, steps=thresholds((None, "green"), (0.01, "red")),
    ))
    d = d.with_panel(ts(
        "Reconcile duration p50 / p99", "s",
        [
            prom(f"histogram_quantile(0.5, sum by (le) (rate(tracehouse_operator_reconcile_duration_seconds_bucket[{RATE}])))", "p50", "A"),
            prom(f"histogram_quantile(0.99, sum by (le) (rate(tracehouse_operator_reconcile_duration_seconds_bucket[{RATE}])))", "p99", "B"),
        ],
        description="How long one reconcile takes.",
        w=8,
    ))
    d = d.with_panel(ts(
        "API writes by kind /s", "ops",
        [prom(f"sum by (kind) (rate(tracehouse_operator_writes_total[{RATE}]))", "{{kind}}")],
        description="Applies, status patches and Events; flat while nothing changes.",
        w=12,
    ))
    d = d.with_panel(ts(
        "Leader", "short",
        [prom("max by (pod) (tracehouse_operator_leader)", "{{pod}}")],
        description="1 while the replica holds the Lease; exactly one should.",
        w=12,
    ))
    return d
