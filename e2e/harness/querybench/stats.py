"""Summaries of the timings, pure: percentiles and the per-query record the report prints."""


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(samples):
    """samples: [{"ms", "server_ms", "rows_read", "bytes_read", "rows"}] of one query, one mode."""
    if not samples:
        return None
    ms = [s["ms"] for s in samples]
    mid = lambda key: percentile([s[key] for s in samples], 50)  # noqa: E731
    return {
        "n": len(samples),
        "p50_ms": round(percentile(ms, 50), 2),
        "p95_ms": round(percentile(ms, 95), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "max_ms": round(max(ms), 2),
        "server_p50_ms": round(mid("server_ms"), 2),
        "rows_read_p50": int(mid("rows_read")),
        "bytes_read_p50": int(mid("bytes_read")),
        "result_rows_p50": int(mid("rows")),
    }
