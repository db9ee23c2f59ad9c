"""The streaming INSERT: an INSERT's body reaches the engine through a FIFO that the engine
reads as `INSERT … FROM INFILE '<fifo>' COMPRESSION 'gzip' FORMAT <fmt>`, run as an ordinary
query on the request's own engine connection.

Why not chdb's streaming insert (`conn.send_insert` … `append` … `finish()`): chdb-core 26.9.0
loses every exception the engine raises on the server side of its insert — in the table's
sink, i.e. while writing parts: `252` too many partitions or parts, `241` memory limit, `243`
no space, constraint and materialized-view errors. Its worker thread
(`ChdbClient::runInsertStreamWorker`) ends with `receiveEndOfQueryForInsert()`, which stores
an Exception packet as the client's `server_exception` and returns false; the worker ignores
the return value, `finish()` reports success with the rows it sent (`written_rows: 101` for
rows on 101 days) and nothing is in the table. The query path (`conn.query`) ends every
statement with `processError`, which rethrows that exception, so an `INSERT … FROM INFILE`
fails exactly as the engine failed. The FIFO keeps the old path's properties: the body is
streamed as it arrives (never held whole), parsed by the engine in the client's format.

Why gzip: a FIFO can only end with EOF, and the engine takes EOF for the end of the data and
commits. A body that fails on chserver's side (a client that disconnects, a bad `decompress=1`
block, a chaos fault) must fail the engine's insert too. The body is therefore framed as a
gzip stream of *stored* deflate blocks — written here by hand: a 5-byte header per 64 KiB and
a CRC-32, no compression work — and an abandoned insert closes the FIFO without the final
block and trailer, which the engine refuses (`354 ZLIB_INFLATE_FAILED`) instead of committing.
As on a real server, blocks the engine had already completed (`max_insert_block_size` rows)
stay written; a body of one block writes nothing.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import struct
import threading
import time
import uuid
import zlib

from errors import CHError, engine_error
from sqltext import infile_statement

# gzip member header: magic, CM=deflate, no flags, no mtime, no extra flags, OS=unknown.
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
STORED_MAX = 0xFFFF
# The last block: final, stored, empty.
FINAL_BLOCK = b"\x01\x00\x00\xff\xff"


def stored_blocks(data: bytes | memoryview) -> bytearray:
    """`data` as non-final stored deflate blocks (each starts on a byte boundary, as the previous
    stored block ended on one)."""
    out = bytearray()
    mv = memoryview(data)
    for i in range(0, len(mv), STORED_MAX):
        piece = mv[i:i + STORED_MAX]
        out += struct.pack("<BHH", 0, len(piece), len(piece) ^ 0xFFFF)
        out += piece
    return out


def gzip_trailer(crc: int, size: int) -> bytes:
    """The final empty stored block, then the gzip trailer (CRC-32 and size mod 2^32)."""
    return FINAL_BLOCK + struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)


class _FifoWriter:
    """The write end of the FIFO, opened once the engine opened the read end; every wait is
    bounded by the engine's query still running (a failed query never reads again)."""

    def __init__(self, path: str, engine_alive):
        self.path, self.alive, self.fd = path, engine_alive, None

    def open(self) -> bool:
        """Wait for the engine to open the FIFO; False when its query ended first (an error before
        it read any data: unknown table, readonly, bad settings)."""
        while self.alive():
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
                time.sleep(0.001)
                continue
            try:  # fewer wake-ups per MiB; the default pipe holds 64 KiB
                fcntl.fcntl(self.fd, fcntl.F_SETPIPE_SZ, 1 << 20)
            except OSError:
                pass
            return True
        return False

    def write(self, data: bytes | bytearray) -> None:
        """Write all of data; BrokenPipeError once the engine stopped reading (its query failed)."""
        mv = memoryview(data)
        # poll, not select: the engine holds many files (parts, /proc/thread-self/* per
        # thread), so the FIFO's descriptor is often above select()'s FD_SETSIZE of 1024
        # ("filedescriptor out of range in select()").
        poller = select.poll()
        poller.register(self.fd, select.POLLOUT)
        while mv:
            ready = poller.poll(100)
            if not ready:
                if not self.alive():
                    raise BrokenPipeError(errno.EPIPE, "the engine's insert ended")
                continue
            try:
                mv = mv[os.write(self.fd, mv):]
            except BlockingIOError:
                continue

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _with_head(head: bytes, chunks):
    if head:
        yield head
    yield from chunks


def insert(conn, fifo_dir: str, statement: str, fmt: str, head: bytes, chunks) -> dict:
    """Run `statement` (`INSERT INTO t [(cols)] [SETTINGS …]`) with the body `head` + `chunks`
    in format `fmt` on the engine connection `conn`. Returns the summary counters; raises the
    engine's error as a CHError, or the body's own error (the engine's insert then fails too)."""
    path = os.path.join(fifo_dir, uuid.uuid4().hex)
    os.mkfifo(path, 0o600)
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = conn.query(infile_statement(statement, path, fmt))
        except Exception as exc:  # noqa: BLE001 - reported below, on the request's thread
            outcome["error"] = exc

    engine = threading.Thread(target=run, name="chserver-insert", daemon=True)
    writer = _FifoWriter(path, engine.is_alive)
    fed, body_error = 0, None
    try:
        engine.start()
        if writer.open():
            crc = 0
            try:
                writer.write(GZIP_HEADER)
                for chunk in _with_head(head, chunks):
                    writer.write(stored_blocks(chunk))
                    crc, fed = zlib.crc32(chunk, crc), fed + len(chunk)
                writer.write(gzip_trailer(crc, fed))
            except BrokenPipeError:
                pass  # the engine failed mid-body: its error is the answer
            except BaseException as exc:  # noqa: BLE001 - the body failed: the stream stays unfinished
                body_error = exc
    finally:
        opened = writer.fd is not None
        writer.close()  # EOF: after the trailer a complete body, otherwise a truncated stream
        while not opened and engine.is_alive():
            # Only when something failed before the engine opened the FIFO: a reader waiting in
            # open() is released by any writer, then reads an empty, unfinished stream.
            os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))
            engine.join(0.1)
        engine.join()
        os.unlink(path)
        # Drain what is left of the body so the connection could be reused.
        try:
            for _ in chunks:
                pass
        except Exception:  # noqa: BLE001 - a broken body is already being reported
            pass
    if body_error is not None:
        raise body_error
    if "error" in outcome:
        raise engine_error(outcome["error"], infile=path)
    r = outcome["result"]
    return {
        "read_rows": r.rows_written(), "read_bytes": fed,
        "written_rows": r.rows_written(), "written_bytes": r.bytes_written(),
        "total_rows_to_read": 0, "result_rows": r.rows_written(), "result_bytes": r.bytes_written(),
    }
