"""Unit tests of chserver's pure parts (no network, no running server).

Run with the server's venv (it has chdb, lz4, clickhouse_cityhash, zstandard):

    "$VENV"/bin/python -m unittest discover -s e2e/chserver -v

A few tests use an in-memory chdb engine (no files, no network) to check chserver against the
engine's own output.
"""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import lzma
import os
import struct
import unittest
import zlib

import lz4.block
import lz4.frame

import chdb

import blocks
import errors
import httpcompression
import infile
import native
import server
import sqltext
import stats
from errors import CHError


def decompress_all(data: bytes) -> bytes:
    return b"".join(blocks.BlockDecompressor(io.BytesIO(data).read))


def frame(method: int, payload: bytes, plain_size: int) -> bytes:
    """One ClickHouse compressed block with a correct checksum."""
    header = struct.pack("<BII", method, len(payload) + 9, plain_size)
    return blocks.checksum(header + payload) + header + payload


class SplitInsertTest(unittest.TestCase):
    def test_format_with_newline(self):
        q = "INSERT INTO t (a, b) FORMAT RowBinary\n\x01\x02"
        stmt, fmt, off = sqltext.split_insert(q)
        self.assertEqual((stmt, fmt, q[off:]), ("INSERT INTO t (a, b)", "RowBinary", "\x01\x02"))

    def test_data_right_after_the_format_name(self):
        q = 'INSERT INTO t FORMAT JSONEachRow{"a":1}'
        stmt, fmt, off = sqltext.split_insert(q)
        self.assertEqual((stmt, fmt, q[off:]), ("INSERT INTO t", "JSONEachRow", '{"a":1}'))

    def test_blanks_then_one_newline_are_skipped_but_not_more(self):
        q = "INSERT INTO t FORMAT TSV  \t\r\n\n1\t2\n"
        _, fmt, off = sqltext.split_insert(q)
        self.assertEqual((fmt, q[off:]), ("TSV", "\n1\t2\n"))
        q = "INSERT INTO t FORMAT CSV 1,2"
        _, fmt, off = sqltext.split_insert(q)
        self.assertEqual((fmt, q[off:]), ("CSV", "1,2"))

    def test_values(self):
        q = "INSERT INTO t VALUES (1, 'FORMAT x'), (2, 'VALUES')"
        stmt, fmt, off = sqltext.split_insert(q)
        self.assertEqual((stmt, fmt, q[off:]), ("INSERT INTO t", "Values", " (1, 'FORMAT x'), (2, 'VALUES')"))

    def test_keywords_inside_strings_comments_and_quoted_identifiers(self):
        q = ("INSERT INTO `FORMAT` /* FORMAT Bad */ -- VALUES (1)\n"
             "# FORMAT Worse\n(\"VALUES\", `format`) SETTINGS x = 'FORMAT y' FORMAT CSV\n1,2")
        stmt, fmt, off = sqltext.split_insert(q)
        self.assertEqual(fmt, "CSV")
        self.assertEqual(q[off:], "1,2")
        self.assertTrue(stmt.endswith("SETTINGS x = 'FORMAT y'"), stmt)

    def test_escaped_and_doubled_quotes(self):
        q = r"INSERT INTO t SETTINGS s = 'it\'s FORMAT', u = 'a''b FORMAT' FORMAT TSV" + "\nx"
        stmt, fmt, off = sqltext.split_insert(q)
        self.assertEqual((fmt, q[off:]), ("TSV", "x"))

    def test_columns_named_like_clauses(self):
        q = "INSERT INTO t (format, values, select) FORMAT TSV\n1\t2\t3"
        stmt, fmt, off = sqltext.split_insert(q)
        self.assertEqual((stmt, fmt, q[off:]), ("INSERT INTO t (format, values, select)", "TSV", "1\t2\t3"))
        q = "INSERT INTO t (values) VALUES (1)"
        stmt, fmt, off = sqltext.split_insert(q)
        self.assertEqual((stmt, fmt, q[off:]), ("INSERT INTO t (values)", "Values", " (1)"))

    def test_settings_before_format(self):
        q = "INSERT INTO db.t SETTINGS async_insert = 1, insert_deduplication_token = 'a-b' FORMAT Native"
        self.assertEqual(sqltext.split_insert(q),
                         ("INSERT INTO db.t SETTINGS async_insert = 1, insert_deduplication_token = 'a-b'", "Native", len(q)))

    def test_insert_select_has_no_data(self):
        self.assertIsNone(sqltext.split_insert("INSERT INTO t SELECT * FROM s FORMAT Native"))
        self.assertIsNone(sqltext.split_insert("INSERT INTO t (a) SELECT 1"))
        self.assertIsNone(sqltext.split_insert("INSERT INTO t WITH 1 AS x SELECT x"))

    def test_incomplete_insert(self):
        self.assertIsNone(sqltext.split_insert("INSERT INTO t FORMAT"))
        self.assertIsNone(sqltext.split_insert("INSERT INTO t FORMAT -- nothing yet"))
        self.assertIsNone(sqltext.split_insert("INSERT INTO t"))

    def test_top_level_words(self):
        words = [w for w, _, _ in sqltext.top_level_words(
            "select 'FORMAT' AS \"x\", `VALUES` -- FORMAT\n/* VALUES */ from_t # c\nFROM t2")]
        self.assertEqual(words, ["SELECT", "AS", "FROM_T", "FROM", "T2"])
        self.assertEqual(sqltext.first_word("  /* c */ -- d\n insert into t"), "INSERT")
        self.assertEqual(sqltext.first_word("(SELECT 1) UNION ALL (SELECT 2)"), "SELECT")
        self.assertEqual(sqltext.first_word(""), "")

    def test_unterminated_literal_does_not_hang(self):
        self.assertEqual([w for w, _, _ in sqltext.top_level_words("SELECT 'abc")], ["SELECT"])
        self.assertEqual([w for w, _, _ in sqltext.top_level_words("SELECT /* abc")], ["SELECT"])


class InsertTargetTest(unittest.TestCase):
    def test_the_shapes_the_collectors_send(self):
        t = sqltext.insert_target
        self.assertEqual(t("INSERT INTO db.otel_traces (a, b)"), ("db", "otel_traces"))
        self.assertEqual(t('INSERT INTO "bench_1"."otel_traces" ("Timestamp")'), ("bench_1", "otel_traces"))
        self.assertEqual(t("insert into `my``db`.`t.x` SETTINGS a = 1"), ("my`db", "t.x"))
        self.assertEqual(t("INSERT INTO TABLE t"), (None, "t"))
        self.assertEqual(t("INSERT INTO db . t"), ("db", "t"))

    def test_no_table_no_target(self):
        self.assertIsNone(sqltext.insert_target("INSERT INTO FUNCTION file('x.tsv')"))
        self.assertIsNone(sqltext.insert_target("SELECT 1"))


class InsertStatsTest(unittest.TestCase):
    def test_counts_per_table_answered_and_failed_apart(self):
        s = stats.InsertStats()
        s.record("a", "t", ok=True, rows=10, body_bytes=100)
        s.record("a", "t", ok=True, rows=5, body_bytes=50)
        s.record("a", "t", ok=False)
        s.record("b", "u", ok=True, rows=1, body_bytes=1)
        self.assertEqual(s.snapshot(), {
            "a": {"t": {"inserts": 2, "failed": 1, "rows": 15, "body_bytes": 150}},
            "b": {"u": {"inserts": 1, "failed": 0, "rows": 1, "body_bytes": 1}}})

    def test_a_snapshot_is_a_copy(self):
        s = stats.InsertStats()
        s.record("a", "t", ok=True, rows=1)
        snap = s.snapshot()
        s.record("a", "t", ok=True, rows=1)
        self.assertEqual(snap["a"]["t"]["inserts"], 1)


class FormatClauseTest(unittest.TestCase):
    def test_detects_trailing_format(self):
        for q, name in [
            ("SELECT 1 FORMAT JSON", "JSON"),
            ("SELECT 1 FORMAT Native;", "Native"),
            ("SELECT 1 FORMAT Native SETTINGS max_threads = 1", "Native"),
            ("SELECT 1 FORMAT TSV -- comment\n ; ", "TSV"),
        ]:
            clause = sqltext.format_clause(q)
            self.assertIsNotNone(clause, q)
            self.assertEqual(clause[0], name, q)
            self.assertEqual(q[clause[1]:clause[2]], "FORMAT " + name)

    def test_ignores_format_that_is_not_the_clause(self):
        for q in [
            "SELECT format FROM system.formats",
            "SELECT 1 AS format",
            "SELECT x FROM t WHERE format = 'FORMAT JSON'",
            "SELECT * FROM (SELECT 1 FORMAT JSON)",
            "SELECT 1 FORMAT JSON, 2",
        ]:
            self.assertIsNone(sqltext.format_clause(q), q)

    def test_multi_statement(self):
        self.assertEqual(sqltext.multi_statement_at("SELECT 1; SELECT 2"), 8)
        self.assertEqual(sqltext.multi_statement_at("SELECT 1;; -- c\n x"), 8)
        for q in ["SELECT 1", "SELECT 1;", "SELECT 1 ; -- trailing\n;", "SELECT ';' AS `a;b`", "SELECT 1 /* ; x */"]:
            self.assertIsNone(sqltext.multi_statement_at(q), q)

    def test_strip_trailing_semicolon(self):
        self.assertEqual(sqltext.strip_trailing_semicolon("SELECT 1; -- x"), "SELECT 1 -- x")
        self.assertEqual(sqltext.strip_trailing_semicolon("SELECT ';'"), "SELECT ';'")
        self.assertEqual(sqltext.strip_trailing_semicolon("SELECT 1"), "SELECT 1")


class FormTest(unittest.TestCase):
    @staticmethod
    def form(*parts: str, boundary: str = "clickhouse-rs-boundary-x") -> bytes:
        return ("".join(f"--{boundary}\r\n{p}\r\n" for p in parts) + f"--{boundary}--\r\n").encode()

    def test_fields(self):
        body = self.form('Content-Disposition: form-data; name="query"\r\n\r\nSELECT {a:String}',
                         'Content-Disposition: form-data; name="param_a"\r\n\r\nline 1\r\nline 2 \u00fc',
                         'Content-Disposition: form-data; name="max_threads"\r\n\r\n1')
        self.assertEqual(server.parse_form(body, "multipart/form-data; boundary=clickhouse-rs-boundary-x"),
                         [("query", "SELECT {a:String}"), ("param_a", "line 1\r\nline 2 \u00fc"), ("max_threads", "1")])

    def test_external_table_file_is_not_implemented(self):
        body = self.form('Content-Disposition: form-data; name="t"; filename=""\r\n'
                         'Content-Type: application/octet-stream\r\n\r\n\x01\x02')
        with self.assertRaises(CHError) as ctx:
            server.parse_form(body, "multipart/form-data; boundary=clickhouse-rs-boundary-x")
        self.assertEqual(ctx.exception.code, 48)

    def test_malformed(self):
        with self.assertRaises(CHError) as ctx:
            server.parse_form(b"no boundary here", "multipart/form-data")
        self.assertEqual(ctx.exception.code, 36)


class BlockFramingTest(unittest.TestCase):
    def test_round_trip(self):
        for data in [b"", b"x", bytes(range(256)) * 5000, os.urandom(3 << 20)]:
            framed = blocks.compress_blocks(data, block_size=1 << 20)
            self.assertEqual(decompress_all(framed), data)

    def test_block_layout(self):
        framed = blocks.compress_blocks(b"hello hello hello", block_size=1 << 20)
        method, size_compressed, size_plain = struct.unpack_from("<BII", framed, 16)
        self.assertEqual(method, blocks.METHOD_LZ4)
        self.assertEqual(size_plain, 17)
        self.assertEqual(size_compressed, len(framed) - 16)
        self.assertEqual(blocks.checksum(framed[16:]), framed[:16])

    def test_checksum_is_cityhash128_as_two_little_endian_halves(self):
        # (That this matches ClickHouse is proven end to end: the Rust `clickhouse` crate and
        # clickhouse-go verify the checksums of chserver's compress=1 responses.)
        self.assertEqual(len(blocks.checksum(b"")), 16)
        h = blocks.CityHash128(b"abc")
        self.assertEqual(blocks.checksum(b"abc"), struct.pack("<QQ", h >> 64, h & ((1 << 64) - 1)))

    def test_none_and_zstd_methods(self):
        data = b"plain block " * 100
        self.assertEqual(decompress_all(frame(blocks.METHOD_NONE, data, len(data))), data)
        if blocks.zstandard is not None:
            z = blocks.zstandard.ZstdCompressor().compress(data)
            self.assertEqual(decompress_all(frame(blocks.METHOD_ZSTD, z, len(data))), data)
        mixed = frame(blocks.METHOD_NONE, b"a", 1) + blocks.compress_blocks(b"b")
        self.assertEqual(decompress_all(mixed), b"ab")

    def assertCode(self, data: bytes, code: int, name: str):
        with self.assertRaises(CHError) as ctx:
            decompress_all(data)
        self.assertEqual((ctx.exception.code, ctx.exception.name), (code, name), ctx.exception.message)
        return ctx.exception

    def test_flipped_checksum_bit_is_code_40(self):
        framed = bytearray(blocks.compress_blocks(b"some data " * 100))
        framed[3] ^= 0x10
        err = self.assertCode(bytes(framed), 40, "CHECKSUM_DOESNT_MATCH")
        self.assertEqual(err.status, 500)
        self.assertIn("Checksum doesn't match", err.message)

    def test_flipped_data_bit_is_code_40(self):
        framed = bytearray(blocks.compress_blocks(b"some data " * 100))
        framed[-1] ^= 0x01
        self.assertCode(bytes(framed), 40, "CHECKSUM_DOESNT_MATCH")

    def test_bad_checksum_on_an_uncompressed_block(self):
        block = bytearray(frame(blocks.METHOD_NONE, b"abc", 3))
        block[0] ^= 0xFF
        self.assertCode(bytes(block), 40, "CHECKSUM_DOESNT_MATCH")

    def test_truncated_block(self):
        framed = blocks.compress_blocks(b"some data " * 100)
        self.assertCode(framed[:-5], 33, "CANNOT_READ_ALL_DATA")
        self.assertCode(framed[:20], 33, "CANNOT_READ_ALL_DATA")
        # A good block followed by a truncated header.
        self.assertCode(framed + framed[:10], 33, "CANNOT_READ_ALL_DATA")

    def test_unknown_method(self):
        self.assertCode(frame(0x42, b"abc", 3), 432, "UNKNOWN_CODEC")

    def test_unknown_method_is_reported_before_the_checksum(self):
        block = bytearray(frame(0x42, b"abc", 3))
        block[0] ^= 0xFF
        self.assertCode(bytes(block), 432, "UNKNOWN_CODEC")

    def test_sizes(self):
        header = struct.pack("<BII", blocks.METHOD_LZ4, 5, 3)
        self.assertCode(blocks.checksum(header) + header, 246, "CORRUPTED_DATA")
        header = struct.pack("<BII", blocks.METHOD_LZ4, (1 << 30) + 1, 3)
        self.assertCode(blocks.checksum(header) + header, 39, "TOO_LARGE_SIZE_COMPRESSED")

    def test_corrupt_lz4_payload_with_valid_checksum(self):
        self.assertCode(frame(blocks.METHOD_LZ4, b"\xff" * 20, 1000), 271, "CANNOT_DECOMPRESS")


class ContentEncodingTest(unittest.TestCase):
    DATA = b"".join(b"row %d\tvalue\n" % i for i in range(50000))

    def encoded(self):
        yield "gzip", gzip.compress(self.DATA)
        yield "x-gzip", gzip.compress(self.DATA)
        yield "deflate", zlib.compress(self.DATA)
        yield "xz", lzma.compress(self.DATA)
        yield "bz2", bz2.compress(self.DATA)
        yield "lz4", lz4.frame.compress(self.DATA)
        if httpcompression.zstandard is not None:
            yield "zstd", httpcompression.zstandard.ZstdCompressor().compress(self.DATA)
        yield "br", httpcompression.encode_content(self.DATA, "br")

    @staticmethod
    def chunked(data: bytes, size: int = 4096):
        return iter([data[i:i + size] for i in range(0, len(data), size)])

    def test_round_trips(self):
        for name, data in self.encoded():
            with self.subTest(name):
                self.assertEqual(b"".join(httpcompression.decode_content(self.chunked(data), name)), self.DATA)

    def test_concatenated_streams(self):
        for name, enc in [("gzip", gzip.compress), ("xz", lzma.compress), ("bz2", bz2.compress),
                          ("lz4", lz4.frame.compress), ("zstd", lambda d: httpcompression.zstandard.ZstdCompressor().compress(d))]:
            with self.subTest(name):
                body = enc(b"first ") + enc(b"second")
                self.assertEqual(b"".join(httpcompression.decode_content(self.chunked(body, 7), name)), b"first second")

    def test_identity(self):
        self.assertEqual(b"".join(httpcompression.decode_content(self.chunked(self.DATA), "")), self.DATA)
        self.assertEqual(b"".join(httpcompression.decode_content(self.chunked(self.DATA), "identity")), self.DATA)

    def test_corrupt_and_truncated_bodies_get_the_method_error(self):
        codes = {"gzip": 354, "x-gzip": 354, "deflate": 354, "xz": 554, "bz2": 594, "lz4": 618, "zstd": 561, "br": 448}
        for name, data in self.encoded():
            for label, bad in [("corrupt", b"\x00garbage" + data[20:]), ("truncated", data[: len(data) // 2])]:
                with self.subTest(f"{name} {label}"):
                    with self.assertRaises(CHError) as ctx:
                        b"".join(httpcompression.decode_content(self.chunked(bad), name))
                    self.assertEqual(ctx.exception.code, codes[name], ctx.exception.message)

    def test_unknown_and_unimplemented_methods(self):
        for name in ("compress", "snappy"):
            with self.assertRaises(CHError) as ctx:
                httpcompression.decode_content(iter([b"x"]), name)
            self.assertEqual((ctx.exception.code, ctx.exception.status), (48, 501))

    def test_response_encoding_follows_clickhouse_preference(self):
        self.assertEqual(httpcompression.choose_response_encoding("gzip, deflate, br"), "br")
        self.assertEqual(httpcompression.choose_response_encoding("deflate, gzip"), "gzip")
        self.assertEqual(httpcompression.choose_response_encoding("identity"), None)
        for method in httpcompression.RESPONSE_ENCODINGS:
            encoded = httpcompression.encode_content(self.DATA, method)
            self.assertEqual(b"".join(httpcompression.decode_content(self.chunked(encoded), method)), self.DATA, method)


class EngineErrorTest(unittest.TestCase):
    def test_chdb_message(self):
        exc = RuntimeError("Code: 60. DB::Exception: Table default.nope does not exist. "
                           "Maybe you meant system.one?. (UNKNOWN_TABLE)")
        err = errors.engine_error(exc)
        self.assertEqual((err.code, err.name, err.status), (60, "UNKNOWN_TABLE", 404))
        self.assertEqual(err.message, "Table default.nope does not exist. Maybe you meant system.one?.")
        self.assertEqual(err.body().decode(),
                         "Code: 60. DB::Exception: Table default.nope does not exist. Maybe you meant system.one?. "
                         f"(UNKNOWN_TABLE) (version {errors.ENGINE_VERSION} (chserver))\n")

    def test_message_with_version_and_parentheses(self):
        exc = RuntimeError("Code: 395. DB::Exception: boom (X): while executing 'f(1)'. "
                           "(FUNCTION_THROW_IF_VALUE_IS_NON_ZERO) (version 26.9.2.1)")
        err = errors.engine_error(exc)
        self.assertEqual((err.code, err.name), (395, "FUNCTION_THROW_IF_VALUE_IS_NON_ZERO"))
        self.assertEqual(err.message, "boom (X): while executing 'f(1)'.")

    def test_multiline_message(self):
        err = errors.engine_error(RuntimeError("Code: 62. DB::Exception: Syntax error: failed at position 1\n"
                                                 "Expected one of: SELECT. (SYNTAX_ERROR)"))
        self.assertEqual((err.code, err.name, err.status), (62, "SYNTAX_ERROR", 400))
        self.assertIn("Expected one of", err.message)

    def test_without_a_code(self):
        err = errors.engine_error(ValueError("something odd"))
        self.assertEqual((err.code, err.name, err.message), (1001, "STD_EXCEPTION", "something odd"))
        self.assertEqual(errors.engine_error(ValueError("")).message, "ValueError")

    def test_real_engine_messages(self):
        conn = chdb.connect(":memory:")
        try:
            for sql, code, name in [("SELECT * FROM nope", 60, "UNKNOWN_TABLE"),
                                    ("SELEC 1", 62, "SYNTAX_ERROR"),
                                    ("SELECT throwIf(1, 'x (Y)')", 395, "FUNCTION_THROW_IF_VALUE_IS_NON_ZERO")]:
                with self.assertRaises(Exception) as ctx:
                    conn.query(sql)
                err = errors.engine_error(ctx.exception)
                self.assertEqual((err.code, err.name), (code, name), str(ctx.exception))
        finally:
            conn.close()

    def test_http_statuses(self):
        for name, status in [("AUTHENTICATION_FAILED", 403), ("REQUIRED_PASSWORD", 401), ("UNKNOWN_TABLE", 404),
                             ("UNKNOWN_DATABASE", 404), ("SYNTAX_ERROR", 400), ("QUERY_IS_TOO_LARGE", 413),
                             ("NOT_IMPLEMENTED", 501), ("CHECKSUM_DOESNT_MATCH", 500), ("TIMEOUT_EXCEEDED", 408)]:
            self.assertEqual(CHError(1, name, "m").status, status, name)


class InfileTest(unittest.TestCase):
    """The pure parts of infile.py and what it relies on: the gzip framing, the statement, the
    rewording of the engine's messages."""

    def test_stored_blocks_are_gzip_that_zlib_reads(self):
        data = os.urandom(200_000)
        body = infile.GZIP_HEADER + infile.stored_blocks(data[:70_000]) + infile.stored_blocks(data[70_000:])
        body += infile.gzip_trailer(zlib.crc32(data), len(data))
        self.assertEqual(gzip.decompress(body), data)
        self.assertEqual(gzip.decompress(infile.GZIP_HEADER + infile.gzip_trailer(0, 0)), b"")

    def test_a_stream_without_its_end_is_refused(self):
        # An abandoned insert closes the FIFO before the final block: the reader must fail.
        unfinished = infile.GZIP_HEADER + infile.stored_blocks(b"whole rows")
        for cut in (unfinished, infile.GZIP_HEADER):
            d = zlib.decompressobj(31)
            d.decompress(cut)
            self.assertFalse(d.eof)
            with self.assertRaises(EOFError):
                gzip.decompress(cut)

    def test_statement_puts_from_infile_before_settings(self):
        self.assertEqual(sqltext.infile_statement("INSERT INTO db.t (a, b)", "/x/f'1", "RowBinary"),
                         "INSERT INTO db.t (a, b) FROM INFILE '/x/f\\'1' COMPRESSION 'gzip' FORMAT RowBinary")
        self.assertEqual(sqltext.infile_statement("INSERT INTO t (settings) SETTINGS async_insert = 0 ", "/f", "Native"),
                         "INSERT INTO t (settings) FROM INFILE '/f' COMPRESSION 'gzip' SETTINGS async_insert = 0 "
                         "FORMAT Native")

    def test_engine_messages_lose_the_fifo_and_the_client_side_wrapping(self):
        path = "/tmp/chserver-insert-abc/0123"
        raw = ("Code: 27. DB::Exception: Code: 27. DB::Exception: Cannot parse input: expected '\"' before: "
               f"'abc\"}}': (at row 1)\n: (in file/uri {path}): While executing ParallelParsingBlockInputFormat: "
               "While executing File: data for INSERT was parsed from file. (CANNOT_PARSE_INPUT_ASSERTION_FAILED) "
               "(version 26.9.2.1). (CANNOT_PARSE_INPUT_ASSERTION_FAILED)")
        err = errors.engine_error(RuntimeError(raw), infile=path)
        self.assertEqual((err.code, err.name, err.status), (27, "CANNOT_PARSE_INPUT_ASSERTION_FAILED", 400))
        self.assertEqual(err.message, "Cannot parse input: expected '\"' before: 'abc\"}': (at row 1)\n: "
                                      "While executing ParallelParsingBlockInputFormat.")
        plain = "Code: 252. DB::Exception: Too many partitions for single INSERT block (more than 100). (TOO_MANY_PARTS)"
        self.assertEqual(errors.engine_error(RuntimeError(plain), infile=path).message,
                         "Too many partitions for single INSERT block (more than 100).")

    def test_readonly_names_the_requests_user(self):
        err = CHError(164, "READONLY", "default: Cannot execute query in readonly mode")
        self.assertEqual(errors.as_request(err, "alice", False).message, "alice: Cannot execute query in readonly mode")
        self.assertTrue(errors.as_request(err, "alice", True).message.endswith(
            "For queries over HTTP, method GET implies readonly. You should use method POST for modifying queries"))
        other = CHError(60, "UNKNOWN_TABLE", "default: x")
        self.assertIs(errors.as_request(other, "alice", True), other)


class _Headers(dict):
    def get(self, key, default=None):  # case-insensitive, like http.client.HTTPMessage
        for k, v in self.items():
            if k.lower() == key.lower():
                return v
        return default


class AuthTest(unittest.TestCase):
    class FakeEngine:
        users = {"default": "", "alice": "s3cret:with:colons"}

    def auth(self, headers=None, params=None):
        handler = server.Handler.__new__(server.Handler)  # no socket: only _authenticate is used
        handler.headers = _Headers(headers or {})
        handler.engine = self.FakeEngine()
        return handler._authenticate(params or {})

    def assertRefused(self, headers=None, params=None):
        with self.assertRaises(CHError) as ctx:
            self.auth(headers, params)
        self.assertEqual((ctx.exception.code, ctx.exception.status), (516, 403))
        return ctx.exception

    @staticmethod
    def basic(user, password):
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    def test_clickhouse_headers(self):
        self.assertEqual(self.auth({"X-ClickHouse-User": "alice", "X-ClickHouse-Key": "s3cret:with:colons"}), "alice")
        self.assertRefused({"X-ClickHouse-User": "alice", "X-ClickHouse-Key": "wrong"})

    def test_basic_auth(self):
        self.assertEqual(self.auth(self.basic("alice", "s3cret:with:colons")), "alice")
        self.assertRefused(self.basic("alice", "s3cret"))
        self.assertRefused({"Authorization": "Basic !!!not-base64"})

    def test_url_parameters(self):
        self.assertEqual(self.auth(params={"user": "alice", "password": "s3cret:with:colons"}), "alice")
        self.assertRefused(params={"user": "alice", "password": "nope"})

    def test_default_user(self):
        self.assertEqual(self.auth(), "default")
        self.assertRefused(params={"password": "x"})

    def test_unknown_user(self):
        err = self.assertRefused({"X-ClickHouse-User": "mallory", "X-ClickHouse-Key": ""})
        self.assertIn("mallory", err.message)

    def test_basic_auth_and_parameters_together_are_refused(self):
        err = self.assertRefused(self.basic("alice", "s3cret:with:colons"), {"user": "alice"})
        self.assertIn("simultaneously", err.message)
        self.assertRefused({**self.basic("alice", "s3cret:with:colons"), "X-ClickHouse-User": "alice"})


class NativeForClientRevisionTest(unittest.TestCase):
    """Native output for clients that send client_protocol_version (clickhouse-go does)."""

    QUERY = ("SELECT number AS n, toString(number) AS s, toDateTime(number, 'Asia/Tokyo') AS d, [1, 2] AS a, "
             "map('k', number) AS m, toLowCardinality(toString(number % 3)) AS lc, "
             "CAST('{\"a\":{\"b\":1},\"c\":[1,2]}' AS JSON) AS j, number::Dynamic AS dy, "
             "if(number % 2 = 0, NULL, number) AS nu, toDecimal64(number, 3) AS dec, "
             "(1, 'x')::Tuple(a UInt8, b String) AS t, [toDateTime64(number, 9, 'UTC')] AS a64, "
             "CAST(number, 'Variant(UInt64, String)') AS v, toFixedString('ab', 2) AS fs, toIPv6('::1') AS ip, "
             "[[map('x', [1])]] AS deep, 1, 1 FROM numbers(70000)")

    @classmethod
    def setUpClass(cls):
        cls.conn = chdb.connect(":memory:")

    @classmethod
    def tearDownClass(cls):
        cls.conn.close()

    def test_revision_0_reproduces_the_engines_native_output_byte_for_byte(self):
        engine_native = bytes(self.conn.query(self.QUERY, "Native").bytes())
        converted, _ = native.native_result(self.conn, self.QUERY, 0)
        self.assertGreater(len(engine_native), 1 << 20)  # several blocks
        self.assertEqual(converted, engine_native)

    def test_header_of_a_select(self):
        cols = native.result_header(self.conn, self.QUERY + " SETTINGS max_threads = 1;")
        self.assertEqual(cols[0], ("n", "UInt64"))
        self.assertEqual(cols[2], ("d", "DateTime('Asia/Tokyo')"))
        self.assertEqual(cols[-2:], [("1", "UInt8"), ("1", "UInt8")])  # duplicate names are kept

    def test_header_of_read_only_statements(self):
        self.assertEqual(native.result_header(self.conn, "SHOW DATABASES"), [("name", "String")])
        self.assertEqual([c[0] for c in native.result_header(self.conn, "DESCRIBE TABLE system.one")][:2],
                         ["name", "type"])

    def test_client_revision_layout(self):
        data, _ = native.native_result(self.conn, "SELECT toDateTime(0, 'UTC') AS d, 'x' AS s", 54460)
        expect = (native.NATIVE_BLOCK_INFO + b"\x02\x01"
                  + b"\x01d" + bytes([len("DateTime('UTC')")]) + b"DateTime('UTC')" + b"\x00" + b"\x00\x00\x00\x00"
                  + b"\x01s" + b"\x06String" + b"\x00" + b"\x01x")
        self.assertEqual(data, expect)

    def test_old_revisions(self):
        # Before 54454 no serialization flag; before 54337 DateTime loses its time zone.
        data, _ = native.native_result(self.conn, "SELECT toDateTime(0, 'UTC') AS d", 54300)
        self.assertEqual(data, native.NATIVE_BLOCK_INFO + b"\x01\x01\x01d\x08DateTime\x00\x00\x00\x00")

    def test_empty_result_is_an_empty_body(self):
        data, _ = native.native_result(self.conn, "SELECT 1 WHERE 0", 54460)
        self.assertEqual(data, b"")

    def test_statement_without_a_result_is_an_empty_body(self):
        data, _ = native.native_result(self.conn, "CREATE TABLE IF NOT EXISTS x (a UInt8) ENGINE = Memory", 54460)
        self.assertEqual(data, b"")

    def test_other_statements_that_return_rows_are_refused(self):
        # e.g. KILL QUERY: its header could only come from running it a second time.
        class Result:
            def bytes(self):
                return struct.pack("<QQQ", 1, 1, 1) + b"\x01"

        class Conn:
            def query(self, sql, fmt):
                assert fmt == "Buffers", fmt
                return Result()

        with self.assertRaises(CHError) as ctx:
            native.native_result(Conn(), "KILL QUERY WHERE 1", 54460)
        self.assertEqual((ctx.exception.code, ctx.exception.name), (48, "NOT_IMPLEMENTED"))

    def test_buffers_output_that_does_not_match_the_header_is_an_error(self):
        buf = bytes(self.conn.query("SELECT 1 AS a, 2 AS b", "Buffers").bytes())
        with self.assertRaises(CHError) as ctx:
            native.buffers_to_native(buf, [("a", "UInt8")], 54460)
        self.assertEqual(ctx.exception.code, 49)
        with self.assertRaises(CHError):
            native.buffers_to_native(buf[:-1], [("a", "UInt8"), ("b", "UInt8")], 54460)

    def test_client_revision_parameter(self):
        self.assertEqual(native.client_revision({}), 0)
        self.assertEqual(native.client_revision({"client_protocol_version": "54460"}), 54460)
        with self.assertRaises(CHError) as ctx:
            native.client_revision({"client_protocol_version": "x"})
        self.assertEqual(ctx.exception.code, 72)

    def test_varint(self):
        for n in (0, 1, 127, 128, 300, 1 << 32, (1 << 64) - 1):
            self.assertEqual(native.read_varint(native.varint(n), 0), (n, len(native.varint(n))))
        with self.assertRaises(ValueError):
            native.read_varint(b"\x80", 0)


if __name__ == "__main__":
    unittest.main()
