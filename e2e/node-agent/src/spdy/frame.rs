//! SPDY/3.1 frames: the pure codec (bytes ⇄ [`Frame`]), no IO.
//!
//! Every frame starts with 8 bytes. A control frame: the control bit, version 3 (15 bits),
//! its type (16 bits), flags (8 bits), payload length (24 bits). A data frame: a clear
//! control bit, the stream id (31 bits), flags, length. Header blocks (SYN_STREAM, SYN_REPLY,
//! HEADERS) go through the connection's [`Deflater`]/[`Inflater`], so frames must be encoded
//! and decoded in wire order.

use super::headers::{Deflater, HeaderError, Headers, Inflater};

pub const VERSION: u16 = 3;
/// FLAG_FIN on data and control frames: the sender's half of the stream ends with this frame.
pub const FLAG_FIN: u8 = 0x01;
/// FLAG_UNIDIRECTIONAL on SYN_STREAM: the receiver must not send on this stream (no
/// port-forward client sets it).
#[cfg(test)]
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const SETTINGS: u16 = 4;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const WINDOW_UPDATE: u16 = 9;

/// RST_STREAM status codes used here.
pub mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INVALID_STREAM: u32 = 2;
    pub const REFUSED_STREAM: u32 = 3;
    pub const CANCEL: u32 = 5;
}

/// GOAWAY status codes.
pub mod goaway {
    #[cfg(test)]
    pub const OK: u32 = 0;
    pub const PROTOCOL_ERROR: u32 = 1;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        stream_id: u32,
        associated_to: u32,
        priority: u8,
        flags: u8,
        headers: Headers,
    },
    SynReply {
        stream_id: u32,
        flags: u8,
        headers: Headers,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    /// `(flags, id, value)` per setting.
    Settings {
        flags: u8,
        entries: Vec<(u8, u32, u32)>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        flags: u8,
        headers: Headers,
    },
    WindowUpdate {
        stream_id: u32,
        delta: u32,
    },
    Data {
        stream_id: u32,
        flags: u8,
        data: Vec<u8>,
    },
    /// A control frame of a type this codec does not know: SPDY says to ignore it.
    Unknown {
        frame_type: u16,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("unsupported SPDY version {0}")]
    Version(u16),
    #[error("{0} frame: bad length {1}")]
    Length(&'static str, usize),
    #[error("{0} frame: stream id 0")]
    ZeroStream(&'static str),
    #[error(transparent)]
    Headers(#[from] HeaderError),
}

/// The payload length announced by a frame's first 8 bytes.
pub fn payload_len(head: &[u8; 8]) -> usize {
    u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Decodes one frame from its 8-byte head and its payload (`payload_len(head)` bytes).
pub fn decode(
    head: &[u8; 8],
    payload: &[u8],
    inflater: &mut Inflater,
) -> Result<Frame, FrameError> {
    let flags = head[4];
    if head[0] & 0x80 == 0 {
        let stream_id = u32_at(head, 0) & 0x7fff_ffff;
        if stream_id == 0 {
            return Err(FrameError::ZeroStream("DATA"));
        }
        return Ok(Frame::Data {
            stream_id,
            flags,
            data: payload.to_vec(),
        });
    }
    let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
    if version != VERSION {
        return Err(FrameError::Version(version));
    }
    let frame_type = u16::from_be_bytes([head[2], head[3]]);
    let need = |name: &'static str, ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(FrameError::Length(name, payload.len()))
        }
    };
    let stream = |name: &'static str, at: usize| {
        let id = u32_at(payload, at) & 0x7fff_ffff;
        if id == 0 {
            Err(FrameError::ZeroStream(name))
        } else {
            Ok(id)
        }
    };
    Ok(match frame_type {
        SYN_STREAM => {
            need("SYN_STREAM", payload.len() >= 10)?;
            Frame::SynStream {
                stream_id: stream("SYN_STREAM", 0)?,
                associated_to: u32_at(payload, 4) & 0x7fff_ffff,
                priority: payload[8] >> 5,
                flags,
                headers: Headers::decode(&inflater.decompress(&payload[10..])?)?,
            }
        }
        SYN_REPLY | HEADERS => {
            let name = if frame_type == SYN_REPLY {
                "SYN_REPLY"
            } else {
                "HEADERS"
            };
            need(name, payload.len() >= 4)?;
            let stream_id = stream(name, 0)?;
            let headers = Headers::decode(&inflater.decompress(&payload[4..])?)?;
            if frame_type == SYN_REPLY {
                Frame::SynReply {
                    stream_id,
                    flags,
                    headers,
                }
            } else {
                Frame::Headers {
                    stream_id,
                    flags,
                    headers,
                }
            }
        }
        RST_STREAM => {
            need("RST_STREAM", payload.len() == 8)?;
            Frame::RstStream {
                stream_id: stream("RST_STREAM", 0)?,
                status: u32_at(payload, 4),
            }
        }
        SETTINGS => {
            need("SETTINGS", payload.len() >= 4)?;
            let count = u32_at(payload, 0) as usize;
            need("SETTINGS", payload.len() == 4 + count.saturating_mul(8))?;
            let entries = (0..count)
                .map(|i| {
                    let at = 4 + i * 8;
                    let word = u32_at(payload, at);
                    (
                        (word >> 24) as u8,
                        word & 0x00ff_ffff,
                        u32_at(payload, at + 4),
                    )
                })
                .collect();
            Frame::Settings { flags, entries }
        }
        PING => {
            need("PING", payload.len() == 4)?;
            Frame::Ping {
                id: u32_at(payload, 0),
            }
        }
        GOAWAY => {
            need("GOAWAY", payload.len() == 8)?;
            Frame::GoAway {
                last_good_stream_id: u32_at(payload, 0) & 0x7fff_ffff,
                status: u32_at(payload, 4),
            }
        }
        WINDOW_UPDATE => {
            need("WINDOW_UPDATE", payload.len() == 8)?;
            Frame::WindowUpdate {
                stream_id: u32_at(payload, 0) & 0x7fff_ffff,
                delta: u32_at(payload, 4) & 0x7fff_ffff,
            }
        }
        other => Frame::Unknown { frame_type: other },
    })
}

fn control(out: &mut Vec<u8>, frame_type: u16, flags: u8, payload: &[u8]) {
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&frame_type.to_be_bytes());
    out.push(flags);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(payload);
}

/// Appends `frame` to `out`. A data frame must fit the 24-bit length (`conn` writes at most
/// 32 KiB); unknown frames encode to nothing.
pub fn encode(
    frame: &Frame,
    deflater: &mut Deflater,
    out: &mut Vec<u8>,
) -> Result<(), HeaderError> {
    let mut p = Vec::new();
    match frame {
        Frame::SynStream {
            stream_id,
            associated_to,
            priority,
            flags,
            headers,
        } => {
            p.extend_from_slice(&stream_id.to_be_bytes());
            p.extend_from_slice(&associated_to.to_be_bytes());
            p.push(priority << 5);
            p.push(0);
            deflater.compress(&headers.encode(), &mut p)?;
            control(out, SYN_STREAM, *flags, &p);
        }
        Frame::SynReply {
            stream_id,
            flags,
            headers,
        }
        | Frame::Headers {
            stream_id,
            flags,
            headers,
        } => {
            p.extend_from_slice(&stream_id.to_be_bytes());
            deflater.compress(&headers.encode(), &mut p)?;
            let t = if matches!(frame, Frame::SynReply { .. }) {
                SYN_REPLY
            } else {
                HEADERS
            };
            control(out, t, *flags, &p);
        }
        Frame::RstStream { stream_id, status } => {
            p.extend_from_slice(&stream_id.to_be_bytes());
            p.extend_from_slice(&status.to_be_bytes());
            control(out, RST_STREAM, 0, &p);
        }
        Frame::Settings { flags, entries } => {
            p.extend_from_slice(&(entries.len() as u32).to_be_bytes());
            for (f, id, value) in entries {
                p.extend_from_slice(&((u32::from(*f) << 24) | (id & 0x00ff_ffff)).to_be_bytes());
                p.extend_from_slice(&value.to_be_bytes());
            }
            control(out, SETTINGS, *flags, &p);
        }
        Frame::Ping { id } => control(out, PING, 0, &id.to_be_bytes()),
        Frame::GoAway {
            last_good_stream_id,
            status,
        } => {
            p.extend_from_slice(&last_good_stream_id.to_be_bytes());
            p.extend_from_slice(&status.to_be_bytes());
            control(out, GOAWAY, 0, &p);
        }
        Frame::WindowUpdate { stream_id, delta } => {
            p.extend_from_slice(&stream_id.to_be_bytes());
            p.extend_from_slice(&delta.to_be_bytes());
            control(out, WINDOW_UPDATE, 0, &p);
        }
        Frame::Data {
            stream_id,
            flags,
            data,
        } => {
            out.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
            out.push(*flags);
            out.extend_from_slice(&(data.len() as u32).to_be_bytes()[1..]);
            out.extend_from_slice(data);
        }
        Frame::Unknown { .. } => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits `wire` into frames and decodes them in order with one inflater.
    fn decode_all(mut wire: &[u8], inflater: &mut Inflater) -> Vec<Frame> {
        let mut frames = Vec::new();
        while !wire.is_empty() {
            let head: [u8; 8] = wire[..8].try_into().unwrap();
            let len = payload_len(&head);
            frames.push(decode(&head, &wire[8..8 + len], inflater).unwrap());
            wire = &wire[8 + len..];
        }
        frames
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Bytes written by Go's SPDY framer (github.com/moby/spdystream/spdy, the one kubectl and
    /// client-go use) for the two streams of a port-forward request, then a FIN data frame,
    /// a PING, a RST_STREAM, a GOAWAY and an empty SYN_REPLY, all on one framer.
    const GO_SYN_ERROR: &str = "800300010000003e0000000100000000000078f9e3c6a7c202253a703a2b294a4dcc851625aca9a0808614cb45e01c60616161c1c0c0c0590489c64c50f2663400000000ffff";
    const GO_SYN_DATA: &str =
        "800300010000001a00000003000000000000826a26ac0ad57850499508000000ffff";
    const GO_CONTROL: &str = "00000001010000008003000600000004000000018003000300000008000000030000000580030007000000080000000000000000800300020000000e000000036260606000000000ffff";

    #[test]
    fn decodes_what_go_spdystream_writes() {
        let mut inflater = Inflater::new();
        let wire = [hex(GO_SYN_ERROR), hex(GO_SYN_DATA), hex(GO_CONTROL)].concat();
        let frames = decode_all(&wire, &mut inflater);
        let syn = |id, kind| Frame::SynStream {
            stream_id: id,
            associated_to: 0,
            priority: 0,
            flags: 0,
            headers: Headers::from([("port", "8888"), ("requestid", "0"), ("streamtype", kind)]),
        };
        // Go writes a header block in map order: compare SYN_STREAM headers sorted.
        let got: Vec<Frame> = frames
            .into_iter()
            .map(|mut f| {
                if let Frame::SynStream { headers, .. } = &mut f {
                    headers.0.sort();
                }
                f
            })
            .collect();
        assert_eq!(
            got,
            vec![
                syn(1, "error"),
                syn(3, "data"),
                Frame::Data {
                    stream_id: 1,
                    flags: FLAG_FIN,
                    data: vec![]
                },
                Frame::Ping { id: 1 },
                Frame::RstStream {
                    stream_id: 3,
                    status: rst::CANCEL
                },
                Frame::GoAway {
                    last_good_stream_id: 0,
                    status: goaway::OK
                },
                Frame::SynReply {
                    stream_id: 3,
                    flags: 0,
                    headers: Headers::default()
                },
            ]
        );
    }

    #[test]
    fn every_frame_round_trips_through_one_connection_context() {
        let frames = vec![
            Frame::SynStream {
                stream_id: 5,
                associated_to: 1,
                priority: 7,
                flags: FLAG_FIN | FLAG_UNIDIRECTIONAL,
                headers: Headers::from([("streamtype", "data"), ("port", "1")]),
            },
            Frame::SynReply {
                stream_id: 5,
                flags: 0,
                headers: Headers::default(),
            },
            Frame::Headers {
                stream_id: 5,
                flags: FLAG_FIN,
                headers: Headers::from([("a", "b\0c")]),
            },
            Frame::RstStream {
                stream_id: 7,
                status: rst::REFUSED_STREAM,
            },
            Frame::Settings {
                flags: 1,
                entries: vec![(1, 7, 65536), (0, 4, 100)],
            },
            Frame::Ping { id: 2 },
            Frame::GoAway {
                last_good_stream_id: 9,
                status: goaway::PROTOCOL_ERROR,
            },
            Frame::WindowUpdate {
                stream_id: 5,
                delta: 1 << 20,
            },
            Frame::Data {
                stream_id: 5,
                flags: 0,
                data: b"GET /metrics HTTP/1.1\r\n\r\n".to_vec(),
            },
            Frame::Data {
                stream_id: 5,
                flags: FLAG_FIN,
                data: vec![],
            },
        ];
        let mut deflater = Deflater::new();
        let mut wire = Vec::new();
        for f in &frames {
            encode(f, &mut deflater, &mut wire).unwrap();
        }
        assert_eq!(decode_all(&wire, &mut Inflater::new()), frames);
    }

    #[test]
    fn a_reply_written_here_has_the_layout_go_reads() {
        // Go's framer writes an empty SYN_REPLY as "80030002 <len> <stream id> <zlib>", and the
        // zlib stream of a direction opens with 78 f9 and the dictionary id.
        let mut wire = Vec::new();
        let reply = Frame::SynReply {
            stream_id: 3,
            flags: 0,
            headers: Headers::default(),
        };
        encode(&reply, &mut Deflater::new(), &mut wire).unwrap();
        assert_eq!(&wire[..4], &[0x80, 0x03, 0x00, 0x02]);
        assert_eq!(&wire[8..12], &3u32.to_be_bytes());
        assert_eq!(&wire[12..18], &[0x78, 0xf9, 0xe3, 0xc6, 0xa7, 0xc2]);
        assert!(wire.ends_with(&[0x00, 0x00, 0xff, 0xff]), "sync flush");
        assert_eq!(payload_len(&wire[..8].try_into().unwrap()), wire.len() - 8);
    }

    #[test]
    fn bad_frames_are_errors_unknown_ones_are_not() {
        let mut inflater = Inflater::new();
        let head = |t: u16, len: u32| {
            let mut h = [0u8; 8];
            h[..2].copy_from_slice(&0x8003u16.to_be_bytes());
            h[2..4].copy_from_slice(&t.to_be_bytes());
            h[4..].copy_from_slice(&len.to_be_bytes());
            h
        };
        assert_eq!(
            decode(&head(PING, 3), &[0, 0, 1], &mut inflater),
            Err(FrameError::Length("PING", 3))
        );
        assert_eq!(
            decode(&head(RST_STREAM, 8), &[0; 8], &mut inflater),
            Err(FrameError::ZeroStream("RST_STREAM"))
        );
        let mut v2 = head(PING, 4);
        v2[1] = 2;
        assert_eq!(
            decode(&v2, &[0, 0, 0, 1], &mut inflater),
            Err(FrameError::Version(2))
        );
        assert_eq!(
            decode(&head(0x0a, 0), &[], &mut inflater),
            Ok(Frame::Unknown { frame_type: 0x0a })
        );
        assert_eq!(
            decode(&[0; 8], &[], &mut inflater),
            Err(FrameError::ZeroStream("DATA"))
        );
    }
}
