//! The token source against a token endpoint on loopback (a few lines of HTTP/1.1 over
//! `std::net`): what is posted, what comes back, what is cached, how a refusal is named; and
//! tokens set on a real librdkafka client (no broker needed: setting a token does not connect).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use rdkafka::ClientConfig;
use rdkafka::consumer::BaseConsumer;

use super::token::{OAuthError, parse_response};
use super::*;

/// One request as the endpoint saw it.
#[derive(Debug, Clone)]
struct Seen {
    authorization: String,
    content_type: String,
    body: String,
}

/// A token endpoint answering every request with `status` and `body`; what it saw.
struct Endpoint {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Endpoint {
    fn start(status: &'static str, body: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/oauth2/token", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut headers = BTreeMap::new();
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                loop {
                    line.clear();
                    reader.read_line(&mut line).unwrap();
                    let l = line.trim_end();
                    if l.is_empty() {
                        break;
                    }
                    if let Some((k, v)) = l.split_once(':') {
                        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
                    }
                }
                let len: usize = headers
                    .get("content-length")
                    .map_or(0, |v| v.parse().unwrap());
                let mut body_in = vec![0; len];
                reader.read_exact(&mut body_in).unwrap();
                log.lock().unwrap().push(Seen {
                    authorization: headers.get("authorization").cloned().unwrap_or_default(),
                    content_type: headers.get("content-type").cloned().unwrap_or_default(),
                    body: String::from_utf8(body_in).unwrap(),
                });
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Self { url, seen }
    }

    fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

/// An (unsigned) JWT with `sub` and `exp`.
fn jwt(sub: &str, exp: u64) -> String {
    format!(
        "{}.{}.c2ln",
        b64(r#"{"alg":"RS256","typ":"JWT"}"#),
        b64(&format!(r#"{{"sub":"{sub}","exp":{exp}}}"#))
    )
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn client(url: &str) -> OAuthClient {
    OAuthClient {
        token_endpoint: url.to_owned(),
        client_id: "tracehouse".into(),
        client_secret: "s3cr3t:with&symbols".into(),
        scope: Some("kafka otel".into()),
        extensions: BTreeMap::new(),
        ca_pem: None,
    }
}

#[test]
fn a_client_credentials_request_posts_the_grant_with_basic_auth_and_reads_the_token() {
    let token = jwt("svc-tracehouse", now_s() + 3600);
    let ep = Endpoint::start(
        "200 OK",
        format!(r#"{{"access_token":"{token}","token_type":"Bearer","expires_in":300}}"#),
    );
    let t = token::fetch(&client(&ep.url), Duration::from_secs(5)).unwrap();
    assert_eq!(t.value, token);
    assert_eq!(t.principal, "svc-tracehouse");
    assert_eq!(t.lifetime, Duration::from_secs(300));
    assert!(t.remaining() > Duration::from_secs(290));
    let seen = ep.requests();
    assert_eq!(seen.len(), 1);
    let basic = base64::engine::general_purpose::STANDARD.encode("tracehouse:s3cr3t:with&symbols");
    assert_eq!(seen[0].authorization, format!("Basic {basic}"));
    assert_eq!(seen[0].content_type, "application/x-www-form-urlencoded");
    assert_eq!(
        seen[0].body,
        "grant_type=client_credentials&scope=kafka+otel"
    );
    // The token is never shown.
    assert!(!format!("{t:?}").contains(&token));
}

#[test]
fn a_refusal_names_the_endpoint_the_status_and_the_oauth_error() {
    let ep = Endpoint::start(
        "401 Unauthorized",
        r#"{"error":"invalid_client","error_description":"client authentication failed"}"#
            .to_owned(),
    );
    let e = token::fetch(&client(&ep.url), Duration::from_secs(5)).unwrap_err();
    assert!(e.is_refusal(), "{e:?}");
    let text = e.to_string();
    assert_eq!(
        text,
        format!(
            "the token endpoint {} answered HTTP 401 Unauthorized: invalid_client: client authentication failed",
            ep.url
        )
    );
    assert!(!text.contains("s3cr3t"));
    // A rate limit or a server error is not a refusal of the credentials.
    let busy = Endpoint::start("429 Too Many Requests", String::new());
    let e = token::fetch(&client(&busy.url), Duration::from_secs(5)).unwrap_err();
    assert!(!e.is_refusal(), "{e:?}");
    assert!(
        e.to_string()
            .contains("HTTP 429 Too Many Requests: (no body)"),
        "{e}"
    );
}

#[test]
fn an_endpoint_that_does_not_answer_is_named_within_the_timeout() {
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/token");
    let started = std::time::Instant::now();
    let e = token::fetch(&client(&url), Duration::from_secs(3)).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        matches!(&e, OAuthError::Unreachable { endpoint, .. } if *endpoint == url),
        "{e:?}"
    );
    assert!(!e.is_refusal());
}

#[test]
fn the_lifetime_comes_from_expires_in_else_from_the_jwt() {
    let c = client("https://idp/token");
    let now = SystemTime::now();
    let t = parse_response(&c, br#"{"access_token":"opaque","expires_in":"120"}"#, now).unwrap();
    assert_eq!(
        (t.lifetime, t.principal.as_str()),
        (Duration::from_secs(120), "tracehouse")
    );
    let exp = now_s() + 600;
    let body = format!(r#"{{"access_token":"{}"}}"#, jwt("me", exp));
    let t = parse_response(
        &c,
        body.as_bytes(),
        UNIX_EPOCH + Duration::from_secs(exp - 600),
    )
    .unwrap();
    assert_eq!(t.lifetime, Duration::from_secs(600));
    for bad in [
        &br#"{"token_type":"Bearer","expires_in":60}"#[..],
        br#"{"access_token":"opaque"}"#,
        br#"{"access_token":"opaque","expires_in":0}"#,
        b"<html>",
    ] {
        let e = parse_response(&c, bad, now).unwrap_err();
        assert!(matches!(e, OAuthError::Invalid { .. }), "{e:?}");
        assert!(e.to_string().contains("https://idp/token"), "{e}");
    }
}

#[test]
fn one_request_serves_every_client_while_the_token_is_fresh() {
    let ep = Endpoint::start(
        "200 OK",
        r#"{"access_token":"opaque","expires_in":3600}"#.to_owned(),
    );
    let source = TokenSource::new(client(&ep.url));
    for _ in 0..3 {
        assert_eq!(source.token().unwrap().value, "opaque");
    }
    assert_eq!(ep.requests().len(), 1);
    // A failure is the answer for a little while, without asking again.
    let refusing = Endpoint::start("401 Unauthorized", r#"{"error":"invalid_client"}"#.into());
    let source = TokenSource::new(client(&refusing.url));
    let first = source.token().unwrap_err();
    assert_eq!(source.token().unwrap_err(), first);
    assert_eq!(refusing.requests().len(), 1);
}

#[test]
fn a_ca_bundle_without_a_certificate_is_named() {
    let mut c = client("https://127.0.0.1:1/token");
    c.ca_pem = Some("not a certificate".into());
    let e = token::fetch(&c, Duration::from_secs(2)).unwrap_err();
    assert!(
        e.to_string().contains("CA bundle holds no PEM certificate"),
        "{e}"
    );
}

fn oauth_consumer() -> BaseConsumer {
    ClientConfig::new()
        // Nothing listens there; setting a token does not connect.
        .set("bootstrap.servers", "127.0.0.1:1")
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanism", "OAUTHBEARER")
        .create()
        .unwrap()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_client_gets_its_token_with_the_extensions_and_is_told_why_when_there_is_none() {
    let ep = Endpoint::start(
        "200 OK",
        r#"{"access_token":"opaque","expires_in":3600}"#.to_owned(),
    );
    let mut c = client(&ep.url);
    c.extensions = BTreeMap::from([("logicalCluster".to_owned(), "lkc-1".to_owned())]);
    let consumer = WithToken::new(oauth_consumer(), Some(&TokenSource::new(c.clone())));
    wait_for("the token request", || !ep.requests().is_empty());
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(consumer.token_failure(), None);
    drop(consumer);

    // librdkafka checks what it is given: a reserved extension key comes back named (and
    // proves the extensions reach it).
    c.extensions = BTreeMap::from([("auth".to_owned(), "x".to_owned())]);
    let consumer = WithToken::new(oauth_consumer(), Some(&TokenSource::new(c)));
    wait_for("librdkafka's refusal", || {
        consumer.token_failure().is_some()
    });
    let failure = consumer.token_failure().unwrap();
    assert!(
        failure.contains("librdkafka refused the token") && failure.contains("auth"),
        "{failure}"
    );

    let refusing = Endpoint::start("401 Unauthorized", r#"{"error":"invalid_client"}"#.into());
    let consumer = WithToken::new(
        oauth_consumer(),
        Some(&TokenSource::new(client(&refusing.url))),
    );
    wait_for("the refusal", || consumer.token_failure().is_some());
    assert_eq!(
        consumer.token_failure().unwrap(),
        format!(
            "the token endpoint {} answered HTTP 401 Unauthorized: invalid_client",
            refusing.url
        )
    );
    // Without OAUTHBEARER there is nothing to report.
    assert_eq!(WithToken::new(oauth_consumer(), None).token_failure(), None);
}
