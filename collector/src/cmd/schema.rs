//! `tracehouse-collector schema …`: print, plan, apply and inspect the traces table's
//! migrations. All the work is in the `tracehouse-schema` library (which the operator
//! uses too); this file maps flags to options, results to text and exit codes.
//!
//! Exit codes, for scripts:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done / up to date |
//! | 1 | error (ClickHouse unreachable, a statement failed, …) |
//! | 2 | usage: bad flags or options, `CLICKHOUSE_URL` missing |
//! | 3 | migrations pending (`status`, `plan --check`) |
//! | 4 | an applied migration changed (checksum mismatch) or a newer release applied migrations this binary does not know |
//! | 5 | schema lock: timed out waiting for another applier, or lost the lease |
//! | 6 | an existing table or view has another shape: not adopted, not altered |

use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use tracehouse_schema::{Action, State, Status};
use tracehouse_schema::{
    ApplyOptions, Attributes, ConnectionConfig, Engine, EngineKind, Error, Layouts, LockConfig,
    MapSerialization, Replication, Server, SettingError, TableOptions, TableSettings, migrations,
};

pub const EXIT_OK: u8 = 0;
pub const EXIT_ERROR: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_PENDING: u8 = 3;
pub const EXIT_CHECKSUM: u8 = 4;
pub const EXIT_LOCK: u8 = 5;
pub const EXIT_SHAPE: u8 = 6;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 ok, 1 error, 2 usage, 3 pending migrations, \
4 checksum mismatch / newer schema, 5 lock timeout or lost, 6 existing table with another shape."
)]
pub struct SchemaArgs {
    #[command(subcommand)]
    command: SchemaCommand,
}

#[derive(Debug, Subcommand)]
enum SchemaCommand {
    /// Print the whole schema as SQL, or the columns the collector inserts (no server needed).
    Print {
        #[command(flatten)]
        table: TableArgs,
        /// Print the insert columns and their types instead of the DDL.
        #[arg(long)]
        columns: bool,
    },
    /// Show what `apply` would do; with --check, exit 3 if anything is pending.
    Plan {
        #[command(flatten)]
        table: TableArgs,
        #[command(flatten)]
        server: ServerArgs,
        #[arg(long)]
        check: bool,
    },
    /// Run pending migrations under the schema lock (idempotent).
    Apply {
        #[command(flatten)]
        table: TableArgs,
        #[command(flatten)]
        server: ServerArgs,
        /// Give up waiting for another applier after this long (e.g. 90s, 5m).
        #[arg(long, default_value = "180s", value_parser = parse_duration)]
        lock_timeout: Duration,
        /// Lease of the schema lock; a crashed applier blocks others this long at most.
        #[arg(long, default_value = "120s", value_parser = parse_duration)]
        lock_lease: Duration,
        /// Apply migrations up to this version only.
        #[arg(long)]
        up_to: Option<u32>,
    },
    /// Show every migration and where it stands; exit 3 if any is pending.
    Status {
        #[command(flatten)]
        table: TableArgs,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// What shapes the table; the same flags for every subcommand.
#[derive(Debug, clap::Args)]
struct TableArgs {
    #[arg(long, default_value = tracehouse_schema::model::DEFAULT_DATABASE)]
    database: String,
    #[arg(long, default_value = tracehouse_schema::model::DEFAULT_TABLE)]
    table: String,
    /// Attribute columns.
    #[arg(long, value_enum, default_value_t = Attributes::Map)]
    attributes: Attributes,
    /// JSON variant: leave out ResourceAttributesKeys / SpanAttributesKeys.
    #[arg(long)]
    no_attribute_keys: bool,
    /// Table engine.
    #[arg(long, value_enum, default_value_t = EngineKind::MergeTree)]
    engine: EngineKind,
    /// Cluster for ON CLUSTER (with --engine replicated).
    #[arg(long)]
    cluster: Option<String>,
    /// Keeper path of replicated tables.
    #[arg(long, default_value = Replication::DEFAULT_ZK_PATH)]
    zk_path: String,
    /// Replica name of replicated tables.
    #[arg(long, default_value = Replication::DEFAULT_REPLICA)]
    replica: String,
    /// Retention: days (30) or a duration (30d, 72h, 90m); "none" for no TTL.
    #[arg(long)]
    ttl: Option<String>,
    /// non_replicated_deduplication_window of MergeTree tables (idempotent retries): a
    /// floor, raised to what --partitions needs (0 turns deduplication off).
    #[arg(long, default_value_t = tracehouse_schema::model::DEFAULT_DEDUP_WINDOW)]
    dedup_window: u64,
    /// Partitions of every topic writing into the table, summed: the window is sized for
    /// them (tracehouse_schema::dedup_window; the collector warns at start when it is not).
    #[arg(long)]
    partitions: Option<u64>,
    /// The collectors' batch.linger_ms, for sizing the window with --partitions (default:
    /// the collector's own default linger, so the window fits collectors left at defaults).
    #[arg(long, default_value_t = tracehouse_collector::config::BatchConfig::default().linger_ms)]
    linger_ms: u64,
    /// Opt-in layout of Map tables: ResourceAttributeItems / SpanAttributeItems ALIAS
    /// columns with text indexes, for `has(SpanAttributeItems, 'k=v')` (ClickHouse 26.2+;
    /// tracehouse_schema::layouts). Leaving it out later keeps what was added.
    #[arg(long)]
    attribute_items: bool,
    /// Opt-in layout of Map tables: how Map columns are serialized in merged parts
    /// (`buckets`: ClickHouse 26.3+, one key read without the rest of the map).
    #[arg(long, value_enum, default_value_t = MapSerialization::Default)]
    map_serialization: MapSerialization,
}

/// Where ClickHouse is. The password comes only from CLICKHOUSE_PASSWORD: a flag
/// would show it in `ps`.
#[derive(Debug, clap::Args)]
struct ServerArgs {
    /// ClickHouse HTTP URL.
    #[arg(
        long = "clickhouse-url",
        env = "CLICKHOUSE_URL",
        hide_env_values = true
    )]
    url: Option<String>,
    /// ClickHouse user.
    #[arg(long, env = "CLICKHOUSE_USER", hide_env_values = true)]
    user: Option<String>,
    #[command(flatten)]
    tls: super::ClickHouseTlsArgs,
}

impl TableArgs {
    fn options(&self) -> Result<TableOptions, Error> {
        if self.cluster.is_some() && self.engine != EngineKind::ReplicatedMergeTree {
            return Err(Error::InvalidOptions(
                "--cluster is only used with --engine replicated".into(),
            ));
        }
        let settings = TableSettings {
            attributes: self.attributes,
            attribute_keys_columns: !self.no_attribute_keys,
            layouts: Layouts {
                attribute_items: self.attribute_items,
                map_serialization: self.map_serialization,
            },
            engine: self.engine,
            cluster: self.cluster.as_deref(),
            zk_path: &self.zk_path,
            replica: &self.replica,
            ttl: match self.ttl.as_deref().map(str::trim) {
                None | Some("none" | "off" | "0") => None,
                Some(s) => Some(s),
            },
            dedup_window: match self.partitions {
                Some(p) => tracehouse_schema::dedup_window::effective_window(
                    self.dedup_window,
                    tracehouse_schema::dedup_window::PipelineShape::new(
                        p,
                        std::time::Duration::from_millis(self.linger_ms),
                    )
                    .required_window(),
                ),
                None => self.dedup_window,
            },
            ..TableSettings::new(&self.database, &self.table)
        };
        TableOptions::try_from(&settings).map_err(|e| match e {
            SettingError::ClusterRequired => {
                Error::InvalidOptions("--engine replicated needs --cluster NAME".into())
            }
            other => other.into_error(),
        })
    }
}

impl ServerArgs {
    fn server(&self) -> Result<(Server, String), Error> {
        // clap already took the URL and user from the flags or the environment.
        let url = self.url.clone().filter(|u| !u.is_empty()).ok_or_else(|| {
            Error::InvalidOptions(
                "no ClickHouse URL: set CLICKHOUSE_URL or pass --clickhouse-url".into(),
            )
        })?;
        let config = ConnectionConfig {
            url: url.clone(),
            user: self.user.clone().filter(|u| !u.is_empty()),
            password: std::env::var(tracehouse_schema::client::ENV_PASSWORD)
                .ok()
                .filter(|p| !p.is_empty()),
            tls: self
                .tls
                .config()
                .map_err(|e| Error::InvalidOptions(format!("ClickHouse TLS: {e}")))?,
        };
        Ok((Server::new(&config)?, url))
    }
}

/// `90s`, `5m`, `1h`, or a bare number of seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("invalid duration {s:?} (use 90s, 5m, 1h)"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        _ => return Err(format!("invalid duration unit in {s:?} (use s, m or h)")),
    };
    Ok(Duration::from_secs(secs))
}

/// The exit code a library error maps to.
fn exit_code(e: &Error) -> u8 {
    match e {
        Error::InvalidIdentifier { .. } | Error::InvalidOptions(_) => EXIT_USAGE,
        Error::ChecksumMismatch { .. } | Error::UnknownMigration { .. } => EXIT_CHECKSUM,
        Error::LockTimeout { .. } | Error::LockLost { .. } => EXIT_LOCK,
        Error::ShapeMismatch { .. } => EXIT_SHAPE,
        Error::ClickHouse { .. } | Error::Protocol(_) | Error::Tls { .. } => EXIT_ERROR,
    }
}

fn fail(e: &Error) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(exit_code(e))
}

pub fn run(args: SchemaArgs) -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,tracehouse_schema=info".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    match runtime.block_on(dispatch(args.command)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => fail(&e),
    }
}

async fn dispatch(command: SchemaCommand) -> Result<u8, Error> {
    match command {
        SchemaCommand::Print { table, columns } => {
            let opts = table.options()?;
            if columns {
                for c in tracehouse_schema::insert_columns(&opts) {
                    println!("{} {}", c.name(), c.ch_type);
                }
            } else {
                print!("{}", migrations::script(&opts)?);
            }
            Ok(EXIT_OK)
        }
        SchemaCommand::Plan {
            table,
            server,
            check,
        } => {
            let opts = table.options()?;
            let (server, url) = server.server()?;
            let status = tracehouse_schema::status(&server, &opts).await?;
            print_status(&opts, &url, &status);
            status.check()?;
            let pending = status.pending().count();
            if pending == 0 {
                println!("nothing to do");
                Ok(EXIT_OK)
            } else {
                println!("{pending} migration(s) would be applied");
                Ok(if check { EXIT_PENDING } else { EXIT_OK })
            }
        }
        SchemaCommand::Status { table, server } => {
            let opts = table.options()?;
            let (server, url) = server.server()?;
            let status = tracehouse_schema::status(&server, &opts).await?;
            print_status(&opts, &url, &status);
            status.check()?;
            Ok(if status.is_up_to_date() {
                EXIT_OK
            } else {
                EXIT_PENDING
            })
        }
        SchemaCommand::Apply {
            table,
            server,
            lock_timeout,
            lock_lease,
            up_to,
        } => {
            let opts = table.options()?;
            let (server, url) = server.server()?;
            let options = ApplyOptions {
                lock: LockConfig {
                    lease: lock_lease,
                    timeout: lock_timeout,
                    ..LockConfig::default()
                },
                up_to,
                ..ApplyOptions::default()
            };
            let report = tracehouse_schema::apply(&server, &opts, &options).await?;
            if report.applied.is_empty() {
                println!("{}.{}: already up to date", opts.database, opts.table);
            }
            for a in &report.applied {
                println!("{:04} {} {}", a.version, a.name, a.mode.as_str());
                for n in &a.notes {
                    println!("      note: {n}");
                }
            }
            print_status(&opts, &url, &report.status);
            Ok(EXIT_OK)
        }
    }
}

fn print_status(opts: &TableOptions, url: &str, status: &Status) {
    let engine = match &opts.engine {
        Engine::MergeTree => "merge-tree".to_string(),
        Engine::Replicated(r) => format!("replicated on cluster {}", r.cluster),
        Engine::Null => "null".to_string(),
    };
    println!(
        "{}.{} at {url} ({engine}, {} attributes)",
        opts.database, opts.table, opts.attributes
    );
    for m in &status.migrations {
        let r = &m.migration;
        let state = match &m.state {
            State::Applied(rec) => format!(
                "{} {} by {}{}",
                rec.mode,
                rec.applied_at,
                rec.applied_by,
                if rec.records > 1 {
                    format!(" (WARNING: recorded {} times)", rec.records)
                } else {
                    String::new()
                }
            ),
            State::ChecksumMismatch(rec) => format!(
                "CHANGED since applied (ledger {}, now {})",
                short(&rec.checksum),
                short(&r.checksum)
            ),
            State::Pending(Action::Run) => "pending: run".into(),
            State::Pending(Action::Adopt { .. }) => "pending: adopt existing object".into(),
            State::Pending(Action::NoOp) => {
                "pending: nothing to run (this engine, or an opt-in layout not asked for)".into()
            }
            State::Pending(Action::Conflict { .. }) => {
                "BLOCKED: an existing object has another shape".into()
            }
        };
        println!("  {:04} {:<28} {state}", r.version, r.name);
        if let State::Pending(Action::Adopt { notes }) = &m.state {
            for n in notes {
                println!("        note: {n}");
            }
        }
        if let State::Pending(Action::Conflict { differences }) = &m.state {
            for d in differences {
                println!("        {d}");
            }
        }
    }
    for u in &status.unknown {
        println!(
            "  {:04} {:<28} applied by a newer release ({})",
            u.version, u.name, u.applied_by
        );
    }
}

fn short(checksum: &str) -> &str {
    checksum.get(..12).unwrap_or(checksum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: SchemaArgs,
    }

    fn options(argv: &[&str]) -> Result<TableOptions, Error> {
        let cli = Cli::try_parse_from(std::iter::once("schema").chain(argv.iter().copied()))
            .expect("flags parse");
        match cli.args.command {
            SchemaCommand::Print { table, .. } => table.options(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn flags_map_to_table_options() {
        let o = options(&[
            "print",
            "--database",
            "db",
            "--table",
            "t",
            "--attributes",
            "json",
            "--no-attribute-keys",
            "--ttl",
            "72h",
            "--dedup-window",
            "5",
        ])
        .unwrap();
        assert_eq!(o.database.as_str(), "db");
        assert_eq!(o.attributes, Attributes::Json);
        assert!(!o.attribute_keys_columns);
        assert_eq!(o.ttl.unwrap().to_string(), "3d");
        assert_eq!(o.dedup_window, 5);
        assert_eq!(options(&["print", "--ttl", "none"]).unwrap().ttl, None);
        // --partitions raises the window to what they need at the collector's default
        // linger (200 ms; issue 41 item 8): 2 × 2 × 96 × 90 s / 0.2 s.
        let sized = options(&["print", "--partitions", "96"]).unwrap();
        assert_eq!(sized.dedup_window, 172_800);
        let slow = options(&["print", "--partitions", "96", "--linger-ms", "1000"]).unwrap();
        assert_eq!(slow.dedup_window, 34_560);
        let floor = options(&["print", "--partitions", "1", "--dedup-window", "50000"]).unwrap();
        assert_eq!(floor.dedup_window, 50_000);
        // The opt-in layouts: off unless asked for; Map tables only.
        assert!(options(&["print"]).unwrap().layouts.is_default());
        let layouts = options(&[
            "print",
            "--attribute-items",
            "--map-serialization",
            "buckets",
        ])
        .unwrap()
        .layouts;
        assert!(layouts.attribute_items);
        assert_eq!(layouts.map_serialization, MapSerialization::Buckets);
        assert!(options(&["print", "--attributes", "json", "--attribute-items"]).is_err());
        assert_eq!(
            options(&["print", "--engine", "null"]).unwrap().engine,
            Engine::Null
        );
    }

    #[test]
    fn replicated_needs_a_cluster_and_cluster_needs_replicated() {
        let o = options(&["print", "--engine", "replicated", "--cluster", "c"]).unwrap();
        assert!(matches!(o.engine, Engine::Replicated(ref r) if r.cluster.as_str() == "c"));
        let e = options(&["print", "--engine", "replicated"]).unwrap_err();
        assert_eq!(exit_code(&e), EXIT_USAGE);
        assert!(e.to_string().contains("--cluster"));
        let e = options(&["print", "--cluster", "c"]).unwrap_err();
        assert_eq!(exit_code(&e), EXIT_USAGE);
    }

    #[test]
    fn bad_names_and_ttl_are_usage_errors() {
        let e = options(&["print", "--table", ""]).unwrap_err();
        assert_eq!(exit_code(&e), EXIT_USAGE);
        assert!(e.to_string().contains("invalid table name"));
        let e = options(&["print", "--ttl", "3 weeks"]).unwrap_err();
        assert_eq!(exit_code(&e), EXIT_USAGE);
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn exit_codes_are_distinct_per_failure_kind() {
        let codes = [
            exit_code(&Error::InvalidOptions(String::new())),
            exit_code(&Error::Protocol(String::new())),
            exit_code(&Error::UnknownMigration {
                target: String::new(),
                version: 9,
                name: String::new(),
            }),
            exit_code(&Error::LockTimeout {
                scope: String::new(),
                waited: Duration::ZERO,
                holder: String::new(),
            }),
            exit_code(&Error::ShapeMismatch {
                object: String::new(),
                differences: vec![],
            }),
        ];
        assert_eq!(
            codes,
            [EXIT_USAGE, EXIT_ERROR, EXIT_CHECKSUM, EXIT_LOCK, EXIT_SHAPE]
        );
    }
}
