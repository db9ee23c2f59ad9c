//! Subcommands of the collector binary, one module each.

pub mod run;
pub mod schema;
pub mod serve_health;
