"""e2e/bench (bench.py): tracehouse side by side with the OpenTelemetry Collector and Rotel, what a
span costs the system; e2e/column-cost (column_cost.py): what each column group and INSERT costs
the ClickHouse server."""
