//! Logging setup: text or JSON lines on stderr, filtered by `--log-level` or `RUST_LOG`.

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogArgs, LogFormat};

/// Installs the global subscriber. Errors name the bad filter.
///
/// Filters are `RUST_LOG`-style directives (`warn`, `info,plegd::pleg=debug`); span-field
/// filters are not supported, which keeps a regex engine out of the binary.
pub fn init(args: &LogArgs, default_level: &str) -> Result<(), TelemetryError> {
    let bad = |from| move |source| TelemetryError::Filter { from, source };
    let filter: Targets = match &args.log_level {
        Some(level) => level.parse().map_err(bad("value for --log-level"))?,
        None => match std::env::var("RUST_LOG") {
            Ok(v) if !v.is_empty() => v.parse().map_err(bad("RUST_LOG"))?,
            _ => default_level.parse().map_err(bad("default log level"))?,
        },
    };
    use std::io::IsTerminal;
    // The builder's own level (INFO unless told) would cap the filter below it: found when
    // `plegd=debug` printed no debug line. The filter alone decides.
    let builder = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let res = match args.log_format {
        LogFormat::Text => builder.finish().with(filter).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).finish().with(filter).try_init(),
    };
    res.map_err(TelemetryError::Install)
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A filter that does not parse.
    #[error("invalid {from}: {source}")]
    Filter {
        /// Where it came from.
        from: &'static str,
        /// Why.
        source: tracing_subscriber::filter::ParseError,
    },
    /// A logger was installed already.
    #[error("cannot install the logger: {0}")]
    Install(#[source] tracing_subscriber::util::TryInitError),
}
