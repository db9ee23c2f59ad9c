//! A lease lock on ClickHouse itself, so two appliers never run schema DDL at once.
//!
//! There is no Keeper to lean on, so the lock is an append-only log in
//! `<database>.tracehouse_schema_lock`, one row per *epoch* of a scope (the traces
//! table name). A row is `acquire` (token, holder, lease) or `release`. The lock is
//! held by the token of the latest epoch while that row is an `acquire` whose lease
//! has not run out by the server's clock.
//!
//! Why two appliers cannot both hold it:
//! 1. Every change is an insert at epoch `latest + 1` carrying
//!    `insert_deduplication_token = '<scope>/<epoch>'`. MergeTree checks and updates its
//!    deduplication log under the table's parts lock when it commits an insert, so for
//!    a given epoch exactly one insert is stored; the others are acknowledged and
//!    dropped (`non_replicated_deduplication_window` keeps the last 10 000 tokens; the
//!    replicated engine does the same through Keeper block ids).
//! 2. When an insert returns, the stored row (ours or the winner's) is committed and
//!    visible to every later `SELECT` on that server. The claimant reads back the
//!    epoch it claimed: it holds the lock only if the single row there has its token.
//!    Seeing no row (a replica that has not caught up) or two rows (deduplication
//!    broken) is never taken as success.
//! 3. A new epoch is claimed only after reading the previous one as released or
//!    expired, so a live holder is never displaced. Expiry compares `written_at`
//!    (set by the server) with the server's `now64()`: applier clocks do not matter.
//! 4. While held, a keeper task renews the lease every third of it (claims the next epoch
//!    with the holder's own token, which also proves it still holds the lock), and the
//!    applier verifies before every migration and before recording it. So a slow
//!    statement (an `ALTER`, an `ON CLUSTER` DDL waiting on a host) never outlives its
//!    lease while its process lives. Residual risk, as for any lease: a whole process
//!    stalled for longer than the lease could overlap the next holder; every migration is
//!    idempotent or adoption-checked, so even that cannot duplicate or lose data.
//!
//! Why the lock never leaks (issue 30, finding 7):
//! 5. A [`SchemaLock`] is released on every exit path: [`SchemaLock::release`] on the
//!    normal one; dropping it unreleased (a caller's deadline, a task aborted at shutdown)
//!    stops the keeper and spawns the release on the current runtime. The same holds for an
//!    acquisition dropped (or failing) after its claim row was sent and before a
//!    [`SchemaLock`] exists: a [`ClaimInFlight`] guard releases the claim if it turns out to
//!    be ours. Only a dead process leaves a live claim, and then (6) or the lease ends it.
//! 6. A process that restarts with the same identity (the operator's pod name) takes its
//!    dead predecessor's claim back at once; see [`crate::lock_decide`] for the rule and
//!    why it is safe. Another identity waits for the lease, since that holder may live.
//! 7. Only the *wait* is bounded ([`LockConfig::timeout`]); callers that need a deadline
//!    on the held section must not drop it while statements run (the operator runs
//!    `apply` in its own task and stops waiting for it, it never cancels it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::RngCore;
use serde::Deserialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::client::Server;
use crate::ddl::{merge_tree_engine, on_cluster};
use crate::error::Error;
use crate::ident::{Ident, quote_ident, quote_str};
use crate::lock_decide::{self, Decision, Holder, Kind, Latest};
use crate::model::{Engine, TableOptions};

/// Name of the lock table, in the traces table's database.
pub const LOCK_TABLE: &str = "tracehouse_schema_lock";
/// How many recent claims the lock table remembers for deduplication.
pub const LOCK_DEDUP_WINDOW: u64 = 10_000;

/// Lease and waiting behaviour.
#[derive(Debug, Clone)]
pub struct LockConfig {
    /// How long a claim stays valid without renewal; a crashed applier of another
    /// identity blocks others for at most this long.
    pub lease: Duration,
    /// How long to wait for another applier before giving up with `LockTimeout`. Only
    /// the wait: once held, nothing here times the holder out.
    pub timeout: Duration,
    /// First wait between polls; doubles up to two seconds.
    pub poll: Duration,
    /// Renew the lease every third of it while held (rule 4). Off only in tests that
    /// play a stalled holder.
    pub keep_alive: bool,
}

impl Default for LockConfig {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(120),
            // Longer than the lease, so a dead holder's claim expires while we wait.
            timeout: Duration::from_secs(180),
            poll: Duration::from_millis(100),
            keep_alive: true,
        }
    }
}

fn lock_ident() -> Ident {
    Ident::new("table", LOCK_TABLE).expect("constant name is valid")
}

/// `CREATE TABLE IF NOT EXISTS` for the lock table. One partition (no `PARTITION BY`):
/// deduplication tokens are remembered per partition.
pub fn create_lock_table(opts: &TableOptions) -> String {
    let window = match opts.engine {
        Engine::Replicated(_) => "replicated_deduplication_window",
        Engine::MergeTree | Engine::Null => "non_replicated_deduplication_window",
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {}.{}{}\n(\n    `scope` String,\n    `epoch` UInt64,\n    `kind` String,\n    `token` String,\n    `holder` String,\n    `lease_ms` UInt64,\n    `written_at` DateTime64(3) DEFAULT now64(3)\n)\nENGINE = {}\nORDER BY (scope, epoch)\nSETTINGS {window} = {LOCK_DEDUP_WINDOW}",
        opts.database,
        lock_ident(),
        on_cluster(opts),
        merge_tree_engine(opts),
    )
}

/// One claim: the insert whose deduplication token makes it the only row of `epoch`.
fn claim_sql(
    database: &Ident,
    scope: &str,
    epoch: u64,
    kind: Kind,
    token: &str,
    holder: &str,
    lease_ms: u64,
) -> String {
    format!(
        "INSERT INTO {database}.{} (scope, epoch, kind, token, holder, lease_ms) \
         SETTINGS insert_deduplicate = 1, insert_deduplication_token = {}, async_insert = 0 \
         VALUES ({}, {epoch}, {}, {}, {}, {lease_ms})",
        lock_ident(),
        quote_str(&format!("tracehouse-lock/{scope}/{epoch}")),
        quote_str(scope),
        quote_str(kind.as_str()),
        quote_str(token),
        quote_str(holder),
    )
}

/// The latest row of `scope`, with whether its lease is still running.
fn latest_sql(database: &Ident, scope: &str) -> String {
    format!(
        "SELECT epoch, kind, token, holder, \
         toUInt8(written_at + toIntervalMillisecond(lease_ms) > now64(3)) AS live \
         FROM {database}.{} WHERE scope = {} ORDER BY epoch DESC LIMIT 1",
        lock_ident(),
        quote_str(scope)
    )
}

fn epoch_rows_sql(database: &Ident, scope: &str, epoch: u64) -> String {
    format!(
        "SELECT token, kind FROM {database}.{} WHERE scope = {} AND epoch = {epoch}",
        lock_ident(),
        quote_str(scope)
    )
}

#[derive(Debug, Clone, clickhouse::Row, Deserialize)]
struct LatestRow {
    epoch: u64,
    kind: String,
    token: String,
    holder: String,
    live: u8,
}

impl From<LatestRow> for Latest {
    fn from(r: LatestRow) -> Self {
        Self {
            epoch: r.epoch,
            kind: Kind::parse(&r.kind),
            token: r.token,
            holder: Holder::parse(&r.holder),
            live: r.live == 1,
        }
    }
}

#[derive(Debug, clickhouse::Row, Deserialize)]
struct EpochRow {
    token: String,
    kind: String,
}

/// One acquisition's identity and the IO on its rows; shared with the keeper task.
#[derive(Debug)]
struct Claimant {
    server: Server,
    database: Ident,
    scope: String,
    /// Random per acquisition: which claims are ours.
    token: String,
    holder: Holder,
    lease_ms: u64,
}

impl Claimant {
    fn scope_name(&self) -> String {
        format!("{}.{}", self.database, quote_ident(&self.scope))
    }

    fn lost(&self, latest: Option<&Latest>) -> Error {
        Error::LockLost {
            scope: self.scope_name(),
            holder: latest.map_or_else(
                || "nobody visible".into(),
                |l| l.holder.identity().to_string(),
            ),
        }
    }

    async fn latest(&self) -> Result<Option<Latest>, Error> {
        let rows: Vec<LatestRow> = self
            .server
            .fetch_all(
                "read the schema lock",
                &latest_sql(&self.database, &self.scope),
            )
            .await?;
        Ok(rows.into_iter().next().map(Latest::from))
    }

    /// Inserts our row for `epoch` and reports whether it is the one that was kept.
    async fn claim(&self, epoch: u64, kind: Kind) -> Result<bool, Error> {
        let sql = claim_sql(
            &self.database,
            &self.scope,
            epoch,
            kind,
            &self.token,
            &self.holder.column(),
            self.lease_ms,
        );
        self.server.execute("claim the schema lock", &sql).await?;
        let rows: Vec<EpochRow> = self
            .server
            .fetch_all(
                "read back the schema lock",
                &epoch_rows_sql(&self.database, &self.scope, epoch),
            )
            .await?;
        match rows.as_slice() {
            // Our token with the other kind (a renewal that landed before our release)
            // is not the row we asked for: the caller looks again.
            [only] => Ok(only.token == self.token && only.kind == kind.as_str()),
            // A replica that has not seen the winner's row yet: not ours, look again.
            [] => Ok(false),
            many => Err(Error::Protocol(format!(
                "the schema lock table holds {} rows for epoch {epoch} of {:?}: insert \
                 deduplication is not working on {}.{}, so the lock cannot be trusted",
                many.len(),
                self.scope,
                self.database,
                lock_ident()
            ))),
        }
    }

    async fn verify(&self) -> Result<(), Error> {
        let latest = self.latest().await?;
        if lock_decide::holds(latest.as_ref(), &self.token) {
            Ok(())
        } else {
            Err(self.lost(latest.as_ref()))
        }
    }

    async fn renew(&self) -> Result<(), Error> {
        let latest = self.latest().await?;
        match &latest {
            Some(l) if lock_decide::holds(latest.as_ref(), &self.token) => {
                if self.claim(l.epoch + 1, Kind::Acquire).await? {
                    Ok(())
                } else {
                    let now = self.latest().await?;
                    Err(self.lost(now.as_ref()))
                }
            }
            _ => Err(self.lost(latest.as_ref())),
        }
    }

    /// Best effort: if our claim is no longer the latest row, there is nothing of ours
    /// left to release. Looks again when a row of ours raced the release (bounded).
    async fn release(&self) -> Result<(), Error> {
        for _ in 0..3 {
            let latest = self.latest().await?;
            let Some(l) = latest
                .as_ref()
                .filter(|_| lock_decide::ours_to_release(latest.as_ref(), &self.token))
            else {
                tracing::warn!(scope = %self.scope, "schema lock was no longer ours to release");
                return Ok(());
            };
            if self.claim(l.epoch + 1, Kind::Release).await? {
                tracing::info!(scope = %self.scope, "schema lock released");
                return Ok(());
            }
        }
        Err(Error::Protocol(format!(
            "could not release the schema lock on {}: every release lost its epoch",
            self.scope_name()
        )))
    }
}

/// Who holds the lock on `opts.table` now, for humans and tests: the latest row (`None`
/// when the lock table or the scope has none). Read-only.
pub async fn latest_claim(server: &Server, opts: &TableOptions) -> Result<Option<Latest>, Error> {
    if !crate::catalog::table_exists(server, &opts.database, &lock_ident()).await? {
        return Ok(None);
    }
    let rows: Vec<LatestRow> = server
        .fetch_all(
            "read the schema lock",
            &latest_sql(&opts.database, opts.table.as_str()),
        )
        .await?;
    Ok(rows.into_iter().next().map(Latest::from))
}

/// The task that renews a held lease (rule 4) until told to stop.
#[derive(Debug)]
struct Keeper {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Keeper {
    fn start(claimant: Arc<Claimant>, every: Duration) -> Self {
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    // A send or a dropped sender: either way, stop.
                    _ = stopped.changed() => return,
                    () = tokio::time::sleep(every) => {}
                }
                match claimant.renew().await {
                    Ok(()) => tracing::debug!(scope = %claimant.scope, "schema lock lease renewed"),
                    Err(e @ Error::LockLost { .. }) => {
                        // The applier finds out at its next verify and stops.
                        tracing::error!(error = %e, "schema lock lost while held");
                        return;
                    }
                    // Transient: the lease still has two thirds to run; try again.
                    Err(e) => tracing::warn!(error = %e, "could not renew the schema lock lease"),
                }
            }
        });
        Self { stop, task }
    }

    /// Stops renewing and waits for a renewal in flight, so no claim of ours lands
    /// after what the caller does next.
    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// A held schema lock. Release it with [`SchemaLock::release`]; dropping it unreleased
/// releases it in the background (rule 5); if the process dies instead, the lease runs
/// out on its own, or the same identity takes it back at once (rule 6).
#[derive(Debug)]
pub struct SchemaLock {
    claimant: Arc<Claimant>,
    keeper: Option<Keeper>,
    released: bool,
}

impl SchemaLock {
    /// Waits until the lock on `opts.table` is free and takes it, or fails with
    /// [`Error::LockTimeout`] naming the holder. `identity` names this applier; it must
    /// be unique among live appliers (a pod name, `host/pid`), see rule 6.
    pub async fn acquire(
        server: &Server,
        opts: &TableOptions,
        identity: &str,
        config: &LockConfig,
    ) -> Result<Self, Error> {
        Self::acquire_as(server, opts, Holder::this_process(identity), config).await
    }

    /// [`SchemaLock::acquire`] as an explicit holder (tests play other processes).
    pub async fn acquire_as(
        server: &Server,
        opts: &TableOptions,
        holder: Holder,
        config: &LockConfig,
    ) -> Result<Self, Error> {
        let mut token_bytes = [0u8; 16];
        rand::rng().fill_bytes(&mut token_bytes);
        let claimant = Arc::new(Claimant {
            server: server.clone(),
            database: opts.database.clone(),
            scope: opts.table.as_str().to_string(),
            token: token_bytes.iter().map(|b| format!("{b:02x}")).collect(),
            holder,
            lease_ms: u64::try_from(config.lease.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        });
        let started = Instant::now();
        let mut wait = config.poll;
        loop {
            let latest = claimant.latest().await?;
            let holder = match lock_decide::decide(latest.as_ref(), &claimant.holder) {
                Decision::Claim { epoch, taking_over } => {
                    // Rule 5 from the moment the row is sent: dropped or failed before we
                    // know the outcome, the guard releases the claim if it is ours.
                    let in_flight = ClaimInFlight::new(claimant.clone());
                    let won = claimant.claim(epoch, Kind::Acquire).await?;
                    in_flight.settled();
                    if won {
                        match taking_over {
                            Some(dead) => tracing::warn!(
                                scope = %claimant.scope, epoch, predecessor = %dead,
                                "schema lock taken back from a dead process of the same identity"
                            ),
                            None => {
                                tracing::info!(scope = %claimant.scope, epoch, "schema lock acquired")
                            }
                        }
                        let keeper = config.keep_alive.then(|| {
                            Keeper::start(
                                claimant.clone(),
                                (config.lease / 3).max(Duration::from_millis(50)),
                            )
                        });
                        return Ok(Self {
                            claimant,
                            keeper,
                            released: false,
                        });
                    }
                    // Lost the race for the free epoch.
                    None
                }
                Decision::Wait { holder } => Some(holder),
            };
            let elapsed = started.elapsed();
            if elapsed >= config.timeout {
                let holder = match holder {
                    Some(h) => h,
                    None => claimant.latest().await?.map_or_else(
                        || "nobody visible".into(),
                        |l| l.holder.identity().to_string(),
                    ),
                };
                return Err(Error::LockTimeout {
                    scope: claimant.scope_name(),
                    waited: elapsed,
                    holder,
                });
            }
            tokio::time::sleep(wait.min(config.timeout - elapsed)).await;
            wait = (wait * 2).min(Duration::from_secs(2));
        }
    }

    /// Proves the lock is still ours and starts a fresh lease; [`Error::LockLost`]
    /// if the lease ran out and someone else took it.
    pub async fn renew(&mut self) -> Result<(), Error> {
        self.claimant.renew().await
    }

    /// Fails with [`Error::LockLost`] unless the lock is still ours and unexpired.
    pub async fn verify(&self) -> Result<(), Error> {
        self.claimant.verify().await
    }

    /// Hands the lock back. Best effort: if our lease already ran out and someone took
    /// it, there is nothing of ours left to release.
    pub async fn release(mut self) -> Result<(), Error> {
        self.released = true;
        if let Some(keeper) = self.keeper.take() {
            keeper.stop().await;
        }
        self.claimant.release().await
    }

    /// This acquisition's random token (recorded in the ledger next to what it applied).
    pub fn token(&self) -> &str {
        &self.claimant.token
    }
}

/// Rule 5: a lock dropped unreleased is released in the background.
impl Drop for SchemaLock {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        release_in_background(
            self.claimant.clone(),
            self.keeper.take(),
            "schema lock dropped while held",
        );
    }
}

/// Rule 5 before a [`SchemaLock`] exists: armed while a claim row is on its way, it
/// releases the claim (only if it is ours: [`Claimant::release`] checks) when the
/// acquisition is dropped or fails before it learns whether the claim won.
struct ClaimInFlight {
    claimant: Option<Arc<Claimant>>,
}

impl ClaimInFlight {
    fn new(claimant: Arc<Claimant>) -> Self {
        Self {
            claimant: Some(claimant),
        }
    }

    /// The outcome is known: won (a [`SchemaLock`] takes over) or lost (nothing of ours).
    fn settled(mut self) {
        self.claimant = None;
    }
}

impl Drop for ClaimInFlight {
    fn drop(&mut self) {
        if let Some(claimant) = self.claimant.take() {
            release_in_background(
                claimant,
                None,
                "schema lock acquisition dropped after its claim",
            );
        }
    }
}

/// Stops `keeper` and releases `claimant`'s claim on the current runtime, if there is one.
fn release_in_background(claimant: Arc<Claimant>, keeper: Option<Keeper>, why: &'static str) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            tracing::warn!(scope = %claimant.scope, "{why}: releasing it");
            runtime.spawn(async move {
                if let Some(k) = keeper {
                    k.stop().await;
                }
                if let Err(e) = claimant.release().await {
                    tracing::warn!(error = %e, "could not release a dropped schema lock; its lease runs out");
                }
            });
        }
        Err(_) => {
            // No runtime left (process exit): the keeper died with it; rule 6 or the
            // lease ends the claim.
            tracing::warn!(scope = %claimant.scope, "{why}, without a runtime; its lease runs out");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Ident {
        Ident::new("database", "otel").unwrap()
    }

    #[test]
    fn claims_carry_a_per_scope_per_epoch_deduplication_token() {
        let sql = claim_sql(
            &db(),
            "otel_traces",
            7,
            Kind::Acquire,
            "abc",
            "host/1",
            120_000,
        );
        assert!(sql.contains("insert_deduplication_token = 'tracehouse-lock/otel_traces/7'"));
        assert!(sql.contains("insert_deduplicate = 1"));
        assert!(sql.contains("async_insert = 0"));
        assert!(sql.ends_with("VALUES ('otel_traces', 7, 'acquire', 'abc', 'host/1', 120000)"));
    }

    #[test]
    fn hostile_scope_and_holder_are_literals() {
        let sql = claim_sql(&db(), "t'x", 1, Kind::Release, "tok", "h'); DROP", 1);
        assert!(sql.contains(r"'tracehouse-lock/t\'x/1'"));
        assert!(sql.contains(r"VALUES ('t\'x', 1, 'release', 'tok', 'h\'); DROP', 1)"));
        assert!(latest_sql(&db(), "t'x").contains(r"WHERE scope = 't\'x'"));
    }

    #[test]
    fn lock_table_has_one_partition_and_a_deduplication_window() {
        let opts = TableOptions::new(db(), Ident::new("table", "t").unwrap());
        let sql = create_lock_table(&opts);
        assert!(!sql.contains("PARTITION BY"));
        assert!(sql.ends_with("SETTINGS non_replicated_deduplication_window = 10000"));
        assert!(sql.contains("`written_at` DateTime64(3) DEFAULT now64(3)"));
    }
}
