"""A timed ClickHouse HTTP client for the benchmark: one kept-alive connection, each query sent
with `FORMAT JSON` so the answer carries the server's own statistics (`rows_read`,
`bytes_read`, `elapsed`).

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

from procs import BenchError


class TimedClient:
    def __init__(self, url, user, password, timeout=300):
        u = urlsplit(url)
        self.host, self.port = u.hostname, u.port or 8123
        self.headers = {"X-ClickHouse-User": user, "X-ClickHouse-Key": password,
                        "Connection": "keep-alive"}
        self.timeout = timeout
        self.conn = None

    def _post(self, sql):
        for attempt in (0, 1):  # one reconnect if the server closed the idle connection
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request("POST", "/", body=sql.encode(), headers=self.headers)
                r = self.conn.getresponse()
                return r.status, r.read()
            except (http.client.HTTPException, OSError) as e:
                self.conn.close()
                self.conn = None
                if attempt:
                    raise BenchError(f"clickhouse: {e}")
        raise AssertionError("unreachable")

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
        if self.conn is not None:
            self.conn.close()
            self.conn = None

