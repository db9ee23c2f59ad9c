"""How a leg wrote into ClickHouse, measured on the server's side so every leg is measured the
same way whatever its own metrics say: INSERT statements, the blocks (parts) they made, and the
rates and sizes that follow.

- INSERT statements per database and table: chserver's own count (`GET /chserver/inserts`,
  e2e/chserver/stats.py; ClickHouse's `system.query_log` is absent from the embedded engine and
  `system.events` counts the whole shared server). None when the running chserver predates it.
- Blocks: `max(max_block_number)` over `system.parts` of the table. On a non-replicated
  MergeTree the block number is a table-wide counter the engine allocates for every block an
  INSERT writes, one per partition the block spans, a block dropped as a duplicate included
  (checked on 26.9: a repeated deduplication token used up a number without a part), and
  merges keep the highest number in the merged part, so the maximum over the parts still there
  is the number of blocks written. A Null table keeps no parts; there the bench's verification
  view (`delivered`, one block per block that passed through the Null table) is counted.

Pure helpers; bench.py does the HTTP.
"""


def blocks_query(db, table):
    return (f"SELECT max(max_block_number), count() FROM system.parts "
            f"WHERE database = '{db}' AND table = '{table}' FORMAT TSV")


def parse_blocks(tsv):
    """Blocks written (the highest block number), or 0 for a table without parts."""
    highest, parts = tsv.strip().split("\t")
    return int(highest) if int(parts) else 0


def table_stats(snapshot, db, table):
    """chserver's counts for one table ({"inserts", "failed", "rows", "body_bytes"}), zeros when
    it received none, None without a snapshot."""
    if snapshot is None:
        return None
    return (snapshot.get(db) or {}).get(table) or {"inserts": 0, "failed": 0, "rows": 0,
                                                    "body_bytes": 0}


def insert_figures(stats, blocks, window_s, spans):
    """The per-leg figures: statements, blocks, inserts per second and parts per minute over
    `window_s` (the time rows were arriving — live: from the producer's start until every row
    was in; pre-filled: from the collector's start), spans per insert (`spans`: the leg's,
    delivered exactly once when it is verified). chserver's own row count is the engine's
    `written_rows`, which counts the rows materialized views wrote too: kept, not divided."""
    inserts = stats["inserts"] if stats else None
    out = {
        "inserts": inserts,
        "failed_inserts": stats["failed"] if stats else None,
        "insert_written_rows": stats["rows"] if stats else None,
        "insert_blocks": blocks,
        "insert_window_seconds": round(window_s, 2) if window_s else None,
        "inserts_per_second": None, "parts_per_minute": None, "rows_per_insert": None,
        "blocks_per_insert": None,
    }
    if window_s and window_s > 0:
        if inserts is not None:
            out["inserts_per_second"] = round(inserts / window_s, 2)
        if blocks is not None:
            out["parts_per_minute"] = round(blocks / window_s * 60, 1)
    if inserts:
        out["rows_per_insert"] = round(spans / inserts, 1)
        if blocks is not None:
            out["blocks_per_insert"] = round(blocks / inserts, 2)
    return out
