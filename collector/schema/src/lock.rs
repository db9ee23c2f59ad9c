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
//! 4. The holder renews (claims the next epoch with its own token, which also proves
//!    it still holds the lock) before every migration, so no DDL starts on a lease
//!    that was not just verified. Residual risk, as for any lease: a holder stalled
//!    for longer than the lease *during* one statement could overlap the next holder;
//!    the lease (default 2 min) dwarfs a metadata DDL, and every migration is
//!    idempotent or adoption-checked, so even that cannot duplicate or lose data.

use std::time::{Duration, Instant};

use rand::RngCore;
use serde::Deserialize;

use crate::client::Server;
use crate::ddl::{merge_tree_engine, on_cluster};
use crate::error::Error;
use crate::ident::{Ident, quote_ident, quote_str};
use crate::model::{Engine, TableOptions};

/// Name of the lock table, in the traces table's database.
pub const LOCK_TABLE: &str = "tracehouse_schema_lock";
/// How many recent claims the lock table remembers for deduplication.
pub const LOCK_DEDUP_WINDOW: u64 = 10_000;

/// Lease and waiting behaviour.
#[derive(Debug, Clone)]
pub struct LockConfig {
    /// How long a claim stays valid without renewal; a crashed applier blocks others
    /// for at most this long.
    pub lease: Duration,
    /// How long to wait for another applier before giving up with `LockTimeout`.
    pub timeout: Duration,
    /// First wait between polls; doubles up to two seconds.
    pub poll: Duration,
}

impl Default for LockConfig {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(120),
            // Longer than the lease, so a dead holder's claim expires while we wait.
            timeout: Duration::from_secs(180),
            poll: Duration::from_millis(100),
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Acquire,
    Release,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Release => "release",
        }
    }
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

fn epoch_tokens_sql(database: &Ident, scope: &str, epoch: u64) -> String {
    format!(
        "SELECT token FROM {database}.{} WHERE scope = {} AND epoch = {epoch}",
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

#[derive(Debug, clickhouse::Row, Deserialize)]
struct TokenRow {
    token: String,
}

/// A held schema lock. Release it with [`SchemaLock::release`]; if the process dies
/// instead, the lease runs out on its own.
#[derive(Debug)]
pub struct SchemaLock {
    server: Server,
    database: Ident,
    scope: String,
    token: String,
    holder: String,
    lease_ms: u64,
    epoch: u64,
}

impl SchemaLock {
    /// Waits until the lock on `opts.table` is free and takes it, or fails with
    /// [`Error::LockTimeout`] naming the holder. `holder` is free text for humans.
    pub async fn acquire(
        server: &Server,
        opts: &TableOptions,
        holder: &str,
        config: &LockConfig,
    ) -> Result<Self, Error> {
        let mut token_bytes = [0u8; 16];
        rand::rng().fill_bytes(&mut token_bytes);
        let mut lock = Self {
            server: server.clone(),
            database: opts.database.clone(),
            scope: opts.table.as_str().to_string(),
            token: token_bytes.iter().map(|b| format!("{b:02x}")).collect(),
            holder: holder.to_string(),
            lease_ms: u64::try_from(config.lease.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
            epoch: 0,
        };
        let started = Instant::now();
        let mut wait = config.poll;
        loop {
            let latest = lock.latest().await?;
            let free_epoch = match &latest {
                None => Some(1),
                Some(r) if r.kind == Kind::Release.as_str() || r.live == 0 => Some(r.epoch + 1),
                Some(_) => None,
            };
            if let Some(epoch) = free_epoch
                && lock.claim(epoch, Kind::Acquire).await?
            {
                lock.epoch = epoch;
                tracing::info!(scope = %lock.scope, epoch, "schema lock acquired");
                return Ok(lock);
            }
            // Held by someone else, or we lost the race for the free epoch.
            let elapsed = started.elapsed();
            if elapsed >= config.timeout {
                let holder = match lock.latest().await? {
                    Some(r) => r.holder,
                    None => "nobody visible".into(),
                };
                return Err(Error::LockTimeout {
                    scope: format!("{}.{}", lock.database, quote_ident(&lock.scope)),
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
        self.verify().await?;
        if self.claim(self.epoch + 1, Kind::Acquire).await? {
            self.epoch += 1;
            Ok(())
        } else {
            let latest = self.latest().await?;
            Err(self.lost(latest))
        }
    }

    /// Fails with [`Error::LockLost`] unless the lock is still ours and unexpired.
    pub async fn verify(&self) -> Result<(), Error> {
        match self.latest().await? {
            Some(r) if r.epoch == self.epoch && r.token == self.token && r.live == 1 => Ok(()),
            other => Err(self.lost(other)),
        }
    }

    /// Hands the lock back. Best effort: if our lease already ran out, there is
    /// nothing of ours left to release.
    pub async fn release(self) -> Result<(), Error> {
        match self.latest().await? {
            Some(r) if r.epoch == self.epoch && r.token == self.token => {
                self.claim(self.epoch + 1, Kind::Release).await?;
                tracing::info!(scope = %self.scope, "schema lock released");
            }
            _ => tracing::warn!(scope = %self.scope, "schema lock was no longer ours to release"),
        }
        Ok(())
    }

    /// This holder's random token (recorded in the ledger next to what it applied).
    pub fn token(&self) -> &str {
        &self.token
    }

    fn lost(&self, latest: Option<LatestRow>) -> Error {
        Error::LockLost {
            scope: format!("{}.{}", self.database, quote_ident(&self.scope)),
            holder: latest.map_or_else(|| "nobody visible".into(), |r| r.holder),
        }
    }

    async fn latest(&self) -> Result<Option<LatestRow>, Error> {
        let rows: Vec<LatestRow> = self
            .server
            .fetch_all(
                "read the schema lock",
                &latest_sql(&self.database, &self.scope),
            )
            .await?;
        Ok(rows.into_iter().next())
    }

    /// Inserts our row for `epoch` and reports whether it is the one that was kept.
    async fn claim(&self, epoch: u64, kind: Kind) -> Result<bool, Error> {
        let sql = claim_sql(
            &self.database,
            &self.scope,
            epoch,
            kind,
            &self.token,
            &self.holder,
            self.lease_ms,
        );
        self.server.execute("claim the schema lock", &sql).await?;
        let rows: Vec<TokenRow> = self
            .server
            .fetch_all(
                "read back the schema lock",
                &epoch_tokens_sql(&self.database, &self.scope, epoch),
            )
            .await?;
        match rows.as_slice() {
            [only] => Ok(only.token == self.token),
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
