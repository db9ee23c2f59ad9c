"""Fidelity of chserver's INSERT path: every error the engine raises reaches the client as a
real ClickHouse server sends it — the HTTP status of ClickHouse's `exceptionCodeToHTTPStatus`
(src/Server/HTTP/exceptionCodeToHTTPStatus.cpp), `X-ClickHouse-Exception-Code: N` and a
`Code: N. DB::Exception: …` body — and nothing is written when the real server writes nothing.

Driven over real HTTP against a private chserver (a subprocess with its own data, users and
port; the shared stack is not touched), through the streaming insert path, in the shapes the
clients send:

- `Native` with `decompress=1&compress=1` (clickhouse-go over HTTP, i.e. the OpenTelemetry
  Collector's ClickHouse exporter), and with `decompress=1` alone (our collector);
- `RowBinary` with `decompress=1` (our collector; Rotel);
- `JSONEachRow` and `VALUES` in plain text (curl, hand-made inserts);

into each error class the collector classifies (collector/src/insert/retry.rs): parse and type errors,
252 for too many partitions and for too many parts, 241 memory, 243 no space, unknown table and
database, authentication, readonly; and a body that breaks on the server's side of the
connection (a bad `decompress=1` block, a client that disconnects mid-body) must not commit the
rows before the break. Every error is provoked in the engine itself (settings, table settings,
a disk without space), none is injected.
"""

from __future__ import annotations

import glob
import http.client
import json
import os
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
from urllib.parse import urlencode

import lz4.block
from clickhouse_cityhash.cityhash import CityHash128

HERE = os.path.dirname(os.path.abspath(__file__))
USER = "fidelity"
DAY = 86_400
T0 = 1_577_836_800  # 2020-01-01 00:00:00 UTC


# -- the client side, written independently of chserver's own modules ------------------------------

def ch_frames(raw: bytes, block: int = 1 << 16) -> bytes:
    """`raw` as ClickHouse compressed blocks (LZ4, method 0x82), what `decompress=1` expects."""
    out = bytearray()
    for i in range(0, len(raw), block):
        piece = raw[i:i + block]
        payload = lz4.block.compress(piece, store_size=False)
        header = struct.pack("<BII", 0x82, len(payload) + 9, len(piece))
        h = CityHash128(header + payload)
        out += struct.pack("<QQ", h >> 64, h & 0xFFFFFFFFFFFFFFFF) + header + payload
    return bytes(out)


def ch_unframe(data: bytes) -> bytes:
    """The plain bytes of a `compress=1` response."""
    out, i = bytearray(), 0
    while i < len(data):
        method, size, plain = struct.unpack_from("<BII", data, i + 16)
        assert method == 0x82, f"unexpected block method {method:#x}"
        out += lz4.block.decompress(data[i + 25:i + 16 + size], uncompressed_size=plain)
        i += 16 + size
    return bytes(out)


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def string(s: str) -> bytes:
    b = s.encode()
    return varint(len(b)) + b


# Rows are (d, x): `d DateTime` (seconds) and `x UInt32`, the columns of every table below.

def native(rows, d_type: str = "DateTime") -> bytes:
    """One Native block (revision 0: no BlockInfo), as clickhouse-go sends it over HTTP."""
    return (varint(2) + varint(len(rows))
            + string("d") + string(d_type) + b"".join(struct.pack("<I", d) for d, _ in rows)
            + string("x") + string("UInt32") + b"".join(struct.pack("<I", x) for _, x in rows))


def rowbinary(rows) -> bytes:
    return b"".join(struct.pack("<II", d, x) for d, x in rows)


def json_each_row(rows) -> bytes:
    return b"".join(json.dumps({"d": d, "x": x}).encode() + b"\n" for d, x in rows)


def values(rows) -> bytes:
    return b", ".join(f"({d}, {x})".encode() for d, x in rows)


class Shape:
    """How a client sends an INSERT: format, body encoding, URL parameters."""

    def __init__(self, name, fmt, encode, params=None, framed=False):
        self.name, self.fmt, self.encode, self.params, self.framed = name, fmt, encode, params or {}, framed

    def query(self, table: str) -> str:
        return f"INSERT INTO {table} (d, x) VALUES" if self.fmt == "Values" else \
            f"INSERT INTO {table} (d, x) FORMAT {self.fmt}"

    def body(self, rows) -> bytes:
        raw = self.encode(rows)
        return ch_frames(raw) if self.framed else raw


SHAPES = [
    Shape("Native, decompress=1&compress=1 (clickhouse-go, OTel Collector)", "Native", native,
          {"decompress": "1", "compress": "1"}, framed=True),
    Shape("Native, decompress=1 (tracehouse collector)", "Native", native, {"decompress": "1"}, framed=True),
    Shape("RowBinary, decompress=1 (tracehouse collector, Rotel)", "RowBinary", rowbinary,
          {"decompress": "1"}, framed=True),
    Shape("JSONEachRow (curl)", "JSONEachRow", json_each_row),
    Shape("VALUES (curl)", "Values", values),
]


def days(n: int):
    """n rows on n different days."""
    return [(T0 + i * DAY, i) for i in range(n)]


def same_day(n: int):
    return [(T0 + i, i) for i in range(n)]


# -- the private server -------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Answer:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    @property
    def code(self):
        v = self.headers.get("X-ClickHouse-Exception-Code")
        return int(v) if v is not None else None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class PrivateServer:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="chserver-fidelity-")
        self.password = secrets.token_hex(12)
        users = os.path.join(self.dir, "users")
        with open(users, "w", encoding="utf-8") as f:
            f.write(f"{USER}:{self.password}\n")
        self.port = free_port()
        self.disks = os.path.join(self.dir, "disks")
        os.makedirs(self.disks)
        self.log = open(os.path.join(self.dir, "chserver.log"), "wb")
        # The server's temporary files (its FIFOs, infile.py) in a place the tests can watch.
        self.tmp = os.path.join(self.dir, "tmp")
        os.makedirs(self.tmp)
        self.proc = subprocess.Popen(
            [sys.executable, "-u", os.path.join(HERE, "chserver.py"), "--listen", f"127.0.0.1:{self.port}",
             "--data", os.path.join(self.dir, "data"), "--users-file", users,
             "--custom-disks-dir", self.disks, "--log-level", "WARNING"],
            stdout=self.log, stderr=subprocess.STDOUT, env=dict(os.environ, TMPDIR=self.tmp))
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.request("GET", "/ping", auth=False).body == b"Ok.\n":
                    return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the private chserver did not start; log in {self.dir}")
            time.sleep(0.1)

    def inserts_in_flight(self) -> int:
        """INSERTs whose body is still on its way to the engine (each has its FIFO until it ends)."""
        return len(glob.glob(os.path.join(self.tmp, "chserver-insert-*", "*")))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def remove(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def request(self, method, path, body=None, headers=None, auth=True, password=None, chunked=False):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            h = dict(headers or {})
            if auth:
                h.update({"X-ClickHouse-User": USER, "X-ClickHouse-Key": password or self.password})
            if chunked and body is not None:
                data = body
                body = (data[i:i + 4096] for i in range(0, len(data), 4096))
                conn.request(method, path, body=body, headers=h, encode_chunked=True)
            else:
                conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            return Answer(r.status, dict(r.getheaders()), r.read())
        finally:
            conn.close()

    def query(self, sql: str, **params) -> str:
        a = self.request("POST", "/?" + urlencode(params), body=sql.encode())
        if a.status != 200:
            raise AssertionError(f"{sql}: HTTP {a.status}: {a.text}")
        return a.text

    def insert(self, shape: Shape, table: str, rows, settings=None, password=None, method="POST",
               chunked=True) -> Answer:
        params = {"query": shape.query(table), **shape.params, **(settings or {})}
        a = self.request(method, "/?" + urlencode(params), body=shape.body(rows) if method == "POST" else None,
                         password=password, chunked=chunked)
        if shape.params.get("compress") == "1" and a.status != 200:
            a.body = ch_unframe(a.body)  # a real server compresses the error text too
        return a


SERVER: PrivateServer | None = None


def setUpModule():
    global SERVER
    SERVER = PrivateServer()


def tearDownModule():
    if SERVER is not None:
        SERVER.remove()


# -- the suite ------------------------------------------------------------------------------------------

class FidelityCase(unittest.TestCase):
    """Helpers: a fresh table per test, and the assertion every error case makes."""

    ENGINE = "MergeTree PARTITION BY toDate(d) ORDER BY x"

    def setUp(self):
        self.db = "fid_" + secrets.token_hex(4)
        SERVER.query(f"CREATE DATABASE {self.db}")

    def tearDown(self):
        SERVER.query(f"DROP DATABASE IF EXISTS {self.db} SYNC")

    def table(self, name="t", engine=None) -> str:
        full = f"{self.db}.{name}"
        SERVER.query(f"CREATE TABLE {full} (d DateTime, x UInt32) ENGINE = {engine or self.ENGINE}")
        return full

    def count(self, table: str) -> int:
        return int(SERVER.query(f"SELECT count() FROM {table}"))

    def assert_error(self, answer: Answer, status: int, code: int, name: str, prefix: str):
        """As ClickHouse's HTTPHandler answers an exception: the status for the code, the code in
        `X-ClickHouse-Exception-Code`, and `Code: N. DB::Exception: <message> (NAME) (version …)`."""
        self.assertEqual((answer.status, answer.code), (status, code), answer.text)
        self.assertTrue(answer.text.startswith(f"Code: {code}. DB::Exception: {prefix}"), answer.text)
        self.assertIn(f"({name}) (version ", answer.text)


class BaselineTest(FidelityCase):
    """Each shape inserts correctly: the error cases below fail for their reason, not the encoding's."""

    def test_every_shape_writes_its_rows_and_reports_them(self):
        t = self.table()
        written = 0
        for shape in SHAPES:
            with self.subTest(shape.name):
                a = SERVER.insert(shape, t, days(7))
                self.assertEqual(a.status, 200, a.text)
                self.assertIsNone(a.code)
                self.assertEqual(json.loads(a.headers["X-ClickHouse-Summary"])["written_rows"], "7")
                written += 7
                self.assertEqual(self.count(t), written)


class InsertStatsPathTest(FidelityCase):
    """`GET /chserver/inserts` (stats.py): INSERT statements per database and table, counted as
    the clients send them; a read-only path for a known user that changes nothing else."""

    def stats(self) -> dict:
        a = SERVER.request("GET", "/chserver/inserts")
        self.assertEqual(a.status, 200, a.text)
        return json.loads(a.body).get(self.db, {})

    def test_inserts_are_counted_per_table_whatever_the_shape(self):
        t = self.table()
        for shape in SHAPES:
            self.assertEqual(SERVER.insert(shape, t, days(3)).status, 200)
        # Unqualified, with the database from the URL, as Rotel and curl may send it.
        SERVER.query("INSERT INTO t VALUES (now(), 1)", database=self.db)
        bad = SERVER.insert(SHAPES[0], t, days(101))  # too many partitions: a failed insert
        self.assertEqual(bad.status, 500, bad.text)
        SERVER.query(f"SELECT count() FROM {t}")  # not an insert
        got = self.stats()["t"]
        self.assertEqual((got["inserts"], got["failed"], got["rows"]),
                         (len(SHAPES) + 1, 1, 3 * len(SHAPES) + 1))
        self.assertGreater(got["body_bytes"], 0)

    def test_the_path_needs_a_known_user_and_a_query_there_stays_a_query(self):
        a = SERVER.request("GET", "/chserver/inserts", auth=False)
        self.assertEqual((a.status, a.code), (403, 516), a.text)
        a = SERVER.request("GET", "/chserver/inserts?" + urlencode({"query": "SELECT 42"}))
        self.assertEqual((a.status, a.text), (200, "42\n"))


class TooManyPartitionsTest(FidelityCase):
    """Rows on 101 days in one INSERT into a table `PARTITION BY toDate(d)`: the engine refuses
    the block (`max_partitions_per_insert_block` = 100). chdb's send_insert answered 200 with
    `written_rows: 101` here and wrote nothing (issue 30, finding 0)."""

    def test_252_in_every_shape_and_nothing_written(self):
        t = self.table()
        for shape in SHAPES:
            with self.subTest(shape.name):
                a = SERVER.insert(shape, t, days(101))
                self.assert_error(a, 500, 252, "TOO_MANY_PARTS", "Too many partitions for single INSERT block (more than 100)")
                self.assertEqual(self.count(t), 0)

    def test_100_days_is_the_limit(self):
        t = self.table()
        a = SERVER.insert(SHAPES[0], t, days(100))
        self.assertEqual(a.status, 200, a.text)
        self.assertEqual(self.count(t), 100)


class TooManyPartsTest(FidelityCase):
    """The other 252: the table holds more active parts than `parts_to_throw_insert` (a table
    setting; merges stopped so the parts stay)."""

    def test_252_in_every_shape_and_nothing_written(self):
        t = self.table(engine="MergeTree ORDER BY x SETTINGS parts_to_throw_insert = 1, parts_to_delay_insert = 0")
        SERVER.query(f"SYSTEM STOP MERGES {t}")
        first = SERVER.insert(SHAPES[4], t, same_day(3))
        self.assertEqual(first.status, 200, first.text)
        for shape in SHAPES:
            with self.subTest(shape.name):
                a = SERVER.insert(shape, t, same_day(5))
                self.assert_error(a, 500, 252, "TOO_MANY_PARTS", "Too many parts (1 with average size of")
                self.assertEqual(self.count(t), 3)


class MemoryLimitTest(FidelityCase):
    """241: the query's `max_memory_usage`, a URL setting as clients send it."""

    def test_241_in_every_shape_and_nothing_written(self):
        # Every allocation counted at once (`max_untracked_memory` = 1 byte): small bodies fail too.
        t = self.table()
        for shape in SHAPES:
            with self.subTest(shape.name):
                a = SERVER.insert(shape, t, same_day(1_000),
                                  settings={"max_memory_usage": "1000", "max_untracked_memory": "1"})
                self.assert_error(a, 500, 241, "MEMORY_LIMIT_EXCEEDED", "Query memory limit exceeded")
                self.assertEqual(self.count(t), 0)

    def test_241_while_reading_a_large_body(self):
        # The default accounting (4 MiB untracked per thread): the input buffer of a 4.8 MB body.
        t = self.table()
        a = SERVER.insert(SHAPES[2], t, same_day(600_000), settings={"max_memory_usage": "1000"})
        self.assert_error(a, 500, 241, "MEMORY_LIMIT_EXCEEDED", "Query memory limit exceeded")
        self.assertEqual(self.count(t), 0)


class NoSpaceTest(FidelityCase):
    """243: the table lives on a local disk that must keep more bytes free than the filesystem
    has (`keep_free_space_bytes`), so the engine's reservation for the new part fails — the
    check ClickHouse makes before writing any part on a full disk."""

    def test_243_in_every_shape_and_nothing_written(self):
        path = os.path.join(SERVER.disks, self.db) + "/"
        t = self.table(engine="MergeTree ORDER BY x SETTINGS disk = disk(name = '" + self.db + "', type = 'local', "
                       f"path = '{path}', keep_free_space_bytes = 1000000000000000000)")
        for shape in SHAPES:
            with self.subTest(shape.name):
                a = SERVER.insert(shape, t, same_day(5))
                self.assert_error(a, 500, 243, "NOT_ENOUGH_SPACE", "Cannot reserve")
                self.assertEqual(self.count(t), 0)


class UnknownTableTest(FidelityCase):
    def test_60_unknown_table_in_every_shape(self):
        for shape in SHAPES:
            with self.subTest(shape.name):
                a = SERVER.insert(shape, f"{self.db}.missing", same_day(5))
                self.assert_error(a, 404, 60, "UNKNOWN_TABLE", f"Table {self.db}.missing does not exist")

    def test_81_unknown_database_in_every_shape(self):
        for shape in SHAPES:
            with self.subTest(shape.name):
                a = SERVER.insert(shape, "no_such_db_fidelity.t", same_day(5))
                self.assert_error(a, 404, 81, "UNKNOWN_DATABASE", "Database no_such_db_fidelity does not exist")


class AccessTest(FidelityCase):
    def test_516_wrong_password_in_every_shape_and_nothing_written(self):
        t = self.table()
        for shape in SHAPES:
            with self.subTest(shape.name):
                a = SERVER.insert(shape, t, same_day(5), password="not-the-password")
                self.assert_error(a, 403, 516, "AUTHENTICATION_FAILED", f"{USER}: Authentication failed")
                self.assertEqual(self.count(t), 0)

    def test_the_connection_stays_usable_after_a_refused_insert(self):
        # ClickHouse reads the rest of a refused POST body and keeps the connection (drainRequestIfNeeded).
        t = self.table()
        conn = http.client.HTTPConnection("127.0.0.1", SERVER.port, timeout=30)
        try:
            for password, want in (("not-the-password", 403), (SERVER.password, 200)):
                conn.request("POST", "/?" + urlencode({"query": SHAPES[2].query(t), **SHAPES[2].params}),
                             body=SHAPES[2].body(same_day(2_000)),
                             headers={"X-ClickHouse-User": USER, "X-ClickHouse-Key": password})
                r = conn.getresponse()
                r.read()
                self.assertEqual(r.status, want)
        finally:
            conn.close()
        self.assertEqual(self.count(t), 2_000)

    def test_164_readonly_in_every_shape_and_nothing_written(self):
        t = self.table()
        for shape in SHAPES:
            with self.subTest(shape.name):
                a = SERVER.insert(shape, t, same_day(5), settings={"readonly": "1"})
                self.assert_error(a, 500, 164, "READONLY", f"{USER}: Cannot execute query in readonly mode (")
                self.assertEqual(self.count(t), 0)

    def test_164_an_insert_sent_with_get(self):
        # A GET runs with readonly=2 (ClickHouse's HTTP interface); an INSERT … VALUES in the URL.
        t = self.table()
        a = SERVER.request("GET", "/?" + urlencode({"query": f"INSERT INTO {t} VALUES ({T0}, 1)"}))
        self.assert_error(a, 500, 164, "READONLY", f"{USER}: Cannot execute query in readonly mode. For queries "
                          "over HTTP, method GET implies readonly. You should use method POST for modifying queries (")
        self.assertEqual(self.count(t), 0)


class DataErrorTest(FidelityCase):
    """Parse and type errors: the engine's codes for each format, and nothing written."""

    def test_truncated_binary_bodies_are_33(self):
        t = self.table()
        for shape in SHAPES[:3]:
            with self.subTest(shape.name):
                raw = shape.encode(same_day(5))[:-3]
                a = SERVER.request("POST", "/?" + urlencode({"query": shape.query(t), **shape.params}),
                                   body=ch_frames(raw), password=None)
                if shape.params.get("compress") == "1":
                    a.body = ch_unframe(a.body)
                self.assert_error(a, 500, 33, "CANNOT_READ_ALL_DATA", "Cannot read all data")
                self.assertEqual(self.count(t), 0)

    def test_native_column_of_another_type(self):
        # A Native column whose type the engine cannot convert: 48 NOT_IMPLEMENTED, HTTP 501.
        t = self.table()
        for shape in SHAPES[:2]:
            with self.subTest(shape.name):
                body = ch_frames(native(same_day(5), d_type="IPv4"))
                a = SERVER.request("POST", "/?" + urlencode({"query": shape.query(t), **shape.params}), body=body)
                if shape.params.get("compress") == "1":
                    a.body = ch_unframe(a.body)
                self.assert_error(a, 501, 48, "NOT_IMPLEMENTED", "Conversion from IPv4 to UInt32 is not supported")
                self.assertEqual(self.count(t), 0)

    def test_text_values_that_do_not_parse(self):
        t = self.table()
        cases = [
            (SHAPES[3], b'{"d": 1577836800, "x": 1}\n{"d": 1577836800, "x": "abc"}\n',
             400, 27, "CANNOT_PARSE_INPUT_ASSERTION_FAILED", "Cannot parse input: expected '\"' before: 'abc\"}"),
            (SHAPES[4], b"(1577836800, 1), (1577836800, 'abc')",
             400, 6, "CANNOT_PARSE_TEXT", ""),
        ]
        for shape, body, status, code, name, prefix in cases:
            with self.subTest(shape.name):
                a = SERVER.request("POST", "/?" + urlencode({"query": shape.query(t)}), body=body)
                self.assert_error(a, status, code, name, prefix)
                self.assertEqual(self.count(t), 0)


class BrokenBodyTest(FidelityCase):
    """A body that breaks on chserver's side of the connection must fail the engine's insert
    too: the rows before the break are not committed (a real server parses the body as it
    reads it, so its insert fails at the break)."""

    def test_bad_block_checksum_after_good_blocks_writes_nothing(self):
        t = self.table()
        shape = SHAPES[2]
        body = bytearray(ch_frames(rowbinary(same_day(50_000)), block=1 << 16))
        body[-40] ^= 0xFF  # inside the last block's payload
        a = SERVER.request("POST", "/?" + urlencode({"query": shape.query(t), **shape.params}), body=bytes(body))
        self.assert_error(a, 500, 40, "CHECKSUM_DOESNT_MATCH", "Checksum doesn't match")
        self.assertEqual(self.count(t), 0)

    def test_client_gone_mid_body_writes_nothing(self):
        t = self.table()
        rows = rowbinary(same_day(10_000))  # whole rows only: a clean cut for the format
        query = urlencode({"query": f"INSERT INTO {t} (d, x) FORMAT RowBinary"})
        with socket.create_connection(("127.0.0.1", SERVER.port)) as s:
            s.sendall((f"POST /?{query} HTTP/1.1\r\nHost: x\r\nX-ClickHouse-User: {USER}\r\n"
                       f"X-ClickHouse-Key: {SERVER.password}\r\nContent-Length: {len(rows) * 2}\r\n\r\n").encode())
            s.sendall(rows)
            deadline = time.monotonic() + 10
            while SERVER.inserts_in_flight() == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertEqual(SERVER.inserts_in_flight(), 1, "the insert never started")
        # The client is gone: the server reads the end of the connection mid-body, and the
        # engine's insert must fail rather than commit the 10 000 whole rows that came.
        deadline = time.monotonic() + 10
        while SERVER.inserts_in_flight() and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(SERVER.inserts_in_flight(), 0, "the insert never ended")
        self.assertEqual(self.count(t), 0)

if __name__ == "__main__":
    unittest.main()


class FifoDescriptorTest(unittest.TestCase):
    """The FIFO's write end may get a descriptor above select()'s FD_SETSIZE (1024) in a server
    that holds many files: writing must still work (it once failed with "filedescriptor out
    of range in select()", code 1001, under the shared stack's load)."""

    def test_a_write_end_above_1024_still_writes(self):
        import os
        import tempfile
        import threading

        from infile import _FifoWriter

        held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
        try:
            path = os.path.join(tempfile.mkdtemp(), "fifo")
            os.mkfifo(path)
            got = bytearray()

            def read():
                with open(path, "rb") as f:
                    while chunk := f.read(65536):
                        got.extend(chunk)

            reader = threading.Thread(target=read)
            reader.start()
            w = _FifoWriter(path, lambda: reader.is_alive())
            self.assertTrue(w.open())
            self.assertGreater(w.fd, 1024)
            w.write(b"x" * (3 << 20))
            w.close()
            reader.join(10)
            self.assertEqual(len(got), 3 << 20)
        finally:
            for fd in held:
                os.close(fd)


class KeptAliveConnectionTest(unittest.TestCase):
    """A real server answers every request of a kept-alive connection without delay (clients
    reuse connections: the collectors' inserts, Grafana's queries)."""

    def test_requests_on_one_connection_are_answered_at_once(self):
        conn = http.client.HTTPConnection("127.0.0.1", SERVER.port, timeout=60)
        headers = {"X-ClickHouse-User": USER, "X-ClickHouse-Key": SERVER.password}
        took = []
        try:
            for _ in range(10):
                t = time.monotonic()
                conn.request("POST", "/", body=b"SELECT 1", headers=headers)
                r = conn.getresponse()
                self.assertEqual(r.read(), b"1\n")
                took.append(time.monotonic() - t)
        finally:
            conn.close()
        took.sort()
        # 40 ms is a delayed ACK (Nagle): the symptom this guards against.
        self.assertLess(took[len(took) // 2], 0.030, f"request times {took}")
