//! The primitive encodings shared by RowBinary, Native and ClickHouse's binary
//! `Dynamic` values: LEB128 var-ints, length-prefixed strings, little-endian numbers.

/// Appends `v` as an unsigned LEB128 var-int (ClickHouse `writeVarUInt`).
#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a `String` value: var-int byte length, then the bytes.
#[inline]
pub fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s);
}

#[inline]
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

#[inline]
pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_le_bytes());
}

#[inline]
pub fn put_f64(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Reads a var-int at `*pos`, advancing it; `None` if truncated or over 10 bytes.
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// Reads a `String` value at `*pos`, advancing it.
pub fn read_str<'a>(buf: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let len = usize::try_from(read_varint(buf, pos)?).ok()?;
    let s = buf.get(*pos..pos.checked_add(len)?)?;
    *pos += len;
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_match_clickhouse_write_var_uint() {
        for (v, bytes) in [
            (0u64, vec![0x00]),
            (127, vec![0x7f]),
            (128, vec![0x80, 0x01]),
            (256, vec![0x80, 0x02]),
            (
                u64::MAX,
                vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out, bytes, "{v}");
            let mut pos = 0;
            assert_eq!(read_varint(&out, &mut pos), Some(v));
            assert_eq!(pos, out.len());
        }
        assert_eq!(read_varint(&[0x80], &mut 0), None);
    }

    #[test]
    fn strings_are_length_prefixed() {
        let mut out = Vec::new();
        put_str(&mut out, "héllo".as_bytes());
        assert_eq!(out[0], 6);
        let mut pos = 0;
        assert_eq!(read_str(&out, &mut pos), Some("héllo".as_bytes()));
        assert_eq!(read_str(&out, &mut pos), None);
    }
}
