//! The server side of one SPDY/3.1 connection, over any byte stream (the upgraded HTTPS
//! connection of a streaming request): the thin IO shell around [`super::frame`].
//!
//! One task writes: frames from every stream go through one queue, so the header compression
//! context sees them in wire order and a reply always precedes its stream's data. The caller's
//! task reads: each SYN_STREAM from the client (odd ids, increasing) is checked by `accept`,
//! answered with SYN_REPLY (or RST_STREAM when refused) and handed over as a [`Stream`]; DATA,
//! FIN and RST_STREAM go to that stream's queue; a client PING is echoed; GOAWAY or EOF ends
//! the connection. There is no flow control (the Go peers, spdystream, send no WINDOW_UPDATE
//! and ignore ours), SETTINGS and HEADERS are ignored, the server opens no streams of its own.

use std::collections::HashMap;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::frame::{self, FLAG_FIN, Frame, goaway, rst};
use super::headers::{Deflater, Headers, Inflater};

/// Largest DATA payload written (spdystream reads any size; this keeps frames interleaved).
const MAX_DATA: usize = 32 * 1024;
/// Frames waiting for the writer, and frames waiting for a stream's consumer.
const QUEUE: usize = 64;

/// What the client sent on a stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    Data(Vec<u8>),
    /// The client's half of the stream ended (FLAG_FIN).
    Fin,
    /// The client reset the stream (RST_STREAM).
    Reset,
}

/// The sending half of a stream (cheap to clone).
#[derive(Debug, Clone)]
pub struct StreamWriter {
    id: u32,
    out: mpsc::Sender<Frame>,
}

/// The connection is gone: nothing more can be sent.
#[derive(Debug, thiserror::Error)]
#[error("SPDY connection closed")]
pub struct Closed;

impl StreamWriter {
    pub async fn write(&self, data: &[u8]) -> Result<(), Closed> {
        for chunk in data.chunks(MAX_DATA) {
            self.send(0, chunk.to_vec()).await?;
        }
        Ok(())
    }

    /// Ends this side of the stream (an empty DATA frame with FLAG_FIN).
    pub async fn close(&self) -> Result<(), Closed> {
        self.send(FLAG_FIN, Vec::new()).await
    }

    async fn send(&self, flags: u8, data: Vec<u8>) -> Result<(), Closed> {
        let frame = Frame::Data {
            stream_id: self.id,
            flags,
            data,
        };
        self.out.send(frame).await.map_err(|_| Closed)
    }
}

/// A stream the client opened: its headers, what it sends, and a writer back.
#[derive(Debug)]
pub struct Stream {
    pub id: u32,
    pub headers: Headers,
    /// Ends (`None`) when the client finished or reset the stream, or the connection ended.
    pub incoming: mpsc::Receiver<Incoming>,
    pub writer: StreamWriter,
}

/// Serves the connection until the client closes it (EOF or GOAWAY) or breaks the protocol
/// (answered with GOAWAY). `accept` vets a new stream's headers; accepted streams go to
/// `streams`. Returns once the writer is done too, i.e. once every [`StreamWriter`] is dropped.
pub async fn serve<IO>(
    io: IO,
    accept: impl Fn(&Headers) -> Result<(), String>,
    streams: mpsc::Sender<Stream>,
) -> Result<(), String>
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(io);
    let (out, out_rx) = mpsc::channel(QUEUE);
    let writer = tokio::spawn(write_frames(wr, out_rx));
    let mut last_id = 0;
    let result = read_frames(rd, &out, &accept, &streams, &mut last_id).await;
    if result.is_err() {
        let _ = out
            .send(Frame::GoAway {
                last_good_stream_id: last_id,
                status: goaway::PROTOCOL_ERROR,
            })
            .await;
    }
    drop(out);
    match writer.await {
        Ok(Err(e)) if result.is_ok() => Err(e),
        _ => result,
    }
}

async fn write_frames<W: AsyncWrite>(
    wr: W,
    mut frames: mpsc::Receiver<Frame>,
) -> Result<(), String> {
    tokio::pin!(wr);
    let mut deflater = Deflater::new();
    let mut buf = Vec::new();
    while let Some(first) = frames.recv().await {
        buf.clear();
        frame::encode(&first, &mut deflater, &mut buf).map_err(|e| e.to_string())?;
        // Whatever else is queued goes out in the same write.
        while buf.len() < 4 * MAX_DATA
            && let Ok(next) = frames.try_recv()
        {
            frame::encode(&next, &mut deflater, &mut buf).map_err(|e| e.to_string())?;
        }
        wr.write_all(&buf)
            .await
            .map_err(|e| format!("writing: {e}"))?;
        wr.flush().await.map_err(|e| format!("writing: {e}"))?;
    }
    let _ = wr.shutdown().await;
    Ok(())
}

async fn read_frames<R: AsyncRead>(
    rd: R,
    out: &mpsc::Sender<Frame>,
    accept: &impl Fn(&Headers) -> Result<(), String>,
    streams: &mpsc::Sender<Stream>,
    last_id: &mut u32,
) -> Result<(), String> {
    tokio::pin!(rd);
    let mut inflater = Inflater::new();
    let mut open: HashMap<u32, mpsc::Sender<Incoming>> = HashMap::new();
    let send = |f: Frame| async move { out.send(f).await.map_err(|_| "writer gone".to_owned()) };
    loop {
        let mut head = [0u8; 8];
        match rd.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("reading: {e}")),
        }
        let mut payload = vec![0u8; frame::payload_len(&head)];
        rd.read_exact(&mut payload)
            .await
            .map_err(|e| format!("reading: {e}"))?;
        match frame::decode(&head, &payload, &mut inflater).map_err(|e| e.to_string())? {
            Frame::SynStream {
                stream_id,
                flags,
                headers,
                ..
            } => {
                if stream_id % 2 == 0 || stream_id <= *last_id {
                    send(Frame::RstStream {
                        stream_id,
                        status: rst::PROTOCOL_ERROR,
                    })
                    .await?;
                    continue;
                }
                *last_id = stream_id;
                if let Err(why) = accept(&headers) {
                    tracing::warn!(stream_id, %why, "SPDY stream refused");
                    send(Frame::RstStream {
                        stream_id,
                        status: rst::CANCEL,
                    })
                    .await?;
                    continue;
                }
                let (tx, incoming) = mpsc::channel(QUEUE);
                if flags & FLAG_FIN == 0 {
                    open.insert(stream_id, tx);
                } else {
                    let _ = tx.try_send(Incoming::Fin);
                }
                send(Frame::SynReply {
                    stream_id,
                    flags: 0,
                    headers: Headers::default(),
                })
                .await?;
                let stream = Stream {
                    id: stream_id,
                    headers,
                    incoming,
                    writer: StreamWriter {
                        id: stream_id,
                        out: out.clone(),
                    },
                };
                if streams.send(stream).await.is_err() {
                    send(Frame::RstStream {
                        stream_id,
                        status: rst::REFUSED_STREAM,
                    })
                    .await?;
                }
            }
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                let Some(tx) = open.get(&stream_id) else {
                    // A stream already ended or reset: SPDY says to drop it.
                    continue;
                };
                let gone = (!data.is_empty() && tx.send(Incoming::Data(data)).await.is_err())
                    || (flags & FLAG_FIN != 0 && tx.send(Incoming::Fin).await.is_err());
                if gone || flags & FLAG_FIN != 0 {
                    open.remove(&stream_id);
                }
            }
            Frame::RstStream { stream_id, .. } => {
                if let Some(tx) = open.remove(&stream_id) {
                    let _ = tx.send(Incoming::Reset).await;
                }
            }
            Frame::Ping { id } => {
                // Odd ids are the client's: echo them. An even id answers a ping of ours.
                if id % 2 == 1 {
                    send(Frame::Ping { id }).await?;
                }
            }
            Frame::GoAway { .. } => return Ok(()),
            Frame::SynReply { stream_id, .. } => {
                send(Frame::RstStream {
                    stream_id,
                    status: rst::INVALID_STREAM,
                })
                .await?;
            }
            Frame::Headers { .. }
            | Frame::Settings { .. }
            | Frame::WindowUpdate { .. }
            | Frame::Unknown { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spdy::test_client::Client;

    fn start() -> (
        Client,
        mpsc::Receiver<Stream>,
        tokio::task::JoinHandle<Result<(), String>>,
    ) {
        let (a, b) = tokio::io::duplex(1 << 20);
        let (tx, rx) = mpsc::channel(8);
        let accept = |h: &Headers| match h.get("streamtype") {
            Some("data" | "error") => Ok(()),
            other => Err(format!("invalid stream type {other:?}")),
        };
        let server = tokio::spawn(serve(b, accept, tx));
        (Client::new(a), rx, server)
    }

    fn reply(id: u32) -> Frame {
        Frame::SynReply {
            stream_id: id,
            flags: 0,
            headers: Headers::default(),
        }
    }

    #[tokio::test]
    async fn streams_are_replied_fed_and_written() {
        let (mut c, mut streams, server) = start();
        c.send(Client::syn(1, "error")).await;
        c.send(Client::syn(3, "data")).await;
        assert_eq!(c.recv().await, Some(reply(1)));
        assert_eq!(c.recv().await, Some(reply(3)));
        let mut error = streams.recv().await.unwrap();
        let mut data = streams.recv().await.unwrap();
        assert_eq!((error.id, data.id), (1, 3));
        assert_eq!(data.headers.get("streamType"), Some("data"));

        c.send(Frame::Data {
            stream_id: 1,
            flags: FLAG_FIN,
            data: vec![],
        })
        .await;
        assert_eq!(error.incoming.recv().await, Some(Incoming::Fin));
        assert_eq!(error.incoming.recv().await, None, "FIN ends the queue");

        c.send(Frame::Data {
            stream_id: 3,
            flags: 0,
            data: b"ping?".to_vec(),
        })
        .await;
        assert_eq!(
            data.incoming.recv().await,
            Some(Incoming::Data(b"ping?".to_vec()))
        );
        let big = vec![7u8; MAX_DATA + 10];
        data.writer.write(&big).await.unwrap();
        data.writer.close().await.unwrap();
        let mut other = Vec::new();
        assert_eq!(c.read_until_fin(3, &mut other).await, big);
        assert_eq!(other, vec![], "only stream 3's data");

        c.send(Frame::RstStream {
            stream_id: 3,
            status: rst::CANCEL,
        })
        .await;
        assert_eq!(data.incoming.recv().await, Some(Incoming::Reset));

        c.send(Frame::Ping { id: 1 }).await;
        assert_eq!(c.recv().await, Some(Frame::Ping { id: 1 }));

        c.send(Frame::GoAway {
            last_good_stream_id: 0,
            status: goaway::OK,
        })
        .await;
        drop((error, data));
        assert_eq!(server.await.unwrap(), Ok(()));
        assert_eq!(c.recv().await, None, "the server closed its side");
    }

    #[tokio::test]
    async fn refused_and_out_of_order_streams_are_reset() {
        let (mut c, mut streams, server) = start();
        c.send(Client::syn(1, "bogus")).await;
        assert_eq!(
            c.recv().await,
            Some(Frame::RstStream {
                stream_id: 1,
                status: rst::CANCEL
            })
        );
        c.send(Client::syn(2, "data")).await;
        assert_eq!(
            c.recv().await,
            Some(Frame::RstStream {
                stream_id: 2,
                status: rst::PROTOCOL_ERROR
            })
        );
        c.send(Client::syn(5, "data")).await;
        assert_eq!(c.recv().await, Some(reply(5)));
        assert_eq!(streams.recv().await.unwrap().id, 5);
        // Data for a stream that does not exist is dropped; SETTINGS are ignored.
        c.send(Frame::Data {
            stream_id: 9,
            flags: 0,
            data: b"x".to_vec(),
        })
        .await;
        c.send(Frame::Settings {
            flags: 0,
            entries: vec![(0, 7, 1 << 16)],
        })
        .await;
        c.send(Frame::Ping { id: 3 }).await;
        assert_eq!(c.recv().await, Some(Frame::Ping { id: 3 }));
        drop(c);
        assert_eq!(server.await.unwrap(), Ok(()), "EOF is a clean end");
    }

    #[tokio::test]
    async fn a_broken_frame_gets_goaway() {
        let (mut c, _streams, server) = start();
        c.io.write_all(&[0x80, 0x02, 0x00, 0x06, 0, 0, 0, 4, 0, 0, 0, 1])
            .await
            .unwrap();
        assert_eq!(
            c.recv().await,
            Some(Frame::GoAway {
                last_good_stream_id: 0,
                status: goaway::PROTOCOL_ERROR
            })
        );
        assert!(server.await.unwrap().unwrap_err().contains("version 2"));
    }
}
