//! What the server has, read from its system tables: whether a table exists and its engine
//! and columns (and so whether a migration's object can be adopted), tables' create
//! queries (what the window and TTL parsers read), the server's defaults of the window
//! settings, and its version (the layouts' gate). Read-only IO; every rule that judges what
//! is read is pure and lives with its subject ([`crate::adopt`], [`crate::dedup_window`],
//! [`crate::retention`], [`crate::layouts`]).

use serde::Deserialize;

use crate::adopt::{
    ExistingColumn, Verdict, check_lookup_table, check_lookup_view, check_traces_table,
};
use crate::client::Server;
use crate::create_query;
use crate::dedup_window;
use crate::error::Error;
use crate::ident::{Ident, quote_str};
use crate::layouts;
use crate::migrations::Creates;
use crate::model::TableOptions;

#[derive(Debug, clickhouse::Row, Deserialize)]
struct EngineRow {
    engine: String,
}

/// `system.tables.engine` of `database.name`, or `None` if there is no such object.
pub async fn table_engine(
    server: &Server,
    database: &Ident,
    name: &Ident,
) -> Result<Option<String>, Error> {
    let sql = format!(
        "SELECT engine FROM system.tables WHERE database = {} AND name = {}",
        quote_str(database.as_str()),
        quote_str(name.as_str())
    );
    let rows: Vec<EngineRow> = server
        .fetch_all(&format!("look up {database}.{name}"), &sql)
        .await?;
    Ok(rows.into_iter().next().map(|r| r.engine))
}

pub async fn table_exists(server: &Server, database: &Ident, name: &Ident) -> Result<bool, Error> {
    Ok(table_engine(server, database, name).await?.is_some())
}

/// The columns of `database.name` in table order.
pub async fn existing_columns(
    server: &Server,
    database: &Ident,
    name: &Ident,
) -> Result<Vec<ExistingColumn>, Error> {
    let sql = format!(
        "SELECT name, type AS ch_type, default_kind, compression_codec FROM system.columns \
         WHERE database = {} AND table = {} ORDER BY position",
        quote_str(database.as_str()),
        quote_str(name.as_str())
    );
    server
        .fetch_all(&format!("describe {database}.{name}"), &sql)
        .await
}

/// Compares the object `creates` names with the model; `None` if it does not exist.
pub async fn inspect(
    server: &Server,
    opts: &TableOptions,
    creates: &Creates,
) -> Result<Option<Verdict>, Error> {
    let name = creates.name();
    let Some(engine) = table_engine(server, &opts.database, name).await? else {
        return Ok(None);
    };
    Ok(Some(match creates {
        Creates::LookupView(_) => check_lookup_view(&engine),
        Creates::TracesTable(_) => {
            let cols = existing_columns(server, &opts.database, name).await?;
            check_traces_table(opts, &engine, &cols)
        }
        Creates::LookupTable(_) => {
            let cols = existing_columns(server, &opts.database, name).await?;
            check_lookup_table(opts, &engine, &cols)
        }
    }))
}

#[derive(Debug, clickhouse::Row, serde::Deserialize)]
struct CreateRow {
    name: String,
    create_table_query: String,
}

/// `(name, create_table_query)` of those of `names` that exist in the database, their
/// comments taken out ([`create_query::without_comments`]): what the TTL and window
/// parsers read.
pub(crate) async fn create_queries(
    server: &Server,
    database: &Ident,
    names: &[Ident],
) -> Result<Vec<(Ident, String)>, Error> {
    let list = names
        .iter()
        .map(|n| quote_str(n.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    let rows: Vec<CreateRow> = server
        .fetch_all(
            "read the table settings",
            &format!(
                "SELECT name, create_table_query FROM system.tables \
                 WHERE database = {} AND name IN ({list})",
                quote_str(database.as_str())
            ),
        )
        .await?;
    Ok(names
        .iter()
        .filter_map(|n| {
            rows.iter().find(|r| r.name == n.as_str()).map(|r| {
                (
                    n.clone(),
                    create_query::without_comments(&r.create_table_query),
                )
            })
        })
        .collect())
}

/// The server's defaults of the window settings (`system.merge_tree_settings`); empty when
/// they cannot be read (then every window setting is set explicitly, never assumed).
pub(crate) async fn server_defaults(server: &Server) -> dedup_window::ServerDefaults {
    #[derive(Debug, clickhouse::Row, serde::Deserialize)]
    struct Row {
        name: String,
        value: String,
    }
    let names = dedup_window::WINDOW_SETTINGS
        .iter()
        .map(|n| quote_str(n))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!("SELECT name, value FROM system.merge_tree_settings WHERE name IN ({names})");
    match server
        .fetch_all::<Row>("read the server's window defaults", &sql)
        .await
    {
        Ok(rows) => dedup_window::ServerDefaults::from_rows(
            rows.iter().map(|r| (r.name.as_str(), r.value.as_str())),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read system.merge_tree_settings; setting every window setting explicitly");
            dedup_window::ServerDefaults::default()
        }
    }
}

/// The IO shell of [`layouts::gate`]: reads `version()` once, only when `opts` ask for a layout;
/// `apply` calls it before anything runs.
pub(crate) async fn check_layouts_gate(server: &Server, opts: &TableOptions) -> Result<(), Error> {
    if opts.layouts.is_default() {
        return Ok(());
    }
    #[derive(clickhouse::Row, serde::Deserialize)]
    struct VersionRow {
        version: String,
    }
    let rows: Vec<VersionRow> = server
        .fetch_all("read the server version", "SELECT version() AS version")
        .await?;
    let version = rows
        .into_iter()
        .next()
        .map(|r| r.version)
        .unwrap_or_default();
    layouts::gate(opts, &version)
}
