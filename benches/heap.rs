//! Heap of a whole plegd, counted by dhat's allocator: the bytes and blocks live at the
//! end of the run and at the peak. `cargo bench --bench heap -- [--pods 1000]
//! [--watchers 10] [--seconds 20] [--churn 0] [--journal-capacity 100000] [--profile 1]`.
//!
//! plegd runs in this process on one worker thread, as `plegd run` does by default; the
//! simulated runtime (`--pods` × 5 containers, `--churn` changes a second) and the
//! watchers are `plegd sim` and `plegd watch` processes, so only plegd's own allocations
//! are counted. At idle the figure explains the `idle` bench's RSS, which is these bytes
//! plus the allocator's per-block overhead and free space, the binary's text and the
//! thread stacks; with churn it shows what each event kept by the journal and the
//! history costs. With `--profile 1`
//! it also writes `dhat-heap.json`, which DHAT's viewer
//! (<https://nnethercote.github.io/dh_view/dh_view.html>) breaks down by allocation site.
#![allow(missing_docs)]

mod support;

use std::time::Duration;

use clap::Parser;
use support::{arg, run_args, sim, spawn};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (pods, watchers, secs) =
        (arg(&args, "--pods", 1000usize), arg(&args, "--watchers", 10usize), arg(&args, "--seconds", 20u64));
    let (churn, capacity) = (arg(&args, "--churn", 0.0f64), arg(&args, "--journal-capacity", 100_000usize));
    let profile = arg(&args, "--profile", 0u8) == 1;
    let _profiler = if profile { dhat::Profiler::new_heap() } else { dhat::Profiler::builder().testing().build() };

    let dir = tempfile::tempdir().unwrap();
    let (_sim, cri) = sim(dir.path(), pods, 5, churn);
    let api = format!("unix://{}", dir.path().join("plegd.sock").display());

    let capacity_arg = capacity.to_string();
    let state = dir.path().join("state").display().to_string();
    let cli = plegd::cli::Cli::parse_from(
        std::iter::once("plegd")
            .chain(run_args(&cri, &api, "generic", &state))
            .chain(["--journal-capacity", capacity_arg.as_str()]),
    );
    let plegd::cli::Command::Run(run_args) = cli.command else { unreachable!("parsed a run command") };
    let cfg = plegd::config::RunConfig::try_from(&run_args).expect("valid run config");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let (stats, events) = runtime.block_on(async {
        let sidecar = plegd::app::start(&cfg, &tracker, &shutdown).await.expect("plegd starts");
        let _watchers: Vec<_> = (0..watchers).map(|_| spawn(&["watch", "--socket", &api])).collect();
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let stats = dhat::HeapStats::get();
        let events = sidecar.journal().revision();
        shutdown.cancel();
        tracker.close();
        (stats, events)
    });
    let mib = |b: usize| b as f64 / 1048576.0;
    println!(
        "heap: {pods} pods × 5 containers, {churn} changes/s, {watchers} watchers, after {secs} s and {events} events: \
         live {:.2} MiB in {} blocks; peak {:.2} MiB in {} blocks",
        mib(stats.curr_bytes),
        stats.curr_blocks,
        mib(stats.max_bytes),
        stats.max_blocks
    );
}
