//! Rate limits for logs that could flood (one consumer error or skipped record per
//! period, with a count of what was held back).

use std::time::{Duration, Instant};

/// Lets one event through per period.
#[derive(Debug)]
pub struct RateLimit {
    period: Duration,
    last: Option<Instant>,
    /// Events held back since the start.
    pub suppressed: u64,
}

impl RateLimit {
    pub fn new(period: Duration) -> Self {
        Self {
            period,
            last: None,
            suppressed: 0,
        }
    }

    pub fn allow(&mut self) -> bool {
        if self.last.is_none_or(|t| t.elapsed() >= self.period) {
            self.last = Some(Instant::now());
            true
        } else {
            self.suppressed += 1;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_per_period_and_the_rest_counted() {
        let mut l = RateLimit::new(Duration::from_secs(3600));
        assert!(l.allow());
        assert!(!l.allow());
        assert!(!l.allow());
        assert_eq!(l.suppressed, 2);
    }
}
