//! Runs the command the command line chose, and says how it ended in one type: done, or
//! a [`Failure`] that is the user's (exit status 64) or not (1). `main` turns it into the
//! process's exit status in one place.

use std::fmt::Display;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Command, OutputFormat, churn_config};
use crate::config::RunConfig;

/// How a command failed.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    /// The command line is at fault (a flag's value, a socket path): exit status 64.
    pub usage: bool,
    /// One line for standard error.
    pub message: String,
}

impl Failure {
    /// The command line's fault.
    pub fn usage(e: impl Display) -> Self {
        Self { usage: true, message: e.to_string() }
    }

    /// Anything else.
    pub fn failed(e: impl Display) -> Self {
        Self { usage: false, message: e.to_string() }
    }
}

impl From<crate::cli::client::ClientError> for Failure {
    fn from(e: crate::cli::client::ClientError) -> Self {
        Self { usage: e.is_usage(), message: e.to_string() }
    }
}

impl From<crate::app::AppError> for Failure {
    fn from(e: crate::app::AppError) -> Self {
        Self { usage: e.is_usage(), message: e.to_string() }
    }
}

/// Runs `command` until it ends or `shutdown` is cancelled; its tasks go into `tracker`.
pub async fn execute(command: Command, tracker: &TaskTracker, shutdown: &CancellationToken) -> Result<(), Failure> {
    match command {
        Command::Run(args) => {
            let cfg = RunConfig::try_from(&args).map_err(Failure::usage)?;
            if args.check_config {
                println!("plegd: the configuration is valid");
                return Ok(());
            }
            match crate::app::start(&cfg, tracker, shutdown).await {
                Ok(sidecar) => {
                    shutdown.cancelled().await;
                    match sidecar.fatal() {
                        Some(fatal) => Err(Failure::failed(fatal)),
                        None => Ok(()),
                    }
                }
                // A SIGTERM while it waited for the state dir: a clean exit.
                Err(crate::app::AppError::Interrupted) => {
                    tracing::info!("shut down before it had started (while waiting for the state dir)");
                    Ok(())
                }
                Err(e) => Err(e.into()),
            }
        }
        Command::Demo(args) => {
            let cfg = crate::cli::demo::DemoConfig {
                duration: args.duration,
                churn: churn_config(&args.churn).map_err(Failure::usage)?,
                relist_period: args.relist_period,
                admin_addr: args.admin_addr,
                output: args.output,
            };
            crate::cli::demo::run(cfg, shutdown.clone()).await.map(drop).map_err(Failure::failed)
        }
        Command::Watch(args) => {
            let opts = crate::cli::client::WatchOptions {
                since: args.since,
                filter: args.client.filter(),
                types: args.types.iter().map(|t| t.to_api()).collect(),
                json: args.client.output == OutputFormat::Json,
                show_snapshot: args.show_snapshot,
                epoch: args.epoch,
                verify: args.verify,
            };
            Ok(crate::cli::client::watch(&args.client.socket, opts, shutdown.clone()).await?)
        }
        Command::Pods(args) => {
            Ok(crate::cli::client::pods(&args.client.socket, args.client.filter(), args.client.output).await?)
        }
        Command::Get(args) => {
            let at = args.at.map(crate::model::system_to_timestamp);
            Ok(crate::cli::client::get(&args.socket, args.key(), at, args.output).await?)
        }
        Command::Sim(args) => {
            let churn = churn_config(&args.churn).map_err(Failure::usage)?;
            let served = if args.trouble {
                crate::cli::trouble::serve(&args.listen, churn, args.events, tracker, shutdown.clone()).await
            } else {
                let root = args.host_root.clone();
                let pods_api = args.pods_api.clone();
                crate::sim::serve_cli(&args.listen, churn, args.events, root, pods_api, tracker, shutdown.clone()).await
            };
            // The simulator fails only on its socket: the flag's value.
            served.map_err(Failure::usage)
        }
    }
}

impl Command {
    /// The command's logging flags.
    pub fn log(&self) -> &crate::config::LogArgs {
        match self {
            Self::Run(a) => &a.log,
            Self::Demo(a) => &a.log,
            Self::Sim(a) => &a.log,
            Self::Watch(a) => &a.log,
            Self::Pods(a) => &a.log,
            Self::Get(a) => &a.log,
        }
    }

    /// The log level when none is given: the client commands and the demo print their
    /// own output and log warnings only.
    pub fn default_log_level(&self) -> &'static str {
        match self {
            Self::Demo(_) | Self::Watch(_) | Self::Pods(_) | Self::Get(_) => "warn",
            Self::Run(_) | Self::Sim(_) => "info",
        }
    }
}
