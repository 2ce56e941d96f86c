//! The Watch guarantees under generated schedules: the simulated runtime churns (pods
//! created with and without labels, containers started, exiting with varied codes,
//! restarted as new attempts, removed; pods stopped, removed with and without their
//! sandbox), while watchers with filters (negative selectors too) stall past the
//! bookmark interval, disconnect and resume with and without their epoch, on tiny
//! watch buffers, and plegd itself restarts. Pods change their labels (a new sandbox
//! with other labels), moving in and out of filtered watchers' selections while those
//! watchers are away and resume, or list and then watch from the list's revision; the
//! journal keeps its records in memory or, with a state dir and a tiny memory budget,
//! replays them from disk. Every watcher runs the invariant checker
//! (`plegd::watchcheck`) on every message; at the end, with the node quiet, each
//! watcher's copy equals `ListPods` with its filter.
//!
//! `PLEGD_WATCH_PROPTEST_CASES` sets the number of schedules (16 in `cargo test`; the soak runs
//! more). The test prints how many schedules, messages and events it checked.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::proto::plegd as api;
use plegd::watchcheck::WatchChecker;
use proptest::prelude::*;
use support::SimHarness;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Label selectors the watchers use; "" is unfiltered.
const SELECTORS: [&str; 6] = ["", "app=web", "!app", "app!=web", "app in (web,db)", "app notin (db)"];

#[derive(Clone, Debug)]
enum Op {
    /// A pod in namespace 0..2 with label set 0..3 (none, app=web, app=db).
    NewPod(u8, u8),
    /// A container in pod i, exiting on its own with a code, or running.
    Start(usize, Option<i32>),
    /// A running container of pod i exits with a code.
    Exit(usize, i32),
    /// The newest dead container of pod i restarts as a new attempt.
    Restart(usize),
    /// The dead containers of pod i are removed.
    RemoveDead(usize),
    /// Pod i is stopped, and removed (with its sandbox) or not.
    StopPod(usize, bool),
    /// Watcher w stops reading for this many ms.
    Stall(usize, u64),
    /// Watcher w drops its stream and resumes, naming its epoch or not.
    Reconnect(usize, bool),
    /// Watcher w drops its stream and its copy, lists with its filter, and watches
    /// from the list's revision and epoch.
    ListThenWatch(usize),
    /// Pod i gets a new sandbox with label set 0..3: the old one stops, the pod's
    /// labels change.
    Relabel(usize, u8),
    /// plegd restarts (a new journal: no state dir).
    RestartPlegd,
    /// Time passes.
    Sleep(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..2, 0u8..3).prop_map(|(n, l)| Op::NewPod(n, l)),
        8 => (0usize..8, proptest::option::of(0i32..4)).prop_map(|(p, c)| Op::Start(p, c)),
        3 => (0usize..8, 0i32..140).prop_map(|(p, c)| Op::Exit(p, c)),
        2 => (0usize..8).prop_map(Op::Restart),
        2 => (0usize..8).prop_map(Op::RemoveDead),
        2 => (0usize..8, any::<bool>()).prop_map(|(p, r)| Op::StopPod(p, r)),
        3 => (0usize..3, 20u64..300).prop_map(|(w, ms)| Op::Stall(w, ms)),
        2 => (0usize..3, any::<bool>()).prop_map(|(w, e)| Op::Reconnect(w, e)),
        1 => (0usize..3).prop_map(Op::ListThenWatch),
        2 => (0usize..8, 0u8..3).prop_map(|(p, l)| Op::Relabel(p, l)),
        1 => Just(Op::RestartPlegd),
        3 => (5u64..120).prop_map(Op::Sleep),
    ]
}

/// What a watcher is told to do.
enum Command {
    Stall(u64),
    Reconnect(bool),
    ListThenWatch,
}

struct Watcher {
    tx: mpsc::UnboundedSender<Command>,
    checker: Arc<Mutex<WatchChecker>>,
    filter: api::PodFilter,
    /// What it received, one line a message, for the failure report.
    log: Arc<Mutex<Vec<String>>>,
}

struct Totals {
    schedules: AtomicU64,
    messages: AtomicU64,
    events: AtomicU64,
    resets: AtomicU64,
    published: AtomicU64,
}

static TOTALS: Totals = Totals {
    schedules: AtomicU64::new(0),
    messages: AtomicU64::new(0),
    events: AtomicU64::new(0),
    resets: AtomicU64::new(0),
    published: AtomicU64::new(0),
};

async fn start_plegd(
    h: &SimHarness,
    buffer: usize,
    durable: bool,
) -> (plegd::app::Sidecar, CancellationToken, TaskTracker) {
    let mut cfg = plegd::config::RunConfig::for_endpoint(&h.endpoint).unwrap();
    if durable {
        // The smallest memory budget: most resumes replay from disk.
        cfg.state_dir = Some(h.dir.path().join("state"));
        cfg.journal.memory_budget = 1;
    }
    cfg.api.socket = h.dir.path().join("api/plegd.sock");
    cfg.admin.addr = "127.0.0.1:0".parse().unwrap();
    cfg.pleg.relist_period = Duration::from_millis(50);
    cfg.api.bookmark_interval = Duration::from_millis(30);
    cfg.journal.client_buffer = buffer;
    cfg.pleg.stream = support::fast_evented();
    let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
    let app = plegd::app::start(&cfg, &tracker, &shutdown).await.expect("plegd starts");
    (app, shutdown, tracker)
}

/// A watcher: reads its stream through the checker, obeys commands, reconnects forever.
fn spawn_watcher(
    socket: String,
    filter: api::PodFilter,
    filtered: bool,
    violations: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
    tracker: &TaskTracker,
) -> Watcher {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let checker = Arc::new(Mutex::new(WatchChecker::new(filtered)));
    let log = Arc::new(Mutex::new(Vec::new()));
    let (c, f, l) = (checker.clone(), filter.clone(), log.clone());
    tracker.spawn(async move {
        let mut name_epoch = true;
        let mut list_first = false;
        'connect: loop {
            if stop.is_cancelled() {
                return;
            }
            let Ok(mut client) = plegd::cli::client::connect(&socket) else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            if list_first {
                list_first = false;
                let list = match client.list_pods(api::ListPodsRequest { filter: Some(f.clone()) }).await {
                    Ok(l) => l.into_inner(),
                    Err(_) => continue,
                };
                l.lock().unwrap().push(format!(
                    "listed {} pods at {} epoch {}",
                    list.pods.len(),
                    list.revision,
                    list.epoch
                ));
                c.lock().unwrap().listed(&list.pods, list.revision, list.epoch);
            }
            let (since, epoch) = {
                let mut c = c.lock().unwrap();
                c.reconnect();
                let (r, e) = c.resume_point().unwrap_or((0, 0));
                (r, if name_epoch { e } else { 0 })
            };
            let req = api::WatchRequest { since_revision: since, filter: Some(f.clone()), types: vec![], epoch };
            l.lock().unwrap().push(format!("open since {since} epoch {epoch}"));
            let mut stream = tokio::select! {
                _ = stop.cancelled() => return,
                s = client.watch(req) => match s {
                    Ok(s) => s.into_inner(),
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                },
            };
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    cmd = rx.recv() => match cmd {
                        Some(Command::Stall(ms)) => tokio::time::sleep(Duration::from_millis(ms)).await,
                        Some(Command::Reconnect(with_epoch)) => {
                            name_epoch = with_epoch;
                            continue 'connect;
                        }
                        Some(Command::ListThenWatch) => {
                            (name_epoch, list_first) = (true, true);
                            continue 'connect;
                        }
                        None => return,
                    },
                    m = stream.message() => match m {
                        Ok(Some(m)) => {
                            TOTALS.messages.fetch_add(1, Ordering::Relaxed);
                            l.lock().unwrap().push(describe(&m));
                            let mut c = c.lock().unwrap();
                            if let Some(api::watch_event::Kind::Start(s)) = &m.kind
                                && c.is_foreign(s)
                            {
                                // Resumed without the epoch into a restarted plegd's
                                // journal: the client sees it in `start` and starts over.
                                c.start_over();
                                continue 'connect;
                            }
                            if let Err(v) = c.observe(&m) {
                                let log = l.lock().unwrap();
                                let recent = log.iter().rev().take(20).rev().cloned().collect::<Vec<_>>().join("\n  ");
                                violations.lock().unwrap().push(format!("{f:?}: {v}; its last messages:\n  {recent}"));
                            }
                        }
                        _ => {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            continue 'connect;
                        }
                    },
                }
            }
        }
    });
    Watcher { tx, checker, filter, log }
}

fn describe(m: &api::WatchEvent) -> String {
    use api::watch_event::Kind;
    let what = match &m.kind {
        Some(Kind::Start(s)) => format!("start epoch {} resumed {}", s.epoch, s.resumed),
        Some(Kind::Snapshot(p)) => format!("snapshot {}", p.uid),
        Some(Kind::Synced(s)) => format!("synced {} pods epoch {}", s.pods, s.epoch),
        Some(Kind::Event(e)) => format!(
            "event {} {} {} pod {}",
            e.r#type,
            e.pod_uid,
            e.container_id.get(..8).unwrap_or(""),
            e.pod.is_some()
        ),
        Some(Kind::Reset(r)) => format!("reset {}", r.reason),
        Some(Kind::Bookmark(_)) => "bookmark".into(),
        None => "?".into(),
    };
    format!("{} {what}", m.revision)
}

/// A pod's containers as (id, state), for comparing copies.
fn shape(p: &api::PodStatus) -> BTreeSet<(String, i32)> {
    p.containers.iter().map(|c| (c.id.clone(), c.state)).collect()
}

struct SimPod {
    spec: PodSpec,
    sid: String,
    containers: Vec<(String, String, u32)>,
    stopped: bool,
}

async fn run_schedule(ops: Vec<Op>, selectors: [usize; 3], buffer: usize, durable: bool) -> Result<(), TestCaseError> {
    let h = SimHarness::start().await;
    let (mut app, mut app_stop, mut app_tracker) = start_plegd(&h, buffer, durable).await;
    let socket = format!("unix://{}", h.dir.path().join("api/plegd.sock").display());
    let violations = Arc::new(Mutex::new(Vec::new()));
    let stop = CancellationToken::new();
    let watchers_tracker = TaskTracker::new();
    let watchers: Vec<Watcher> = selectors
        .iter()
        .map(|i| {
            let filter = api::PodFilter { label_selector: SELECTORS[*i].into(), ..Default::default() };
            spawn_watcher(socket.clone(), filter, *i != 0, violations.clone(), stop.clone(), &watchers_tracker)
        })
        .collect();
    let sim = h.sim.clone();
    let mut pods: Vec<SimPod> = Vec::new();
    let mut n = 0;
    for op in ops {
        // Pod indices name one of the pods there are.
        let op = match (op, pods.len()) {
            (Op::Start(i, c), n) if n > 0 => Op::Start(i % n, c),
            (Op::Exit(i, c), n) if n > 0 => Op::Exit(i % n, c),
            (Op::Restart(i), n) if n > 0 => Op::Restart(i % n),
            (Op::RemoveDead(i), n) if n > 0 => Op::RemoveDead(i % n),
            (Op::StopPod(i, r), n) if n > 0 => Op::StopPod(i % n, r),
            (Op::Relabel(i, l), n) if n > 0 => Op::Relabel(i % n, l),
            (op, _) => op,
        };
        match op {
            Op::NewPod(ns, l) => {
                n += 1;
                let mut spec = PodSpec::new(["default", "shop"][ns as usize], &format!("pod-{n}"));
                if l > 0 {
                    spec = spec.label("app", ["", "web", "db"][l as usize]);
                }
                let sid = sim.run_pod_sandbox(spec.run_request()).await.unwrap();
                pods.push(SimPod { spec, sid, containers: Vec::new(), stopped: false });
            }
            Op::Start(i, code) => {
                let Some(p) = pods.get_mut(i).filter(|p| !p.stopped) else { continue };
                n += 1;
                let name = format!("c{n}");
                let mut c = ContainerSpec::new(&name);
                if let Some(code) = code {
                    c = c.exits_after(Duration::from_millis(30), code);
                }
                let id = sim.create_container(p.spec.create_request(&p.sid, &c)).await.unwrap();
                sim.start_container(&id).await.unwrap();
                p.containers.push((id, name, 0));
            }
            Op::Exit(i, code) => {
                if let Some((id, _, _)) = pods.get(i).and_then(|p| p.containers.last()) {
                    sim.exit_container(id, code, if code == 137 { "OOMKilled" } else { "Error" });
                }
            }
            Op::Restart(i) => {
                let Some(p) = pods.get_mut(i).filter(|p| !p.stopped) else { continue };
                let Some((_, name, attempt)) = p.containers.last().cloned() else { continue };
                let c = ContainerSpec::new(&name).attempt(attempt + 1);
                if let Ok(id) = sim.create_container(p.spec.create_request(&p.sid, &c)).await {
                    let _ = sim.start_container(&id).await;
                    p.containers.push((id, name, attempt + 1));
                }
            }
            Op::RemoveDead(i) => {
                let Some(p) = pods.get_mut(i) else { continue };
                let mut keep = Vec::new();
                for (id, name, attempt) in std::mem::take(&mut p.containers) {
                    let st = sim.container_status_cri(&id).await.ok();
                    let exited =
                        st.is_some_and(|s| s.state == plegd::proto::runtime::ContainerState::ContainerExited as i32);
                    if exited {
                        sim.remove_container_cri(&id).await.unwrap();
                    } else {
                        keep.push((id, name, attempt));
                    }
                }
                p.containers = keep;
            }
            Op::StopPod(i, remove) => {
                let Some(p) = pods.get_mut(i) else { continue };
                let _ = sim.stop_pod_sandbox(&p.sid).await;
                p.stopped = true;
                if remove {
                    let _ = sim.remove_pod_sandbox(&p.sid).await;
                    pods.remove(i);
                }
            }
            Op::Stall(w, ms) => {
                let _ = watchers[w].tx.send(Command::Stall(ms));
            }
            Op::Reconnect(w, with_epoch) => {
                let _ = watchers[w].tx.send(Command::Reconnect(with_epoch));
            }
            Op::ListThenWatch(w) => {
                let _ = watchers[w].tx.send(Command::ListThenWatch);
            }
            Op::Relabel(i, l) => {
                let Some(p) = pods.get_mut(i).filter(|p| !p.stopped) else { continue };
                let _ = sim.stop_pod_sandbox(&p.sid).await;
                p.spec.labels.clear();
                if l > 0 {
                    p.spec = p.spec.clone().label("app", ["", "web", "db"][l as usize]);
                }
                p.spec.attempt += 1;
                p.sid = sim.run_pod_sandbox(p.spec.run_request()).await.unwrap();
                p.containers.clear();
            }
            Op::RestartPlegd => {
                app_stop.cancel();
                app_tracker.close();
                app_tracker.wait().await;
                // The old journal goes (and with it the state dir's lock) before the
                // new plegd opens it, as when a process exits.
                drop(app);
                (app, app_stop, app_tracker) = start_plegd(&h, buffer, durable).await;
            }
            Op::Sleep(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
    }
    // Quiet: containers that exit on their own have, relists found everything.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut client = plegd::cli::client::connect(&socket).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    for w in &watchers {
        loop {
            let list =
                client.list_pods(api::ListPodsRequest { filter: Some(w.filter.clone()) }).await.unwrap().into_inner();
            let (caught_up, equal, view) = {
                let c = w.checker.lock().unwrap();
                let caught_up =
                    c.is_synced() && c.resume_point().is_some_and(|(r, e)| r >= list.revision && e == list.epoch);
                let mine: BTreeMap<String, BTreeSet<(String, i32)>> =
                    c.view().iter().map(|(uid, p)| (uid.clone(), shape(p))).collect();
                let theirs: BTreeMap<String, BTreeSet<(String, i32)>> =
                    list.pods.iter().map(|p| (p.uid.clone(), shape(p))).collect();
                (caught_up, mine == theirs, format!("{mine:?}\nListPods: {theirs:?}"))
            };
            if caught_up && equal {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                stop.cancel();
                let log =
                    w.log.lock().unwrap().iter().filter(|l| !l.ends_with("bookmark")).cloned().collect::<Vec<_>>();
                return Err(TestCaseError::fail(format!(
                    "watcher {:?} never matched ListPods at revision {} epoch {} (caught up: {caught_up}):\n{view}\nits messages (bookmarks left out):\n{}",
                    w.filter,
                    list.revision,
                    list.epoch,
                    log.join("\n")
                )));
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }
    stop.cancel();
    watchers_tracker.close();
    watchers_tracker.wait().await;
    TOTALS.published.fetch_add(app.journal().revision(), Ordering::Relaxed);
    for w in &watchers {
        let c = w.checker.lock().unwrap();
        TOTALS.events.fetch_add(c.events, Ordering::Relaxed);
        TOTALS.resets.fetch_add(c.resets, Ordering::Relaxed);
    }
    TOTALS.schedules.fetch_add(1, Ordering::Relaxed);
    app_stop.cancel();
    app_tracker.close();
    app_tracker.wait().await;
    let _ = &app;
    h.stop().await;
    let violations = violations.lock().unwrap().clone();
    prop_assert!(violations.is_empty(), "{} violations, first: {}", violations.len(), violations[0]);
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PLEGD_WATCH_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(16)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 20, ..ProptestConfig::default() })]
    #[test]
    fn every_watcher_sees_the_invariants_hold_and_ends_with_listpods(
        ops in proptest::collection::vec(op(), 40..120),
        // The first watcher is unfiltered: it must see every revision, gap-free.
        selectors in (Just(0usize), 0usize..SELECTORS.len(), 0usize..SELECTORS.len()).prop_map(|(a, b, c)| [a, b, c]),
        buffer in prop_oneof![Just(2usize), Just(4), Just(64), Just(4096)],
        durable in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(run_schedule(ops, selectors, buffer, durable))?;
        eprintln!(
            "watch property: {} schedules, {} messages, {} events checked (of {} published by the last plegd of each schedule), {} resets so far",
            TOTALS.schedules.load(Ordering::Relaxed),
            TOTALS.messages.load(Ordering::Relaxed),
            TOTALS.published.load(Ordering::Relaxed),
            TOTALS.events.load(Ordering::Relaxed),
            TOTALS.resets.load(Ordering::Relaxed)
        );
    }
}
