//! Where the operator serves `/metrics`, `/healthz` and `/readyz`: the `--metrics-addr` text
//! read into a socket address, and the listener bound on it.
//!
//! The default is every address, IPv4 and IPv6 (`[::]:8080`): `kubectl port-forward`
//! connects to the pod's loopback, and an IPv6-only cluster has no IPv4 address to offer.
//! On nodes whose pods share one network (the local stack's node agent) the chart binds the
//! pod's own IP instead, `$(POD_IP):8080`, which the kubelet expands before the operator sees
//! it; an IPv6 pod IP then arrives unbracketed (`fd00::7:8080`), which a plain
//! [`SocketAddr`] refuses, so the port is taken from after the last colon.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// Why a `--metrics-addr` cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not an address to listen on: expected IP:PORT, [IPv6]:PORT or IPv6:PORT \
     (e.g. [::]:8080, 0.0.0.0:8080, 10.0.0.7:8080, fd00::7:8080)"
)]
pub struct AddrError(String);

/// Reads `IP:PORT`, `[IPv6]:PORT`, or an unbracketed `IPv6:PORT` (the port is what follows
/// the last colon). Host names are refused: the operator listens, it does not resolve.
pub fn parse_listen_addr(text: &str) -> Result<SocketAddr, AddrError> {
    let err = || AddrError(text.to_owned());
    let text = text.trim();
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let (host, port) = text.rsplit_once(':').ok_or_else(err)?;
    let port: u16 = port.parse().map_err(|_| err())?;
    // Only an IPv6 address may stand unbracketed: "10.0.0.7" would have parsed above.
    let ip: Ipv6Addr = host.parse().map_err(|_| err())?;
    Ok(SocketAddr::new(IpAddr::V6(ip), port))
}

/// Binds `addr`. The unspecified IPv6 address (`[::]`) listens on every IPv4 and IPv6 address
/// too: a pod's network namespace starts with `net.ipv6.bindv6only = 0`, Linux's dual-stack
/// default, so IPv4 connections arrive as IPv4-mapped addresses on the same socket. On a node
/// without IPv6 (the module not loaded, or disabled in the pod) binding `[::]` fails, and the
/// operator falls back to `0.0.0.0` rather than crash-looping.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    match tokio::net::TcpListener::bind(addr).await {
        Err(e) if addr.ip() == Ipv6Addr::UNSPECIFIED => {
            let v4 = SocketAddr::from(([0, 0, 0, 0], addr.port()));
            tracing::info!(error = %e, %v4, "no IPv6 here: listening on IPv4 only");
            tokio::net::TcpListener::bind(v4).await
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn addr(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
        SocketAddr::new(ip.into(), port)
    }

    #[test]
    fn every_address_reads_as_the_unspecified_ipv6_address() {
        assert_eq!(
            parse_listen_addr("[::]:8080"),
            Ok(addr(Ipv6Addr::UNSPECIFIED, 8080))
        );
        assert_eq!(
            parse_listen_addr("0.0.0.0:8080"),
            Ok(addr(Ipv4Addr::UNSPECIFIED, 8080))
        );
    }

    #[test]
    fn an_expanded_pod_ip_reads_whether_ipv4_or_ipv6() {
        // What the kubelet makes of `$(POD_IP):8080` on an IPv4 and on an IPv6 pod.
        assert_eq!(
            parse_listen_addr("10.244.1.7:8080"),
            Ok(addr(Ipv4Addr::new(10, 244, 1, 7), 8080))
        );
        let v6: Ipv6Addr = "fd00:10:244::7".parse().unwrap();
        assert_eq!(parse_listen_addr("fd00:10:244::7:8080"), Ok(addr(v6, 8080)));
        assert_eq!(
            parse_listen_addr("[fd00:10:244::7]:8080"),
            Ok(addr(v6, 8080))
        );
        assert_eq!(
            parse_listen_addr("::1:9090"),
            Ok(addr(Ipv6Addr::LOCALHOST, 9090))
        );
    }

    #[test]
    fn anything_but_an_ip_and_a_port_is_refused_naming_the_text() {
        for bad in [
            "",
            "8080",
            ":8080",
            "localhost:8080",
            "10.0.0.7",
            "10.0.0.7:",
            "10.0.0.7:http",
            "10.0.0.7:65536",
            "$(POD_IP):8080", // an env var the kubelet did not expand
            "[::]",
            "::",
        ] {
            let e = parse_listen_addr(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    /// A dual-stack bind on this machine: `[::]` takes IPv4 and IPv6 connections on one
    /// socket (or, where there is no IPv6, falls back to IPv4 and still takes IPv4).
    #[tokio::test]
    async fn binding_every_address_takes_ipv4_and_ipv6_connections() {
        let listener = bind(addr(Ipv6Addr::UNSPECIFIED, 0)).await.unwrap();
        let local = listener.local_addr().unwrap();
        let accept = tokio::spawn(async move {
            let mut peers = Vec::new();
            while let Ok((_, peer)) = listener.accept().await {
                peers.push(peer);
                if peers.len() == 2 {
                    break;
                }
            }
            peers
        });
        let port = local.port();
        tokio::net::TcpStream::connect(addr(Ipv4Addr::LOCALHOST, port))
            .await
            .expect("IPv4 loopback reaches a [::] listener");
        if local.is_ipv6() {
            tokio::net::TcpStream::connect(addr(Ipv6Addr::LOCALHOST, port))
                .await
                .expect("IPv6 loopback reaches a [::] listener");
            let peers = tokio::time::timeout(std::time::Duration::from_secs(5), accept)
                .await
                .unwrap()
                .unwrap();
            // The IPv4 client arrives IPv4-mapped on the IPv6 socket.
            assert_eq!(
                peers[0].ip(),
                IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped())
            );
            assert_eq!(peers[1].ip(), IpAddr::V6(Ipv6Addr::LOCALHOST));
        }
    }
}
