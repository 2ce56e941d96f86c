//! Logging setup: text or JSON lines on stderr, filtered by `--log-level` or `RUST_LOG`.

use tracing_subscriber::EnvFilter;

use crate::config::{LogArgs, LogFormat};

/// Installs the global subscriber. Errors name the bad filter.
pub fn init(args: &LogArgs, default_level: &str) -> Result<(), String> {
    let filter = match &args.log_level {
        Some(level) => EnvFilter::try_new(level).map_err(|e| format!("invalid value for --log-level: {e}"))?,
        None => match std::env::var("RUST_LOG") {
            Ok(v) if !v.is_empty() => EnvFilter::try_new(&v).map_err(|e| format!("invalid RUST_LOG: {e}"))?,
            _ => EnvFilter::new(default_level),
        },
    };
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let res = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    res.map_err(|e| format!("cannot install the logger: {e}"))
}
