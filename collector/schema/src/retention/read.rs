//! Retention's IO shell: the traces table's TTL on a server and the statements that bring
//! every table's to the options' ([`ttl_status`]); the rules are the parent module's.
//! `apply` runs the changes ([`crate::migrate`]).

use super::{change_statements, current_ttl, keeps_own_ttl, tables};
use crate::catalog;
use crate::client::Server;
use crate::error::Error;
use crate::ident::Ident;
use crate::model::TableOptions;

/// The traces table's TTL now, and the statements that bring every table's to the options'
/// (none while an `adopted` table keeps its own, see [`keeps_own_ttl`]).
/// Read-only.
pub async fn ttl_status(
    server: &Server,
    opts: &TableOptions,
    adopted: bool,
) -> Result<(Option<String>, Vec<String>), Error> {
    let tables = tables(opts)?;
    let names: Vec<Ident> = tables.iter().map(|(n, _)| n.clone()).collect();
    let existing = catalog::create_queries(server, &opts.database, &names).await?;
    let current = existing
        .iter()
        .find(|(n, _)| n == &opts.table)
        .and_then(|(_, q)| current_ttl(q));
    let changes = if keeps_own_ttl(opts, adopted) {
        Vec::new()
    } else {
        change_statements(opts, &tables, &existing)
    };
    Ok((current, changes))
}
