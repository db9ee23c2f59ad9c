"""The HTTP server: ClickHouse's HTTP interface on top of the engine.

Request flow: auth → settings/params from the URL (or a multipart/form-data body) → body decoding
(HTTP Content-Encoding, then ClickHouse block decompression for `decompress=1`) → INSERT data
streamed to the engine, or the query run and its result returned (Native framed for the client's
`client_protocol_version`, optionally block-compressed for `compress=1` and HTTP-compressed for
`enable_http_compression=1`). `Engine` holds the chdb engine; one engine connection per request.
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import hmac
import json
import logging
import shutil
import socket
import tempfile
import time
import uuid
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qsl, urlsplit

import chdb

import infile
from blocks import BlockDecompressor, compress_blocks
from errors import CHError, as_request, engine_error
from faults import FAULTS
from httpcompression import IterReader, choose_response_encoding, decode_content, encode_content
from native import client_revision, native_result
from sqltext import (SETTING_NAME, first_word, format_clause, insert_target, multi_statement_at,
                     quote_identifier, quote_string, split_insert)
from stats import InsertStats

LOG = logging.getLogger("chserver")

# URL parameters that are part of the HTTP protocol; every other one is a query setting.
PROTOCOL_PARAMS = {
    "query", "database", "default_format", "user", "password", "quota_key", "query_id",
    "session_id", "session_timeout", "session_check", "compress", "decompress", "buffer_size",
    "wait_end_of_query", "role", "stacktrace", "http_response_buffer_size",
    "enable_http_compression", "http_zlib_compression_level", "send_progress_in_http_headers",
    "http_headers_progress_interval_ms", "http_wait_end_of_query", "client_protocol_version",
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

MAX_QUERY_BYTES = 256 << 20

# The read-only path of chserver's own INSERT counts (stats.py), for the bench. Only a GET
# without a `query` parameter is answered there: anything else on it is a query, as before.
STATS_PATH = "/chserver/inserts"


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


class Engine:
    """The chdb engine and the users allowed to reach it."""

    def __init__(self, data_dir: str, users: dict[str, str], custom_disks_dir: str | None = None):
        self.data_dir = data_dir
        self.users = users
        self.started = time.time()
        # The engine reads its options once, when the first connection starts it. ClickHouse's
        # `custom_local_disks_base_directory` lets a table name its own local disk
        # (`SETTINGS disk = disk(type = 'local', path = …)`), as on a server configured so.
        self.dsn = data_dir if not custom_disks_dir else (
            f"file:{data_dir}?custom_local_disks_base_directory={custom_disks_dir.rstrip('/')}/")
        # The first connection starts the engine (loading every database: ~0.2 s and more with
        # more tables) and closing the last one shuts it down again. This connection stays open
        # for the server's lifetime so that the per-request connections cost ~0.3 ms, not a
        # restart of the engine each.
        self._keeper = chdb.connect(self.dsn)
        # Where each INSERT's body passes to the engine (infile.py); private to this process.
        self.fifo_dir = tempfile.mkdtemp(prefix="chserver-insert-")

    def connect(self):
        return chdb.connect(self.dsn)

    def close(self):
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.close()
        shutil.rmtree(self.fifo_dir, ignore_errors=True)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "chserver"

    def version_string(self):
        return self.server_version

    def setup(self):
        super().setup()
        # A real server answers each request of a kept-alive connection at once. Without
        # TCP_NODELAY the body, written after the headers, waited for the client's delayed
        # ACK: every request but a connection's first took 40+ ms more (issue 29's freshness).
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
    engine: Engine  # set on the class by main()
    stats = InsertStats()  # INSERTs per target table since the server started (stats.py)

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
        """The read(n) over this request's body (one per request: what it has read is gone)."""
        if getattr(self, "_body_read", None) is None:
            self._body_read = self._new_raw_reader()
        return self._body_read

    def _drain_body(self) -> bool:
        """Read what is left of a POST body after an error, as ClickHouse does (drainRequestIfNeeded), so
        the connection stays usable and the client reads the answer instead of a reset. False
        when the body cannot be read to its end (the connection must then be closed)."""
        if self.command != "POST":
            return True
        try:
            read = self._raw_reader()
            while read(1 << 20):
                pass
            return True
        except Exception:  # noqa: BLE001 - a broken body: close the connection instead
            return False

    def _new_raw_reader(self):
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
                    if not line:
                        raise CHError(3, "UNEXPECTED_END_OF_FILE",
                                      "Unexpected end of file while reading chunk header of HTTP chunked data")
                    size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        state["done"] = True
                        return b""
                    state["left"] = size
                data = rfile.read(min(n, state["left"]))
                if not data:
                    raise CHError(3, "UNEXPECTED_END_OF_FILE", "Unexpected end of file while reading HTTP chunked data")
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
            if not data:
                # The client went away mid-body: the insert must fail, not commit what came.
                raise CHError(3, "UNEXPECTED_END_OF_FILE", f"Unexpected end of file: the request body ended "
                                                           f"after {length - state['left']} of {length} bytes")
            state["left"] -= len(data)
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
            reader = IterReader(chunks)
            return iter(BlockDecompressor(reader.read))
        return chunks

    # -- request handling ----------------------------------------------------------------------

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = urlsplit(self.path).path
        if path == STATS_PATH:
            params = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
            if "query" not in params:
                self._stats(params)
                return
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

    def _stats(self, params: dict[str, str]):
        """`GET /chserver/inserts`: the INSERT counts as JSON, for a user the server knows."""
        try:
            self._authenticate(params)
        except CHError as err:
            self._error(err, str(uuid.uuid4()), params)
            return
        body = json.dumps(self.stats.snapshot(), sort_keys=True).encode() + b"\n"
        self._send(200, body, {"Content-Type": "application/json; charset=UTF-8"})

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
        user = None
        self._body_read = None
        try:
            form = (self.command == "POST"
                    and (self.headers.get("Content-Type") or "").lower().startswith("multipart/form-data"))
            if form:
                # Fields of a multipart/form-data body are parameters like those of the URL
                # (`query`, `param_*`, settings); the URL's win, as ClickHouse's HTMLForm keeps them first.
                for name, value in parse_form(b"".join(self._body_chunks(params)), self.headers.get("Content-Type")):
                    params.setdefault(name, value)
                body_consumed = True
            user = self._authenticate(params)
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
                    target = insert_target(stmt) or (None, "")
                    target = (target[0] or database or "default", target[1])
                    try:
                        summary = self._insert(conn, stmt, fmt_in, data_head, chunks)
                    except BaseException:
                        self.stats.record(*target, ok=False)
                        raise
                    self.stats.record(*target, ok=True, rows=summary["written_rows"],
                                      body_bytes=summary["read_bytes"])
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
            self.close_connection = self.close_connection or not (body_consumed or self._drain_body())
            self._error(as_request(err, user, self.command == "GET") if user else err, query_id, params)
            return
        except Exception as exc:  # noqa: BLE001 - every engine error goes back to the client
            self.close_connection = self.close_connection or not (body_consumed or self._drain_body())
            err = engine_error(exc)
            self._error(as_request(err, user, self.command == "GET") if user else err, query_id, params)
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
        fault = FAULTS.rule_for(statement)  # the chaos runner's switches (faults.py); usually None
        if fault is not None:
            try:
                head, chunks = fault.before(head, chunks)
            except CHError:
                fault.after()
                raise
            try:
                return self._insert_now(conn, statement, fmt, head, chunks)
            finally:
                fault.after()
        return self._insert_now(conn, statement, fmt, head, chunks)

    def _insert_now(self, conn, statement: str, fmt: str, head: bytes, chunks) -> dict:
        # Through a FIFO and `INSERT … FROM INFILE`, not chdb's send_insert, which loses the
        # engine's errors (see infile.py).
        return infile.insert(conn, self.engine.fifo_dir, statement, fmt, head, chunks)
