"""What chserver counts for the benchmark: INSERT statements per target table, answered or
failed, with the rows they wrote and the body bytes they carried.

ClickHouse keeps this in `system.query_log`, which the embedded engine (chdb) does not have, and
`system.events`' `InsertQuery` counts the whole server, so on a shared stack one run's inserts
cannot be told from another's. The bench reads these counts per database (each leg has its own)
through `GET /chserver/inserts`, a read-only path no ClickHouse client uses: what clients see
of the HTTP interface does not change.

Counting is a dict update under a lock per INSERT: nothing per row, no query to the engine.
"""

from __future__ import annotations

import threading


class InsertStats:
    """Counts per (database, table); `snapshot()` is a copy, safe to serialise while inserts
    go on."""

    def __init__(self):
        self._lock = threading.Lock()
        self._by_table: dict[tuple[str, str], dict[str, int]] = {}

    def record(self, database: str, table: str, ok: bool, rows: int = 0, body_bytes: int = 0) -> None:
        with self._lock:
            c = self._by_table.setdefault((database, table), {"inserts": 0, "failed": 0, "rows": 0,
                                                              "body_bytes": 0})
            if ok:
                c["inserts"] += 1
                c["rows"] += rows
                c["body_bytes"] += body_bytes
            else:
                c["failed"] += 1

    def snapshot(self) -> dict[str, dict[str, dict[str, int]]]:
        """{database: {table: {"inserts", "failed", "rows", "body_bytes"}}} since the server
        started."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        with self._lock:
            for (db, table), c in self._by_table.items():
                out.setdefault(db, {})[table] = dict(c)
        return out
