//! `apply_layouts --database DB [--attribute-items] [--map-buckets]`: `apply` of the traces
//! table `DB.otel_traces` (Map attributes, MergeTree, defaults) with the opt-in layouts asked
//! for, on `CLICKHOUSE_URL` as `CLICKHOUSE_USER`/`CLICKHOUSE_PASSWORD`: the same library call
//! the operator makes when a pipeline's `spec.clickhouse.schema.layouts` asks for them.
//!
//! For e2e/querybenchlib/readercompat.py, which applies every other case through
//! `tracehouse-collector schema apply`; that command has no layout flags yet (the collector's
//! command line is not this crate's), so the reader check opts in through this example.

use tracehouse_schema::{
    ApplyOptions, ConnectionConfig, Ident, MapSerialization, Server, TableOptions, apply,
};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut database = None;
    let mut opts_layouts = tracehouse_schema::Layouts::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--database" => database = args.next(),
            "--attribute-items" => opts_layouts.attribute_items = true,
            "--map-buckets" => opts_layouts.map_serialization = MapSerialization::Buckets,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let database = database.ok_or("--database DB is required")?;
    let mut opts = TableOptions::new(
        Ident::new("database", &database)?,
        Ident::new("table", tracehouse_schema::model::DEFAULT_TABLE)?,
    );
    opts.layouts = opts_layouts;
    let server = Server::new(&ConnectionConfig::from_env()?)?;
    let report = apply(&server, &opts, &ApplyOptions::default()).await?;
    for a in &report.applied {
        println!("{:04} {} {}", a.version, a.name, a.mode.as_str());
    }
    if !report.status.is_up_to_date() {
        return Err("not up to date after apply".into());
    }
    Ok(())
}
