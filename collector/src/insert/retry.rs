//! Retry policy: which ClickHouse failures are worth retrying, and how long to wait.
//!
//! The decision is made here and only here, on ClickHouse's exception code (never on the
//! HTTP status, which ClickHouse maps loosely), so the sink, the tests and the metrics
//! agree on what "retryable" means. An HTTP error that carries no code did not come from
//! ClickHouse but from a proxy, an ingress or a load balancer in front of it: that one is
//! judged by its status ([`classify_http_status`]).
//!
//! Invariant: no deterministic error is [`Verdict::Retry`]. An error the same bytes would
//! get again on every attempt must be `Permanent` (the insert stage bisects the batch and
//! the refused records take the dead-letter path) or `Fatal`; retrying it would stall the
//! partition forever. One code carries two meanings and is told apart by its message:
//! 252 is TOO_MANY_PARTS (the server is behind on merges: wait) and also "Too many
//! partitions for single INSERT block" (the rows fall on more than
//! `max_partitions_per_insert_block` partitions of the table: the same rows always will).

use std::time::Duration;

/// What to do with a failed insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The server or the network is the problem; the same insert may succeed later.
    Retry,
    /// The data (or the request) is the problem; retrying the same bytes cannot succeed.
    Permanent,
    /// Configuration or permissions: retrying cannot help, splitting data cannot either.
    /// The collector keeps retrying slowly (an operator may fix it) and reports it loudly.
    Fatal,
}

/// Classify an HTTP error status that carries no ClickHouse exception code.
pub fn classify_http_status(status: u16) -> Verdict {
    match status {
        // The body is over the proxy's limit (nginx's `client_max_body_size` is 1 MiB by
        // default): smaller inserts get through, so the insert is split.
        413 => Verdict::Permanent,
        // Timeouts, rate limits and the proxy's own trouble pass.
        408 | 429 | 500..=599 => Verdict::Retry,
        // Any other refusal (401, 403, 404, 400, 414, 431 …) is the proxy's configuration:
        // retried slowly and reported loudly, never a silent loop.
        400..=499 => Verdict::Fatal,
        _ => Verdict::Retry,
    }
}

/// Classify a ClickHouse exception: by its code, and by its message for the code that
/// has two meanings (see the module docs).
pub fn classify_exception(code: u32, message: &str) -> Verdict {
    match code {
        252 if is_too_many_partitions(message) => Verdict::Permanent,
        _ => classify(code),
    }
}

/// "Too many partitions for single INSERT block (more than 100). The limit is controlled
/// by 'max_partitions_per_insert_block' setting. …": data-dependent, never transient.
pub fn is_too_many_partitions(message: &str) -> bool {
    message.contains("Too many partitions for single INSERT block")
        || message.contains("max_partitions_per_insert_block")
}

/// Classify a ClickHouse exception code (for 252, the parts meaning: see
/// [`classify_exception`]).
pub fn classify(code: u32) -> Verdict {
    match code {
        // Data problems: parse and type errors, values out of range, too large.
        6
        | 17
        | 25..=27
        | 33
        | 38
        | 41
        | 53
        | 62
        | 69
        | 70
        | 72
        | 117
        | 130
        | 131
        | 321
        | 349
        | 354
        | 376
        | 393
        | 441
        | 472
        | 676
        | 677 => Verdict::Permanent,
        // Schema or access problems: unknown table/column/database, auth, readonly, quota.
        // 48 NOT_IMPLEMENTED: a Native column of a type the table's column cannot take (the
        // table's shape is not what the collector writes).
        16 | 47 | 48 | 60 | 81 | 164 | 192..=195 | 497 | 516 | 10 => Verdict::Fatal,
        // Everything else, including 159 TIMEOUT_EXCEEDED, 209 SOCKET_TIMEOUT,
        // 210 NETWORK_ERROR, 241 MEMORY_LIMIT_EXCEEDED, 242 TABLE_IS_READ_ONLY,
        // 252 TOO_MANY_PARTS, 202 TOO_MANY_SIMULTANEOUS_QUERIES, 319 UNKNOWN_STATUS_OF_INSERT,
        // 999 KEEPER_EXCEPTION, 425 SYSTEM_ERROR, 3 UNEXPECTED_END_OF_FILE (a cut connection).
        _ => Verdict::Retry,
    }
}

/// Capped exponential backoff with full jitter.
#[derive(Debug, Clone)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            attempt: 0,
        }
    }

    /// The delay before the next attempt (grows ×2 up to `max`, jittered to 50–100 %).
    pub fn next_delay(&mut self) -> Duration {
        let exp = self.initial.saturating_mul(1u32 << self.attempt.min(20));
        self.attempt = self.attempt.saturating_add(1);
        let capped = exp.min(self.max);
        let jitter = 0.5 + rand::random::<f64>() * 0.5;
        capped.mul_f64(jitter)
    }

    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compat_doc_examples_are_classified_as_documented() {
        for code in [159, 209, 241, 252, 202] {
            assert_eq!(classify(code), Verdict::Retry, "code {code}");
        }
        for code in [6, 27, 53, 62, 117] {
            assert_eq!(classify(code), Verdict::Permanent, "code {code}");
        }
        for code in [60, 81, 516] {
            assert_eq!(classify(code), Verdict::Fatal, "code {code}");
        }
    }

    #[test]
    fn code_252_is_retried_for_too_many_parts_and_split_for_too_many_partitions() {
        // Both messages as ClickHouse 26.9 words them (the second read off chdb's engine).
        let parts = "Too many parts (3001 with average size of 1.00 KiB) in table 'otel.otel_traces'. \
                     Merges are processing significantly slower than inserts";
        let partitions = "Too many partitions for single INSERT block (more than 100). The limit is \
                          controlled by 'max_partitions_per_insert_block' setting. Large number of \
                          partitions is a common misconception. (TOO_MANY_PARTS)";
        assert_eq!(classify_exception(252, parts), Verdict::Retry);
        assert_eq!(classify_exception(252, partitions), Verdict::Permanent);
        assert_eq!(classify_exception(241, partitions), Verdict::Retry);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let delays: Vec<_> = (0..12).map(|_| b.next_delay()).collect();
        assert!(delays[0] <= Duration::from_millis(100) && delays[0] >= Duration::from_millis(50));
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(5)));
        assert!(
            delays[11] >= Duration::from_millis(2500),
            "{:?}",
            delays[11]
        );
        assert_eq!(b.attempts(), 12);
    }
}
