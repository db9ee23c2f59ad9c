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
or the query run and its result returned (optionally block-compressed for `compress=1`).
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hmac
import json
import logging
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
            if size_compressed < 9 or size_compressed > MAX_BLOCK or size_plain > MAX_BLOCK:
                raise CHError(271, "CANNOT_DECOMPRESS",
                              f"Too large size_compressed_without_checksum: {size_compressed}")
            body = self._exact(size_compressed - 9)
            if len(body) < size_compressed - 9:
                raise CHError(33, "CANNOT_READ_ALL_DATA",
                              "Cannot read all data: truncated compressed block")
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
            elif method == METHOD_ZSTD and zstandard is not None:
                try:
                    yield zstandard.ZstdDecompressor().decompress(body, max_output_size=size_plain)
                except Exception as exc:  # noqa: BLE001
                    raise CHError(271, "CANNOT_DECOMPRESS", f"Cannot decompress ZSTD block: {exc}") from exc
            else:
                raise CHError(271, "CANNOT_DECOMPRESS", f"Unknown compression method: 0x{method:02x}")


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


def top_level_words(text: str):
    """Yield (word_upper, start, end) of bare words outside literals and comments."""
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
            i += 1


def first_word(text: str) -> str:
    for word, _, _ in top_level_words(text):
        return word
    return ""


def split_insert(text: str):
    """For `INSERT … FORMAT X <data>` / `INSERT … VALUES <data>` return (statement, format, data_offset).

    Returns None for an INSERT that carries no data (INSERT … SELECT).
    """
    words = list(top_level_words(text))
    for k, (word, start, end) in enumerate(words):
        if word == "VALUES":
            return text[:start].rstrip(), "Values", end
        if word == "FORMAT" and k + 1 < len(words):
            fmt, _, fmt_end = words[k + 1]
            fmt = text[words[k + 1][1]:fmt_end]
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


def quote_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_identifier(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ---------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------

class Engine:
    """The chdb engine and the users allowed to reach it."""

    def __init__(self, data_dir: str, users: dict[str, str]):
        self.data_dir = data_dir
        self.users = users
        self.started = time.time()
        self.sessions: dict[str, tuple[threading.Lock, object, float]] = {}
        self.sessions_lock = threading.Lock()
        # The first connection initialises the engine (≈50 ms); later ones are cheap.
        chdb.connect(self.data_dir).close()

    def connect(self):
        return chdb.connect(self.data_dir)


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
        if params.get("compress") == "1":
            body = compress_blocks(body)
        LOG.info("query %s failed: %s", query_id, body.decode(errors="replace").strip()[:500])
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

        chunks = raw_chunks()
        if encoding in ("gzip", "deflate", "x-gzip"):
            dec = zlib.decompressobj(wbits=47 if encoding != "deflate" else 15)

            def inflate(src):
                for c in src:
                    out = dec.decompress(c)
                    if out:
                        yield out
                tail = dec.flush()
                if tail:
                    yield tail

            chunks = inflate(chunks)
        elif encoding == "zstd" and zstandard is not None:
            chunks = zstandard.ZstdDecompressor().read_to_iter(_IterReader(chunks))
        elif encoding not in ("", "identity"):
            raise CHError(415, "UNSUPPORTED_MEDIA_TYPE", f"Unknown HTTP Content-Encoding: {encoding}")
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
            self._authenticate(params)
            settings = {k: v for k, v in params.items() if k not in PROTOCOL_PARAMS and not k.startswith("param_")}
            qparams = {k[6:]: v for k, v in params.items() if k.startswith("param_")}
            database = self.headers.get("X-ClickHouse-Database") or params.get("database")
            fmt = self.headers.get("X-ClickHouse-Format") or params.get("default_format") or "TabSeparated"
            if readonly:
                settings.setdefault("readonly", "2")
            query = params.get("query", "")
            chunks = self._body_chunks(params) if self.command == "POST" else iter(())

            statement = query
            data_head, insert = b"", None
            if not query.strip() or first_word(query) != "INSERT" or split_insert(query) is None:
                # The query (or its continuation) is in the body: read until its data starts.
                head = bytearray()
                for chunk in chunks:
                    head += chunk
                    text = (query + ("\n" if query else "") + head.decode("utf-8", "surrogateescape"))
                    if first_word(text) == "INSERT" and split_insert(text) is not None:
                        break
                    if len(head) > MAX_QUERY_BYTES:
                        raise CHError(393, "QUERY_IS_TOO_LARGE", "Query is too large")
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
                    r = conn.query(statement, fmt)
                    result = bytes(r.bytes() or b"")
                    summary = {
                        "read_rows": r.rows_read(), "read_bytes": r.bytes_read(),
                        "written_rows": 0, "written_bytes": 0, "total_rows_to_read": r.rows_read(),
                        "result_rows": r.rows_read(), "result_bytes": len(result),
                    }
                    out_fmt = fmt
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
        elif params.get("enable_http_compression") == "1":
            accept = (self.headers.get("Accept-Encoding") or "").lower()
            if "gzip" in accept:
                result, headers["Content-Encoding"] = gzip.compress(result, 3), "gzip"
            elif "zstd" in accept and zstandard is not None:
                result, headers["Content-Encoding"] = zstandard.ZstdCompressor().compress(result), "zstd"
            elif "deflate" in accept:
                result, headers["Content-Encoding"] = zlib.compress(result, 3), "deflate"
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
    LOG.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
