"""The pure half of e2e/grants-probe: privileges the engine recorded, against GRANTs a document
states.

`system.query_log.used_privileges` holds one string per privilege the engine checked for a
statement, as ClickHouse prints it: `INSERT(a, b) ON db.t`, `SELECT, INSERT ON db.t`,
`CREATE TABLE ON db.t`, `TABLE ENGINE ON MergeTree`, `SHOW TABLES ON *.*`. A document states
`GRANT <privilege>[, …] ON <db>.<table|*> TO <role>;`. `missing` answers which recorded
privileges no stated GRANT covers, using the part of ClickHouse's privilege tree these
statements reach (docs: "GRANT Statement", the privilege hierarchy).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# What every user may do without a GRANT of its own, on a server with default access settings:
# read the system tables (unless `access_control_improvements.select_from_system_db_requires_grant`
# is on), list the tables and columns it holds a privilege on (SHOW TABLES / SHOW COLUMNS are
# checked on *.* and the rows filtered), and name a table engine (unless
# `table_engines_require_grant` is on). docs/install.md names these conditions.
IMPLICIT_PRIVILEGES = {"SHOW TABLES", "SHOW COLUMNS", "TABLE ENGINE"}

# The groups of ClickHouse's privilege tree the schema step reaches: a grant of the group
# covers each member. `ALTER TABLE` holds every column, index, TTL and settings alteration.
GROUPS = {
    "ALL": None,  # everything
    "ALTER": lambda p: p.startswith("ALTER "),
    "ALTER TABLE": lambda p: p.startswith("ALTER ") and not p.startswith(("ALTER VIEW", "ALTER USER", "ALTER ROLE")),
    "CREATE": lambda p: p.startswith("CREATE "),
}


@dataclass(frozen=True)
class Privilege:
    """One privilege on one target: `("INSERT", "db", "t")`; `"*"` for a wildcard."""

    name: str
    database: str
    table: str


_ON = re.compile(r"^(?P<privs>.+?) ON (?P<target>\S+)$")


def _target(target: str) -> tuple[str, str]:
    target = target.replace("`", "")
    if "." not in target:  # `TABLE ENGINE ON MergeTree`: an engine name, not a table
        return target, "*"
    database, _, table = target.partition(".")
    return database, table


def _names(privs: str) -> list[str]:
    """`SELECT(a, b), INSERT` → [SELECT, INSERT]: column lists dropped, commas outside them split."""
    privs = re.sub(r"\([^)]*\)", "", privs)
    return [p.strip().upper() for p in privs.split(",") if p.strip()]


def parse_used(entry: str) -> list[Privilege]:
    """One `used_privileges` string → its privileges."""
    m = _ON.match(entry.strip())
    if not m:
        raise ValueError(f"not a privilege: {entry!r}")
    database, table = _target(m["target"])
    return [Privilege(name, database, table) for name in _names(m["privs"])]


_GRANT = re.compile(r"^\s*GRANT\s+(?P<privs>.+?)\s+ON\s+(?P<target>\S+)\s+TO\s+(?P<to>[\w,\s]+?)\s*;?\s*$",
                    re.IGNORECASE)


def parse_grants(text: str) -> dict[str, list[Privilege]]:
    """Every `GRANT … ON … TO role;` line of a document, by role. Role grants (`GRANT role TO
    user`) have no ON and are not privileges."""
    out: dict[str, list[Privilege]] = {}
    for line in text.splitlines():
        m = _GRANT.match(line)
        if not m:
            continue
        database, table = _target(m["target"])
        for role in (r.strip() for r in m["to"].split(",")):
            out.setdefault(role, []).extend(Privilege(n, database, table) for n in _names(m["privs"]))
    return out


def _name_covers(granted: str, used: str) -> bool:
    if granted == used:
        return True
    rule = GROUPS.get(granted, False)
    if rule is None:
        return True
    return bool(rule) and rule(used)


def _target_covers(granted: Privilege, used: Privilege) -> bool:
    return granted.database in ("*", used.database) and granted.table in ("*", used.table)


def covered(used: Privilege, grants: list[Privilege]) -> bool:
    if used.name in IMPLICIT_PRIVILEGES or used.database == "system":
        return True
    return any(_name_covers(g.name, used.name) and _target_covers(g, used) for g in grants)


def missing(used_entries: list[str], grants: list[Privilege]) -> list[str]:
    """The recorded entries that the grants do not cover, each once, in order."""
    out: list[str] = []
    for entry in used_entries:
        if any(not covered(p, grants) for p in parse_used(entry)) and entry not in out:
            out.append(entry)
    return out
