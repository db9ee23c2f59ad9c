"""HTTP compression: request bodies sent with a `Content-Encoding` (decoded as a stream, chunk by
chunk, concatenated streams included) and responses compressed for `enable_http_compression=1`
by ClickHouse's order of preference. Decoding failures carry the error ClickHouse names for each
method.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib

import lz4.frame

from errors import CHError

try:  # optional: Content-Encoding: zstd
    import zstandard
except ImportError:  # pragma: no cover - requirements.txt installs it
    zstandard = None

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
            stream = pa.CompressedInputStream(pa.PythonFile(_RawStream(IterReader(chunks).read), mode="r"), "brotli")
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


class IterReader:
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
