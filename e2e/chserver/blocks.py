"""ClickHouse compressed block framing (`compress=1` responses, `decompress=1` request bodies).

A block is `[16-byte CityHash128 v1.0.2 checksum][method][u32 LE compressed size incl. the
9-byte header][u32 LE uncompressed size][data]`, with methods none (0x02), LZ4 (0x82) and ZSTD
(0x90). Reading checks a block in the order ClickHouse's CompressedReadBufferBase does, and
raises the error ClickHouse raises for each failure.
"""

from __future__ import annotations

import hmac
import struct

import lz4.block
from clickhouse_cityhash.cityhash import CityHash128

from errors import CHError

try:  # optional: zstd block method (0x90)
    import zstandard
except ImportError:  # pragma: no cover - requirements.txt installs it
    zstandard = None

METHOD_NONE, METHOD_LZ4, METHOD_ZSTD = 0x02, 0x82, 0x90
MAX_BLOCK = 1 << 30  # a single compressed block larger than this is refused as corrupt


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
