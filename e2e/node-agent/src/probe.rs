//! Container probes (startup, readiness, liveness): `httpGet` and `tcpSocket` against the pod
//! IP, with the kubelet's timing (initial delay, period, timeout, success/failure thresholds).
//!
//! The HTTP check is a single HTTP/1.1 request on a fresh connection; any status in 200..400
//! passes, as for the kubelet. `exec`, `grpc` and HTTPS probes are not supported here: such a
//! probe is reported once in the log and treated as passing.

use std::net::IpAddr;
use std::ops::ControlFlow;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProbeError {
    #[error("probe port {0:?} is neither a port number nor a named port of the container")]
    Port(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Http {
        host: Option<String>,
        port: u16,
        path: String,
        headers: Vec<(String, String)>,
    },
    Tcp {
        host: Option<String>,
        port: u16,
    },
    /// A probe kind this node agent does not run; it always passes.
    Unsupported(&'static str),
    /// A probe that cannot work (its port does not resolve); it always fails with this message.
    Invalid(String),
}

impl Action {
    /// The check a probe describes, with named ports resolved against the container.
    pub fn of(probe: &Probe, container: &Container) -> Result<Self, ProbeError> {
        if let Some(h) = &probe.http_get {
            if h.scheme
                .as_deref()
                .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"))
            {
                return Ok(Self::Unsupported("httpGet with scheme HTTPS"));
            }
            return Ok(Self::Http {
                host: h.host.clone().filter(|h| !h.is_empty()),
                port: port(&h.port, container)?,
                path: h
                    .path
                    .clone()
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| "/".to_owned()),
                headers: h
                    .http_headers
                    .iter()
                    .flatten()
                    .map(|h| (h.name.clone(), h.value.clone()))
                    .collect(),
            });
        }
        if let Some(t) = &probe.tcp_socket {
            return Ok(Self::Tcp {
                host: t.host.clone().filter(|h| !h.is_empty()),
                port: port(&t.port, container)?,
            });
        }
        if probe.exec.is_some() {
            return Ok(Self::Unsupported("exec"));
        }
        Ok(Self::Unsupported("grpc"))
    }
}

fn port(p: &IntOrString, container: &Container) -> Result<u16, ProbeError> {
    match p {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| ProbeError::Port(n.to_string())),
        IntOrString::String(s) => {
            if let Ok(n) = s.parse::<u16>() {
                return Ok(n);
            }
            container
                .ports
                .iter()
                .flatten()
                .find(|cp| cp.name.as_deref() == Some(s.as_str()))
                .and_then(|cp| u16::try_from(cp.container_port).ok())
                .ok_or_else(|| ProbeError::Port(s.clone()))
        }
    }
}

/// The kubelet's probe timing, with its defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Timing {
    pub fn of(probe: &Probe) -> Self {
        let secs = |v: Option<i32>, default: u64| {
            Duration::from_secs(v.and_then(|v| u64::try_from(v).ok()).unwrap_or(default))
        };
        let count = |v: Option<i32>, default: u32| {
            v.and_then(|v| u32::try_from(v).ok())
                .filter(|v| *v > 0)
                .unwrap_or(default)
        };
        Self {
            initial_delay: secs(probe.initial_delay_seconds, 0),
            period: secs(probe.period_seconds, 10).max(Duration::from_secs(1)),
            timeout: secs(probe.timeout_seconds, 1).max(Duration::from_secs(1)),
            success_threshold: count(probe.success_threshold, 1),
            failure_threshold: count(probe.failure_threshold, 3),
        }
    }
}

/// A thresholded probe result: reported once when a streak of results reaches its threshold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Healthy,
    Unhealthy(String),
}

/// Counts consecutive results and says when a threshold is reached.
#[derive(Debug, Default)]
pub struct Streak {
    successes: u32,
    failures: u32,
}

impl Streak {
    pub fn record(&mut self, timing: &Timing, result: Result<(), String>) -> Option<Verdict> {
        match result {
            Ok(()) => {
                self.failures = 0;
                self.successes = self.successes.saturating_add(1);
                (self.successes == timing.success_threshold).then_some(Verdict::Healthy)
            }
            Err(message) => {
                self.successes = 0;
                self.failures = self.failures.saturating_add(1);
                (self.failures == timing.failure_threshold).then_some(Verdict::Unhealthy(message))
            }
        }
    }
}

/// One probe of one container run.
#[derive(Debug, Clone)]
pub struct Prober {
    pub action: Action,
    pub timing: Timing,
    pub pod_ip: IpAddr,
}

impl Prober {
    /// Probes until `on` breaks, calling it with every [`Verdict`].
    pub async fn run(&self, mut on: impl FnMut(Verdict) -> ControlFlow<()>) {
        if let Action::Unsupported(kind) = self.action {
            tracing::warn!(
                kind,
                "probe kind not supported by the node agent; treating it as passing"
            );
            if on(Verdict::Healthy).is_break() {
                return;
            }
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(self.timing.initial_delay).await;
        let mut streak = Streak::default();
        loop {
            let result = self.check().await;
            if let Some(verdict) = streak.record(&self.timing, result)
                && on(verdict).is_break()
            {
                return;
            }
            tokio::time::sleep(self.timing.period).await;
        }
    }

    /// A single check within the probe timeout; `Err` carries the kubelet-style message.
    pub async fn check(&self) -> Result<(), String> {
        match tokio::time::timeout(self.timing.timeout, self.check_inner()).await {
            Ok(r) => r,
            Err(_) => Err(format!("probe timed out after {:?}", self.timing.timeout)),
        }
    }

    async fn check_inner(&self) -> Result<(), String> {
        match &self.action {
            Action::Unsupported(_) => Ok(()),
            Action::Invalid(message) => Err(message.clone()),
            Action::Tcp { host, port } => {
                let host = host.clone().unwrap_or_else(|| self.pod_ip.to_string());
                TcpStream::connect((host.as_str(), *port))
                    .await
                    .map(drop)
                    .map_err(|e| format!("dial tcp {host}:{port}: {e}"))
            }
            Action::Http {
                host,
                port,
                path,
                headers,
            } => {
                let host = host.clone().unwrap_or_else(|| self.pod_ip.to_string());
                let url = format!("http://{host}:{port}{path}");
                let mut stream = TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(|e| format!("Get \"{url}\": dial tcp {host}:{port}: {e}"))?;
                let mut request = format!(
                    "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: tracehouse-node-agent-probe\r\nAccept: */*\r\nConnection: close\r\n"
                );
                for (name, value) in headers {
                    request.push_str(&format!("{name}: {value}\r\n"));
                }
                request.push_str("\r\n");
                stream
                    .write_all(request.as_bytes())
                    .await
                    .map_err(|e| format!("Get \"{url}\": {e}"))?;
                // Only the status line matters; 64 bytes hold it.
                let mut buf = [0u8; 64];
                let mut len = 0;
                while len < buf.len() && !buf[..len].contains(&b'\n') {
                    match stream.read(&mut buf[len..]).await {
                        Ok(0) => break,
                        Ok(n) => len += n,
                        Err(e) => return Err(format!("Get \"{url}\": {e}")),
                    }
                }
                match status_code(&buf[..len]) {
                    Some(code) if (200..400).contains(&code) => Ok(()),
                    Some(code) => Err(format!("HTTP probe failed with statuscode: {code}")),
                    None => Err(format!("Get \"{url}\": malformed HTTP response")),
                }
            }
        }
    }
}

/// `HTTP/1.1 200 OK` → 200.
fn status_code(head: &[u8]) -> Option<u16> {
    let line = std::str::from_utf8(head).ok()?.lines().next()?;
    let mut parts = line.split_whitespace();
    parts.next().filter(|v| v.starts_with("HTTP/"))?;
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HTTPGetAction, TCPSocketAction};

    fn container() -> Container {
        Container {
            ports: Some(vec![ContainerPort {
                name: Some("health".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn http_probe_resolves_named_ports_and_defaults() {
        let probe = Probe {
            http_get: Some(HTTPGetAction {
                port: IntOrString::String("health".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            Action::of(&probe, &container()).unwrap(),
            Action::Http {
                host: None,
                port: 8080,
                path: "/".into(),
                headers: vec![]
            }
        );
        let unknown = Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String("metrics".into()),
                host: None,
            }),
            ..Default::default()
        };
        assert_eq!(
            Action::of(&unknown, &container()),
            Err(ProbeError::Port("metrics".into()))
        );
        let t = Timing::of(&probe);
        assert_eq!(
            (
                t.period,
                t.timeout,
                t.success_threshold,
                t.failure_threshold
            ),
            (Duration::from_secs(10), Duration::from_secs(1), 1, 3)
        );
    }

    #[test]
    fn verdicts_come_once_per_streak_at_the_threshold() {
        let timing = Timing {
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: 2,
            failure_threshold: 2,
        };
        let mut s = Streak::default();
        let fail = || Err("down".to_owned());
        assert_eq!(s.record(&timing, Ok(())), None);
        assert_eq!(s.record(&timing, Ok(())), Some(Verdict::Healthy));
        assert_eq!(s.record(&timing, Ok(())), None);
        assert_eq!(s.record(&timing, fail()), None);
        assert_eq!(
            s.record(&timing, fail()),
            Some(Verdict::Unhealthy("down".into()))
        );
        assert_eq!(s.record(&timing, fail()), None);
    }

    #[test]
    fn status_line_parsing() {
        assert_eq!(status_code(b"HTTP/1.1 204 No Content\r\n"), Some(204));
        assert_eq!(status_code(b"HTTP/1.0 503"), Some(503));
        assert_eq!(status_code(b"garbage"), None);
    }

    #[tokio::test]
    async fn http_check_against_a_real_socket() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            for status in ["200 OK", "500 Internal Server Error"] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await.unwrap();
                s.write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await
                    .unwrap();
            }
        });
        let prober = Prober {
            action: Action::Http {
                host: None,
                port,
                path: "/readyz".into(),
                headers: vec![],
            },
            timing: Timing::of(&Probe::default()),
            pod_ip: "127.0.0.1".parse().unwrap(),
        };
        assert_eq!(prober.check().await, Ok(()));
        assert_eq!(
            prober.check().await,
            Err("HTTP probe failed with statuscode: 500".into())
        );
    }
}
