//! Tokens into librdkafka: [`WithToken`] is a Kafka client with a thread beside it that sets
//! the [`TokenSource`]'s token on the client's handle (`rd_kafka_oauthbearer_set_token`, with
//! the SASL extensions) as soon as it is made and again 80 % through each token's life, and
//! that reports a failure to librdkafka (`rd_kafka_oauthbearer_set_token_failure`, which raises
//! `ERR__AUTHENTICATION` "Failed to acquire SASL OAUTHBEARER token: …" to the client's error
//! callback) and keeps it for [`WithToken::token_failure`]. A client without a token does not
//! connect (librdkafka waits for one), so nothing is tried against the brokers with none.
//!
//! Why hand-written FFI, and this crate's only `unsafe`: rdkafka 0.39's token callback cannot
//! carry SASL extensions and runs only in a client's `poll` (the module notes of
//! [`super`]). librdkafka takes a token from any thread (it locks its own state).
//!
//! Soundness: the thread holds the client's raw handle only inside [`Link`], behind a mutex.
//! [`WithToken`] declares its link before its client, so the link is dropped first: its drop
//! takes the mutex (waiting for a call in progress) and clears the handle before the client,
//! and with it the handle, is destroyed. The handle is only ever read from the client the
//! link was made with ([`Handle`] is sealed to rdkafka's own client types).

#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char};
use std::ops::{Deref, DerefMut};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::producer::{FutureProducer, Producer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::util::AsyncRuntime;

use super::token::{Token, TokenSource};

/// The first retry after a failed refresh; doubled up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_secs(2);
const RETRY_MAX: Duration = Duration::from_secs(60);

mod sealed {
    pub trait Sealed {}
}

/// A librdkafka client whose handle a token can be set on: rdkafka's consumer, future
/// producer and admin client.
pub trait Handle: sealed::Sealed {
    #[doc(hidden)]
    fn handle(&self) -> *mut rd::rd_kafka_t;
}

impl<C: ConsumerContext> sealed::Sealed for BaseConsumer<C> {}
impl<C: ConsumerContext> Handle for BaseConsumer<C> {
    fn handle(&self) -> *mut rd::rd_kafka_t {
        self.client().native_ptr()
    }
}

impl<C: ClientContext + 'static, R: AsyncRuntime> sealed::Sealed for FutureProducer<C, R> {}
impl<C: ClientContext + 'static, R: AsyncRuntime> Handle for FutureProducer<C, R> {
    fn handle(&self) -> *mut rd::rd_kafka_t {
        self.client().native_ptr()
    }
}

impl<C: ClientContext> sealed::Sealed for AdminClient<C> {}
impl<C: ClientContext> Handle for AdminClient<C> {
    fn handle(&self) -> *mut rd::rd_kafka_t {
        self.inner().native_ptr()
    }
}

/// A client, and the link that keeps its token current (none: no OAUTHBEARER). Derefs to the
/// client.
pub struct WithToken<T> {
    // Declared first: dropped (detached from the handle) before the client.
    link: Option<Link>,
    client: T,
}

impl<T> std::fmt::Debug for WithToken<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithToken")
            .field("oauth", &self.link.is_some())
            .finish_non_exhaustive()
    }
}

impl<T> Deref for WithToken<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.client
    }
}

impl<T> DerefMut for WithToken<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.client
    }
}

impl<T: Handle> WithToken<T> {
    /// `client`, with its token kept current from `source` when there is one. Returns at
    /// once: the first token is set from the link's thread (the client waits for it before it
    /// connects).
    pub fn new(client: T, source: Option<&Arc<TokenSource>>) -> Self {
        let link = source.map(|s| Link::start(client.handle(), s.clone()));
        Self { link, client }
    }
}

impl<T> WithToken<T> {
    /// Why the client has no current token, if the last attempt to give it one failed (the
    /// token endpoint's refusal, named); `None` without OAUTHBEARER or when it has one.
    pub fn token_failure(&self) -> Option<String> {
        let link = self.link.as_ref()?;
        link.shared
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The raw handle of a live client. Only [`Link`]'s thread uses it, under [`Shared::handle`].
struct RawHandle(*mut rd::rd_kafka_t);

// SAFETY: librdkafka handles are thread-safe; the pointer is only used while the mutex that
// guards it is held and the client it belongs to is alive (see the module's notes).
unsafe impl Send for RawHandle {}

struct Shared {
    handle: Mutex<Option<RawHandle>>,
    failure: Mutex<Option<String>>,
}

/// The thread that sets a client's tokens, for as long as the link lives.
struct Link {
    shared: Arc<Shared>,
    /// Dropping it wakes the thread, which then ends.
    _stop: mpsc::Sender<()>,
}

impl Drop for Link {
    fn drop(&mut self) {
        // Waits for a call in progress; the thread sets nothing after this.
        *self.shared.handle.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

impl Link {
    fn start(handle: *mut rd::rd_kafka_t, source: Arc<TokenSource>) -> Self {
        let shared = Arc::new(Shared {
            handle: Mutex::new(Some(RawHandle(handle))),
            failure: Mutex::new(None),
        });
        let (stop, stopped) = mpsc::channel::<()>();
        let extensions = extensions(&source.client().extensions);
        let thread_shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("kafka-oauth".into())
            .spawn(move || refresh(&thread_shared, &source, &extensions, &stopped));
        if let Err(e) = spawned {
            *shared.failure.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(format!("cannot start the token thread: {e}"));
        }
        Self {
            shared,
            _stop: stop,
        }
    }
}

/// The extensions as C strings (validated before: letters for keys, no NUL in values).
fn extensions(map: &BTreeMap<String, String>) -> Vec<(CString, CString)> {
    map.iter()
        .filter_map(|(k, v)| {
            Some((
                CString::new(k.as_str()).ok()?,
                CString::new(v.as_str()).ok()?,
            ))
        })
        .collect()
}

/// How long until the next refresh: 80 % of the token's remaining life, as librdkafka's own
/// refresh does.
fn refresh_in(token: &Token) -> Duration {
    token.remaining().mul_f64(0.8).max(Duration::from_secs(1))
}

fn refresh(
    shared: &Shared,
    source: &TokenSource,
    extensions: &[(CString, CString)],
    stopped: &mpsc::Receiver<()>,
) {
    let mut retry = RETRY_MIN;
    loop {
        let fetched = source.token();
        let wait = {
            let handle = shared.handle.lock().unwrap_or_else(|p| p.into_inner());
            let Some(handle) = handle.as_ref() else {
                return;
            };
            let outcome = fetched.map_err(|e| e.to_string()).and_then(|token| {
                // SAFETY: the handle is live while the mutex is held (module notes).
                unsafe { set_token(handle.0, &token, extensions) }.map(|()| token)
            });
            match outcome {
                Ok(token) => {
                    *shared.failure.lock().unwrap_or_else(|p| p.into_inner()) = None;
                    retry = RETRY_MIN;
                    refresh_in(&token)
                }
                Err(reason) => {
                    // SAFETY: as above.
                    unsafe { set_failure(handle.0, &reason) };
                    *shared.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
                    let wait = retry;
                    retry = (retry * 2).min(RETRY_MAX);
                    wait
                }
            }
        };
        match stopped.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Sets `token` (with `extensions`) on `rk`.
///
/// # Safety
/// `rk` must be a live librdkafka handle for the whole call.
unsafe fn set_token(
    rk: *mut rd::rd_kafka_t,
    token: &Token,
    extensions: &[(CString, CString)],
) -> Result<(), String> {
    let value = CString::new(token.value.as_str()).map_err(|_| "the token holds a NUL")?;
    let principal =
        CString::new(token.principal.as_str()).map_err(|_| "the principal holds a NUL")?;
    let mut pairs: Vec<*const c_char> = extensions
        .iter()
        .flat_map(|(k, v)| [k.as_ptr(), v.as_ptr()])
        .collect();
    let mut errstr = [0 as c_char; 512];
    // SAFETY: every pointer is valid for the call (the CStrings and `pairs` outlive it),
    // `errstr` is writable for its length, and `rk` is live (the caller's promise).
    let code = unsafe {
        rd::rd_kafka_oauthbearer_set_token(
            rk,
            value.as_ptr(),
            token.expires_at_ms(),
            principal.as_ptr(),
            if pairs.is_empty() {
                std::ptr::null_mut()
            } else {
                pairs.as_mut_ptr()
            },
            pairs.len(),
            errstr.as_mut_ptr(),
            errstr.len(),
        )
    };
    if code == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Ok(());
    }
    // SAFETY: librdkafka wrote a NUL-terminated message into `errstr` (zeroed before).
    let message = unsafe { CStr::from_ptr(errstr.as_ptr()) }.to_string_lossy();
    Err(format!("librdkafka refused the token: {message}"))
}

/// Tells `rk` there is no token, and why.
///
/// # Safety
/// `rk` must be a live librdkafka handle for the whole call.
unsafe fn set_failure(rk: *mut rd::rd_kafka_t, reason: &str) {
    let Ok(reason) = CString::new(reason.replace('\0', " ")) else {
        return;
    };
    // SAFETY: `rk` is live (the caller's promise), `reason` NUL-terminated and valid for the
    // call; librdkafka copies it.
    unsafe {
        rd::rd_kafka_oauthbearer_set_token_failure(rk, reason.as_ptr());
    }
}
