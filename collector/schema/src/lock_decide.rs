//! The schema lock's decisions, pure: who a claim belongs to, and what an applier does
//! given the latest row of the lock table. [`crate::lock`] does the IO around them.
//!
//! A claim's `holder` column is `<identity> #<instance>`: `identity` is what the applier
//! was told it is (the operator's pod name, `host/pid` for the CLI), `instance` names one
//! process (`<unix ms when it first took a lock>-<random>`). Rules, in order:
//! 1. No row, a `release`, or an `acquire` whose lease ran out (by the server's clock):
//!    the next epoch is free to claim.
//! 2. A live `acquire` of *our identity* made by *another instance* is taken over at
//!    once: an identity is unique among live appliers (a pod name is: Kubernetes restarts
//!    a container only after the previous one exited; `host/pid` is), so that instance is
//!    dead — a restarted container does not wait out its own predecessor's lease. This is
//!    the rule the operator's leader Lease already follows for its holder identity. Which
//!    instance is older is not compared: process clocks and start times are not needed.
//! 3. Anything else live is someone else's (another identity, another apply of this very
//!    process, or a claim written before instances existed): wait.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use rand::RngCore;

/// One applier process: a stable identity plus this process's instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    identity: String,
    /// `<unix ms>-<random hex>`; `None` for a claim written before instances existed.
    instance: Option<String>,
}

impl Holder {
    /// `identity` as this process.
    pub fn this_process(identity: &str) -> Self {
        Self {
            identity: identity.to_string(),
            instance: Some(process_instance().to_string()),
        }
    }

    /// `identity` as the given instance (tests, and reading claims back).
    pub fn with_instance(identity: &str, instance: &str) -> Self {
        Self {
            identity: identity.to_string(),
            instance: Some(instance.to_string()),
        }
    }

    /// Reads a `holder` column back. A value without ` #` is a claim of an older release.
    pub fn parse(column: &str) -> Self {
        match column.rsplit_once(" #") {
            Some((identity, instance)) if started_ms(instance).is_some() => Self {
                identity: identity.to_string(),
                instance: Some(instance.to_string()),
            },
            _ => Self {
                identity: column.to_string(),
                instance: None,
            },
        }
    }

    /// What the `holder` column stores.
    pub fn column(&self) -> String {
        match &self.instance {
            Some(i) => format!("{} #{i}", self.identity),
            None => self.identity.clone(),
        }
    }

    /// The identity alone: what errors show humans.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// True when `other` is our identity in another process (rule 2).
    fn is_predecessor(&self, other: &Holder) -> bool {
        let (Some(mine), Some(theirs)) = (&self.instance, &other.instance) else {
            return false;
        };
        other.identity == self.identity && mine != theirs
    }
}

fn started_ms(instance: &str) -> Option<u64> {
    let (ms, random) = instance.split_once('-')?;
    (!random.is_empty()).then_some(())?;
    ms.parse().ok()
}

/// This process's instance, fixed the first time it is asked for.
fn process_instance() -> &'static str {
    static INSTANCE: OnceLock<String> = OnceLock::new();
    INSTANCE.get_or_init(|| {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        format!("{ms}-{:08x}", rand::rng().next_u32())
    })
}

/// Whether a lock row is a claim or a hand-back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Acquire,
    Release,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Release => "release",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "acquire" => Some(Self::Acquire),
            "release" => Some(Self::Release),
            _ => None,
        }
    }
}

/// The latest row of a scope, as the decision needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latest {
    pub epoch: u64,
    pub kind: Option<Kind>,
    pub token: String,
    pub holder: Holder,
    /// The lease has not run out by the server's clock.
    pub live: bool,
}

/// What an applier that wants the lock does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Claim `epoch`; `taking_over` names a dead predecessor whose live claim is replaced.
    Claim {
        epoch: u64,
        taking_over: Option<String>,
    },
    /// Someone holds it: poll again later.
    Wait { holder: String },
}

/// Rules 1–3 of the module header.
pub fn decide(latest: Option<&Latest>, me: &Holder) -> Decision {
    let Some(l) = latest else {
        return Decision::Claim {
            epoch: 1,
            taking_over: None,
        };
    };
    let epoch = l.epoch + 1;
    if l.kind == Some(Kind::Release) || !l.live {
        return Decision::Claim {
            epoch,
            taking_over: None,
        };
    }
    if l.kind == Some(Kind::Acquire) && me.is_predecessor(&l.holder) {
        return Decision::Claim {
            epoch,
            taking_over: Some(l.holder.column()),
        };
    }
    Decision::Wait {
        holder: l.holder.identity().to_string(),
    }
}

/// Whether the latest row says `token` (one acquisition) holds the lock now.
pub fn holds(latest: Option<&Latest>, token: &str) -> bool {
    latest.is_some_and(|l| l.token == token && l.kind == Some(Kind::Acquire) && l.live)
}

/// Whether `token` still has something to release: its claim is the latest row (live or
/// not: an expired claim nobody replaced still reads as ours to the next applier).
pub fn ours_to_release(latest: Option<&Latest>, token: &str) -> bool {
    latest.is_some_and(|l| l.token == token && l.kind == Some(Kind::Acquire))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(epoch: u64, kind: Kind, holder: Holder, live: bool) -> Latest {
        Latest {
            epoch,
            kind: Some(kind),
            token: "t".into(),
            holder,
            live,
        }
    }

    fn claim(epoch: u64) -> Decision {
        Decision::Claim {
            epoch,
            taking_over: None,
        }
    }

    #[test]
    fn the_holder_column_round_trips_and_old_claims_parse_as_identity_only() {
        let h = Holder::with_instance("pod-0", "1700000000000-0a0b0c0d");
        assert_eq!(h.column(), "pod-0 #1700000000000-0a0b0c0d");
        assert_eq!(Holder::parse(&h.column()), h);
        let legacy = Holder::parse("host/123");
        assert_eq!(legacy.identity(), "host/123");
        assert_eq!(legacy.column(), "host/123");
        // A `#` in free text that is not an instance stays part of the identity.
        assert_eq!(Holder::parse("a #b").identity(), "a #b");
        let me = Holder::this_process("x #1-2");
        assert_eq!(Holder::parse(&me.column()), me);
    }

    #[test]
    fn a_free_lock_is_claimed_at_the_next_epoch() {
        let me = Holder::this_process("me");
        let other = Holder::with_instance("other", "1-aa");
        assert_eq!(decide(None, &me), claim(1));
        assert_eq!(
            decide(Some(&row(4, Kind::Release, other.clone(), true)), &me),
            claim(5)
        );
        assert_eq!(
            decide(Some(&row(4, Kind::Acquire, other, false)), &me),
            claim(5)
        );
    }

    #[test]
    fn a_live_claim_of_another_identity_is_waited_for() {
        let me = Holder::with_instance("pod-1", "2000-bb");
        let other = Holder::with_instance("pod-0", "1000-aa");
        assert_eq!(
            decide(Some(&row(3, Kind::Acquire, other, true)), &me),
            Decision::Wait {
                holder: "pod-0".into()
            }
        );
    }

    #[test]
    fn a_live_claim_of_our_identity_by_another_process_is_taken_over() {
        let me = Holder::with_instance("pod-0", "2000-bb");
        let dead = Holder::with_instance("pod-0", "1000-aa");
        assert_eq!(
            decide(Some(&row(3, Kind::Acquire, dead, true)), &me),
            Decision::Claim {
                epoch: 4,
                taking_over: Some("pod-0 #1000-aa".into())
            }
        );
        // Which of the two started first does not matter: not ours, same identity, dead.
        let later = Holder::with_instance("pod-0", "3000-cc");
        assert!(matches!(
            decide(Some(&row(3, Kind::Acquire, later, true)), &me),
            Decision::Claim { epoch: 4, .. }
        ));
    }

    #[test]
    fn our_own_process_or_a_legacy_claim_are_never_taken_over() {
        let me = Holder::with_instance("pod-0", "2000-bb");
        for live in [
            // Another apply of this very process (two pipelines on one table).
            me.clone(),
            // Written by a release without instances.
            Holder::parse("pod-0"),
        ] {
            assert_eq!(
                decide(Some(&row(3, Kind::Acquire, live, true)), &me),
                Decision::Wait {
                    holder: "pod-0".into()
                }
            );
        }
    }

    #[test]
    fn holding_and_releasing_follow_the_token_of_the_latest_row() {
        let h = Holder::with_instance("a", "1-aa");
        let mut l = row(2, Kind::Acquire, h, true);
        l.token = "mine".into();
        assert!(holds(Some(&l), "mine"));
        assert!(!holds(Some(&l), "theirs"));
        assert!(ours_to_release(Some(&l), "mine"));
        l.live = false;
        assert!(!holds(Some(&l), "mine"), "an expired claim is not held");
        assert!(ours_to_release(Some(&l), "mine"));
        l.kind = Some(Kind::Release);
        assert!(!ours_to_release(Some(&l), "mine"), "already released");
        assert!(!holds(None, "mine") && !ours_to_release(None, "mine"));
    }
}
