//! The kubelet's port-forward protocol (`portforward.k8s.io`) over one SPDY connection.
//!
//! For each forwarded connection the client opens two streams with the same `requestID`
//! header: `streamType: error` (which it half-closes at once) and `streamType: data`, both
//! with the pod `port`. Once both are there, the agent connects to the pod's IP on that port
//! and copies bytes both ways on the data stream; when that fails, the message goes on the
//! error stream as the kubelet words it (`error forwarding port P to pod NAME, uid UID: …`),
//! and both streams are closed. One connection carries any number of such pairs.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::spdy::conn::{self, Incoming, Stream, StreamWriter};
use crate::spdy::headers::Headers;

/// The subprotocol negotiated with `X-Stream-Protocol-Version`.
pub const PROTOCOL: &str = "portforward.k8s.io";
const PORT: &str = "port";
const STREAM_TYPE: &str = "streamType";
const REQUEST_ID: &str = "requestID";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the first stream of a pair waits for the second (the kubelet's stream creation
/// timeout).
const PAIR_TIMEOUT: Duration = Duration::from_secs(30);

/// The pod the connection forwards to.
#[derive(Debug, Clone)]
pub struct Target {
    /// How the kubelet names the pod in errors: `<name>_<namespace>`.
    pub pod: String,
    pub uid: String,
    pub ip: IpAddr,
}

/// The stream checks of the kubelet: a port in 1..=65535 and a known stream type; a stream
/// that fails them is reset.
pub fn check_stream(h: &Headers) -> Result<(), String> {
    let port = h
        .get(PORT)
        .ok_or_else(|| format!("{PORT:?} header is required"))?;
    match port.parse::<u16>() {
        Ok(0) => return Err(format!("port {port:?} must be > 0")),
        Ok(_) => {}
        Err(e) => return Err(format!("unable to parse {port:?} as a port: {e}")),
    }
    match h.get(STREAM_TYPE) {
        None => Err(format!("{STREAM_TYPE:?} header is required")),
        Some("error" | "data") => Ok(()),
        Some(other) => Err(format!("invalid stream type {other:?}")),
    }
}

/// The pair a stream belongs to: its `requestID`, or for old clients that send none, the
/// id the kubelet derives from the stream id (error stream N, data stream N+2).
fn request_id(s: &Stream) -> String {
    match s.headers.get(REQUEST_ID) {
        Some(id) => id.to_owned(),
        None if s.headers.get(STREAM_TYPE) == Some("data") => s.id.saturating_sub(2).to_string(),
        None => s.id.to_string(),
    }
}

struct Pair {
    data: Option<Stream>,
    error: Option<Stream>,
    since: Instant,
}

impl Default for Pair {
    fn default() -> Self {
        Self {
            data: None,
            error: None,
            since: Instant::now(),
        }
    }
}

/// Serves one upgraded connection until the client closes it.
pub async fn serve<IO>(io: IO, target: Target)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let target = Arc::new(target);
    let (tx, mut streams) = mpsc::channel(16);
    let connection = tokio::spawn(conn::serve(io, check_stream, tx));
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let mut sweep = tokio::time::interval(Duration::from_secs(1));
    loop {
        let stream = tokio::select! {
            s = streams.recv() => match s {
                Some(s) => s,
                None => break,
            },
            _ = sweep.tick() => {
                expire(&mut pairs, PAIR_TIMEOUT).await;
                continue;
            }
        };
        let id = request_id(&stream);
        let pair = pairs.entry(id.clone()).or_default();
        let data = stream.headers.get(STREAM_TYPE) == Some("data");
        let slot = if data {
            &mut pair.data
        } else {
            &mut pair.error
        };
        if slot.is_some() {
            let kind = if data { "data" } else { "error" };
            let msg =
                format!("error processing stream for request {id}: {kind} stream already assigned");
            tracing::warn!(%msg, "port-forward");
            if let Some(e) = &pair.error {
                let _ = e.writer.write(msg.as_bytes()).await;
            }
            continue;
        }
        *slot = Some(stream);
        if pair.data.is_some() && pair.error.is_some() {
            let pair = pairs.remove(&id).unwrap_or_default();
            if let (Some(data), Some(error)) = (pair.data, pair.error) {
                tokio::spawn(forward(data, error, target.clone()));
            }
        }
    }
    match connection.await {
        Ok(Err(e)) => {
            tracing::info!(error = %e, pod = %target.pod, "port-forward connection ended")
        }
        Err(e) => tracing::warn!(error = %e, "port-forward connection task failed"),
        Ok(Ok(())) => tracing::debug!(pod = %target.pod, "port-forward connection closed"),
    }
}

/// Drops pairs whose second stream did not come within `timeout`, saying so on the error
/// stream when that is the one that came.
async fn expire(pairs: &mut HashMap<String, Pair>, timeout: Duration) {
    let expired: Vec<(String, Pair)> = pairs
        .extract_if(|_, p| p.since.elapsed() >= timeout)
        .collect();
    for (id, pair) in expired {
        let msg = format!("(request={id}) timed out waiting for streams");
        tracing::warn!(%msg, "port-forward");
        if let Some(error) = pair.error {
            let _ = error.writer.write(msg.as_bytes()).await;
            let _ = error.writer.close().await;
        }
        if let Some(data) = pair.data {
            let _ = data.writer.close().await;
        }
    }
}

async fn forward(data: Stream, error: Stream, target: Arc<Target>) {
    let port = data
        .headers
        .get(PORT)
        .and_then(|p| p.parse::<u16>().ok())
        .unwrap_or_default();
    // The client half-closes the error stream and only reads it: drain what it sends so the
    // connection's reader never waits on this stream.
    let Stream {
        incoming: mut error_in,
        writer: error_out,
        ..
    } = error;
    tokio::spawn(async move { while error_in.recv().await.is_some() {} });
    tracing::debug!(pod = %target.pod, port, "port-forward: forwarding");
    if let Err(e) = pipe(target.ip, port, data.incoming, &data.writer).await {
        let msg = format!(
            "error forwarding port {port} to pod {}, uid {}: {e}",
            target.pod, target.uid
        );
        tracing::warn!(%msg, "port-forward");
        let _ = error_out.write(msg.as_bytes()).await;
    }
    let _ = error_out.close().await;
    let _ = data.writer.close().await;
}

/// Connects to `ip:port` and copies until the pod closes its side, or the client resets the
/// stream or goes away. The client's FIN only half-closes the pod connection: the pod may
/// still be answering.
async fn pipe(
    ip: IpAddr,
    port: u16,
    mut from_client: mpsc::Receiver<Incoming>,
    to_client: &StreamWriter,
) -> Result<(), String> {
    let dial = |e: String| format!("failed to connect to {ip}:{port} (the pod's IP): {e}");
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((ip, port)))
        .await
        .map_err(|_| dial("timed out".to_owned()))?
        .map_err(|e| dial(e.to_string()))?;
    let (mut rd, mut wr) = tcp.into_split();
    let up = async {
        while let Some(m) = from_client.recv().await {
            match m {
                Incoming::Data(b) => wr
                    .write_all(&b)
                    .await
                    .map_err(|e| format!("writing to {ip}:{port}: {e}"))?,
                Incoming::Fin => {
                    let _ = wr.shutdown().await;
                }
                Incoming::Reset => break,
            }
        }
        Ok::<(), String>(())
    };
    let down = async {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            let n = rd
                .read(&mut buf)
                .await
                .map_err(|e| format!("reading from {ip}:{port}: {e}"))?;
            if n == 0 {
                return Ok(());
            }
            if to_client.write(&buf[..n]).await.is_err() {
                return Ok(()); // the client is gone: nobody to tell
            }
        }
    };
    tokio::select! {
        r = down => r,
        r = up => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spdy::frame::{FLAG_FIN, Frame};
    use crate::spdy::test_client::Client;

    fn pf_headers(kind: &str, port: u16, request: &str) -> Headers {
        Headers(vec![
            ("streamtype".into(), kind.into()),
            ("port".into(), port.to_string()),
            ("requestid".into(), request.into()),
        ])
    }

    fn target() -> Target {
        Target {
            pod: "p_ns".into(),
            uid: "u-1".into(),
            ip: "127.0.0.1".parse().unwrap(),
        }
    }

    #[tokio::test]
    async fn forwards_to_the_pod_and_reports_a_refused_port_on_the_error_stream() {
        // The "pod": answers one request with a fixed reply, then closes.
        let pod = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = pod.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = pod.accept().await.unwrap();
            let mut req = [0u8; 4];
            s.read_exact(&mut req).await.unwrap();
            assert_eq!(&req, b"GET ");
            s.write_all(b"tracehouse_up 1\n").await.unwrap();
        });
        // A port nothing listens on: bind, note, drop.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();

        let (a, b) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(serve(b, target()));
        let mut c = Client::new(a);
        let mut other = Vec::new();

        // Request 0: the error stream first (half-closed at once), then the data stream.
        c.send(Client::syn_with(1, pf_headers("error", port, "0")))
            .await;
        c.send(Frame::Data {
            stream_id: 1,
            flags: FLAG_FIN,
            data: vec![],
        })
        .await;
        c.send(Client::syn_with(3, pf_headers("data", port, "0")))
            .await;
        c.send(Frame::Data {
            stream_id: 3,
            flags: 0,
            data: b"GET ".to_vec(),
        })
        .await;
        assert_eq!(c.read_until_fin(3, &mut other).await, b"tracehouse_up 1\n");

        // Request 1, to the closed port: the kubelet's message on the error stream.
        c.send(Client::syn_with(5, pf_headers("error", closed, "1")))
            .await;
        c.send(Client::syn_with(7, pf_headers("data", closed, "1")))
            .await;
        let msg = String::from_utf8(c.read_until_fin(5, &mut other).await).unwrap();
        assert!(
            msg.starts_with(&format!("error forwarding port {closed} to pod p_ns, uid u-1: failed to connect to 127.0.0.1:{closed}")),
            "{msg}"
        );
        assert!(msg.contains("refused"), "{msg}");
        assert_eq!(
            c.read_until_fin(7, &mut other).await,
            b"",
            "data stream closed too"
        );

        // Every stream was replied to; the error stream of request 0 ended empty.
        for id in [1, 3, 5, 7] {
            assert!(
                other
                    .iter()
                    .any(|f| matches!(f, Frame::SynReply { stream_id, .. } if *stream_id == id)),
                "no SYN_REPLY for {id}: {other:?}"
            );
        }
        drop(c);
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_pair_missing_its_data_stream_times_out_on_its_error_stream() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let (tx, mut rx) = mpsc::channel(4);
        tokio::spawn(conn::serve(b, check_stream, tx));
        let mut c = Client::new(a);
        c.send(Client::syn_with(1, pf_headers("error", 80, "4")))
            .await;
        let mut pairs = HashMap::new();
        pairs.insert(
            "4".to_owned(),
            Pair {
                error: rx.recv().await,
                ..Pair::default()
            },
        );
        expire(&mut pairs, Duration::from_secs(60)).await;
        assert_eq!(pairs.len(), 1, "not yet");
        expire(&mut pairs, Duration::ZERO).await;
        assert!(pairs.is_empty());
        let mut other = Vec::new();
        let msg = c.read_until_fin(1, &mut other).await;
        assert_eq!(msg, b"(request=4) timed out waiting for streams");
    }

    #[test]
    fn streams_are_checked_as_the_kubelet_does() {
        let ok = Headers::from([("streamtype", "data"), ("port", "8888")]);
        assert_eq!(check_stream(&ok), Ok(()));
        for (h, why) in [
            (
                Headers::from([("streamtype", "data")]),
                "\"port\" header is required",
            ),
            (
                Headers::from([("streamtype", "data"), ("port", "0")]),
                "must be > 0",
            ),
            (
                Headers::from([("streamtype", "data"), ("port", "70000")]),
                "unable to parse",
            ),
            (
                Headers::from([("port", "1")]),
                "\"streamType\" header is required",
            ),
            (
                Headers::from([("streamtype", "x"), ("port", "1")]),
                "invalid stream type",
            ),
        ] {
            let e = check_stream(&h).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }
}
