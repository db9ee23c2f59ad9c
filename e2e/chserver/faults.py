"""Fault switches for the chaos runner (e2e/chaos): make the INSERTs into chosen databases slow,
refused for space, or refused when their data carries a marker — without touching any other
client of the server.

Off unless the server runs with the environment variable `CHSERVER_FAULTS=<file>`. The file is
JSON, re-read whenever its modification time changes (so a runner flips a switch by rewriting
it; a missing or empty file means no fault):

    {"rules": [{"match": "chaos_slow_1f3a",   # substring of the INSERT statement (a database name)
                "delay_ms": 3000,              # answer every matching INSERT this much later
                "error": {"code": 243, "name": "NOT_ENOUGH_SPACE", "message": "…"},
                                               # refuse every matching INSERT with this error
                "reject_marker": "bad-rows"}]} # refuse a matching INSERT whose data holds these
                                               # bytes (code 117 INCORRECT_DATA: permanent)

Rules only ever apply to INSERTs whose statement contains `match` (never empty), so a runner
keys them by a database name of its own and the other users of a shared server are unaffected.
The delay comes after the insert ran (ClickHouse slow to answer: the rows are in, a client that
gives up and retries is deduplicated by its token). A refused INSERT writes nothing.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass

from errors import CHError

LOG = logging.getLogger("chserver.faults")


@dataclass(frozen=True)
class Rule:
    match: str
    delay_ms: int = 0
    error: CHError | None = None
    reject_marker: bytes = b""

    @staticmethod
    def parse(obj: dict) -> "Rule":
        match = str(obj.get("match") or "")
        if not match:
            raise ValueError("a fault rule needs a non-empty 'match'")
        err = obj.get("error")
        error = None
        if err:
            error = CHError(int(err["code"]), str(err.get("name", "UNKNOWN_EXCEPTION")),
                            str(err.get("message", "refused by a chserver fault switch")))
        return Rule(match=match, delay_ms=int(obj.get("delay_ms", 0)), error=error,
                    reject_marker=str(obj.get("reject_marker") or "").encode())

    def before(self, head: bytes, chunks):
        """Apply the refusals to an INSERT's data. Returns (head, chunks) to insert; raises the
        CHError of a refusal after reading the whole body (so the connection stays usable)."""
        if self.error is not None:
            for _ in chunks:
                pass
            raise self.error
        if self.reject_marker:
            data = head + b"".join(chunks)
            if self.reject_marker in data:
                raise CHError(117, "INCORRECT_DATA",
                              "Cannot insert a value the table refuses (chserver fault switch: "
                              f"data holds {self.reject_marker.decode(errors='replace')!r})")
            return data, iter(())
        return head, chunks

    def after(self):
        """The answer's delay, once the insert has run (successfully or not)."""
        if self.delay_ms > 0:
            time.sleep(self.delay_ms / 1000)


class Faults:
    """The rules of a faults file, reloaded when the file changes."""

    def __init__(self, path: str | None):
        self.path = path
        self._lock = threading.Lock()
        self._mtime: tuple[int, int] | None = None
        self._rules: list[Rule] = []

    def _load(self) -> list[Rule]:
        try:
            st = os.stat(self.path)
            mtime = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            mtime = None
        with self._lock:
            if mtime != self._mtime:
                self._mtime = mtime
                self._rules = []
                if mtime is not None:
                    try:
                        with open(self.path, encoding="utf-8") as f:
                            text = f.read()
                        doc = json.loads(text) if text.strip() else {}
                        self._rules = [Rule.parse(r) for r in doc.get("rules", [])]
                    except (OSError, ValueError, KeyError, TypeError) as exc:
                        LOG.error("faults file %s ignored: %s", self.path, exc)
                LOG.info("fault rules now: %s", self._rules)
            return self._rules

    def rule_for(self, statement: str) -> Rule | None:
        """The first rule whose `match` is in the INSERT statement, if any."""
        if not self.path:
            return None
        for rule in self._load():
            if rule.match in statement:
                return rule
        return None


FAULTS = Faults(os.environ.get("CHSERVER_FAULTS"))
