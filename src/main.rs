//! The `plegd` binary: parse the command line, start the async runtime and logging, run
//! the command (`cli::execute`), drain its tasks on shutdown, and turn how it ended into
//! the exit status — 0, 64 for the command line's fault, 1 otherwise — in one place.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use plegd::cli::{Cli, Failure};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Exit status for usage errors (sysexits' EX_USAGE).
const EX_USAGE: u8 = 64;
/// How long tasks get to finish after a shutdown signal.
const GRACE: Duration = Duration::from_secs(10);
/// How long the runtime's blocking threads get after the tasks have ended.
const BLOCKING_GRACE: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    // Before any thread exists: the allocator's arenas are set when threads first
    // allocate (`memory::tune` says why).
    plegd::memory::tune();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(cli.worker_threads.into()).enable_all().build();
    let res = match runtime {
        Ok(rt) => {
            let res = rt.block_on(run(cli));
            // A blocking task that never returns (a read or write on a disk that hangs)
            // must not hold the exit: dropping the runtime would wait for it forever.
            rt.shutdown_timeout(BLOCKING_GRACE);
            res
        }
        Err(e) => Err(Failure::failed(format!("cannot start the async runtime: {e}"))),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            say(&format!("plegd: {f}"));
            if f.usage { ExitCode::from(EX_USAGE) } else { ExitCode::FAILURE }
        }
    }
}

/// One line on stderr; a stderr nobody reads any more is no reason to panic on the way out.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Help and version go to stdout with status 0 (help for a missing subcommand: 64);
/// every other parse error is one line naming the flag, with status 64.
fn clap_exit(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(EX_USAGE)
        }
        _ => {
            let msg = e.to_string();
            say(&format!("plegd: {}", msg.lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ")));
            ExitCode::from(EX_USAGE)
        }
    }
}

/// Runs the command with logging set up, stops on the first SIGINT or SIGTERM, and
/// gives its tasks [`GRACE`] to finish.
async fn run(cli: Cli) -> Result<(), Failure> {
    let log = plegd::telemetry::init(cli.command.log(), cli.command.default_log_level()).map_err(Failure::usage)?;
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    // Outside the tracker: it must keep listening for a second signal while the
    // tracker drains, and it stops when `exited` is cancelled.
    let exited = CancellationToken::new();
    let signal_task = tokio::spawn(signals(shutdown.clone(), exited.clone()));
    let res = plegd::cli::execute(cli.command, &tracker, &shutdown).await;
    shutdown.cancel();
    tracker.close();
    if tokio::time::timeout(GRACE, tracker.wait()).await.is_err() {
        tracing::warn!("tasks did not stop within {GRACE:?}; exiting anyway");
    }
    exited.cancel();
    let _ = signal_task.await;
    log.flush(Duration::from_secs(1));
    res
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
    shutdown.cancel();
    tracing::info!("shutting down (send the signal again to exit at once)");
    tokio::select! {
        _ = exited.cancelled() => return,
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    std::process::exit(130);
}
