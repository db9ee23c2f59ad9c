"""What a bench leg looks like over time, and how fresh its rows are: the series sampled during
each leg (rows visible, spans/s, consumer lag, RSS), span-end → queryable measured by ClickHouse
itself (a materialized view stamps every inserted row), the collector's own freshness histogram
read back from /metrics, and the PNG of the series drawn with matplotlib.

Pure helpers and the plot only: bench.py does the sampling and the IO.
"""

import math

SAMPLE_EVERY = 0.5  # seconds between two points of a series


class Series:
    """Points of one leg: seconds since the collector started, rows visible in ClickHouse, the
    group's lag in records (None when the poll failed), the collector's RSS in MiB, INSERT
    statements into otel_traces so far (chserver's count; None when unknown)."""

    def __init__(self):
        self.t, self.rows, self.lag, self.rss_mib, self.inserts = [], [], [], [], []

    def due(self, t):
        return not self.t or t - self.t[-1] >= SAMPLE_EVERY

    def add(self, t, rows, lag, rss_mib, inserts=None):
        self.t.append(round(t, 2))
        self.rows.append(rows)
        self.lag.append(lag)
        self.rss_mib.append(None if rss_mib is None else round(rss_mib, 1))
        self.inserts.append(inserts)

    def _rate(self, values, window):
        out, j = [], 0
        for i in range(len(self.t)):
            while j < i and self.t[i] - self.t[j + 1] >= window:
                j += 1
            dt = self.t[i] - self.t[j]
            if values[i] is None or values[j] is None:
                out.append(None)
            else:
                out.append((values[i] - values[j]) / dt if dt > 0 else 0.0)
        return out

    def spans_per_second(self, window=2.0):
        """Rows that became visible per second over the last `window` seconds at each point
        (inserts land in steps of a batch, so a rate between two 0.5 s points jumps)."""
        return self._rate(self.rows, window)

    def inserts_per_second(self, window=2.0):
        """INSERT statements per second over the last `window` seconds (None where unknown)."""
        return self._rate(self.inserts, window)

    def to_json(self):
        return {"t": self.t, "rows": self.rows, "lag_records": self.lag, "rss_mib": self.rss_mib,
                "inserts": self.inserts}


# ---------------------------------------------------------------- freshness

def arrivals_ddl(db, seq_expr):
    """A MergeTree table and the materialized view that fills it: for every row inserted into
    otel_traces, its loadgen sequence number (`seq_expr`, an integer expression over the row),
    its span end and the moment the server wrote the block holding it (nowInBlock64, per
    block, not per query: an insert of several blocks stamps each as it is written; the insert
    is acknowledged after its last block). The view runs in the server, the same for every
    leg."""
    return [
        f"CREATE TABLE `{db}`.arrivals (Seq UInt64, EndNs Int64, StampNs Int64) "
        "ENGINE = MergeTree ORDER BY tuple()",
        f"CREATE MATERIALIZED VIEW `{db}`.arrivals_mv TO `{db}`.arrivals AS SELECT "
        f"{seq_expr} AS Seq, "
        "toInt64(toUnixTimestamp64Nano(Timestamp)) + toInt64(Duration) AS EndNs, "
        "toInt64(toUnixTimestamp64Nano(nowInBlock64(9))) AS StampNs "
        f"FROM `{db}`.otel_traces",
    ]


def arrivals_query(db):
    """Span end → queryable over every row. It includes how long each span waited in the
    generator before its record was sent: loadgen moves a record so that its *latest* span ends
    as it is sent, and the other spans of that record ended up to a root span's duration
    (≤ 2 s) earlier, as an SDK holds ended spans until it exports them."""
    return (f"SELECT count(), quantilesExact(0.5, 0.9, 0.99)(StampNs - EndNs), "
            f"max(StampNs - EndNs) FROM `{db}`.arrivals FORMAT TSV")


def record_arrivals_query(db, spans_per_record):
    """Span end → queryable of the span of each record that ended as the record was sent
    (its latest end): what the pipeline adds, Kafka to ClickHouse, without the generator's
    wait. Records hold `spans_per_record` consecutive sequence numbers."""
    return (f"SELECT count(), quantilesExact(0.5, 0.9, 0.99)(lag), max(lag) FROM ("
            f"SELECT argMax(StampNs, EndNs) - max(EndNs) AS lag FROM `{db}`.arrivals "
            f"GROUP BY intDiv(Seq, {int(spans_per_record)})) FORMAT TSV")


def parse_arrivals(tsv):
    """{"rows", "p50_s", "p90_s", "p99_s", "max_s"} from an arrivals query's answer ("rows" are
    records for record_arrivals_query)."""
    count, quantiles, mx = tsv.strip().split("\t")
    p50, p90, p99 = (int(x) / 1e9 for x in quantiles.strip("[]").split(","))
    return {"rows": int(count), "p50_s": round(p50, 3), "p90_s": round(p90, 3),
            "p99_s": round(p99, 3), "max_s": round(int(mx) / 1e9, 3)}


def histogram_buckets(samples, name):
    """[(upper bound, cumulative count)] of a Prometheus histogram in scraped samples
    ({'name_bucket{le="2.0"}': 12.0, …}), sorted, +Inf last."""
    out = []
    prefix = name + "_bucket{"
    for key, value in (samples or {}).items():
        if key.startswith(prefix):
            le = key[len(prefix):].split('le="', 1)[1].split('"', 1)[0]
            out.append((math.inf if le == "+Inf" else float(le), value))
    return sorted(out)


def histogram_quantile(q, buckets):
    """Prometheus's histogram_quantile: linear within the bucket the rank falls in; the
    highest finite bound if it falls in +Inf; None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, cum in buckets:
        if cum >= rank:
            if math.isinf(bound):
                return lower
            inside = cum - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, cum
    return lower


def collector_freshness(samples, name="tracehouse_span_freshness_seconds"):
    """{"spans", "p50_s", "p99_s", "mean_s"} of the collector's own histogram, or None."""
    buckets = histogram_buckets(samples, name)
    if not buckets:
        return None
    count = buckets[-1][1]
    total = (samples or {}).get(name + "_sum")
    p50, p99 = histogram_quantile(0.5, buckets), histogram_quantile(0.99, buckets)
    return {"spans": int(count),
            "p50_s": None if p50 is None else round(p50, 3),
            "p99_s": None if p99 is None else round(p99, 3),
            "mean_s": round(total / count, 3) if count and total is not None else None}


# ---------------------------------------------------------------- the picture

COLORS = {"tracehouse": "tab:blue", "tracehouse+processing": "tab:purple", "otelcol": "tab:orange",
          "rotel": "tab:green", "tracehouse+alt": "tab:cyan"}


def plot(series_by_leg, path, title, rate=None):
    """spans/s, lag and RSS over time, one line per leg, into a PNG at path; and INSERT
    statements per second when the server counted them."""
    import matplotlib
    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    with_inserts = any(v is not None for s in series_by_leg.values() for v in s.inserts)
    fig, axes = plt.subplots(4 if with_inserts else 3, 1, figsize=(10, 12 if with_inserts else 9),
                             sharex=True)
    for leg, s in series_by_leg.items():
        if not s.t:
            continue
        color = COLORS.get(leg)
        axes[0].plot(s.t, [v / 1000 for v in s.spans_per_second()], label=leg, color=color,
                     linewidth=1)
        axes[1].plot(s.t, [float("nan") if v is None else v for v in s.lag], label=leg,
                     color=color, linewidth=1)
        axes[2].plot(s.t, [float("nan") if v is None else v for v in s.rss_mib], label=leg,
                     color=color, linewidth=1)
        if with_inserts:
            axes[3].plot(s.t, [float("nan") if v is None else v for v in s.inserts_per_second()],
                         label=leg, color=color, linewidth=1)
    if rate:
        axes[0].axhline(rate / 1000, color="grey", linestyle="--", linewidth=1,
                        label=f"produced ({rate / 1000:g} k/s)")
    axes[0].set_ylabel("rows visible / s, 2 s mean (k)")
    axes[1].set_ylabel("consumer lag (records)")
    axes[2].set_ylabel("collector RSS (MiB)")
    if with_inserts:
        axes[3].set_ylabel("INSERTs / s, 2 s mean")
    axes[-1].set_xlabel("seconds since the collector started")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper right", fontsize="small")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_sweep(steps, legs, path, title):
    """A partition sweep (bench --partitions-sweep): inserts/s, parts per minute and span end →
    queryable (a record's last span, p50 dashed, p99 solid) of each leg against the partition
    count, into a PNG at path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def column(leg, get):
        xs, ys = [], []
        for step in steps:
            v = get(step.get(leg) or {})
            if v is not None:
                xs.append(step["partitions"])
                ys.append(v)
        return xs, ys

    fig, axes = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
    for leg in legs:
        color = COLORS.get(leg)
        for ax, key in ((axes[0], "inserts_per_second"), (axes[1], "parts_per_minute")):
            ax.plot(*column(leg, lambda r: r.get(key)), marker="o", label=leg, color=color)
        for q, style in (("p50_s", "--"), ("p99_s", "-")):
            axes[2].plot(*column(leg, lambda r: (r.get("freshness_record") or {}).get(q)),
                         marker="o", linestyle=style, color=color, label=f"{leg} {q[:3]}")
    axes[0].set_ylabel("INSERT statements / s")
    axes[1].set_ylabel("parts written / minute")
    axes[2].set_ylabel("span end → queryable (s),\na record's last span")
    axes[2].set_xlabel("partitions")
    counts = [step["partitions"] for step in steps]
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", fontsize="small")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
