"""A timed ClickHouse HTTP client for the benchmark: each query on a fresh connection, sent
with `FORMAT JSON` so the answer carries the server's own statistics (`rows_read`,
`bytes_read`, `elapsed`).

Why a fresh connection per query (as curl does): on a kept-alive connection the local server
(chserver) answers every request after the first about 44 ms late — its response leaves in two
writes and the second waits, under Nagle's algorithm, for the client's delayed ACK of the first
(`SELECT 1`: 44 ms kept alive, 2–5 ms on fresh connections, with or without TCP_NODELAY on the
client). A loopback connect costs well under a millisecond, so fresh connections measure the
query and not that stall.

Why not the server's `system.query_log`: the local server (chserver on chdb 26.9) has no query
log (`system.query_log` is an unknown table there), and the `read_rows` of its
`X-ClickHouse-Summary` header is the result's row count, not what was read. The JSON format's
statistics come from the engine's progress counters: the same rows and bytes the query log would
record as `read_rows`/`read_bytes`.
"""

import http.client
import json
import time
from urllib.parse import urlsplit

from harness.procs import BenchError

RESTART_WAIT = 120  # seconds a request waits for the server to come back


class TimedClient:
    def __init__(self, url, user, password, timeout=300):
        u = urlsplit(url)
        self.host, self.port = u.hostname, u.port or 8123
        self.headers = {"X-ClickHouse-User": user, "X-ClickHouse-Key": password,
                        "Connection": "close"}
        self.timeout = timeout
        self.reconnects = 0

    def _post(self, sql):
        """One request on a fresh connection. The stack's server is shared and may be restarted
        by other work: a failed request is retried every second for up to RESTART_WAIT seconds
        and counted in `self.reconnects`, so a run can report that it was disturbed."""
        deadline = time.monotonic() + RESTART_WAIT
        while True:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                conn.request("POST", "/", body=sql.encode(), headers=self.headers)
                r = conn.getresponse()
                return r.status, r.read()
            except (http.client.HTTPException, OSError) as e:
                self.reconnects += 1
                if time.monotonic() > deadline:
                    raise BenchError(f"clickhouse: {e}") from None
                time.sleep(1)
            finally:
                conn.close()

    def execute(self, sql):
        """Run a statement with no result; raise BenchError with the server's message."""
        status, body = self._post(sql)
        if status != 200:
            raise BenchError(f"clickhouse: {body.decode(errors='replace').strip()[:400]}")
        return body.decode(errors="replace")

    def timed(self, sql):
        """Run a SELECT; {"ms" (wall, client side), "server_ms", "rows_read", "bytes_read",
        "rows"}."""
        t0 = time.perf_counter()
        status, body = self._post(sql + "\nFORMAT JSON")
        ms = (time.perf_counter() - t0) * 1000
        if status != 200:
            raise BenchError(f"clickhouse: {body.decode(errors='replace').strip()[:400]}")
        doc = json.loads(body)
        st = doc.get("statistics", {})
        return {"ms": ms, "server_ms": st.get("elapsed", 0) * 1000,
                "rows_read": st.get("rows_read", 0), "bytes_read": st.get("bytes_read", 0),
                "rows": doc.get("rows", len(doc.get("data", [])))}

    def rows(self, sql):
        """A SELECT's rows as lists (JSONCompact)."""
        status, body = self._post(sql + "\nFORMAT JSONCompact")
        if status != 200:
            raise BenchError(f"clickhouse: {body.decode(errors='replace').strip()[:400]}")
        return json.loads(body)["data"]

    def close(self):
        """Nothing is held between queries; kept for symmetry with the callers."""
