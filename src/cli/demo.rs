//! `plegd demo`: the simulated runtime with churn and the sidecar against it over a
//! real unix socket, printing lifecycle events as they are published.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cli::OutputFormat;
use crate::config::RunConfig;
use crate::sim::SimRuntime;
use crate::sim::churn::{Churn, ChurnConfig};

/// What the demo does.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Churn.
    pub churn: ChurnConfig,
    /// Relist period.
    pub relist_period: Duration,
    /// Admin address.
    pub admin_addr: std::net::SocketAddr,
    /// Output format.
    pub output: OutputFormat,
}

/// Errors of the demo.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The scratch directory or a socket could not be made.
    #[error("demo setup failed: {0}")]
    Setup(String),
    /// The sidecar could not start.
    #[error(transparent)]
    App(#[from] crate::app::AppError),
}

/// What the demo saw.
#[derive(Clone, Debug, Default)]
pub struct DemoSummary {
    /// Events by type.
    pub by_type: BTreeMap<&'static str, u64>,
    /// Latencies of the changes plegd saw as they happened (after its first read of
    /// the runtime, whose events report how long the pods had been there), in
    /// milliseconds: what the lines printed.
    pub latencies_ms: Vec<f64>,
    /// Pods cached at the end.
    pub pods_cached: usize,
}

/// Runs the demo until `duration` passes or `shutdown` is cancelled.
pub async fn run(cfg: DemoConfig, shutdown: CancellationToken) -> Result<DemoSummary, DemoError> {
    let dir = scratch_dir()?;
    let sim_sock = dir.join("cri.sock");
    let listener = crate::uds::bind(&sim_sock, 0o660).await.map_err(|e| DemoError::Setup(e.to_string()))?;
    let sim = SimRuntime::new();
    let tracker = TaskTracker::new();
    let inner = shutdown.child_token();
    tracker.spawn(crate::sim::server::serve(sim.clone(), listener, inner.clone()));
    tracker.spawn(Churn::new(sim.clone(), cfg.churn.clone()).run(inner.clone()));

    let endpoint = format!("unix://{}", sim_sock.display());
    let mut run_cfg = RunConfig::for_endpoint(&endpoint).map_err(|e| DemoError::Setup(e.to_string()))?;
    run_cfg.pleg.relist_period = cfg.relist_period;
    run_cfg.admin.addr = cfg.admin_addr;
    run_cfg.api.socket = dir.join("plegd.sock");
    // The journal on disk, as in production, in the demo's scratch dir.
    run_cfg.state_dir = Some(dir.join("state"));
    let sidecar = crate::app::start(&run_cfg, &tracker, &inner).await?;
    let journal = sidecar.journal().clone();
    let node = crate::model::identity::Identities::new(&run_cfg.api.node_name, std::time::Duration::ZERO);
    let live = |j: &crate::journal::Journal| {
        j.subscribe(crate::journal::Since::Revision(j.revision(), j.epoch()), Default::default()).into_feed().1
    };
    let mut events = live(&journal);
    // The first full relist's events tell pods that were there before plegd: their
    // latency is plegd's start-up, not how fast it sees a change.
    let _ = tokio::time::timeout(Duration::from_secs(5), journal.primed()).await;
    let first_read = journal.revision();
    eprintln!(
        "plegd demo: simulated runtime with {} pods × {} containers, {} changes/s",
        cfg.churn.pods, cfg.churn.containers_per_pod, cfg.churn.churn_per_sec
    );
    eprintln!("  runtime socket  {endpoint}");
    eprintln!("  metrics         http://{}/metrics", sidecar.admin_addr());
    eprintln!(
        "  health          http://{}/healthz   readiness http://{}/readyz",
        sidecar.admin_addr(),
        sidecar.admin_addr()
    );
    eprintln!("  debug           http://{}/debug/pods", sidecar.debug_addr());
    let api = format!("unix://{}", sidecar.api_socket().display());
    eprintln!("  gRPC API        {api}   (try: plegd watch --socket {api})");
    eprintln!(
        "  stop with Ctrl-C{}",
        cfg.duration.map(|d| format!(" (or after {})", humantime::format_duration(d))).unwrap_or_default()
    );
    if cfg.output == OutputFormat::Text {
        println!(
            "{:<12}  {:<18}  {:<10}  {:<32}  {:<14}  {:<12}  latency",
            "time", "event", "source", "pod", "container", "id"
        );
    }

    let deadline = async {
        match cfg.duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let mut summary = DemoSummary::default();
    let stdout = std::io::stdout();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = &mut deadline => break,
            ev = events.next() => match ev {
                Some(crate::journal::FeedItem::Entry(entry)) => {
                    let ev = &entry.event;
                    *summary.by_type.entry(ev.kind.as_str()).or_default() += 1;
                    if let Some(l) = ev.latency().filter(|_| entry.revision > first_read) {
                        summary.latencies_ms.push(l.as_secs_f64() * 1e3);
                    }
                    let api = ev.to_api(&node);
                    let line = match cfg.output {
                        OutputFormat::Text => crate::cli::client::format_event(&api),
                        OutputFormat::Json => crate::cli::client::event_json(&api).to_string(),
                    };
                    let mut out = stdout.lock();
                    if writeln!(out, "{line}").is_err() {
                        break;
                    }
                }
                Some(_) | None => {
                    eprintln!("(the terminal fell behind; skipping to the newest events)");
                    events = live(&journal);
                }
            }
        }
    }
    summary.pods_cached = sidecar.cache().len();
    let evented = sidecar.stream().borrow().is_up();
    inner.cancel();
    tracker.close();
    let _ = tokio::time::timeout(Duration::from_secs(5), tracker.wait()).await;
    let _ = std::fs::remove_dir_all(&dir);
    print_summary(&summary, evented);
    Ok(summary)
}

fn scratch_dir() -> Result<PathBuf, DemoError> {
    let dir = std::env::temp_dir().join(format!("plegd-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| DemoError::Setup(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

fn print_summary(s: &DemoSummary, evented: bool) {
    let total: u64 = s.by_type.values().sum();
    eprintln!("\nplegd demo: {total} events, {} pods cached at the end", s.pods_cached);
    for (k, v) in &s.by_type {
        eprintln!("  {k:<18} {v}");
    }
    if !s.latencies_ms.is_empty() {
        let mut l = s.latencies_ms.clone();
        l.sort_by(|a, b| a.total_cmp(b));
        let pct = |p: f64| l[((l.len() - 1) as f64 * p).round() as usize];
        eprintln!(
            "  latency from the runtime's change to publication, {} changes after plegd's first read: p50 {:.1}ms  p99 {:.1}ms  max {:.1}ms ({})",
            l.len(),
            pct(0.5),
            pct(0.99),
            l[l.len() - 1],
            if evented {
                "evented mode: the CRI event stream triggers a targeted relist of the pod"
            } else {
                "relist mode: bounded by the relist period"
            }
        );
    }
}
