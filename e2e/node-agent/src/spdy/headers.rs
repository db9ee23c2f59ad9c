//! SPDY/3 header blocks: the name/value block layout and its zlib compression with the
//! protocol's preset dictionary.
//!
//! A block is a 32-bit count, then for each header a 32-bit length and the (lowercase) name,
//! a 32-bit length and the value; several values of one name are joined by NUL. Each
//! direction of a connection compresses all of its blocks as **one** zlib stream that starts
//! with the SPDY/3 dictionary (RFC-draft `draft-mbelshe-httpbis-spdy-00`, §2.6.10.1), each
//! block ended by a sync flush — so [`Deflater`] and [`Inflater`] keep their state for the
//! life of a connection.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The words of the SPDY/3 dictionary, each stored with a 32-bit big-endian length before
/// it, in this order; [`TAIL`] follows them as it is.
const WORDS: [&str; 65] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];

/// The dictionary's unprefixed end: status codes, reason phrases, dates, media types.
const TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information",
    "204 No Content",
    "301 Moved Permanently",
    "400 Bad Request",
    "401 Unauthorized",
    "403 Forbidden",
    "404 Not Found",
    "500 Internal Server Error",
    "501 Not Implemented",
    "503 Service Unavailable",
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec",
    " 00:00:00",
    " Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,",
    "text/plain,text/javascript,public",
    "private",
    "max-age=",
    "gzip,deflate,sdch",
    "charset=utf-8",
    "charset=iso-8859-1,utf-,*,enq=0.",
);

/// The SPDY/3 zlib dictionary (1423 bytes).
pub fn dictionary() -> Vec<u8> {
    let mut d = Vec::with_capacity(1423);
    for w in WORDS {
        d.extend_from_slice(&(w.len() as u32).to_be_bytes());
        d.extend_from_slice(w.as_bytes());
    }
    d.extend_from_slice(TAIL.as_bytes());
    d
}

/// Largest decompressed header block accepted (a peer cannot make us inflate without bound).
const MAX_BLOCK: usize = 1 << 20;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeaderError {
    #[error("header block: {0}")]
    Malformed(&'static str),
    #[error("header block: zlib: {0}")]
    Zlib(String),
}

/// The headers of a stream, in order; names lowercase.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

impl Headers {
    /// The value of `name` (case-insensitive); the first of several values.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.split('\0').next().unwrap_or_default())
    }

    /// The uncompressed block.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(self.0.len() as u32).to_be_bytes());
        for (name, value) in &self.0 {
            let name = name.to_ascii_lowercase();
            out.extend_from_slice(&(name.len() as u32).to_be_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(value.len() as u32).to_be_bytes());
            out.extend_from_slice(value.as_bytes());
        }
        out
    }

    /// Parses an uncompressed block; it must be used up exactly.
    pub fn decode(mut b: &[u8]) -> Result<Self, HeaderError> {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], HeaderError> {
            if b.len() < n {
                return Err(HeaderError::Malformed("truncated"));
            }
            let (head, rest) = b.split_at(n);
            *b = rest;
            Ok(head)
        }
        fn len(b: &mut &[u8]) -> Result<usize, HeaderError> {
            let v = take(b, 4)?;
            Ok(u32::from_be_bytes([v[0], v[1], v[2], v[3]]) as usize)
        }
        fn text(b: &mut &[u8]) -> Result<String, HeaderError> {
            let n = len(b)?;
            String::from_utf8(take(b, n)?.to_vec()).map_err(|_| HeaderError::Malformed("not UTF-8"))
        }
        let count = len(&mut b)?;
        if count > b.len() / 8 {
            return Err(HeaderError::Malformed("more headers than bytes"));
        }
        let mut headers = Vec::with_capacity(count);
        for _ in 0..count {
            let name = text(&mut b)?;
            if name.is_empty() {
                return Err(HeaderError::Malformed("empty header name"));
            }
            headers.push((name.to_ascii_lowercase(), text(&mut b)?));
        }
        if !b.is_empty() {
            return Err(HeaderError::Malformed("bytes after the last header"));
        }
        Ok(Self(headers))
    }
}

impl<const N: usize> From<[(&str, &str); N]> for Headers {
    fn from(pairs: [(&str, &str); N]) -> Self {
        Self(
            pairs
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }
}

/// The compressing side of one direction of a connection.
pub struct Deflater(Compress);

impl std::fmt::Debug for Deflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Deflater")
    }
}

impl Deflater {
    pub fn new() -> Self {
        let mut c = Compress::new(Compression::best(), true);
        // Only fails when called after data was compressed.
        c.set_dictionary(&dictionary())
            .expect("a fresh zlib stream takes a dictionary");
        Self(c)
    }

    /// Appends `block`, compressed and sync-flushed, to `out`.
    pub fn compress(&mut self, block: &[u8], out: &mut Vec<u8>) -> Result<(), HeaderError> {
        let start = self.0.total_in();
        loop {
            out.reserve(block.len() + 64);
            let used = (self.0.total_in() - start) as usize;
            self.0
                .compress_vec(&block[used..], out, FlushCompress::Sync)
                .map_err(|e| HeaderError::Zlib(e.to_string()))?;
            // The flush is complete once zlib stopped with output space left over.
            if (self.0.total_in() - start) as usize == block.len() && out.len() < out.capacity() {
                return Ok(());
            }
        }
    }
}

/// The decompressing side of one direction of a connection.
pub struct Inflater(Decompress);

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Inflater")
    }
}

impl Inflater {
    pub fn new() -> Self {
        Self(Decompress::new(true))
    }

    /// Decompresses one block's bytes (all of them, as the peer flushed them).
    pub fn decompress(&mut self, input: &[u8]) -> Result<Vec<u8>, HeaderError> {
        let zlib = |e: flate2::DecompressError| HeaderError::Zlib(e.to_string());
        let start = self.0.total_in();
        let mut out = Vec::with_capacity(input.len() * 4 + 64);
        loop {
            let used = (self.0.total_in() - start) as usize;
            let before = (self.0.total_in(), out.len());
            match self
                .0
                .decompress_vec(&input[used..], &mut out, FlushDecompress::Sync)
            {
                Ok(Status::StreamEnd) => {
                    return Err(HeaderError::Malformed("zlib stream ended"));
                }
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.0.set_dictionary(&dictionary()).map_err(zlib)?;
                    continue;
                }
                Err(e) => return Err(zlib(e)),
            }
            let used = (self.0.total_in() - start) as usize;
            if used == input.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            if out.len() >= MAX_BLOCK {
                return Err(HeaderError::Malformed("decompressed block too large"));
            }
            if out.len() == out.capacity() {
                out.reserve(out.capacity());
            } else if (self.0.total_in(), out.len()) == before {
                return Err(HeaderError::Malformed("zlib made no progress"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_is_the_spdy3_one() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        // The id every SPDY/3 peer puts in its zlib header (FDICT): Adler-32 of the dictionary.
        let mut c = Compress::new(Compression::best(), true);
        assert_eq!(c.set_dictionary(&d).unwrap(), 0xe3c6_a7c2);
        assert!(d.starts_with(b"\0\0\0\x07options\0\0\0\x04head"));
        assert!(d.ends_with(b"utf-,*,enq=0."));
    }

    #[test]
    fn blocks_round_trip_through_one_stream_per_direction() {
        let mut deflate = Deflater::new();
        let mut inflate = Inflater::new();
        let blocks = [
            Headers::from([
                ("streamtype", "error"),
                ("port", "8888"),
                ("requestid", "0"),
            ]),
            Headers::from([("streamtype", "data"), ("port", "8888"), ("requestid", "0")]),
            Headers::default(),
            Headers(vec![("x-big".into(), "v".repeat(100_000))]),
        ];
        for h in &blocks {
            let mut wire = Vec::new();
            deflate.compress(&h.encode(), &mut wire).unwrap();
            let plain = inflate.decompress(&wire).unwrap();
            assert_eq!(&Headers::decode(&plain).unwrap(), h);
        }
    }

    #[test]
    fn header_lookup_is_case_insensitive_and_takes_the_first_value() {
        let h = Headers(vec![("streamtype".into(), "data\0error".into())]);
        assert_eq!(h.get("streamType"), Some("data"));
        assert_eq!(h.get("port"), None);
    }

    #[test]
    fn malformed_blocks_are_refused() {
        assert!(Headers::decode(&[0, 0, 0]).is_err());
        assert!(Headers::decode(&[0, 0, 0, 1, 0, 0, 0, 9, b'a']).is_err());
        let mut b = Headers::from([("a", "b")]).encode();
        b.push(0);
        assert!(Headers::decode(&b).is_err());
        assert!(Inflater::new().decompress(b"not zlib at all").is_err());
    }
}
