//! The migration ledger's IO: reading a table's rows ([`read`]) and recording a step done
//! under the schema lock ([`record`]). What a row is and the SQL are [`crate::ledger`]'s.

use std::time::Instant;

use crate::catalog;
use crate::client::Server;
use crate::error::Error;
use crate::ledger::{self, AppliedRecord, Mode, RecordContext};
use crate::lock::SchemaLock;
use crate::migrations::Rendered;
use crate::model::TableOptions;

/// The ledger rows for `opts.table`; empty if the ledger table does not exist yet
/// (reading must never create anything: `plan` and `status` are read-only).
pub async fn read(server: &Server, opts: &TableOptions) -> Result<Vec<AppliedRecord>, Error> {
    if !catalog::table_exists(server, &opts.database, &ledger::ledger_ident()).await? {
        return Ok(Vec::new());
    }
    server
        .fetch_all("read the migration ledger", &ledger::read_ledger_sql(opts))
        .await
}

/// Records a step done under the lock in the ledger. The lock is verified first: a statement
/// that outlived our lease may have raced a new holder, which then adopts the object;
/// recording it too would double the ledger row.
pub async fn record(
    server: &Server,
    opts: &TableOptions,
    applied_by: &str,
    lock: &SchemaLock,
    started: Instant,
    step: &Rendered,
    mode: Mode,
) -> Result<(), Error> {
    lock.verify().await?;
    let what = if step.version == ledger::SETTINGS_VERSION {
        "record the setting change in the ledger"
    } else {
        "record the migration in the ledger"
    };
    let ctx = RecordContext {
        applied_by,
        lock_token: lock.token(),
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    };
    server
        .execute(what, &ledger::record_sql(opts, step, mode, &ctx))
        .await
}
