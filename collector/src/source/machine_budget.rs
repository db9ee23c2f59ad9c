//! The machine's in-flight budget: what it does when the budget is spent. A child module of
//! the machine, so it works on the machine's partitions directly.
//!
//! A spent budget first *holds* intake: the shell stops taking records
//! ([`Machine::holding`]) while acknowledgements free the budget, and librdkafka keeps what
//! it prefetched (up to `queued.max.messages.kbytes`) and fetches no more. Only a budget
//! spent for [`BUDGET_HOLD`] pauses the partitions. Pausing is the heavier tool: librdkafka
//! drops a paused partition's prefetched records and fetches them again on resume
//! (confluentinc/librdkafka#5343), and with a budget a few inserts deep it was spent briefly
//! at every insert (16 pauses while 1 M full spans went through at the 64 MiB default, each
//! a refetch). A pause still comes when ClickHouse is slow or away for longer, and it is
//! what frees librdkafka's prefetched memory then. The hold is short because while it lasts
//! the consumer is not polled: rebalance callbacks wait for it, and a batch replaying a
//! recorded cut gets no records (rule 5 pauses only the others, once the hold is over).

use std::time::{Duration, Instant};

use super::{Command, Machine};

/// Resume paused partitions once the budget drops below this fraction.
pub const RESUME_FRACTION: f64 = 0.75;

/// How long a spent budget holds intake before it pauses the partitions.
pub const BUDGET_HOLD: Duration = Duration::from_secs(1);

impl Machine {
    /// At a spent budget, hold intake; once it has been spent for [`BUDGET_HOLD`], pause
    /// every partition but those replaying a recorded cut (rule 5) and send what they have
    /// open, so memory can drain even at low traffic. Resume them below [`RESUME_FRACTION`].
    /// (The hold closes nothing: open batches are cut by size or by the linger timer as
    /// usual, and closing them at every brief hold made inserts smaller and more.)
    pub fn check_budget(&mut self, now: Instant, out: &mut Vec<Command>) {
        let used = self.budget.used();
        let over = self.budget.spent();
        let under = (used as f64) < self.budget.max() as f64 * RESUME_FRACTION;
        if !over {
            self.spent_since = None;
        } else if self.spent_since.is_none() {
            self.spent_since = Some(now);
        }
        let pausing = self.spent_since.is_some() && !self.holding(now);
        let mut pause = Vec::new();
        let mut resume = Vec::new();
        let mut closing = Vec::new();
        for (i, p) in self.partitions.iter_mut().enumerate() {
            // Rule 5: a batch replaying a recorded cut must get its records; pause after.
            let replaying = p.recorded_cut().is_some();
            if pausing && !p.paused && !replaying {
                p.paused = true;
                pause.push(p.id.clone());
                closing.push(i);
            } else if under && p.paused {
                p.paused = false;
                resume.push(p.id.clone());
            }
        }
        if !pause.is_empty() {
            out.push(Command::Pause(pause));
        }
        if !resume.is_empty() {
            out.push(Command::Resume(resume));
        }
        self.close_together(&closing, out);
    }

    /// Whether the shell should take no records now: the budget is spent and has not yet
    /// paused the partitions ([`Self::check_budget`]).
    pub fn holding(&self, now: Instant) -> bool {
        self.spent_since
            .is_some_and(|since| now.duration_since(since) < BUDGET_HOLD)
    }
}
