//! ClickHouse block compression (`decompress=1`): the body as a sequence of frames
//! `[CityHash128 v1.0.2 of the rest][0x82][u32 compressed size incl. the 9-byte
//! header][u32 raw size][LZ4 block]`, each holding at most 1 MiB of raw bytes (the
//! server's default block size, and its limit on one frame's memory).
//!
//! `lz4_flex` is built without its `safe-encode` feature (workspace Cargo.toml), which
//! selects its faster block compressor; this crate itself stays free of `unsafe`.

/// Largest raw chunk per frame.
pub const MAX_BLOCK: usize = 1 << 20;

/// Checksum (16) + method (1) + compressed size (4) + raw size (4).
const FRAME_OVERHEAD: usize = 25;
/// ClickHouse's method byte for LZ4.
const METHOD_LZ4: u8 = 0x82;

/// Appends `raw` to `out` as frames of at most [`MAX_BLOCK`] raw bytes.
///
/// A one-off: sets up a [`Compressor`] per call. Encoders keep one.
pub fn compress_into(raw: &[u8], out: &mut Vec<u8>) {
    Compressor::default().compress_into(raw, out);
}

/// Writes frames through a scratch block allocated once, sized for the worst case of a
/// whole [`MAX_BLOCK`]: each frame's LZ4 block is compressed there and only its actual
/// bytes are copied into the body. (Compressing straight into the body would need the
/// body's spare capacity initialised first: zero-filling the worst-case size, a little
/// more than the raw frame, for every frame.)
#[derive(Debug, Default)]
pub struct Compressor {
    scratch: Vec<u8>,
}

impl Compressor {
    /// Appends `raw` to `out` as frames of at most [`MAX_BLOCK`] raw bytes.
    pub fn compress_into(&mut self, raw: &[u8], out: &mut Vec<u8>) {
        for chunk in raw.chunks(MAX_BLOCK) {
            self.frame(chunk, out);
        }
    }

    fn frame(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        if self.scratch.is_empty() {
            // Once, for the largest frame (`vec!` of zeros: fresh zeroed pages, no memset).
            self.scratch = vec![0; lz4_flex::block::get_maximum_output_size(MAX_BLOCK)];
        }
        let n = match lz4_flex::block::compress_into(chunk, &mut self.scratch) {
            Ok(n) => n,
            // The scratch was sized to lz4_flex's documented worst case, so the only
            // error it returns (output too small) cannot occur.
            Err(_) => unreachable!("lz4 output buffer sized by get_maximum_output_size"),
        };
        let compressed = u32::try_from(n + 9).unwrap_or(u32::MAX);
        let raw = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
        let start = out.len();
        out.reserve(FRAME_OVERHEAD + n);
        out.extend_from_slice(&[0; 16]); // the checksum, written last
        out.push(METHOD_LZ4);
        out.extend_from_slice(&compressed.to_le_bytes());
        out.extend_from_slice(&raw.to_le_bytes());
        out.extend_from_slice(&self.scratch[..n]);
        // The server compares the two 64-bit halves in this order (as the clickhouse crate).
        let hash = cityhash_rs::cityhash_102_128(&out[start + 16..]).rotate_right(64);
        out[start..start + 16].copy_from_slice(&hash.to_le_bytes());
    }
}

/// Decompresses a body of frames, verifying every checksum (tests and debugging).
pub fn decompress(mut body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while !body.is_empty() {
        if body.len() < FRAME_OVERHEAD {
            return Err(format!("truncated frame header ({} bytes)", body.len()));
        }
        if body[16] != METHOD_LZ4 {
            return Err(format!("unknown compression method {:#x}", body[16]));
        }
        let le32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let compressed = le32(&body[17..21]);
        let raw = le32(&body[21..25]);
        let end = 16 + compressed;
        if compressed < 9 || body.len() < end {
            return Err(format!(
                "frame claims {compressed} bytes, {} left",
                body.len() - 16
            ));
        }
        let want = cityhash_rs::cityhash_102_128(&body[16..end]).rotate_right(64);
        if body[..16] != want.to_le_bytes() {
            return Err("checksum mismatch".into());
        }
        let block = lz4_flex::block::decompress(&body[25..end], raw).map_err(|e| e.to_string())?;
        out.extend_from_slice(&block);
        body = &body[end..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_splits_at_one_mebibyte() {
        let raw: Vec<u8> = (0..(MAX_BLOCK * 2 + 12_345))
            .map(|i| (i % 251) as u8 ^ (i / 7919) as u8)
            .collect();
        let mut body = Vec::new();
        compress_into(&raw, &mut body);
        assert_eq!(decompress(&body).unwrap(), raw);
        // Three frames: 1 MiB, 1 MiB, the rest.
        let mut frames = 0;
        let mut rest = &body[..];
        while !rest.is_empty() {
            let size = u32::from_le_bytes(rest[17..21].try_into().unwrap()) as usize;
            let raw_size = u32::from_le_bytes(rest[21..25].try_into().unwrap()) as usize;
            assert!(raw_size <= MAX_BLOCK);
            rest = &rest[16 + size..];
            frames += 1;
        }
        assert_eq!(frames, 3);
    }

    #[test]
    fn a_reused_compressor_writes_what_a_fresh_one_does() {
        let mut reused = Compressor::default();
        let mut body = Vec::new();
        for len in [10, MAX_BLOCK + 3, 0, 70_000, MAX_BLOCK, 5] {
            let raw: Vec<u8> = (0..len).map(|i| (i % 13 + i / 4099) as u8).collect();
            let mut fresh = Vec::new();
            compress_into(&raw, &mut fresh);
            body.clear();
            reused.compress_into(&raw, &mut body);
            assert_eq!(body, fresh, "{len} bytes");
            assert_eq!(decompress(&body).unwrap(), raw);
        }
    }

    #[test]
    fn a_flipped_bit_fails_the_checksum() {
        let mut body = Vec::new();
        compress_into(b"hello hello hello hello", &mut body);
        let last = body.len() - 1;
        body[last] ^= 1;
        assert_eq!(decompress(&body).unwrap_err(), "checksum mismatch");
    }

    #[test]
    fn empty_input_is_an_empty_body() {
        let mut body = Vec::new();
        compress_into(b"", &mut body);
        assert!(body.is_empty());
    }
}
