#!/usr/bin/env python3
"""chserver: ClickHouse's HTTP interface in front of the real ClickHouse engine (chdb).

There is no clickhouse-server binary on these machines, but the `chdb-core` package embeds
the full ClickHouse engine in-process. This server gives that engine the network face that
unmodified ClickHouse clients expect (the Rust `clickhouse` crate, Go's `clickhouse-go` over
HTTP, curl), following ClickHouse's HTTP interface documentation. The server never decodes
rows: INSERT bodies, in any input format the engine reads, are streamed to the engine as
they arrive. See README.md beside this file for what is and is not implemented.

Request flow: auth → settings/params from the URL → body decoding (HTTP Content-Encoding,
then ClickHouse block decompression for `decompress=1`) → INSERT data streamed to the engine,
or the query run and its result returned (Native framed for the client's
`client_protocol_version`, optionally block-compressed for `compress=1` and HTTP-compressed for
`enable_http_compression=1`).
"""

from __future__ import annotations

import argparse
import base64
import bz2
import email.parser
import email.policy
import gzip
import hmac
import io
import json
import logging
import lzma
import os
import re
import signal
import struct
import sys
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

import chdb
import lz4.block
import lz4.frame
from clickhouse_cityhash.cityhash import CityHash128

try:  # optional: zstd block method (0x90) and Content-Encoding: zstd
    import zstandard
except ImportError:  # pragma: no cover - requirements.txt installs it
    zstandard = None

ENGINE_VERSION = "26.9.2.1"
LOG = logging.getLogger("chserver")

# URL parameters that are part of the HTTP protocol; every other one is a query setting.
PROTOCOL_PARAMS = {
    "query", "database", "default_format", "user", "password", "quota_key", "query_id",
    "session_id", "session_timeout", "session_check", "compress", "decompress", "buffer_size",
    "wait_end_of_query", "role", "stacktrace", "http_response_buffer_size",
    "enable_http_compression", "http_zlib_compression_level", "send_progress_in_http_headers",
    "http_headers_progress_interval_ms", "http_wait_end_of_query", "client_protocol_version",
}

# HTTP statuses by exception name, as ClickHouse's exceptionCodeToHTTPStatus maps them.
STATUS_BY_NAME = {
    **{n: 401 for n in ("REQUIRED_PASSWORD",)},
    **{n: 403 for n in ("UNKNOWN_USER", "WRONG_PASSWORD", "AUTHENTICATION_FAILED",
                        "SET_NON_GRANTED_ROLE", "ACCESS_DENIED")},
    **{n: 400 for n in (
        "BAD_ARGUMENTS", "CANNOT_COMPILE_REGEXP", "CANNOT_PARSE_TEXT", "CANNOT_PARSE_ESCAPE_SEQUENCE",
        "CANNOT_PARSE_QUOTED_STRING", "CANNOT_PARSE_DATE", "CANNOT_PARSE_DATETIME",
        "CANNOT_PARSE_NUMBER", "CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING", "CANNOT_PARSE_IPV4",
        "CANNOT_PARSE_IPV6", "CANNOT_PARSE_INPUT_ASSERTION_FAILED", "CANNOT_PARSE_UUID",
        "DUPLICATE_COLUMN", "ILLEGAL_COLUMN", "UNKNOWN_ELEMENT_IN_AST", "UNKNOWN_TYPE_OF_AST_NODE",
        "THERE_IS_NO_COLUMN", "TOO_DEEP_AST", "TOO_BIG_AST", "UNEXPECTED_AST_STRUCTURE",
        "SYNTAX_ERROR", "INCORRECT_DATA", "TYPE_MISMATCH", "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE")},
    **{n: 404 for n in (
        "UNKNOWN_TABLE", "UNKNOWN_FUNCTION", "UNKNOWN_IDENTIFIER", "UNKNOWN_TYPE",
        "UNKNOWN_STORAGE", "UNKNOWN_DATABASE", "UNKNOWN_SETTING", "UNKNOWN_DIRECTION_OF_SORTING",
        "UNKNOWN_AGGREGATE_FUNCTION", "UNKNOWN_FORMAT", "UNKNOWN_DATABASE_ENGINE",
        "UNKNOWN_TYPE_OF_QUERY", "UNKNOWN_ROLE")},
    "QUERY_IS_TOO_LARGE": 413,
    "NOT_IMPLEMENTED": 501,
    "SOCKET_TIMEOUT": 503,
    "CANNOT_OPEN_FILE": 503,
    "CANNOT_SCHEDULE_TASK": 503,
    "HTTP_LENGTH_REQUIRED": 411,
    "TIMEOUT_EXCEEDED": 408,
    "UNSUPPORTED_MEDIA_TYPE": 415,
}

CONTENT_TYPES = {
    "TabSeparated": "text/tab-separated-values; charset=UTF-8",
    "TSV": "text/tab-separated-values; charset=UTF-8",
    "TabSeparatedWithNames": "text/tab-separated-values; charset=UTF-8",
    "TSVWithNames": "text/tab-separated-values; charset=UTF-8",
    "TabSeparatedWithNamesAndTypes": "text/tab-separated-values; charset=UTF-8",
    "CSV": "text/csv; charset=UTF-8; header=absent",
    "CSVWithNames": "text/csv; charset=UTF-8; header=present",
    "Pretty": "text/plain; charset=UTF-8",
    "PrettyCompact": "text/plain; charset=UTF-8",
}

METHOD_NONE, METHOD_LZ4, METHOD_ZSTD = 0x02, 0x82, 0x90
MAX_BLOCK = 1 << 30  # a single compressed block larger than this is refused as corrupt
MAX_QUERY_BYTES = 256 << 20


class CHError(Exception):
    """An error reported to the client the way ClickHouse reports it."""

    def __init__(self, code: int, name: str, message: str):
        super().__init__(message)
        self.code, self.name, self.message = code, name, message

    def body(self) -> bytes:
        return (f"Code: {self.code}. DB::Exception: {self.message} ({self.name}) "
                f"(version {ENGINE_VERSION} (chserver))\n").encode()

    @property
    def status(self) -> int:
        return STATUS_BY_NAME.get(self.name, 500)


ENGINE_ERROR = re.compile(r"Code: (\d+)\. DB::Exception: (.*)", re.S)
TRAILING_NAME = re.compile(r"\s*\(([A-Z_0-9]+)\)(?:\s*\(version [^)]*\))?\s*$")


def engine_error(exc: Exception) -> CHError:
    """Turn an exception raised by chdb into a ClickHouse-shaped error."""
    text = str(exc)
    m = ENGINE_ERROR.search(text)
    if not m:
        return CHError(1001, "STD_EXCEPTION", text.strip() or type(exc).__name__)
    code, message = int(m.group(1)), m.group(2).strip()
    name = "UNKNOWN_EXCEPTION"
    n = TRAILING_NAME.search(message)
    if n:
        name, message = n.group(1), message[: n.start()].rstrip()
    return CHError(code, name, message)


# ---------------------------------------------------------------------------------------------
# ClickHouse compressed block framing
# ---------------------------------------------------------------------------------------------

def checksum(data: bytes) -> bytes:
    # ClickHouse writes CityHash128 v1.0.2 as its two 64-bit halves, `first` then `second`,
    # little-endian; the binding packs `first` into the high bits of its integer.
    h = CityHash128(data)
    return struct.pack("<QQ", h >> 64, h & 0xFFFFFFFFFFFFFFFF)


def compress_blocks(data: bytes, block_size: int = 1 << 20) -> bytes:
    """Frame `data` as ClickHouse LZ4 compressed blocks (what `compress=1` returns)."""
    out = []
    for i in range(0, max(len(data), 1), block_size):
        chunk = data[i:i + block_size]
        body = lz4.block.compress(chunk, store_size=False)
        header = struct.pack("<BII", METHOD_LZ4, len(body) + 9, len(chunk))
        out.append(checksum(header + body) + header + body)
    return b"".join(out)


class BlockDecompressor:
    """Reads ClickHouse compressed blocks from a byte stream, yielding decompressed chunks."""

    def __init__(self, read):
        self._read = read

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            part = self._read(n - len(buf))
            if not part:
                break
            buf += part
        return bytes(buf)

    def __iter__(self):
        while True:
            head = self._exact(25)
            if not head:
                return
            if len(head) < 25:
                raise CHError(33, "CANNOT_READ_ALL_DATA",
                              f"Cannot read all data: truncated compressed block header ({len(head)} of 25 bytes)")
            expected, header = head[:16], head[16:]
            method, size_compressed, size_plain = struct.unpack("<BII", header)
            # The checks in the order ClickHouse's CompressedReadBufferBase makes them: codec from
            # the method byte, then the sizes, then the checksum over header and data.
            if method not in (METHOD_NONE, METHOD_LZ4) and not (method == METHOD_ZSTD and zstandard is not None):
                raise CHError(432, "UNKNOWN_CODEC", f"Unknown codec family code: {method}")
            if size_compressed > MAX_BLOCK:
                raise CHError(39, "TOO_LARGE_SIZE_COMPRESSED",
                              f"Too large size_compressed_without_checksum: {size_compressed}. Most likely corrupted data.")
            if size_compressed < 9:
                raise CHError(246, "CORRUPTED_DATA",
                              f"Can't decompress data: the compressed data size ({size_compressed}, this should "
                              "include header size) is less than the header size (9)")
            if size_plain > MAX_BLOCK:
                raise CHError(271, "CANNOT_DECOMPRESS", f"Too large size_decompressed: {size_plain}. Most likely corrupted data.")
            body = self._exact(size_compressed - 9)
            if len(body) < size_compressed - 9:
                raise CHError(33, "CANNOT_READ_ALL_DATA",
                              f"Cannot read all data. Bytes read: {len(body)}. Bytes expected: {size_compressed - 9}.")
            actual = checksum(header + body)
            if not hmac.compare_digest(actual, expected):
                raise CHError(40, "CHECKSUM_DOESNT_MATCH",
                              "Checksum doesn't match: corrupted data. Reference: "
                              f"{expected.hex()}. Actual: {actual.hex()}. Size of compressed block: {size_compressed}")
            if method == METHOD_LZ4:
                try:
                    yield lz4.block.decompress(body, uncompressed_size=size_plain)
                except Exception as exc:  # noqa: BLE001 - lz4 raises plain errors
                    raise CHError(271, "CANNOT_DECOMPRESS", f"Cannot decompress LZ4 block: {exc}") from exc
            elif method == METHOD_NONE:
                yield body
            else:
                try:
                    yield zstandard.ZstdDecompressor().decompress(body, max_output_size=size_plain)
                except Exception as exc:  # noqa: BLE001
                    raise CHError(271, "CANNOT_DECOMPRESS", f"Cannot decompress ZSTD block: {exc}") from exc


# ---------------------------------------------------------------------------------------------
# Finding where an INSERT's data starts (a small lexer: strings, identifiers, comments)
# ---------------------------------------------------------------------------------------------

def _skip_quoted(text: str, i: int, quote: str) -> int:
    i += 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == quote:
            if i + 1 < len(text) and text[i + 1] == quote:
                i += 2
                continue
            return i + 1
        i += 1
    return i


def _tokens(text: str):
    """Yield (token, start, end) outside literals and comments: bare words (upper-cased) and
    single punctuation characters; quoted strings and identifiers are skipped."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":
            i = _skip_quoted(text, i, c)
        elif text.startswith("--", i) or c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            yield text[i:j].upper(), i, j
            i = j
        else:
            if not c.isspace():
                yield c, i, i + 1
            i += 1


def top_level_words(text: str):
    """Yield (word_upper, start, end) of bare words outside literals and comments."""
    for tok, start, end in _tokens(text):
        if tok[0].isalpha() or tok[0] == "_":
            yield tok, start, end


def first_word(text: str) -> str:
    for word, _, _ in top_level_words(text):
        return word
    return ""


def _clause_words(text: str):
    """Yield (word_upper, start, end) of the bare words outside parentheses (so a column named
    `format` or `values` in an INSERT's column list is not taken for the clause)."""
    depth = 0
    for tok, start, end in _tokens(text):
        if tok == "(":
            depth += 1
        elif tok == ")":
            depth = max(depth - 1, 0)
        elif depth == 0 and (tok[0].isalpha() or tok[0] == "_"):
            yield tok, start, end


def split_insert(text: str):
    """For `INSERT … FORMAT X <data>` / `INSERT … VALUES <data>` return (statement, format, data_offset).

    Returns None for an INSERT that carries no data (INSERT … SELECT), or while the text does
    not yet reach the format name.
    """
    words = _clause_words(text)
    for word, start, end in words:
        if word == "VALUES":
            return text[:start].rstrip(), "Values", end
        if word == "FORMAT":
            # The format name is the next token, which must be a word.
            for tok, fstart, fend in _tokens(text[end:]):
                if not (tok[0].isalpha() or tok[0] == "_"):
                    return None
                fmt_end = end + fend
                fmt = text[end + fstart:fmt_end]
                break
            else:
                return None
            # Data begins after the format name, skipping blanks up to and including one newline.
            j = fmt_end
            while j < len(text) and text[j] in " \t\r":
                j += 1
            if j < len(text) and text[j] == "\n":
                j += 1
            return text[:start].rstrip(), fmt, j
        if word == "SELECT" or word == "WITH":
            return None
    return None


def _only_blanks(text: str) -> bool:
    """True when text holds nothing but blanks, comments and semicolons."""
    return all(tok == ";" for tok, _, _ in _tokens(text))


def format_clause(text: str):
    """The `FORMAT <name>` clause that ends a query (optionally followed by SETTINGS):
    (name, start, end), or None when the query names no output format."""
    words = list(_clause_words(text))
    for k in range(len(words) - 1, -1, -1):
        word, start, end = words[k]
        if word != "FORMAT" or k + 1 == len(words):
            continue
        _, nstart, nend = words[k + 1]
        if text[end:nstart].strip():
            continue
        rest_end = words[k + 2][1] if k + 2 < len(words) else len(text)
        if k + 2 < len(words) and words[k + 2][0] != "SETTINGS":
            continue
        if not _only_blanks(text[nend:rest_end]):
            continue
        return text[nstart:nend], start, nend
    return None


def multi_statement_at(text: str) -> int | None:
    """Offset of the `;` that ends the first of several statements, or None for one statement."""
    end = None
    for tok, start, _ in _tokens(text):
        if tok == ";":
            if end is None:
                end = start
        elif end is not None:
            return end
    return None


def strip_trailing_semicolon(text: str) -> str:
    last = None
    for tok, start, _ in _tokens(text):
        last = (tok, start)
    if last and last[0] == ";":
        return text[:last[1]] + text[last[1] + 1:]
    return text


def quote_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_identifier(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ---------------------------------------------------------------------------------------------
# Native output for clients that announce a protocol revision (`client_protocol_version=N`)
# ---------------------------------------------------------------------------------------------
#
# Over HTTP, ClickHouse writes the Native format for the protocol revision the client announces
# in `client_protocol_version` (clickhouse-go sends it on every request and decodes accordingly):
# a BlockInfo before each block and, from revision 54454 on, a "custom serialization" flag after
# each column's type. The embedded engine can only write Native for revision 0. So chserver has
# the engine write the `Buffers` format, which carries every column's serialized data exactly as
# Native does plus its byte length, and frames those bytes as Native for the client's revision.
# Column names and types come from the engine too: `DESCRIBE TABLE (<query>)` for SELECT queries,
# or the header of a second run for read-only statements (DESCRIBE, SHOW, EXISTS, ...). No value
# is decoded.

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


def parse_form(body: bytes, content_type: str) -> list[tuple[str, str]]:
    """The fields of a multipart/form-data body, as (name, value) pairs."""
    if len(body) > MAX_QUERY_BYTES:
        raise CHError(229, "QUERY_IS_TOO_LARGE", "Query is too large")
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1", "replace") + b"\r\n\r\n" + body)
    if not msg.is_multipart():
        raise CHError(36, "BAD_ARGUMENTS", "Malformed multipart/form-data body")
    fields = []
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not name:
            raise CHError(36, "BAD_ARGUMENTS", "A multipart/form-data part has no name")
        if part.get_filename() is not None:
            raise CHError(48, "NOT_IMPLEMENTED", f"chserver does not implement external tables (form file '{name}')")
        value = part.get_payload(decode=True) or b""
        fields.append((str(name), value.decode("utf-8", "surrogateescape")))
    return fields


# ---------------------------------------------------------------------------------------------
# HTTP compression (Content-Encoding of requests, enable_http_compression for responses)
# ---------------------------------------------------------------------------------------------

# The names ClickHouse accepts in Content-Encoding (chooseCompressionMethod), by method.
CONTENT_ENCODINGS = {
    "gzip": "gzip", "gz": "gzip", "x-gzip": "gzip", "deflate": "deflate",
    "br": "br", "brotli": "br", "xz": "xz", "lzma": "xz", "zstd": "zstd", "zst": "zstd",
    "lz4": "lz4", "bz2": "bz2", "snappy": "snappy",
}
# Decoding errors, as ClickHouse names them.
DECODE_ERRORS = {
    "gzip": (354, "ZLIB_INFLATE_FAILED"), "deflate": (354, "ZLIB_INFLATE_FAILED"),
    "br": (448, "BROTLI_READ_FAILED"), "xz": (554, "LZMA_STREAM_DECODER_FAILED"),
    "zstd": (561, "ZSTD_DECODER_FAILED"), "lz4": (618, "LZ4_DECODER_FAILED"),
    "bz2": (594, "BZIP2_STREAM_DECODER_FAILED"),
}
# Response methods in ClickHouse's order of preference (chooseHTTPCompressionMethod); snappy,
# which chserver does not implement, is left out.
RESPONSE_ENCODINGS = ("zstd", "br", "lz4", "gzip", "deflate", "xz", "bz2")


def _brotli():
    # Brotli comes with pyarrow, which chdb itself depends on; imported only when used.
    import pyarrow  # noqa: PLC0415
    return pyarrow


class _RawStream(io.RawIOBase):
    """A readable raw stream over a read(n) function (for pyarrow's streaming decoders)."""

    def __init__(self, read):
        super().__init__()
        self._read = read

    def readable(self):
        return True

    def readinto(self, b):
        data = self._read(len(b))
        b[:len(data)] = data
        return len(data)


def decode_content(chunks, encoding: str):
    """Decode an iterator of body chunks sent with HTTP `Content-Encoding: encoding`."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity", "none"):
        return chunks
    method = CONTENT_ENCODINGS.get(encoding)
    if method is None:
        raise CHError(48, "NOT_IMPLEMENTED",
                      f"Unknown compression method '{encoding}'. Only 'auto', 'none', 'gzip', 'deflate', 'br', "
                      "'xz', 'zstd', 'lz4', 'bz2', 'snappy' are supported as compression methods")
    if method == "snappy" or (method == "zstd" and zstandard is None):
        raise CHError(48, "NOT_IMPLEMENTED", f"chserver does not implement the HTTP compression method '{encoding}'")
    code, name = DECODE_ERRORS[method]

    def guarded(gen):
        try:
            yield from gen
        except CHError:
            raise
        except Exception as exc:  # noqa: BLE001 - every decoder raises its own error types
            raise CHError(code, name, f"Cannot decode the request body ({encoding}): {exc}") from exc

    def incremental(new_decoder):
        # One decoder per stream; a body may hold several concatenated streams (gzip members,
        # zstd/lz4/xz frames). Anything after the end of one stream starts the next.
        dec, fed = new_decoder(), False
        for c in chunks:
            while c:
                out = dec.decompress(c)
                fed = True
                if out:
                    yield out
                if not dec.eof:
                    break
                c, dec, fed = dec.unused_data, new_decoder(), False
        if fed:
            raise CHError(code, name, f"Cannot decode the request body ({encoding}): truncated stream")

    if method in ("gzip", "deflate"):
        gen = incremental(lambda: zlib.decompressobj(wbits=47 if method == "gzip" else 15))
    elif method == "xz":
        gen = incremental(lzma.LZMADecompressor)
    elif method == "bz2":
        gen = incremental(bz2.BZ2Decompressor)
    elif method == "lz4":
        gen = incremental(lz4.frame.LZ4FrameDecompressor)
    elif method == "zstd":
        gen = incremental(lambda: zstandard.ZstdDecompressor().decompressobj())
    else:  # br
        def unbrotli():
            pa = _brotli()
            stream = pa.CompressedInputStream(pa.PythonFile(_RawStream(_IterReader(chunks).read), mode="r"), "brotli")
            while True:
                out = stream.read(1 << 20)
                if not out:
                    return
                yield out
        gen = unbrotli()
    return guarded(gen)


def choose_response_encoding(accept_encoding: str) -> str | None:
    accept = accept_encoding.lower()
    for method in RESPONSE_ENCODINGS:
        if method in accept and (method != "zstd" or zstandard is not None):
            return method
    return None


def encode_content(data: bytes, method: str, level: int = 3) -> bytes:
    """Encode a response body with an HTTP compression method (enable_http_compression=1)."""
    if method == "gzip":
        return gzip.compress(data, max(0, min(level, 9)))
    if method == "deflate":
        return zlib.compress(data, max(0, min(level, 9)))
    if method == "zstd":
        return zstandard.ZstdCompressor(level=max(1, min(level, 22))).compress(data)
    if method == "br":
        return _brotli().Codec("brotli", compression_level=max(0, min(level, 11))).compress(data, asbytes=True)
    if method == "lz4":
        return lz4.frame.compress(data)
    if method == "xz":
        return lzma.compress(data, preset=max(0, min(level, 9)))
    if method == "bz2":
        return bz2.compress(data, max(1, min(level, 9)))
    raise ValueError(method)


# ---------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------

class Engine:
    """The chdb engine and the users allowed to reach it."""

    def __init__(self, data_dir: str, users: dict[str, str]):
        self.data_dir = data_dir
        self.users = users
        self.started = time.time()
        # The first connection starts the engine (loading every database: ~0.2 s and more with
        # more tables) and closing the last one shuts it down again. This connection stays open
        # for the server's lifetime so that the per-request connections cost ~0.3 ms, not a
        # restart of the engine each.
        self._keeper = chdb.connect(self.data_dir)

    def connect(self):
        return chdb.connect(self.data_dir)

    def close(self):
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "chserver"

    def version_string(self):
        return self.server_version
    engine: Engine  # set on the class by main()

    # -- plumbing ------------------------------------------------------------------------------

    def log_message(self, format, *args):  # noqa: A002 - signature from the base class
        LOG.debug("%s - %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, headers: dict[str, str]):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        else:
            self.send_header("Connection", "Keep-Alive")
            self.send_header("Keep-Alive", "timeout=10")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _base_headers(self, query_id: str) -> dict[str, str]:
        return {
            "X-ClickHouse-Server-Display-Name": "chserver",
            "X-ClickHouse-Query-Id": query_id,
            "X-ClickHouse-Timezone": "UTC",
        }

    def _error(self, err: CHError, query_id: str, params: dict[str, str]):
        headers = self._base_headers(query_id)
        headers["Content-Type"] = "text/plain; charset=UTF-8"
        headers["X-ClickHouse-Exception-Code"] = str(err.code)
        body = err.body()
        LOG.info("query %s failed: %s", query_id, body.decode(errors="replace").strip()[:500])
        if params.get("compress") == "1":
            body = compress_blocks(body)
        self._send(err.status, body, headers)

    # -- body reading --------------------------------------------------------------------------

    def _raw_reader(self):
        """A read(n) over the request body, handling Content-Length and chunked encoding."""
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        rfile = self.rfile
        if "chunked" in te:
            state = {"left": 0, "done": False}

            def read(n: int) -> bytes:
                if state["done"]:
                    return b""
                if state["left"] == 0:
                    line = rfile.readline(65537)
                    size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        state["done"] = True
                        return b""
                    state["left"] = size
                data = rfile.read(min(n, state["left"]))
                state["left"] -= len(data)
                if state["left"] == 0:
                    rfile.readline(3)  # CRLF after the chunk
                return data

            return read
        length = int(self.headers.get("Content-Length") or 0)
        state = {"left": length}

        def read(n: int) -> bytes:
            if state["left"] <= 0:
                return b""
            data = rfile.read(min(n, state["left"]))
            state["left"] -= len(data)
            if not data:
                state["left"] = 0
            return data

        return read

    def _body_chunks(self, params: dict[str, str]):
        """Yield the decoded request body in chunks (Content-Encoding, then decompress=1)."""
        read = self._raw_reader()
        encoding = (self.headers.get("Content-Encoding") or "").strip().lower()

        def raw_chunks():
            while True:
                data = read(1 << 20)
                if not data:
                    return
                yield data

        chunks = decode_content(raw_chunks(), encoding)
        if params.get("decompress") == "1":
            reader = _IterReader(chunks)
            return iter(BlockDecompressor(reader.read))
        return chunks

    # -- request handling ----------------------------------------------------------------------

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = urlsplit(self.path).path
        if path in ("/ping", "/replicas_status") or (path == "/" and "query=" not in self.path):
            self._send(200, b"Ok.\n", {"Content-Type": "text/html; charset=UTF-8"})
            return
        if not urlsplit(self.path).query:
            # ClickHouse's query handler takes GET requests only with URL parameters.
            self._send(404, (f"There is no handle {path}\n\nUse / or /ping for health checks.\n"
                             "Or /replicas_status for more sophisticated health checks.\n\n"
                             "Send queries from your program with POST method or GET /?query=...\n").encode(),
                       {"Content-Type": "text/plain; charset=UTF-8"})
            return
        self._handle(readonly=True)

    def do_POST(self):
        self._handle(readonly=False)

    def _authenticate(self, params: dict[str, str]) -> str:
        user = self.headers.get("X-ClickHouse-User")
        key = self.headers.get("X-ClickHouse-Key")
        auth = self.headers.get("Authorization") or ""
        if auth.lower().startswith("basic "):
            try:
                u, _, p = base64.b64decode(auth[6:].strip()).decode().partition(":")
            except Exception as exc:  # noqa: BLE001
                raise CHError(516, "AUTHENTICATION_FAILED", "Invalid Basic authorization header") from exc
            if user is not None or "user" in params:
                raise CHError(516, "AUTHENTICATION_FAILED",
                              "Invalid authentication: it is not allowed to use Authorization HTTP header "
                              "and authentication via parameters simultaneously")
            user, key = u, p
        if user is None:
            user = params.get("user", "default")
        if key is None:
            key = params.get("password", "")
        expected = self.engine.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), key.encode()):
            raise CHError(516, "AUTHENTICATION_FAILED",
                          f"{user}: Authentication failed: password is incorrect, or there is no user with such name.")
        return user

    def _handle(self, readonly: bool):
        started = time.monotonic_ns()
        params = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
        query_id = params.get("query_id") or str(uuid.uuid4())
        body_consumed = False
        try:
            form = (self.command == "POST"
                    and (self.headers.get("Content-Type") or "").lower().startswith("multipart/form-data"))
            if form:
                # Fields of a multipart/form-data body are parameters like those of the URL
                # (`query`, `param_*`, settings); the URL's win, as ClickHouse's HTMLForm keeps them first.
                for name, value in parse_form(b"".join(self._body_chunks(params)), self.headers.get("Content-Type")):
                    params.setdefault(name, value)
                body_consumed = True
            self._authenticate(params)
            if params.get("session_id") and params.get("session_check") == "1":
                # chserver keeps no HTTP sessions (each request is a fresh query context), so a
                # session the client expects to exist never does.
                raise CHError(372, "SESSION_NOT_FOUND", f"Session {params['session_id']} not found")
            settings = {k: v for k, v in params.items() if k not in PROTOCOL_PARAMS and not k.startswith("param_")}
            qparams = {k[6:]: v for k, v in params.items() if k.startswith("param_")}
            database = self.headers.get("X-ClickHouse-Database") or params.get("database")
            fmt = self.headers.get("X-ClickHouse-Format") or params.get("default_format") or "TabSeparated"
            if readonly:
                settings.setdefault("readonly", "2")
            query = params.get("query", "")
            chunks = self._body_chunks(params) if self.command == "POST" and not form else iter(())

            statement = query
            data_head, insert = b"", None
            if not query.strip() or first_word(query) != "INSERT" or split_insert(query) is None:
                # The query (or its continuation) is in the body: read until its data starts.
                head = bytearray()
                for chunk in chunks:
                    head += chunk
                    text = (query + ("\n" if query else "") + head.decode("utf-8", "surrogateescape"))
                    if first_word(text) == "INSERT":
                        found = split_insert(text)
                        # Stop once the data has started (a format name at the very end of
                        # what has arrived may still continue in the next chunk).
                        if found is not None and (found[2] < len(text) or not text[-1:].isalnum()):
                            break
                    if len(head) > MAX_QUERY_BYTES:
                        raise CHError(229, "QUERY_IS_TOO_LARGE", "Query is too large")
                else:
                    body_consumed = True
                text = query + ("\n" if query and head else "") + head.decode("utf-8", "surrogateescape")
                statement = text
                if first_word(text) == "INSERT":
                    insert = split_insert(text)
                    if insert is not None:
                        stmt, fmt_in, offset = insert
                        data_head = text[offset:].encode("utf-8", "surrogateescape")
                        insert = (stmt, fmt_in)
            else:
                stmt, fmt_in, offset = split_insert(query)
                data_head = query[offset:].encode("utf-8", "surrogateescape")
                insert = (stmt, fmt_in)

            if not statement.strip():
                raise CHError(62, "SYNTAX_ERROR", "Empty query")
            if insert is None and (at := multi_statement_at(statement)) is not None:
                raise CHError(62, "SYNTAX_ERROR", "Syntax error (Multi-statements are not allowed): failed at "
                                                  f"position {at + 1} (end of query): {statement[at:at + 100]}")
            conn = self.engine.connect()
            try:
                self._prepare(conn, settings, qparams, database)
                if insert is not None:
                    stmt, fmt_in = insert
                    summary = self._insert(conn, stmt, fmt_in, data_head, chunks)
                    body_consumed = True
                    result, out_fmt = b"", fmt
                else:
                    body_consumed = True
                    # A FORMAT clause in the query wins over default_format / X-ClickHouse-Format.
                    clause = format_clause(statement)
                    out_fmt = clause[0] if clause else fmt
                    revision = client_revision(params)
                    if revision and out_fmt.lower() == "native":
                        if clause:
                            statement = statement[:clause[1]] + statement[clause[2]:]
                        if settings.get("output_format_native_encode_types_in_binary_format", "0") not in ("0", "false"):
                            raise CHError(48, "NOT_IMPLEMENTED", "chserver does not implement "
                                          "output_format_native_encode_types_in_binary_format with client_protocol_version")
                        result, r = native_result(conn, statement, revision)
                    else:
                        r = conn.query(statement, fmt)
                        result = bytes(r.bytes() or b"")
                    summary = {
                        "read_rows": r.rows_read(), "read_bytes": r.bytes_read(),
                        "written_rows": 0, "written_bytes": 0, "total_rows_to_read": r.rows_read(),
                        "result_rows": r.rows_read(), "result_bytes": len(result),
                    }
            finally:
                conn.close()
        except CHError as err:
            self.close_connection = self.close_connection or not body_consumed
            self._error(err, query_id, params)
            return
        except Exception as exc:  # noqa: BLE001 - every engine error goes back to the client
            self.close_connection = self.close_connection or not body_consumed
            self._error(engine_error(exc), query_id, params)
            return

        summary["elapsed_ns"] = time.monotonic_ns() - started
        headers = self._base_headers(query_id)
        headers["X-ClickHouse-Format"] = out_fmt
        headers["Content-Type"] = CONTENT_TYPES.get(out_fmt, "application/octet-stream"
                                                    if not out_fmt.startswith("JSON")
                                                    else "application/json; charset=UTF-8")
        headers["X-ClickHouse-Summary"] = json.dumps({k: str(v) for k, v in summary.items()},
                                                     separators=(",", ":"))
        if params.get("compress") == "1":
            result = compress_blocks(result) if result else b""
        # HTTP compression applies on top of compress=1 framing, as in ClickHouse.
        if params.get("enable_http_compression") == "1" and result:
            method = choose_response_encoding(self.headers.get("Accept-Encoding") or "")
            if method:
                try:
                    level = int(params.get("http_zlib_compression_level") or 3)
                except ValueError:
                    level = 3
                result, headers["Content-Encoding"] = encode_content(result, method, level), method
        self._send(200, result, headers)

    def _prepare(self, conn, settings: dict[str, str], qparams: dict[str, str], database: str | None):
        for name, value in settings.items():
            if not SETTING_NAME.match(name):
                raise CHError(115, "UNKNOWN_SETTING", f"Unknown setting '{name}'")
            conn.query(f"SET {name} = {quote_string(value)}")
        for name, value in qparams.items():
            if not SETTING_NAME.match(name):
                raise CHError(36, "BAD_ARGUMENTS", f"Invalid query parameter name '{name}'")
            conn.query(f"SET param_{name} = {quote_string(value)}")
        if database:
            conn.query("USE " + quote_identifier(database))

    def _insert(self, conn, statement: str, fmt: str, head: bytes, chunks) -> dict:
        inserter = conn.send_insert(statement, fmt)
        written_bytes = 0
        try:
            if head:
                inserter.append(head)
                written_bytes += len(head)
            for chunk in chunks:
                inserter.append(chunk)
                written_bytes += len(chunk)
            res = inserter.finish()
        except BaseException:
            try:
                inserter.cancel()
            except Exception:  # noqa: BLE001 - cancelling an already failed insert may fail too
                pass
            # Drain what is left of the body so the connection could be reused.
            for _ in chunks:
                pass
            raise
        return {
            "read_rows": res.rows_written, "read_bytes": written_bytes,
            "written_rows": res.rows_written, "written_bytes": res.bytes_written,
            "total_rows_to_read": 0, "result_rows": res.rows_written, "result_bytes": res.bytes_written,
        }


class _IterReader:
    """A file-like read(n) over an iterator of byte chunks."""

    def __init__(self, chunks):
        self._chunks = iter(chunks)
        self._buf = b""

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self._buf) < n:
            try:
                self._buf += next(self._chunks)
            except StopIteration:
                break
        if n < 0:
            out, self._buf = self._buf, b""
        else:
            out, self._buf = self._buf[:n], self._buf[n:]
        return out


def load_users(path: str) -> dict[str, str]:
    users = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line and not line.startswith("#"):
                name, _, password = line.partition(":")
                users[name] = password
    if not users:
        raise SystemExit(f"chserver: no users in {path}")
    return users


def handle_error(_request, client_address):
    """A client that goes away mid-response is routine; anything else is logged with its trace."""
    exc = sys.exc_info()[1]
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        LOG.debug("%s: connection closed by the client: %s", client_address, exc)
    else:
        LOG.exception("unexpected error handling a request from %s", client_address)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="127.0.0.1:8123", help="host:port to listen on")
    ap.add_argument("--data", required=True, help="directory where the engine keeps its data")
    ap.add_argument("--users-file", required=True, help="file of `user:password` lines")
    ap.add_argument("--log-level", default=os.environ.get("CHSERVER_LOG", "INFO"))
    args = ap.parse_args()
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    host, _, port = args.listen.rpartition(":")
    os.makedirs(args.data, exist_ok=True)
    Handler.engine = Engine(os.path.abspath(args.data), load_users(args.users_file))
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 128
    server = ThreadingHTTPServer((host, int(port)), Handler)
    server.handle_error = handle_error

    def stop(signum, _frame):
        LOG.info("signal %s: shutting down", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    LOG.info("chserver %s (ClickHouse engine %s via chdb) listening on http://%s:%s, data in %s",
             "0.1", chdb.engine_version if hasattr(chdb, "engine_version") else ENGINE_VERSION,
             host, port, args.data)
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    Handler.engine.close()
    LOG.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
