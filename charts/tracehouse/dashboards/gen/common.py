"""Shared pieces of the tracehouse dashboards: data sources, template variables, the label
selector every Prometheus query uses, panel helpers with units and thresholds, and a query
type for the ClickHouse data source (grafana-clickhouse-datasource), which the Grafana
Foundation SDK does not ship.

Labels the dashboards and rules rely on (set by the scrape configuration: the stack's
e2e/lib/prometheus.sh, the chart's PodMonitor): `namespace`, `pod`, and `pipeline` (from
the collector pods' `tracehouse.dev/pipeline` label).
"""

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as models

PROMETHEUS = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
CLICKHOUSE = models.DataSourceRef(type_val="grafana-clickhouse-datasource", uid="${clickhouse}")

# Every gateway query is filtered by the three template variables.
SEL = 'namespace=~"$namespace", pipeline=~"$pipeline", pod=~"$pod"'
# Per-pipeline series of the operator (no pod of the pipeline's own).
PIPE_SEL = 'namespace=~"$namespace", pipeline=~"$pipeline"'
RATE = "$__rate_interval"


def prom(expr: str, legend: str, ref: str = "A") -> prometheus.Dataquery:
    return (
        prometheus.Dataquery()
        .expr(expr)
        .legend_format(legend)
        .ref_id(ref)
        .datasource(PROMETHEUS)
    )


class ClickHouseQuery(cogvariants.Dataquery):
    """A raw-SQL target of the grafana-clickhouse-datasource plugin (v4 query model)."""

    # The plugin's Format enum: 0 time series, 1 table, 3 trace.
    FORMATS = {"timeseries": 0, "table": 1, "traces": 3}

    def __init__(self, sql: str, query_type: str, ref: str) -> None:
        self.sql = sql
        self.query_type = query_type
        self.ref = ref

    def to_json(self) -> dict[str, object]:
        return {
            "datasource": CLICKHOUSE.to_json(),
            "editorType": "sql",
            "format": self.FORMATS[self.query_type],
            "pluginVersion": "4.0.0",
            "queryType": self.query_type,
            "rawSql": self.sql,
            "refId": self.ref,
        }


class ClickHouseQueryBuilder(cogbuilder.Builder[cogvariants.Dataquery]):
    def __init__(self, sql: str, query_type: str = "table", ref: str = "A") -> None:
        self._query = ClickHouseQuery(sql.strip(), query_type, ref)

    def build(self) -> ClickHouseQuery:
        return self._query


def sql(text: str, query_type: str = "table", ref: str = "A") -> ClickHouseQueryBuilder:
    return ClickHouseQueryBuilder(text, query_type, ref)


def thresholds(*steps: tuple[float | None, str]) -> dashboard.ThresholdsConfig:
    return (
        dashboard.ThresholdsConfig()
        .mode(models.ThresholdsMode.ABSOLUTE)
        .steps([models.Threshold(value=v, color=c) for v, c in steps])
    )


OK_ONLY = thresholds((None, "green"))


def ts(title: str, unit: str, targets, *, description: str, w: int = 12, h: int = 8,
       steps=None, stack: bool = False, minimum: float | None = 0,
       datasource=PROMETHEUS) -> timeseries.Panel:
    p = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .span(w)
        .height(h)
        .datasource(datasource)
        .fill_opacity(10)
        .line_width(1)
        .legend(common_models_legend())
        .thresholds(steps or OK_ONLY)
    )
    if minimum is not None:
        p = p.min(minimum)
    if steps is not None:
        p = p.thresholds_style(common_threshold_style())
    if stack:
        p = p.stacking(common_stacking())
    for t in targets:
        p = p.with_target(t)
    return p


def stat_panel(title: str, unit: str, targets, *, description: str, w: int = 6, h: int = 5,
               steps=None, datasource=PROMETHEUS) -> stat.Panel:
    p = (
        stat.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .span(w)
        .height(h)
        .datasource(datasource)
        .thresholds(steps or OK_ONLY)
    )
    for t in targets:
        p = p.with_target(t)
    return p


def table_panel(title: str, targets, *, description: str, w: int = 24, h: int = 9,
                unit: str | None = None, datasource=CLICKHOUSE) -> table.Panel:
    p = (
        table.Panel()
        .title(title)
        .description(description)
        .span(w)
        .height(h)
        .datasource(datasource)
    )
    if unit:
        p = p.unit(unit)
    for t in targets:
        p = p.with_target(t)
    return p


def common_models_legend():
    from grafana_foundation_sdk.builders import common

    return (
        common.VizLegendOptions()
        .display_mode(common_models.LegendDisplayMode.TABLE)
        .placement(common_models.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["lastNotNull", "max"])
    )


def common_threshold_style():
    from grafana_foundation_sdk.builders import common

    return common.GraphThresholdsStyleConfig().mode(common_models.GraphThresholdsStyleMode.LINE)


def common_stacking():
    from grafana_foundation_sdk.builders import common

    return common.StackingConfig().mode(common_models.StackingMode.NORMAL)


def chained_variable(name: str, label: str, query: str) -> dashboard.QueryVariable:
    """A Prometheus query variable that narrows the next one: multi-select, `All` = `.*`."""
    return (
        dashboard.QueryVariable(name)
        .label(label)
        .datasource(PROMETHEUS)
        .query(query)
        .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(models.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(models.VariableOption(selected=True, text="All", value="$__all"))
    )


def prometheus_variables(metric: str, pods: bool = True) -> list:
    """`datasource`, then `namespace` → `pipeline` (→ `pod`), each narrowing the next."""
    out = [
        dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"),
        chained_variable("namespace", "Namespace", f"label_values({metric}, namespace)"),
        chained_variable("pipeline", "Pipeline",
                         f'label_values({metric}{{namespace=~"$namespace"}}, pipeline)'),
    ]
    if pods:
        out.append(chained_variable(
            "pod", "Pod", f'label_values({metric}{{namespace=~"$namespace", pipeline=~"$pipeline"}}, pod)'))
    return out


def base(title: str, uid: str, description: str, tags: list[str]) -> dashboard.Dashboard:
    return (
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["tracehouse", *tags])
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .tooltip(models.DashboardCursorSync.CROSSHAIR)
        .editable()
    )
