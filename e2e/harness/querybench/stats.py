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


def server_cpu(samples):
    """The server CPU figures of one query's samples, where they carry them: the p50 in ms over
    the undisturbed samples (all of them when every one was disturbed) and how many were
    disturbed (the server started other queries or merges meanwhile). {} without figures."""
    timed = [s for s in samples if s.get("server_cpu_us") is not None]
    if not timed:
        return {}
    clean = [s for s in timed if not s.get("disturbed")] or timed
    return {"server_cpu_p50_ms": round(percentile([s["server_cpu_us"] for s in clean], 50)
                                       / 1000, 2),
            "server_cpu_disturbed": len(timed) - len([s for s in timed
                                                      if not s.get("disturbed")])}


def summarize(samples):
    """samples: [{"ms", "server_ms", "rows_read", "bytes_read", "rows"}, and where measured
    "server_cpu_us" and "disturbed"] of one query, one mode."""
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
        **server_cpu(samples),
    }
