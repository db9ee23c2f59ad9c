//! The window's IO shell: where the traces table's and its lookup table's window stands
//! on a server ([`window_status`]), read from their create queries and the server's
//! defaults; the rules it applies are the parent module's. `apply` runs the changes
//! ([`crate::migrate`]).

use super::{
    PipelineShape, WindowStatus, change_statements, current_value, desired_setting,
    desired_settings, engine_in,
};
use crate::catalog;
use crate::client::Server;
use crate::error::Error;
use crate::model::TableOptions;

/// Where the window of the traces table and its lookup table stands: the settings of the
/// engine the server reports (Cloud's `SharedMergeTree` for a `MergeTree`), their values
/// or the server's defaults. Read-only.
pub async fn window_status(
    server: &Server,
    opts: &TableOptions,
) -> Result<Option<WindowStatus>, Error> {
    if desired_setting(opts).is_none() {
        return Ok(None);
    }
    let tables = catalog::create_queries(
        server,
        &opts.database,
        &[opts.table.clone(), opts.lookup_table()?],
    )
    .await?;
    let traces = tables
        .iter()
        .find(|(n, _)| n == &opts.table)
        .map(|(_, q)| q);
    let engine = traces.and_then(|q| engine_in(q));
    let seconds = PipelineShape::new(1, std::time::Duration::from_secs(1)).required_seconds();
    let desired = desired_settings(opts, engine, seconds);
    let Some(count) = desired.first() else {
        return Ok(None);
    };
    let defaults = catalog::server_defaults(server).await;
    let current = traces.and_then(|q| current_value(count.name, q, &defaults));
    Ok(Some(WindowStatus {
        setting: count.name,
        desired: count.value,
        current,
        changes: change_statements(opts, &desired, &tables, &defaults),
    }))
}
