//! End-to-end benchmark: plegd with N watchers, reporting latency from a change in the
//! runtime to its event at each watcher (p50 / p99 / max), events per second with zero
//! loss, and plegd's CPU and RSS. `cargo bench --bench e2e -- MODE [options]`:
//!
//! * `churn`     — `plegd sim` with churn and `plegd run` as separate processes, N gRPC
//!   watchers; latency = watcher receipt − the runtime's timestamp.
//! * `idle`      — 1,000 pods × 5 containers, no churn, relist every 1 s: plegd's CPU
//!   share and RSS with 10 watchers; `--durable 0` keeps the journal in memory.
//! * `fanout`    — events appended to plegd's journal at a fixed rate, N gRPC watchers:
//!   delivery latency and loss of the API path at load. `--lean 1` makes the watchers
//!   decode only what the bench reads (revision, kind, timestamp) and skip the pod, so
//!   that on a small machine the clients leave plegd more of the cores. `--split 1`
//!   runs the watchers in a child process pinned to CPU 1 and pins plegd (this
//!   process) to CPU 0, to see what plegd sustains on one core of its own.
//! * `containerd`— against a real containerd (`PLEGD_E2E_ENDPOINT`): pods started in a
//!   loop; a raw GetContainerEvents client is the floor, and plegd's latency (at
//!   its journal, where the event is published, and at a gRPC watcher) is reported
//!   as the difference to it. `--durable 0` keeps the journal in memory (default 1:
//!   on disk, committed before delivery).
//! * `cri-calls` — against a real containerd: what one hinted read costs when the
//!   runtime is quiet, each call alone and all at once.
//! * `runtime-cost` — against a real containerd: how long `RunPodSandbox`,
//!   `CreateContainer`, `StartContainer` and the pod's stop + removal take with no plegd,
//!   with plegd (on one worker thread, as deployed, journal on disk), and with plegd
//!   under its heaviest fan-out load (`--watchers` clients in a child process taking
//!   `--rate` synthetic events/s each, on top of the runtime's), and — the control — the
//!   same load on a plegd watching a simulated runtime; passes interleaved over
//!   `--rounds`, reported as ratios to no plegd.
#![allow(missing_docs)]

mod support;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt as _;
use plegd::proto::plegd as api;
use plegd::proto::plegd::watch_event::Kind;
use support::{Proc, arg, run_args, sim, spawn, wait_path};

/// CPU seconds and RSS bytes of a process.
fn usage(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
    let ticks = |n: usize| f.get(n - 3).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let cpu = (ticks(14) + ticks(15)) / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        * 1024.0;
    (cpu, rss)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn ts(t: &prost_types::Timestamp) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::new(t.seconds as u64, t.nanos as u32)
}

/// What one watcher saw.
#[derive(Default)]
struct Seen {
    latencies_ms: Vec<f64>,
    events: u64,
    gaps: u64,
    resets: u64,
}

/// What a watcher reads off one message.
enum Got {
    Synced,
    Reset,
    /// An event, with the time it is measured from.
    Event(Option<SystemTime>),
    Other,
}

/// Reads a watch stream until `until`, counting events, gaps and resets.
async fn watch_loop<M>(mut s: tonic::Streaming<M>, until: Instant, classify: impl Fn(&M) -> (u64, Got)) -> Seen {
    let mut seen = Seen::default();
    let mut last = None;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let Ok(Ok(Some(m))) = tokio::time::timeout(left, s.message()).await else { break };
        let now = SystemTime::now();
        match classify(&m) {
            (revision, Got::Synced) => last = Some(revision),
            (_, Got::Reset) => seen.resets += 1,
            (revision, Got::Event(at)) => {
                if let Some(l) = last
                    && revision != l + 1
                {
                    seen.gaps += 1;
                }
                last = Some(revision);
                seen.events += 1;
                if let Some(d) = at.and_then(|t| now.duration_since(t).ok()) {
                    seen.latencies_ms.push(d.as_secs_f64() * 1e3);
                }
            }
            (_, Got::Other) => {}
        }
    }
    seen
}

async fn watcher(socket: String, until: Instant, use_observed: bool) -> Seen {
    let mut c = plegd::cli::client::connect(&socket).expect("socket");
    let s = c.watch(api::WatchRequest::default()).await.expect("watch").into_inner();
    watch_loop(s, until, |m: &api::WatchEvent| {
        let got = match &m.kind {
            Some(Kind::Synced(_)) => Got::Synced,
            Some(Kind::Reset(_)) => Got::Reset,
            Some(Kind::Event(e)) => {
                Got::Event(if use_observed { e.observed_at.as_ref() } else { e.runtime_timestamp.as_ref() }.map(ts))
            }
            _ => Got::Other,
        };
        (m.revision, got)
    })
    .await
}

/// The part of a `WatchEvent` a lean watcher decodes; prost skips the rest (the pod,
/// the strings) without allocating.
#[derive(Clone, PartialEq, prost::Message)]
struct LeanWatchEvent {
    #[prost(uint64, tag = "1")]
    revision: u64,
    #[prost(message, optional, tag = "3")]
    synced: Option<Nothing>,
    #[prost(message, optional, tag = "4")]
    event: Option<LeanEvent>,
    #[prost(message, optional, tag = "5")]
    reset: Option<Nothing>,
}

/// A `LifecycleEvent`'s observation time only.
#[derive(Clone, PartialEq, prost::Message)]
struct LeanEvent {
    #[prost(message, optional, tag = "9")]
    observed_at: Option<prost_types::Timestamp>,
}

/// Any message, fields skipped.
#[derive(Clone, PartialEq, prost::Message)]
struct Nothing {}

/// A watcher over the same gRPC `Watch` call that decodes `LeanWatchEvent`s.
async fn lean_watcher(socket: String, until: Instant) -> Seen {
    let path = plegd::uds::parse_unix_endpoint(&socket).expect("socket");
    let mut grpc = tonic::client::Grpc::new(plegd::uds::lazy_channel(path));
    grpc.ready().await.expect("ready");
    let codec = tonic_prost::ProstCodec::<api::WatchRequest, LeanWatchEvent>::default();
    let method = tonic::codegen::http::uri::PathAndQuery::from_static("/plegd.v1.PodLifecycle/Watch");
    let req = tonic::Request::new(api::WatchRequest::default());
    let s = grpc.server_streaming(req, method, codec).await.expect("watch").into_inner();
    watch_loop(s, until, |m: &LeanWatchEvent| {
        let got = if m.synced.is_some() {
            Got::Synced
        } else if m.reset.is_some() {
            Got::Reset
        } else if let Some(e) = &m.event {
            Got::Event(e.observed_at.as_ref().map(ts))
        } else {
            Got::Other
        };
        (m.revision, got)
    })
    .await
}

fn report(mode: &str, watchers: usize, secs: f64, all: Vec<Seen>, cpu: Option<(f64, f64)>) {
    let events: u64 = all.iter().map(|s| s.events).sum();
    let gaps: u64 = all.iter().map(|s| s.gaps).sum();
    let resets: u64 = all.iter().map(|s| s.resets).sum();
    let per_watcher = events as f64 / watchers.max(1) as f64 / secs;
    let mut lat: Vec<f64> = all.into_iter().flat_map(|s| s.latencies_ms).collect();
    let (p50, p99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99));
    let max = lat.last().copied().unwrap_or(f64::NAN);
    println!(
        "{mode}: {watchers} watchers, {per_watcher:.0} events/s per watcher ({events} delivered), gaps {gaps}, resets {resets}; latency p50 {p50:.2} ms p99 {p99:.2} ms max {max:.2} ms"
    );
    if let Some((cpu_share, rss)) = cpu {
        println!("{mode}: plegd CPU {:.2}% of a core, RSS {:.1} MiB", cpu_share * 100.0, rss / 1048576.0);
    }
}

/// `plegd sim` + `plegd run` as processes; returns them and plegd's API socket.
fn processes(dir: &std::path::Path, pods: usize, cpp: usize, churn: f64, mode: &str) -> (Proc, Proc, String) {
    processes_with(dir, pods, cpp, churn, mode, true)
}

/// [`processes`], with the journal on a state dir (`durable`) or in memory.
fn processes_with(
    dir: &std::path::Path,
    pods: usize,
    cpp: usize,
    churn: f64,
    mode: &str,
    durable: bool,
) -> (Proc, Proc, String) {
    let (sim, cri) = sim(dir, pods, cpp, churn);
    let api = format!("unix://{}", dir.join("plegd.sock").display());
    let state = if durable { dir.join("state").display().to_string() } else { String::new() };
    let run = spawn(&run_args(&cri, &api, mode, &state));
    wait_path(&dir.join("plegd.sock"));
    (sim, run, api)
}

async fn churn(args: &[String]) {
    let (watchers, pods, rate, secs) = (
        arg(args, "--watchers", 10usize),
        arg(args, "--pods", 200usize),
        arg(args, "--churn", 50.0f64),
        arg(args, "--seconds", 20u64),
    );
    let dir = tempfile::tempdir().unwrap();
    let (_sim, run, api) = processes(dir.path(), pods, 2, rate, "auto");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = run.0.id();
    let (c0, _) = usage(pid);
    let t0 = Instant::now();
    let until = t0 + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..watchers).map(|_| tokio::spawn(watcher(api.clone(), until, false))).collect();
    let mut all = Vec::new();
    for t in tasks {
        all.push(t.await.unwrap());
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let (c1, rss) = usage(pid);
    report("churn", watchers, elapsed, all, Some(((c1 - c0) / elapsed, rss)));
}

async fn idle(args: &[String]) {
    let (pods, secs) = (arg(args, "--pods", 1000usize), arg(args, "--seconds", 30u64));
    // generic: a full relist every second; auto: the simulated runtime's stream is up
    // and complete, so full relists are 300 s apart and the loops only beat.
    let mode = arg(args, "--mode", "generic".to_string());
    // `--durable 0`: the journal in memory, to compare with the default in one run.
    let durable = arg(args, "--durable", 1u8) == 1;
    let dir = tempfile::tempdir().unwrap();
    let (_sim, run, api) = processes_with(dir.path(), pods, 5, 0.0, &mode, durable);
    let until = Instant::now() + Duration::from_secs(secs + 5);
    let tasks: Vec<_> = (0..10).map(|_| tokio::spawn(watcher(api.clone(), until, false))).collect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pid = run.0.id();
    let (c0, _) = usage(pid);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let (c1, rss) = usage(pid);
    let share = (c1 - c0) / t0.elapsed().as_secs_f64();
    println!(
        "idle ({mode}, journal {}): {pods} pods × 5 containers, 10 watchers: plegd CPU {:.2}% of a core, RSS {:.1} MiB",
        if durable { "on disk" } else { "in memory" },
        share * 100.0,
        rss / 1048576.0
    );
    for t in tasks {
        t.abort();
    }
}

async fn fanout(args: &[String]) {
    let (watchers, rate, secs) =
        (arg(args, "--watchers", 100usize), arg(args, "--rate", 10_000u64), arg(args, "--seconds", 10u64));
    let lean = arg(args, "--lean", 0u8) == 1;
    let split = arg(args, "--split", 0u8) == 1;
    let dir = tempfile::tempdir().unwrap();
    let cri = dir.path().join("cri.sock");
    let _sim = spawn(&["sim", "--listen", &format!("unix://{}", cri.display()), "--pods", "0", "--churn-per-sec", "0"]);
    wait_path(&cri);
    let mut cfg = plegd::config::RunConfig::for_endpoint(&format!("unix://{}", cri.display())).unwrap();
    cfg.api.socket = dir.path().join("plegd.sock");
    cfg.admin.addr = "127.0.0.1:0".parse().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let tracker = tokio_util::task::TaskTracker::new();
    let app = plegd::app::start(&cfg, &tracker, &shutdown).await.unwrap();
    let api_socket = format!("unix://{}", cfg.api.socket.display());
    let until = Instant::now() + Duration::from_secs(secs + 3);
    let mut clients = None;
    if split {
        pin(&std::process::id().to_string(), "0");
        let exe = std::env::current_exe().unwrap();
        let (n, total, lean) = (watchers.to_string(), (secs + 3).to_string(), u8::from(lean).to_string());
        let measured = secs.to_string();
        let child = Command::new("taskset")
            .args(["-c", "1"])
            .arg(exe)
            .args([
                "clients",
                "--socket",
                &api_socket,
                "--watchers",
                &n,
                "--seconds",
                &total,
                "--measured",
                &measured,
                "--lean",
                &lean,
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("taskset (util-linux) runs the clients");
        clients = Some(child);
    }
    let tasks = spawn_watchers(&api_socket, if split { 0 } else { watchers }, until, lean);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let labels = [("app".to_string(), "web".to_string())].into();
    let pod = std::sync::Arc::new(plegd::model::PodStatus {
        labels,
        ..plegd::model::PodStatus::empty("bench", "default", "web")
    });
    let c0 = plegd::process::read().cpu_seconds;
    let t0 = Instant::now();
    let batch = (rate / 1000).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let mut sent = 0u64;
    while t0.elapsed() < Duration::from_secs(secs) {
        tick.tick().await;
        let due = (t0.elapsed().as_secs_f64() * rate as f64) as u64;
        while sent < due.min(sent + batch * 5) {
            app.journal().append(plegd::model::event::PodLifecycleEvent {
                pod_uid: "bench".into(),
                pod_namespace: "default".into(),
                pod_name: "web".into(),
                kind: plegd::model::event::EventType::ContainerStarted,
                container_id: format!("{sent:064x}"),
                container_name: "app".into(),
                is_sandbox: false,
                source: plegd::model::event::EventSource::CriEvent,
                observed_at: SystemTime::now(),
                runtime_timestamp: None,
                pod: Some(pod.clone()),
                message: String::new(),
            });
            sent += 1;
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    println!("fanout: appended {sent} events in {elapsed:.1} s ({:.0}/s)", sent as f64 / elapsed);
    let (c1, rss) = (plegd::process::read().cpu_seconds, plegd::process::read().rss_bytes);
    let lean_word = if lean { "lean " } else { "" };
    let (missing, who) = match clients {
        Some(child) => {
            let out = child.wait_with_output().expect("clients");
            let text = String::from_utf8_lossy(&out.stdout);
            print!("{text}");
            let delivered: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix("clients: delivered "))
                .and_then(|n| n.trim().parse().ok())
                .expect("the clients report what they got");
            let who = format!("plegd alone on CPU 0 (the {watchers} {lean_word}clients on CPU 1)");
            ((sent * watchers as u64).saturating_sub(delivered), who)
        }
        None => {
            let mut all = Vec::new();
            for t in tasks {
                all.push(t.await.unwrap());
            }
            let missing: u64 = all.iter().map(|s| sent - s.events.min(sent)).sum();
            report("fanout", watchers, elapsed, all, None);
            (missing, format!("the bench process (plegd and the {watchers} {lean_word}gRPC clients together)"))
        }
    };
    println!("fanout: events missing across all watchers: {missing}");
    println!("fanout: {who} used {:.0}% of a core, RSS {:.1} MiB", (c1 - c0) / elapsed * 100.0, rss / 1048576.0);
    shutdown.cancel();
}

/// `n` watchers on `socket` until `until`, lean or decoding everything.
fn spawn_watchers(socket: &str, n: usize, until: Instant, lean: bool) -> Vec<tokio::task::JoinHandle<Seen>> {
    (0..n)
        .map(|_| {
            let socket = socket.to_owned();
            tokio::spawn(async move {
                if lean { lean_watcher(socket, until).await } else { watcher(socket, until, true).await }
            })
        })
        .collect()
}

/// Pins every thread of process `pid` to `cpus` (`taskset`, util-linux).
fn pin(pid: &str, cpus: &str) {
    let ok = Command::new("taskset").args(["-a", "-p", "-c", cpus, pid]).stdout(Stdio::null()).status();
    assert!(ok.is_ok_and(|s| s.success()), "taskset -a -p -c {cpus} {pid} failed");
}

/// The `--split` child: N watchers on `--socket` for `--seconds`, then a report.
async fn clients(args: &[String]) {
    let socket: String = arg(args, "--socket", String::new());
    let (watchers, secs) = (arg(args, "--watchers", 100usize), arg(args, "--seconds", 13u64));
    // The seconds events were appended for, to turn counts into rates.
    let measured = arg(args, "--measured", secs.saturating_sub(3).max(1));
    let lean = arg(args, "--lean", 0u8) == 1;
    let c0 = plegd::process::read().cpu_seconds;
    let until = Instant::now() + Duration::from_secs(secs);
    let tasks = spawn_watchers(&socket, watchers, until, lean);
    let mut all = Vec::new();
    for t in tasks {
        all.push(t.await.unwrap());
    }
    let cpu = (plegd::process::read().cpu_seconds - c0) / secs as f64;
    println!("clients: delivered {}", all.iter().map(|s| s.events).sum::<u64>());
    println!("fanout clients: {:.0}% of a core over {secs} s", cpu * 100.0);
    report("fanout", watchers, measured as f64, all, None);
}

/// Starts `pods` pods with one container each; returns (container id, when
/// StartContainer returned) and the sandbox ids.
async fn start_pods(
    client: &plegd::cri::client::CriClient,
    pods: usize,
    tag: &str,
) -> (Vec<(String, Instant)>, Vec<String>) {
    use plegd::cri::spec::{ContainerSpec, PodSpec};
    let (mut started, mut sandboxes) = (Vec::new(), Vec::new());
    for i in 0..pods {
        let pod = PodSpec::new("bench", &format!("{tag}-{i}"));
        let sid = client.raw().run_pod_sandbox(pod.run_request()).await.unwrap().into_inner().pod_sandbox_id;
        let id = client
            .raw()
            .create_container(pod.create_request(&sid, &ContainerSpec::new("app")))
            .await
            .unwrap()
            .into_inner()
            .container_id;
        client
            .raw()
            .start_container(plegd::proto::runtime::StartContainerRequest { container_id: id.clone() })
            .await
            .unwrap();
        started.push((id, Instant::now()));
        sandboxes.push(sid);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (started, sandboxes)
}

async fn remove_pods(client: &plegd::cri::client::CriClient, sandboxes: Vec<String>) {
    for sid in sandboxes {
        let _ = client
            .raw()
            .stop_pod_sandbox(plegd::proto::runtime::StopPodSandboxRequest { pod_sandbox_id: sid.clone() })
            .await;
        let _ = client
            .raw()
            .remove_pod_sandbox(plegd::proto::runtime::RemovePodSandboxRequest { pod_sandbox_id: sid })
            .await;
    }
}

/// Milliseconds from StartContainer returning to arrival, for each container seen.
fn delays(started: &[(String, Instant)], arrived: &HashMap<String, Instant>) -> (Vec<f64>, usize) {
    let mut v = Vec::new();
    let mut missing = 0;
    for (id, at) in started {
        match arrived.get(id) {
            Some(t) => v.push(t.saturating_duration_since(*at).as_secs_f64() * 1e3),
            None => missing += 1,
        }
    }
    (v, missing)
}

async fn containerd(args: &[String]) {
    use futures_util::StreamExt;
    use plegd::cri::RuntimeService;
    let endpoint =
        std::env::var("PLEGD_E2E_ENDPOINT").expect("PLEGD_E2E_ENDPOINT: start containerd with tests/e2e/containerd.sh");
    let pods = arg(args, "--pods", 30usize);
    let client = plegd::cri::client::CriClient::new(
        &endpoint,
        Default::default(),
        plegd::cri::metrics::CriMetrics::register(&mut Default::default()),
    )
    .unwrap();

    // Pass 1, the floor: a raw GetContainerEvents client alone. containerd 1.7 splits
    // events between concurrent subscribers (containerd#7318), so plegd and the floor
    // cannot listen at the same time.
    let floor: std::sync::Arc<std::sync::Mutex<HashMap<String, Instant>>> = Default::default();
    let mut raw = client.container_events().await.unwrap();
    let f = floor.clone();
    let floor_task = tokio::spawn(async move {
        while let Some(Ok(ev)) = raw.next().await {
            if ev.container_event_type == plegd::proto::runtime::ContainerEventType::ContainerStartedEvent as i32 {
                f.lock().unwrap().insert(ev.container_id, Instant::now());
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (started, sandboxes) = start_pods(&client, pods, "floor").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    floor_task.abort();
    let (mut floor_ms, floor_missing) = delays(&started, &floor.lock().unwrap());
    remove_pods(&client, sandboxes).await;

    // Pass 2: plegd alone, one watcher on its socket.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = plegd::config::RunConfig::for_endpoint(&endpoint).unwrap();
    cfg.api.socket = dir.path().join("plegd.sock");
    cfg.admin.addr = "127.0.0.1:0".parse().unwrap();
    // `--durable 1` (the default, as deployed): the journal commits each batch to a
    // state dir before delivery; `--durable 0`: in memory, to measure what that adds.
    if arg(args, "--durable", 1u8) == 1 {
        cfg.state_dir = Some(dir.path().join("state"));
    }
    println!("journal: {}", if cfg.state_dir.is_some() { "on disk (commit before deliver)" } else { "in memory" });
    let shutdown = tokio_util::sync::CancellationToken::new();
    let tracker = tokio_util::task::TaskTracker::new();
    let app = plegd::app::start(&cfg, &tracker, &shutdown).await.unwrap();
    tokio::time::sleep(Duration::from_secs(13)).await; // past the settle window after the stream came up
    // When each start was published to the journal, inside plegd: the target's own
    // measure, before the gRPC hop to a watcher.
    let published: std::sync::Arc<std::sync::Mutex<HashMap<String, Instant>>> = Default::default();
    let (_, mut sub) = app.journal().subscribe(plegd::journal::Since::Snapshot, Default::default()).into_feed();
    let p2 = published.clone();
    let journal_task = tokio::spawn(async move {
        while let Some(plegd::journal::FeedItem::Entry(e)) = sub.next().await {
            if e.event.kind == plegd::model::event::EventType::ContainerStarted {
                p2.lock().unwrap().insert(e.event.container_id.clone(), Instant::now());
            }
        }
    });
    let api_socket = format!("unix://{}", cfg.api.socket.display());
    let seen: std::sync::Arc<std::sync::Mutex<HashMap<String, Instant>>> = Default::default();
    let s2 = seen.clone();
    let w = tokio::spawn(async move {
        let mut c = plegd::cli::client::connect(&api_socket).unwrap();
        let mut s = c.watch(api::WatchRequest::default()).await.unwrap().into_inner();
        while let Ok(Ok(Some(m))) = tokio::time::timeout(Duration::from_secs(5), s.message()).await {
            if let Some(Kind::Event(e)) = m.kind
                && e.r#type == api::LifecycleEventType::ContainerStarted as i32
            {
                s2.lock().unwrap().insert(e.container_id, Instant::now());
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (started, sandboxes) = start_pods(&client, pods, "plegd").await;
    w.await.unwrap();
    let (mut plegd_ms, plegd_missing) = delays(&started, &seen.lock().unwrap());
    let (mut pub_ms, _) = delays(&started, &published.lock().unwrap());
    journal_task.abort();
    remove_pods(&client, sandboxes).await;
    shutdown.cancel();

    println!("containerd: {pods} containers per pass; missing: floor {floor_missing}, plegd {plegd_missing}");
    let (f50, f99) = (pct(&mut floor_ms, 0.5), pct(&mut floor_ms, 0.99));
    let (p50, p99) = (pct(&mut plegd_ms, 0.5), pct(&mut plegd_ms, 0.99));
    let pmax = plegd_ms.last().copied().unwrap_or(f64::NAN);
    println!(
        "containerd: raw GetContainerEvents arrival after StartContainer returned: p50 {f50:.2} ms p99 {f99:.2} ms"
    );
    println!(
        "containerd: plegd watcher receipt after StartContainer returned: p50 {p50:.2} ms p99 {p99:.2} ms max {pmax:.2} ms"
    );
    let (j50, j99) = (pct(&mut pub_ms, 0.5), pct(&mut pub_ms, 0.99));
    let jmax = pub_ms.last().copied().unwrap_or(f64::NAN);
    println!(
        "containerd: plegd journal publish after StartContainer returned: p50 {j50:.2} ms p99 {j99:.2} ms max {jmax:.2} ms"
    );
    println!("containerd: published over the floor: p50 {:.2} ms p99 {:.2} ms", j50 - f50, j99 - f99);
    println!("containerd: plegd over the floor: p50 {:.2} ms p99 {:.2} ms", p50 - f50, p99 - f99);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    match args.first().map(String::as_str) {
        Some("churn") => rt.block_on(churn(&args)),
        Some("idle") => rt.block_on(idle(&args)),
        Some("fanout") => rt.block_on(fanout(&args)),
        Some("clients") => rt.block_on(clients(&args)),
        Some("containerd") => rt.block_on(containerd(&args)),
        Some("cri-calls") => rt.block_on(cri_calls()),
        Some("runtime-cost") => rt.block_on(runtime_cost(&args)),
        _ => eprintln!(
            "usage: cargo bench --bench e2e -- churn|idle|fanout|containerd|cri-calls|runtime-cost [--watchers N] [--pods N] [--churn R] [--rate R] [--seconds S]"
        ),
    }
}

/// Milliseconds `f` took.
async fn ms<T>(f: impl std::future::Future<Output = T>) -> f64 {
    let at = Instant::now();
    f.await;
    at.elapsed().as_secs_f64() * 1e3
}

/// What a hinted read costs on a quiet containerd: each call of the read alone, then
/// the relister's own read of the pod (its listing with the statuses prefetched, then
/// the inspection: one round trip), 300 times after a warm-up round.
async fn cri_calls() {
    use plegd::cri::RuntimeService;
    use plegd::pleg::inspect::{Prefetched, inspect_prefetched};
    use plegd::pleg::list::list_pod;
    use plegd::proto::runtime as cri;
    let endpoint = std::env::var("PLEGD_E2E_ENDPOINT").unwrap();
    let client = plegd::cri::client::CriClient::new(
        &endpoint,
        Default::default(),
        plegd::cri::metrics::CriMetrics::register(&mut Default::default()),
    )
    .unwrap();
    let (started, sandboxes) = start_pods(&client, 1, "cri-calls").await;
    let sid = sandboxes[0].clone();
    let cid = started[0].0.clone();
    let pod =
        client.list_pod_sandboxes(Some(cri::PodSandboxFilter { id: sid.clone(), ..Default::default() })).await.unwrap();
    let uid = pod[0].metadata.as_ref().unwrap().uid.clone();
    let by_label: HashMap<String, String> = [(plegd::labels::kubelet::POD_UID.to_owned(), uid.clone())].into();
    let known: std::collections::BTreeSet<String> = [sid.clone()].into();
    let names = [
        "ListPodSandbox(label)",
        "ListContainers(label)",
        "ListContainers(sandbox)",
        "PodSandboxStatus",
        "ContainerStatus",
        "the relister's read (one round trip)",
    ];
    for round in 0..2 {
        let mut t = vec![Vec::new(); names.len()];
        for _ in 0..300 {
            let sandboxes_by_label = cri::PodSandboxFilter { label_selector: by_label.clone(), ..Default::default() };
            let containers_by_label = cri::ContainerFilter { label_selector: by_label.clone(), ..Default::default() };
            let containers_of = cri::ContainerFilter { pod_sandbox_id: sid.clone(), ..Default::default() };
            t[0].push(ms(async { client.list_pod_sandboxes(Some(sandboxes_by_label)).await.unwrap() }).await);
            t[1].push(ms(async { client.list_containers(Some(containers_by_label)).await.unwrap() }).await);
            t[2].push(ms(async { client.list_containers(Some(containers_of)).await.unwrap() }).await);
            t[3].push(ms(async { client.pod_sandbox_status(&sid).await.unwrap() }).await);
            t[4].push(ms(async { client.container_status(&cid).await.unwrap() }).await);
            t[5].push(
                ms(async {
                    let (listed, prefetched) = futures_util::future::join(
                        list_pod(&client, &uid, &known),
                        Prefetched::read(&client, [sid.clone()], [cid.clone()], None),
                    )
                    .await;
                    inspect_prefetched(&client, None, &listed.unwrap().unwrap(), None, prefetched).await.unwrap()
                })
                .await,
            );
        }
        if round == 1 {
            for (n, mut v) in names.into_iter().zip(t) {
                println!("{n}: p50 {:.3} p90 {:.3} ms", pct(&mut v, 0.5), pct(&mut v, 0.9));
            }
        }
    }
    remove_pods(&client, sandboxes).await;
}

/// A plegd inside this process on a runtime of its own with one worker thread (as
/// `plegd run` deploys it), optionally loaded with synthetic events at `rate` per second.
struct Loaded {
    shutdown: tokio_util::sync::CancellationToken,
    done: std::sync::mpsc::Receiver<()>,
    socket: String,
    journal: plegd::journal::Journal,
    _dir: tempfile::TempDir,
}

fn loaded_plegd(endpoint: &str, rate: u64) -> Loaded {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = plegd::config::RunConfig::for_endpoint(endpoint).unwrap();
    cfg.api.socket = dir.path().join("plegd.sock");
    cfg.admin.addr = "127.0.0.1:0".parse().unwrap();
    cfg.state_dir = Some(dir.path().join("state"));
    let socket = format!("unix://{}", cfg.api.socket.display());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done) = std::sync::mpsc::channel();
    let stop = shutdown.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        rt.block_on(async move {
            let tracker = tokio_util::task::TaskTracker::new();
            let app = plegd::app::start(&cfg, &tracker, &stop).await.unwrap();
            while app.readiness().check().is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tx.send(app.journal().clone()).unwrap();
            if rate > 0 {
                let journal = app.journal().clone();
                let stop = stop.clone();
                tracker.spawn(async move {
                    let pod = std::sync::Arc::new(plegd::model::PodStatus {
                        labels: [("app".to_string(), "web".to_string())].into(),
                        ..plegd::model::PodStatus::empty("bench-load", "default", "web")
                    });
                    let t0 = Instant::now();
                    let mut tick = tokio::time::interval(Duration::from_millis(1));
                    let mut sent = 0u64;
                    while !stop.is_cancelled() {
                        tick.tick().await;
                        let due = (t0.elapsed().as_secs_f64() * rate as f64) as u64;
                        let batch: Vec<_> = (sent..due.min(sent + rate / 100 + 5))
                            .map(|n| plegd::model::event::PodLifecycleEvent {
                                pod_uid: "bench-load".into(),
                                pod_namespace: "default".into(),
                                pod_name: "web".into(),
                                kind: plegd::model::event::EventType::ContainerStarted,
                                container_id: format!("{n:064x}"),
                                container_name: "app".into(),
                                is_sandbox: false,
                                source: plegd::model::event::EventSource::CriEvent,
                                observed_at: SystemTime::now(),
                                runtime_timestamp: None,
                                pod: Some(pod.clone()),
                                message: String::new(),
                            })
                            .collect();
                        sent += batch.len() as u64;
                        journal.append_batch(batch);
                    }
                });
            }
            stop.cancelled().await;
            tracker.close();
            tracker.wait().await;
        });
        let _ = done_tx.send(());
    });
    let journal = rx.recv().expect("plegd started");
    Loaded { shutdown, done, socket, journal, _dir: dir }
}

impl Loaded {
    fn stop(self) {
        self.shutdown.cancel();
        self.done.recv_timeout(Duration::from_secs(30)).expect("plegd stopped");
    }
}

/// Times each CRI call of `pods` pod lifecycles (one container each): RunPodSandbox,
/// CreateContainer, StartContainer, then StopPodSandbox + RemovePodSandbox. Returns the
/// times (ms) per call and the started container ids.
async fn timed_pods(client: &plegd::cri::client::CriClient, pods: usize, tag: &str) -> ([Vec<f64>; 4], Vec<String>) {
    use plegd::cri::spec::{ContainerSpec, PodSpec};
    use plegd::proto::runtime as cri;
    let mut t: [Vec<f64>; 4] = Default::default();
    let mut sandboxes = Vec::new();
    let mut ids = Vec::new();
    for i in 0..pods {
        let pod = PodSpec::new("bench", &format!("{tag}-{i}"));
        let at = Instant::now();
        let sid = client.raw().run_pod_sandbox(pod.run_request()).await.unwrap().into_inner().pod_sandbox_id;
        t[0].push(at.elapsed().as_secs_f64() * 1e3);
        let at = Instant::now();
        let id = client
            .raw()
            .create_container(pod.create_request(&sid, &ContainerSpec::new("app")))
            .await
            .unwrap()
            .into_inner()
            .container_id;
        t[1].push(at.elapsed().as_secs_f64() * 1e3);
        let at = Instant::now();
        client.raw().start_container(cri::StartContainerRequest { container_id: id.clone() }).await.unwrap();
        t[2].push(at.elapsed().as_secs_f64() * 1e3);
        sandboxes.push(sid);
        ids.push(id);
    }
    for sid in sandboxes {
        let at = Instant::now();
        client.raw().stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: sid.clone() }).await.unwrap();
        client.raw().remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: sid }).await.unwrap();
        t[3].push(at.elapsed().as_secs_f64() * 1e3);
    }
    (t, ids)
}

async fn runtime_cost(args: &[String]) {
    let endpoint =
        std::env::var("PLEGD_E2E_ENDPOINT").expect("PLEGD_E2E_ENDPOINT: start containerd with tests/e2e/containerd.sh");
    let (pods, rounds) = (arg(args, "--pods", 20usize), arg(args, "--rounds", 3usize));
    let (watchers, rate) = (arg(args, "--watchers", 100usize), arg(args, "--rate", 2000u64));
    let client = plegd::cri::client::CriClient::new(
        &endpoint,
        Default::default(),
        plegd::cri::metrics::CriMetrics::register(&mut Default::default()),
    )
    .unwrap();
    // The last mode is the control: the same fan-out load on a plegd that watches a
    // simulated runtime instead, so containerd's calls share the CPU with it exactly as
    // in the third mode but nothing of containerd's waits on plegd. The third mode against
    // the fourth is what plegd's reading costs the runtime; against the first, what two
    // saturated cores cost it.
    let modes = ["no plegd", "plegd", "plegd under fan-out load", "same load, plegd not on containerd"];
    let sim_dir = tempfile::tempdir().unwrap();
    let sim_socket = sim_dir.path().join("cri.sock");
    let _sim =
        spawn(&["sim", "--listen", &format!("unix://{}", sim_socket.display()), "--pods", "0", "--churn-per-sec", "0"]);
    wait_path(&sim_socket);
    let sim_endpoint = format!("unix://{}", sim_socket.display());
    let calls = ["RunPodSandbox", "CreateContainer", "StartContainer", "StopPodSandbox+RemovePodSandbox"];
    let mut times: Vec<[Vec<f64>; 4]> = vec![Default::default(); modes.len()];
    // Warm containerd up (first sandbox, image, snapshotter).
    timed_pods(&client, 3, "warmup").await;
    for round in 0..rounds {
        for (m, mode) in modes.iter().enumerate() {
            let watched = if m == 3 { &sim_endpoint } else { &endpoint };
            let plegd = (m > 0).then(|| loaded_plegd(watched, if m >= 2 { rate } else { 0 }));
            let mut load = None;
            let mut published = None;
            if let Some(p) = &plegd {
                // Every container timed must reach plegd's journal: plegd was reading.
                let only_bench = plegd::journal::Filter { namespace: "bench".into(), ..Default::default() };
                let sub = p.journal.subscribe(plegd::journal::Since::Snapshot, std::sync::Arc::new(only_bench));
                let (_, mut sub) = sub.into_feed();
                published = Some(tokio::spawn(async move {
                    let mut started = std::collections::HashSet::new();
                    // Until the pass is over and plegd quiet for 10 s.
                    while let Ok(Some(item)) = tokio::time::timeout(Duration::from_secs(10), sub.next()).await {
                        let plegd::journal::FeedItem::Entry(e) = item else {
                            panic!("the bench's own subscriber fell behind: {item:?}");
                        };
                        if e.event.kind == plegd::model::event::EventType::ContainerStarted {
                            started.insert(e.event.container_id.clone());
                        }
                    }
                    started
                }));
                if m >= 2 {
                    let exe = std::env::current_exe().unwrap();
                    let child = Command::new(exe)
                        .args(["clients", "--socket", &p.socket, "--watchers", &watchers.to_string()])
                        .args(["--seconds", "3600", "--lean", "0"])
                        .stdout(Stdio::null())
                        .spawn()
                        .unwrap();
                    load = Some(child);
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            let c0 = plegd::process::read().cpu_seconds;
            let at = Instant::now();
            let (t, ids) = timed_pods(&client, pods, &format!("r{round}m{m}")).await;
            let cpu = (plegd::process::read().cpu_seconds - c0) / at.elapsed().as_secs_f64();
            let mut seen = String::new();
            if let Some(p) = plegd {
                let started = published.unwrap().await.unwrap();
                p.stop();
                let got = ids.iter().filter(|id| started.contains(*id)).count();
                if m < 3 {
                    seen = format!(", plegd published {got}/{} starts", ids.len());
                    assert_eq!(got, ids.len(), "plegd missed a start it should have read");
                }
            }
            if let Some(mut child) = load {
                let _ = child.kill();
                let _ = child.wait();
            }
            println!(
                "round {round} {mode}: {pods} pods in {:.1} s, this process {:.0}% of a core{seen}",
                at.elapsed().as_secs_f64(),
                cpu * 100.0
            );
            for (k, v) in t.into_iter().enumerate() {
                times[m][k].extend(v);
            }
        }
    }
    println!("runtime-cost: containerd calls, {pods} pods × {rounds} rounds per mode, passes interleaved");
    let mut base = [0f64; 4];
    for (m, mode) in modes.iter().enumerate() {
        for (k, call) in calls.iter().enumerate() {
            let v = &mut times[m][k];
            let (p50, p90) = (pct(v, 0.5), pct(v, 0.9));
            let max = v.last().copied().unwrap_or(f64::NAN);
            if m == 0 {
                base[k] = p50;
            }
            println!(
                "runtime-cost: {mode:<36} {call:<32} p50 {p50:7.1} ms  p90 {p90:7.1} ms  max {max:7.1} ms  p50 ratio {:.2}",
                p50 / base[k]
            );
        }
    }
}
