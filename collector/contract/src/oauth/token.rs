//! The client-credentials request and the one token cache of a process (a pipeline, in the
//! operator): [`fetch`] posts `grant_type=client_credentials` (and `scope`) to the token
//! endpoint with the client id and secret as HTTP basic authentication, over rustls trusting
//! the system roots and the configured CA, bounded by a timeout; [`TokenSource`] keeps the
//! token it got and answers every client from it while more than half its lifetime is left.
//!
//! Blocking: a request runs on a thread of its own with a small current-thread runtime, so it
//! may be called from any thread that may block (never an async task), runtime or not.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use std::{fmt, thread};

use base64::Engine;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::OAuthClient;

/// How long one token request may take, connection included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// After a failed request, its error is the answer for this long (every client of a process
/// asks; the endpoint is asked once).
const FAILURE_HOLD: Duration = Duration::from_secs(5);
/// The largest token response read.
const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// Why there is no token, naming the endpoint (and the HTTP status when it answered).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OAuthError {
    #[error("cannot reach the token endpoint {endpoint}: {detail}")]
    Unreachable { endpoint: String, detail: String },
    #[error("the token endpoint {endpoint} answered HTTP {status}: {detail}")]
    Refused {
        endpoint: String,
        /// `401 Unauthorized`.
        status: String,
        code: u16,
        detail: String,
    },
    #[error("the token endpoint {endpoint} answered without a usable token: {detail}")]
    Invalid { endpoint: String, detail: String },
}

impl OAuthError {
    /// The endpoint refused the request itself (4xx, but for a timeout or a rate limit): the
    /// client id, the secret or the scope is wrong, and asking again will not change that.
    pub fn is_refusal(&self) -> bool {
        matches!(self, Self::Refused { code, .. } if (400..500).contains(code) && *code != 408 && *code != 429)
    }
}

/// An access token and what librdkafka needs beside it. `Debug` never shows the token.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub value: String,
    /// The token's `sub` claim when it is a JWT, else the client id: librdkafka's name for the
    /// principal (the broker derives its own from the token).
    pub principal: String,
    pub expires_at: SystemTime,
    /// From issue to expiry.
    pub lifetime: Duration,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("principal", &self.principal)
            .field("expires_at", &self.expires_at)
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}

impl Token {
    /// Milliseconds since the epoch of the expiry (librdkafka's `md_lifetime_ms`).
    pub fn expires_at_ms(&self) -> i64 {
        self.expires_at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// Time left until expiry (zero once expired).
    pub fn remaining(&self) -> Duration {
        self.expires_at
            .duration_since(SystemTime::now())
            .unwrap_or_default()
    }

    /// Fresh enough to hand to another client: more than half its lifetime left.
    fn fresh(&self) -> bool {
        self.remaining() > self.lifetime / 2
    }
}

/// `application/x-www-form-urlencoded`.
fn form_encode(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                    (b as char).to_string()
                }
                b' ' => "+".to_owned(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// rustls trusting the system roots and `ca_pem` (both: a Kafka cluster's private CA must
/// not stop a public identity provider from being trusted).
fn tls(ca_pem: Option<&str>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(pem) = ca_pem {
        let mut n = 0;
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(|e| format!("CA bundle: {e}"))?;
            roots.add(cert).map_err(|e| format!("CA bundle: {e}"))?;
            n += 1;
        }
        if n == 0 {
            return Err("CA bundle holds no PEM certificate".to_owned());
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// An error and its causes, `: `-joined (reqwest's own text says little: "error sending request").
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// What an error response says: the OAuth `error` and `error_description` (RFC 6749 §5.2),
/// else the start of the body.
fn refusal_detail(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body)
        && let Some(error) = v.get("error").and_then(|e| e.as_str())
    {
        return match v.get("error_description").and_then(|d| d.as_str()) {
            Some(d) => format!("{error}: {d}"),
            None => error.to_owned(),
        };
    }
    let text: String = String::from_utf8_lossy(body)
        .chars()
        .take(200)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.trim().is_empty() {
        "(no body)".to_owned()
    } else {
        text.trim().to_owned()
    }
}

/// The `sub` claim of a JWT, if `token` is one.
fn jwt_subject(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&json).ok()?;
    v.get("sub")?.as_str().map(str::to_owned)
}

/// The `exp` claim of a JWT (seconds since the epoch), if `token` is one.
fn jwt_expiry(token: &str) -> Option<u64> {
    let payload = token.split('.').nth(1)?;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&json).ok()?;
    v.get("exp")?.as_u64()
}

/// Pure: the token of a successful response (RFC 6749 §5.1): `access_token`, and its lifetime
/// from `expires_in` (a number, or a string some providers send) or else the JWT's `exp`.
pub fn parse_response(
    client: &OAuthClient,
    body: &[u8],
    now: SystemTime,
) -> Result<Token, OAuthError> {
    let invalid = |detail: String| OAuthError::Invalid {
        endpoint: client.token_endpoint.clone(),
        detail,
    };
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| invalid(format!("not JSON: {e}")))?;
    let value = v
        .get("access_token")
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| invalid("no access_token".to_owned()))?
        .to_owned();
    let expires_in = match v.get("expires_in") {
        Some(serde_json::Value::Number(n)) => n.as_f64(),
        Some(serde_json::Value::String(s)) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    let lifetime = match (expires_in, jwt_expiry(&value)) {
        (Some(s), _) if s > 0.0 && s.is_finite() => Duration::from_secs_f64(s),
        (_, Some(exp)) => (UNIX_EPOCH + Duration::from_secs(exp))
            .duration_since(now)
            .map_err(|_| invalid("the token has expired already (exp)".to_owned()))?,
        _ => {
            return Err(invalid(
                "neither expires_in nor a JWT exp says how long the token lives".to_owned(),
            ));
        }
    };
    if lifetime < Duration::from_secs(1) {
        return Err(invalid(format!("a token that lives {lifetime:?}")));
    }
    Ok(Token {
        principal: jwt_subject(&value).unwrap_or_else(|| client.client_id.clone()),
        value,
        expires_at: now + lifetime,
        lifetime,
    })
}

/// One client-credentials request to `client.token_endpoint`, blocking for at most `timeout`.
pub fn fetch(client: &OAuthClient, timeout: Duration) -> Result<Token, OAuthError> {
    let failed = |detail: String| OAuthError::Unreachable {
        endpoint: client.token_endpoint.clone(),
        detail,
    };
    let owned = client.clone();
    // A thread of its own: a runtime cannot be started on a thread that drives another.
    thread::Builder::new()
        .name("kafka-oauth-fetch".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start a runtime: {e}"))?;
            Ok(runtime.block_on(request(&owned, timeout)))
        })
        .map_err(|e| failed(format!("cannot start a thread: {e}")))?
        .join()
        .unwrap_or_else(|_| Err("the token request panicked".to_owned()))
        .map_err(failed)?
}

async fn request(client: &OAuthClient, timeout: Duration) -> Result<Token, OAuthError> {
    let endpoint = || client.token_endpoint.clone();
    let unreachable = |detail: String| OAuthError::Unreachable {
        endpoint: endpoint(),
        detail,
    };
    let http = reqwest::Client::builder()
        .use_preconfigured_tls(tls(client.ca_pem.as_deref()).map_err(unreachable)?)
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        // Credentials are not re-posted wherever a redirect points.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| unreachable(chain(&e)))?;
    let mut form = vec![("grant_type", "client_credentials")];
    if let Some(scope) = &client.scope {
        form.push(("scope", scope));
    }
    let response = http
        .post(&client.token_endpoint)
        .basic_auth(&client.client_id, Some(&client.client_secret))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(form_encode(&form))
        .send()
        .await
        .map_err(|e| unreachable(chain(&e)))?;
    let status = response.status();
    let body = response.bytes().await.map_err(|e| unreachable(chain(&e)))?;
    if body.len() > MAX_RESPONSE_BYTES {
        return Err(OAuthError::Invalid {
            endpoint: endpoint(),
            detail: format!("a response of {} bytes", body.len()),
        });
    }
    if !status.is_success() {
        return Err(OAuthError::Refused {
            endpoint: endpoint(),
            status: status.to_string(),
            code: status.as_u16(),
            detail: refusal_detail(&body),
        });
    }
    parse_response(client, &body, SystemTime::now())
}

/// The token of one set of client credentials, shared by every Kafka client that uses them:
/// the cached token while it is fresh (more than half its lifetime left), else a new request;
/// one request at a time. A failure is logged once per change and answered for
/// `FAILURE_HOLD` without asking again.
pub struct TokenSource {
    client: OAuthClient,
    timeout: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    token: Option<Token>,
    failed: Option<(Instant, OAuthError)>,
    /// The last failure logged, so a repeated one is not logged again.
    logged: Option<String>,
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSource")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl TokenSource {
    pub fn new(client: OAuthClient) -> Arc<Self> {
        Self::with_timeout(client, FETCH_TIMEOUT)
    }

    pub fn with_timeout(client: OAuthClient, timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            client,
            timeout,
            state: Mutex::default(),
        })
    }

    pub fn client(&self) -> &OAuthClient {
        &self.client
    }

    /// A token with more than half its lifetime left. Blocks while a request runs.
    pub fn token(&self) -> Result<Token, OAuthError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = state.token.as_ref().filter(|t| t.fresh()) {
            return Ok(t.clone());
        }
        if let Some((at, e)) = &state.failed
            && at.elapsed() < FAILURE_HOLD
        {
            return Err(e.clone());
        }
        match fetch(&self.client, self.timeout) {
            Ok(t) => {
                if state.logged.take().is_some() {
                    tracing::info!(endpoint = %self.client.token_endpoint, principal = %t.principal, valid_for = ?t.lifetime, "OAUTHBEARER token fetched again");
                } else {
                    tracing::debug!(endpoint = %self.client.token_endpoint, principal = %t.principal, valid_for = ?t.lifetime, "OAUTHBEARER token fetched");
                }
                state.failed = None;
                state.token = Some(t.clone());
                Ok(t)
            }
            Err(e) => {
                let text = e.to_string();
                if state.logged.as_deref() != Some(&text) {
                    tracing::error!("OAUTHBEARER token refresh failed: {text}");
                    state.logged = Some(text);
                }
                state.failed = Some((Instant::now(), e.clone()));
                Err(e)
            }
        }
    }
}
