//! A minimal SPDY/3.1 server, enough for the kubelet's streaming protocols (port-forward):
//! the header-block codec with the SPDY/3 zlib dictionary ([`headers`]), the frame codec
//! ([`frame`]), both pure, and one connection's IO ([`conn`]).
//!
//! No maintained Rust SPDY crate exists; the peers this must satisfy are Go's
//! `github.com/moby/spdystream` (kubectl, client-go, the API server's proxy), whose framing
//! the unit tests check byte for byte.

pub mod conn;
pub mod frame;
pub mod headers;

/// A SPDY client for tests: frames in and out over an in-memory pipe, with its own
/// compression contexts.
#[cfg(test)]
pub mod test_client {
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    use super::frame::{self, Frame};
    use super::headers::{Deflater, Headers, Inflater};

    pub struct Client {
        pub io: DuplexStream,
        deflater: Deflater,
        inflater: Inflater,
    }

    impl Client {
        pub fn new(io: DuplexStream) -> Self {
            Self {
                io,
                deflater: Deflater::new(),
                inflater: Inflater::new(),
            }
        }

        pub async fn send(&mut self, f: Frame) {
            let mut buf = Vec::new();
            frame::encode(&f, &mut self.deflater, &mut buf).unwrap();
            self.io.write_all(&buf).await.unwrap();
        }

        /// The next frame, `None` at EOF.
        pub async fn recv(&mut self) -> Option<Frame> {
            let mut head = [0u8; 8];
            self.io.read_exact(&mut head).await.ok()?;
            let mut payload = vec![0u8; frame::payload_len(&head)];
            self.io.read_exact(&mut payload).await.unwrap();
            Some(frame::decode(&head, &payload, &mut self.inflater).unwrap())
        }

        /// Everything the server sent on `stream` until its FIN; other frames go to `other`.
        pub async fn read_until_fin(&mut self, stream: u32, other: &mut Vec<Frame>) -> Vec<u8> {
            let mut got = Vec::new();
            loop {
                match self.recv().await.expect("frame") {
                    Frame::Data {
                        stream_id,
                        flags,
                        data,
                    } if stream_id == stream => {
                        got.extend(data);
                        if flags & frame::FLAG_FIN != 0 {
                            return got;
                        }
                    }
                    f => other.push(f),
                }
            }
        }

        pub fn syn(id: u32, kind: &str) -> Frame {
            Self::syn_with(id, Headers::from([("streamtype", kind)]))
        }

        pub fn syn_with(id: u32, headers: Headers) -> Frame {
            Frame::SynStream {
                stream_id: id,
                associated_to: 0,
                priority: 0,
                flags: 0,
                headers,
            }
        }
    }
}
