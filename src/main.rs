//! The `plegd` binary: parse arguments, set up logging, validate the config, run the
//! chosen command, shut down gracefully, and exit with a meaningful status.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use plegd::cli::{self, Cli, Command};
use plegd::config::RunConfig;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Exit status for usage errors (sysexits' EX_USAGE).
const EX_USAGE: u8 = 64;
/// How long tasks get to finish after a shutdown signal.
const GRACE: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.worker_threads.into())
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("plegd: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(cli))
}

/// Help and version go to stdout with status 0; every other parse error is one line
/// naming the flag, with status 64.
fn clap_exit(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                ExitCode::from(EX_USAGE)
            } else {
                ExitCode::SUCCESS
            }
        }
        _ => usage(e.to_string().lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ")),
    }
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("plegd: {msg}");
    ExitCode::from(EX_USAGE)
}

async fn run(cli: Cli) -> ExitCode {
    let log = match &cli.command {
        Command::Run(a) => &a.log,
        Command::Demo(a) => &a.log,
        Command::Sim(a) => &a.log,
        Command::Watch(a) => &a.log,
        Command::Pods(a) => &a.log,
        Command::Get(a) => &a.log,
    };
    let default_level = match cli.command {
        Command::Demo(_) | Command::Watch(_) | Command::Pods(_) | Command::Get(_) => "warn",
        _ => "info",
    };
    if let Err(e) = plegd::telemetry::init(log, default_level) {
        return usage(&e.to_string());
    }
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    // Outside the tracker: it must keep listening for a second signal while the
    // tracker drains, and it stops when `exited` is cancelled.
    let exited = CancellationToken::new();
    let signal_task = tokio::spawn(signals(shutdown.clone(), exited.clone()));

    let status = match cli.command {
        Command::Run(args) => {
            let cfg = match RunConfig::try_from(&args) {
                Ok(c) => c,
                Err(e) => return usage(&e.to_string()),
            };
            match plegd::app::start(&cfg, &tracker, &shutdown).await {
                Ok(_sidecar) => {
                    shutdown.cancelled().await;
                    ExitCode::SUCCESS
                }
                Err(e) if e.is_usage() => return usage(&e.to_string()),
                // A SIGTERM while it waited for the state dir: a clean exit.
                Err(plegd::app::AppError::Interrupted) => {
                    tracing::info!("shut down before it had started (while waiting for the state dir)");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("plegd: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Demo(args) => {
            let churn = match cli::churn_config(&args.churn) {
                Ok(c) => c,
                Err(e) => return usage(&e.to_string()),
            };
            let cfg = plegd::cli::demo::DemoConfig {
                duration: args.duration,
                churn,
                relist_period: args.relist_period,
                admin_addr: args.admin_addr,
                output: args.output,
            };
            match plegd::cli::demo::run(cfg, shutdown.clone()).await {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("plegd: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Watch(args) => {
            let opts = plegd::cli::client::WatchOptions {
                since: args.since,
                filter: args.client.filter(),
                types: args.types.iter().map(|t| t.to_api()).collect(),
                json: args.client.output == cli::OutputFormat::Json,
                show_snapshot: args.show_snapshot,
                epoch: args.epoch,
                verify: args.verify,
            };
            client_exit(plegd::cli::client::watch(&args.client.socket, opts, shutdown.clone()).await)
        }
        Command::Pods(args) => {
            client_exit(plegd::cli::client::pods(&args.client.socket, args.client.filter(), args.client.output).await)
        }
        Command::Get(args) => client_exit(plegd::cli::client::get(&args.socket, args.key(), args.output).await),
        Command::Sim(args) => {
            let churn = match cli::churn_config(&args.churn) {
                Ok(c) => c,
                Err(e) => return usage(&e.to_string()),
            };
            let served = if args.trouble {
                plegd::cli::trouble::serve(&args.listen, churn, args.events, &tracker, shutdown.clone()).await
            } else {
                let root = args.host_root.clone();
                plegd::sim::serve_cli(&args.listen, churn, args.events, root, &tracker, shutdown.clone()).await
            };
            match served {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("plegd: {e}");
                    ExitCode::from(EX_USAGE)
                }
            }
        }
    };
    shutdown.cancel();
    tracker.close();
    if tokio::time::timeout(GRACE, tracker.wait()).await.is_err() {
        tracing::warn!("tasks did not stop within {GRACE:?}; exiting anyway");
    }
    exited.cancel();
    let _ = signal_task.await;
    status
}

fn client_exit(res: Result<(), plegd::cli::client::ClientError>) -> ExitCode {
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_usage() => usage(&e.to_string()),
        Err(e) => {
            eprintln!("plegd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Cancels `shutdown` on the first SIGINT or SIGTERM; exits at once on the second,
/// unless the process finished exiting first.
async fn signals(shutdown: CancellationToken, exited: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    tokio::select! {
        _ = shutdown.cancelled() => return,
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down (send the signal again to exit at once)");
    shutdown.cancel();
    tokio::select! {
        _ = exited.cancelled() => return,
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    std::process::exit(130);
}
