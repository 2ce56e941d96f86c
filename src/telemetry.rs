//! Logging setup: text or JSON lines on stderr, filtered by `--log-level` or `RUST_LOG`.

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogArgs, LogFormat};

/// Installs the global subscriber. Errors name the bad filter.
///
/// Filters are `RUST_LOG`-style directives (`warn`, `info,plegd::pleg=debug`); span-field
/// filters are not supported, which keeps a regex engine out of the binary.
pub fn init(args: &LogArgs, default_level: &str) -> Result<(), String> {
    let filter: Targets = match &args.log_level {
        Some(level) => level.parse().map_err(|e| format!("invalid value for --log-level: {e}"))?,
        None => match std::env::var("RUST_LOG") {
            Ok(v) if !v.is_empty() => v.parse().map_err(|e| format!("invalid RUST_LOG: {e}"))?,
            _ => default_level.parse().map_err(|e| format!("invalid default log level: {e}"))?,
        },
    };
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(std::io::stderr().is_terminal());
    let res = match args.log_format {
        LogFormat::Text => builder.finish().with(filter).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).finish().with(filter).try_init(),
    };
    res.map_err(|e| format!("cannot install the logger: {e}"))
}
