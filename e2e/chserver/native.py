"""Native output for clients that announce a protocol revision (`client_protocol_version=N`).

Over HTTP, ClickHouse writes the Native format for the protocol revision the client announces
in `client_protocol_version` (clickhouse-go sends it on every request and decodes accordingly):
a BlockInfo before each block and, from revision 54454 on, a "custom serialization" flag after
each column's type. The embedded engine can only write Native for revision 0. So chserver has
the engine write the `Buffers` format, which carries every column's serialized data exactly as
Native does plus its byte length, and frames those bytes as Native for the client's revision.
Column names and types come from the engine too: `DESCRIBE TABLE (<query>)` for SELECT queries,
or the header of a second run for read-only statements (DESCRIBE, SHOW, EXISTS, ...). No value
is decoded.
"""

from __future__ import annotations

import struct

from errors import CHError
from sqltext import first_word, strip_trailing_semicolon

REVISION_WITH_TIME_ZONE_PARAMETER_IN_DATETIME = 54337
REVISION_WITH_LOW_CARDINALITY_TYPE = 54405
REVISION_WITH_CUSTOM_SERIALIZATION = 54454
# BlockInfo as ClickHouse writes it: field 1 is_overflows = false, field 2 bucket_num = -1, end.
NATIVE_BLOCK_INFO = b"\x01\x00\x02\xff\xff\xff\xff\x00"
HEADER_BY_DESCRIBE = {"SELECT", "WITH", "FROM"}
HEADER_BY_RERUN = {"DESCRIBE", "DESC", "SHOW", "EXISTS", "EXPLAIN", "CHECK"}


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_varint(buf, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, pos
        shift += 7


def read_binary_string(buf, pos: int) -> tuple[str, int]:
    n, pos = read_varint(buf, pos)
    if pos + n > len(buf):
        raise ValueError("truncated string")
    return bytes(buf[pos:pos + n]).decode("utf-8", "surrogateescape"), pos + n


def client_revision(params: dict[str, str]) -> int:
    raw = params.get("client_protocol_version")
    if not raw:
        return 0
    try:
        return int(raw)
    except ValueError:
        raise CHError(72, "CANNOT_PARSE_NUMBER",
                      f"Cannot parse client_protocol_version '{raw}' as UInt64") from None


def buffers_to_native(data: bytes, columns: list[tuple[str, str]], revision: int) -> bytes:
    """Frame the engine's `Buffers` output as the Native format written for `revision`."""
    heads = []
    for name, type_name in columns:
        if revision < REVISION_WITH_TIME_ZONE_PARAMETER_IN_DATETIME and type_name.startswith("DateTime("):
            type_name = "DateTime"  # what ClickHouse sends clients that predate the parameter
        if 0 < revision < REVISION_WITH_LOW_CARDINALITY_TYPE and "LowCardinality(" in type_name:
            raise CHError(48, "NOT_IMPLEMENTED",
                          f"chserver cannot send LowCardinality column {name} to a client of revision {revision}")
        head = varint(len(name.encode("utf-8", "surrogateescape"))) + name.encode("utf-8", "surrogateescape")
        head += varint(len(type_name.encode())) + type_name.encode()
        if revision >= REVISION_WITH_CUSTOM_SERIALIZATION:
            head += b"\x00"  # no custom (sparse) serialization: the data is dense
        heads.append(head)
    view, out, pos = memoryview(data), [], 0

    def corrupt(what: str):
        return CHError(49, "LOGICAL_ERROR", f"Unexpected Buffers output from the engine: {what}")

    while pos < len(view):
        if pos + 16 > len(view):
            raise corrupt("truncated block header")
        ncols, nrows = struct.unpack_from("<QQ", view, pos)
        pos += 16
        if ncols != len(columns):
            raise corrupt(f"{ncols} columns in a block, {len(columns)} in the header")
        if revision > 0:
            out.append(NATIVE_BLOCK_INFO)
        out.append(varint(ncols) + varint(nrows))
        for head in heads:
            if pos + 8 > len(view):
                raise corrupt("truncated column size")
            (size,) = struct.unpack_from("<Q", view, pos)
            pos += 8
            if pos + size > len(view):
                raise corrupt("truncated column data")
            out.append(head)
            out.append(view[pos:pos + size])
            pos += size
    return b"".join(out)


def result_header(conn, statement: str) -> list[tuple[str, str]]:
    """Names and types of the columns a statement returns, as the engine reports them."""
    kind = first_word(statement)
    if kind in HEADER_BY_DESCRIBE:
        r = conn.query(f"DESCRIBE TABLE (\n{strip_trailing_semicolon(statement)}\n) SETTINGS describe_compact_output = 1, "
                       "describe_include_subcolumns = 0, describe_include_virtual_columns = 0, "
                       "print_pretty_type_names = 0", "RowBinary")
        buf, pos, cols = bytes(r.bytes() or b""), 0, []
        while pos < len(buf):
            name, pos = read_binary_string(buf, pos)
            type_name, pos = read_binary_string(buf, pos)
            cols.append((name, type_name))
        return cols
    # Read-only statements: run again for the header (they read metadata only).
    buf = bytes(conn.query(statement, "RowBinaryWithNamesAndTypes").bytes() or b"")
    n, pos = read_varint(buf, 0)
    names, types = [], []
    for _ in range(n):
        name, pos = read_binary_string(buf, pos)
        names.append(name)
    for _ in range(n):
        type_name, pos = read_binary_string(buf, pos)
        types.append(type_name)
    return list(zip(names, types))


def native_result(conn, statement: str, revision: int):
    """Run a query whose output format is Native for a client of `revision`: (bytes, engine result)."""
    r = conn.query(statement, "Buffers")
    data = bytes(r.bytes() or b"")
    if not data:
        return b"", r
    kind = first_word(statement)
    if kind not in HEADER_BY_DESCRIBE and kind not in HEADER_BY_RERUN:
        raise CHError(48, "NOT_IMPLEMENTED",
                      f"chserver cannot return the result of a {kind} statement in the Native format with "
                      "client_protocol_version; ask for another output format")
    return buffers_to_native(data, result_header(conn, statement), revision), r
