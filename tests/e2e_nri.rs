//! plegd as an NRI observer plugin of a real containerd (2.1: NRI on by default; 1.7:
//! on by its config), on the runtime's NRI socket of the test's own
//! (`tests/e2e/containerd.sh nri-socket`). Run by `tests/e2e/run.sh` on 1.7 and 2.1.

mod support;

use std::process::Command;
use std::time::Duration;

use plegd::cri::client::CriClient;
use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::model::event::{EventSource, EventType, PodLifecycleEvent};
use plegd::nri::NriMode;
use plegd::pleg::evented::Mode;
use plegd::proto::runtime as cri;
use support::containerd::{Env, env, figure, remove_pod, run_pod, start};
use support::{Sidecar, start_sidecar_tuned};
use tokio::time::Instant;

/// The NRI socket of the containerd under test.
fn nri_socket(env: &Env) -> String {
    let out = Command::new(&env.ctl).args(["nri-socket", &env.version]).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn log() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter: tracing_subscriber::filter::Targets =
        std::env::var("RUST_LOG").unwrap_or_else(|_| "plegd=info".into()).parse().expect("RUST_LOG filter");
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_test_writer()
        .finish()
        .with(filter)
        .try_init();
}

/// Polls `f` every 50 ms until it holds; panics with `what` after `within`.
async fn until(within: Duration, what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < within, "{what} not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    t.elapsed()
}

async fn wait_event(
    sc: &mut Sidecar,
    seen: &mut Vec<PodLifecycleEvent>,
    within: Duration,
    what: &str,
    pred: impl Fn(&PodLifecycleEvent) -> bool,
) -> PodLifecycleEvent {
    if let Some(hit) = seen.iter().find(|e| pred(e)) {
        return hit.clone();
    }
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ev = sc.next(left).await.unwrap_or_else(|| panic!("{what} within {within:?}; saw {seen:#?}"));
        seen.push(ev.clone());
        if pred(&ev) {
            return ev;
        }
    }
}

/// plegd in `mode`, relisting five minutes apart, registered as an NRI plugin of the
/// containerd under test, and settled.
async fn registered_sidecar(env: &Env, mode: Mode) -> Sidecar {
    let socket = nri_socket(env);
    let period = Duration::from_secs(300);
    let mut sc = start_sidecar_tuned(env.client(), mode, period, period, |cfg| {
        cfg.nri.mode = NriMode::On;
        cfg.nri.socket = socket.into();
    })
    .await;
    let registered = sc.metrics.nri.registered.clone();
    until(Duration::from_secs(10), "registration", || registered.get() == 1).await;
    sc.until_quiet(Duration::from_millis(1500)).await;
    sc
}

/// With no event stream and full relists five minutes apart, only NRI can tell plegd
/// of a change within seconds: every sandbox's and container's start, a container's stop
/// by the CRI call and its own exit (containerd tells both as `STOP_CONTAINER`, the exit
/// when it deletes the dead task), a container's removal on its own, a sandbox's stop
/// and its removal must each arrive so, told as NRI's, though containerd tells most of
/// them ahead of its own status.
#[tokio::test]
#[ignore = "needs a real containerd with NRI: run tests/e2e/run.sh"]
async fn with_no_event_stream_and_relists_minutes_apart_nri_tells_every_start_stop_and_removal_at_once() {
    log();
    let env = env();
    let c = env.client();
    let mut sc = registered_sidecar(&env, Mode::Generic).await;
    let soon = Duration::from_secs(5);
    let mut seen = Vec::new();
    let mut latencies = Vec::new();
    let mut pods = Vec::new();
    for (i, exit) in [None, Some(3)].into_iter().enumerate() {
        let pod = PodSpec::new("nri", &format!("p{i}"));
        let sid = run_pod(&c, &pod).await;
        wait_event(&mut sc, &mut seen, soon, "the sandbox's start", |e| {
            e.is_sandbox && e.kind == EventType::ContainerStarted && e.container_id == sid
        })
        .await;
        let spec = match exit {
            None => ContainerSpec::new("main"),
            Some(code) => ContainerSpec::new("main").exits_after(Duration::from_millis(500), code),
        };
        let (id, started) = start(&c, &pod, &sid, &spec).await;
        let ev = wait_event(&mut sc, &mut seen, soon, "the container's start", |e| {
            e.kind == EventType::ContainerStarted && e.container_id == id
        })
        .await;
        latencies.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(ev.source, EventSource::Nri, "told as NRI's: {ev:?}");
        pods.push((pod, sid, id));
    }
    let told_by_nri = |ev: &PodLifecycleEvent, what: &str| assert_eq!(ev.source, EventSource::Nri, "{what}: {ev:?}");
    let exit_code = |ev: &PodLifecycleEvent, id: &str| {
        ev.pod.as_ref().unwrap().containers.iter().find(|s| s.id == id).unwrap().exit_code
    };
    let [(pod0, sid0, running), (pod1, sid1, exiting)] = &pods[..] else { unreachable!() };
    // The running container stopped by the CRI call.
    c.raw()
        .stop_container(cri::StopContainerRequest { container_id: running.clone(), timeout: 0 })
        .await
        .expect("StopContainer");
    let ev = wait_event(&mut sc, &mut seen, soon, "the stopped container's death", |e| {
        e.kind == EventType::ContainerDied && e.container_id == *running
    })
    .await;
    told_by_nri(&ev, "a stop");
    // The other one's own exit, with its code.
    let ev = wait_event(&mut sc, &mut seen, soon, "a container's own exit", |e| {
        e.kind == EventType::ContainerDied && e.container_id == *exiting
    })
    .await;
    told_by_nri(&ev, "an exit");
    assert_eq!(exit_code(&ev, exiting), 3);
    // A container removed on its own, its pod left.
    c.raw()
        .remove_container(cri::RemoveContainerRequest { container_id: running.clone() })
        .await
        .expect("RemoveContainer");
    let ev = wait_event(&mut sc, &mut seen, soon, "a container's removal", |e| {
        e.kind == EventType::ContainerRemoved && e.container_id == *running
    })
    .await;
    told_by_nri(&ev, "a removal");
    // A sandbox stopped, then removed.
    c.raw()
        .stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: sid1.clone() })
        .await
        .expect("StopPodSandbox");
    let ev = wait_event(&mut sc, &mut seen, soon, "a sandbox's stop", |e| {
        e.is_sandbox && e.kind == EventType::ContainerDied && e.container_id == *sid1
    })
    .await;
    told_by_nri(&ev, "a sandbox's stop");
    for (pod, sid, id) in [(pod1, sid1, exiting), (pod0, sid0, running)] {
        remove_pod(&c, sid).await;
        for (what, kind, on) in [
            ("the sandbox's death", EventType::ContainerDied, sid),
            ("the container's removal", EventType::ContainerRemoved, id),
            ("the sandbox's removal", EventType::ContainerRemoved, sid),
        ] {
            wait_event(&mut sc, &mut seen, soon, what, |e| e.kind == kind && e.container_id == *on).await;
        }
        let order: Vec<_> = seen
            .iter()
            .filter(|e| e.container_id == *id && e.kind != EventType::ContainerChanged)
            .map(|e| e.kind)
            .collect();
        assert_eq!(order, [EventType::ContainerStarted, EventType::ContainerDied, EventType::ContainerRemoved]);
        assert!(sc.cache.get(&pod.uid).is_none(), "a removed pod leaves the cache");
    }
    let events = sc.metrics.encode_text();
    let told: Vec<&str> = events.lines().filter(|l| l.starts_with("plegd_nri_events_total{")).collect();
    let count = |name: &str| {
        told.iter().find(|l| l.contains(name)).and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).unwrap_or(0.0)
    };
    for e in plegd::nri::api::Event::SUBSCRIBED {
        assert!(count(&format!("\"{}\"", e.as_str())) >= pods.len() as f64, "each event told for each pod: {told:?}");
    }
    figure(&format!(
        "containerd {} with NRI, no event stream, relists 300 s apart: StartContainer returned -> CONTAINER_STARTED published: {:?} ms; events told: {}",
        env.version,
        latencies.iter().map(|l| format!("{l:.1}")).collect::<Vec<_>>(),
        told.iter().map(|l| l.trim_start_matches("plegd_nri_events_total")).collect::<Vec<_>>().join(" "),
    ));
    sc.stop().await;
}

/// containerd 1.7 hands each CRI event to one of its stream's subscribers: beside
/// another subscriber (the kubelet's Evented PLEG, another agent) plegd's stream misses
/// some of the changes, and relisting five minutes apart it would hear of them late.
/// With NRI every container's start arrives within seconds all the same. On 2.1, whose
/// stream hands every event to every subscriber, the same holds with the stream alone.
#[tokio::test]
#[ignore = "needs a real containerd with NRI: run tests/e2e/run.sh"]
async fn beside_another_event_stream_subscriber_nri_tells_every_start_at_once() {
    log();
    let env = env();
    let c = env.client();
    // The other subscriber: it takes what it is handed, and counts it. (The runtime
    // sends the stream's headers with its first event: the call waits until then.)
    let taken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (counter, mut raw) = (taken.clone(), c.raw());
    let other = tokio::spawn(async move {
        let mut events =
            raw.get_container_events(cri::GetEventsRequest {}).await.expect("a second subscriber").into_inner();
        while let Ok(Some(_)) = events.message().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut sc = registered_sidecar(&env, Mode::Evented).await;
    let pod = PodSpec::new("nri", "split");
    let sid = run_pod(&c, &pod).await;
    let mut seen = Vec::new();
    let (mut by_stream, mut by_nri, mut latencies) = (0, 0, Vec::new());
    for i in 0..8 {
        let (id, started) = start(&c, &pod, &sid, &ContainerSpec::new(&format!("c{i}"))).await;
        let ev = wait_event(&mut sc, &mut seen, Duration::from_secs(5), "a container's start", |e| {
            e.kind == EventType::ContainerStarted && e.container_id == id
        })
        .await;
        latencies.push(started.elapsed().as_secs_f64() * 1e3);
        match ev.source {
            EventSource::Nri => by_nri += 1,
            _ => by_stream += 1,
        }
    }
    let taken = taken.load(std::sync::atomic::Ordering::Relaxed);
    figure(&format!(
        "containerd {} with another event-stream subscriber (it took {taken} events) and NRI: 8 starts, each told within 5 s, {by_nri} found by a read NRI prompted and {by_stream} otherwise; StartContainer returned -> CONTAINER_STARTED: {:?} ms",
        env.version,
        latencies.iter().map(|l| format!("{l:.1}")).collect::<Vec<_>>(),
    ));
    if env.version == "1.7" {
        assert!(taken > 0, "containerd 1.7 handed the other subscriber some of the events");
    }
    other.abort();
    remove_pod(&c, &sid).await;
    sc.stop().await;
}

/// Timed CRI calls of one pod: its sandbox run, its container created and started.
async fn timed_pod(c: &CriClient, name: &str) -> (String, [Duration; 3]) {
    let pod = PodSpec::new("nri-stall", name);
    let t = Instant::now();
    let sid = run_pod(c, &pod).await;
    let run = t.elapsed();
    let mut raw = c.raw();
    let t = Instant::now();
    let spec = ContainerSpec::new("main");
    let id =
        raw.create_container(pod.create_request(&sid, &spec)).await.expect("CreateContainer").into_inner().container_id;
    let create = t.elapsed();
    let t = Instant::now();
    raw.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("StartContainer");
    (sid, [run, create, t.elapsed()])
}

/// The sum of a metric family's samples as plegd's `/metrics` says them.
async fn metric(p: &support::binary::Binary, name: &str) -> f64 {
    let (_, text) = support::try_http(p.admin, "GET", "/metrics").await.unwrap_or_default();
    text.lines().filter(|l| l.starts_with(name)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

async fn until_registered(p: &support::binary::Binary, within: Duration) -> Duration {
    let t = Instant::now();
    while metric(p, "plegd_nri_registered").await != 1.0 {
        assert!(t.elapsed() < within, "plegd registered again within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    t.elapsed()
}

/// plegd (the binary, no event stream, relists two minutes apart: only NRI and its
/// re-registration can tell it anything soon) stopped with SIGSTOP for 30 s while pods
/// are made: each runtime call waits at most the runtime's 2 s per plugin call, every
/// pod starts, and plegd, resumed, registers again and has every pod. Then killed: the
/// runtime's calls no longer wait at all, and plegd restarted registers again and
/// reports the pod made while it was down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real containerd with NRI: run tests/e2e/run.sh"]
async fn a_stopped_or_killed_plegd_never_stops_a_pod_from_starting_and_catches_up_after() {
    let env = env();
    let socket = nri_socket(&env);
    let c = env.client();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let bin = env!("CARGO_BIN_EXE_plegd");
    let flags = ["--mode", "generic", "--relist-period", "120s", "--nri", "on", "--nri-socket", &socket];
    let p = support::binary::start_with(bin, &env.endpoint, &state, dir.path(), &flags).await;
    until_registered(&p, Duration::from_secs(10)).await;
    let mut pods = Vec::new();
    let mut baseline = Duration::ZERO;
    for i in 0..3 {
        let (sid, calls) = timed_pod(&c, &format!("before-{i}")).await;
        baseline = baseline.max(calls.into_iter().max().unwrap());
        pods.push(sid);
    }
    const STOPPED: Duration = Duration::from_secs(30);
    let signal = |sig: &str| {
        let ok = Command::new("kill").args([sig, &p.child.id().to_string()]).status().unwrap();
        assert!(ok.success(), "kill {sig}");
    };
    signal("-STOP");
    let stopped_at = Instant::now();
    let mut while_stopped = Duration::ZERO;
    let mut made = Vec::new();
    for i in 0..3 {
        let (sid, calls) = timed_pod(&c, &format!("stopped-{i}")).await;
        while_stopped = while_stopped.max(calls.into_iter().max().unwrap());
        made.push(sid);
    }
    assert!(
        while_stopped < Duration::from_millis(3500),
        "a runtime call waited {while_stopped:?} on a stopped plugin (the runtime's limit is 2 s a call)"
    );
    tokio::time::sleep(STOPPED.saturating_sub(stopped_at.elapsed())).await;
    signal("-CONT");
    let back = until_registered(&p, Duration::from_secs(15)).await;
    let has = |view: &std::collections::BTreeMap<String, String>, ids: &[String]| {
        ids.iter().all(|id| view.get(id).is_some_and(|s| s.starts_with("sandbox:")))
    };
    let t = Instant::now();
    while !has(&support::binary::view(&p).await, &made) {
        assert!(t.elapsed() < Duration::from_secs(15), "plegd resumed has every pod made while it was stopped");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let caught_up = t.elapsed() + back;
    // Killed: the runtime drops the connection and calls no plugin.
    support::binary::stop(p, support::binary::Stop::Kill);
    let (sid, calls) = timed_pod(&c, "killed").await;
    let while_killed = calls.into_iter().max().unwrap();
    assert!(while_killed < Duration::from_secs(1), "a runtime call waited {while_killed:?} after plegd was killed");
    made.push(sid.clone());
    let p = support::binary::start_with(bin, &env.endpoint, &state, dir.path(), &flags).await;
    until_registered(&p, Duration::from_secs(10)).await;
    assert!(has(&support::binary::view(&p).await, &made), "plegd restarted has the pod made while it was down");
    figure(&format!(
        "containerd {} with plegd as an NRI plugin: slowest RunPodSandbox/CreateContainer/StartContainer {:.0} ms \
         registered, {:.0} ms while plegd was stopped (SIGSTOP {} s), {:.0} ms after it was killed; resumed, plegd \
         registered again and had every pod in {:.1} s",
        env.version,
        baseline.as_secs_f64() * 1e3,
        while_stopped.as_secs_f64() * 1e3,
        STOPPED.as_secs(),
        while_killed.as_secs_f64() * 1e3,
        caught_up.as_secs_f64(),
    ));
    support::binary::stop(p, support::binary::Stop::Term);
    for sid in pods.into_iter().chain(made) {
        remove_pod(&c, &sid).await;
    }
}

/// The CRI calls the test times, as containerd's metrics name them.
const TIMED_CALLS: [&str; 3] = ["RunPodSandbox", "CreateContainer", "StartContainer"];

/// containerd's own clock: for each of [`TIMED_CALLS`], the seconds it spent serving
/// them and how many it served (`grpc_server_handling_seconds`), from its metrics
/// listener (`PLEGD_E2E_METRICS`, which tests/e2e/run.sh sets); `None` without one.
async fn runtime_clock() -> Option<[(f64, f64); 3]> {
    let addr = std::env::var("PLEGD_E2E_METRICS").ok().filter(|a| !a.is_empty())?;
    let (_, text) = support::try_http(addr.parse().expect("PLEGD_E2E_METRICS is host:port"), "GET", "/v1/metrics")
        .await
        .unwrap_or_else(|e| panic!("containerd's metrics at {addr}: {e}"));
    let sample = |name: &str, call: &str| {
        let label = format!("grpc_method=\"{call}\",grpc_service=\"runtime.v1.RuntimeService\"");
        text.lines()
            .filter(|l| l.starts_with(name) && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    Some(TIMED_CALLS.map(|call| {
        (sample("grpc_server_handling_seconds_sum", call), sample("grpc_server_handling_seconds_count", call))
    }))
}

/// The standard error of the samples' mean, in ms.
fn standard_error_ms(v: &[Duration]) -> f64 {
    let n = v.len() as f64;
    let ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    let mean = ms.iter().sum::<f64>() / n;
    let var = ms.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (var / n).sqrt()
}

/// The p-th quantile of `v`, in milliseconds.
fn quantile_ms(v: &mut [Duration], q: f64) -> f64 {
    v.sort();
    v[((v.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e3
}

/// NRI's own Go plugin stub as a bare observer (tests/e2e/nri-reference, built by
/// tests/e2e/run.sh), registered on `socket`: it answers every call at once and does
/// nothing else. Killed when dropped.
struct ReferencePlugin(std::process::Child);

impl ReferencePlugin {
    /// Started and synchronized by the runtime; `None` (said loudly) when it is not built.
    fn start(socket: &str) -> Option<Self> {
        use std::io::BufRead;
        let Some(bin) = std::env::var("PLEGD_E2E_NRI_REFERENCE").ok().filter(|b| !b.is_empty()) else {
            eprintln!(
                "*** PLEGD_E2E_NRI_REFERENCE unset: NRI's reference plugin is not built, its way is left out ***"
            );
            return None;
        };
        let mut child = Command::new(&bin)
            .args(["-socket", socket])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("NRI's reference plugin {bin}: {e}"));
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let synced = std::io::BufReader::new(stdout).lines().map_while(Result::ok).any(|l| l == "synchronized");
            let _ = tx.send(synced);
        });
        let plugin = Self(child);
        let synced = rx.recv_timeout(Duration::from_secs(10)).unwrap_or(false);
        assert!(synced, "NRI's reference plugin was not synchronized by the runtime within 10 s");
        Some(plugin)
    }
}

impl Drop for ReferencePlugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The ways the runtime's calls are timed, in each round's order.
const WAYS: [&str; 4] =
    ["no plegd", "plegd without NRI", "plegd registered", "plegd without NRI + NRI's reference plugin"];

/// What registering plegd adds to the runtime's calls: the same pods made in rounds,
/// alternately with no plegd, with plegd not registered (its reads of the runtime are
/// the same), with plegd registered, and with plegd not registered beside NRI's own Go
/// plugin stub registered as a bare observer (what any plugin costs the runtime), each
/// call timed by the caller; and plegd's own
/// time from a call's read to its answer's write (`plegd_nri_answer_duration_seconds`),
/// and each way's mean on containerd's own clock (its gRPC handling time, which holds
/// the plugin's calls made before it answers). A figure, with the machine's noise beside
/// it: the two rounds without a plugin differ by what plegd's own reads cost the runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real containerd with NRI: run tests/e2e/run.sh"]
async fn what_plegd_adds_to_the_runtimes_calls_is_measured_with_and_without_it() {
    log();
    let env = env();
    let socket = nri_socket(&env);
    let c = env.client();
    // More rounds narrow the means (PLEGD_E2E_NRI_ROUNDS; a call's spread on this
    // machine is several ms, so a 1 ms difference needs hundreds of pods each way).
    let rounds: usize = std::env::var("PLEGD_E2E_NRI_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    const PODS: usize = 8;
    // [way][call], the ways as WAYS names them.
    let mut times: [[Vec<Duration>; 3]; 4] = Default::default();
    let mut sids = Vec::new();
    let mut answers = (0.0, 0u64, 0u64);
    // [way][call]: (seconds, calls) on containerd's clock.
    let mut served = [[(0.0, 0.0); 3]; 4];
    for round in 0..rounds {
        for (way, samples) in times.iter_mut().enumerate() {
            let sc = if way > 0 {
                let period = Duration::from_secs(1);
                let sc = start_sidecar_tuned(env.client(), Mode::Auto, period, period, |cfg| {
                    cfg.nri.mode = if way == 2 { NriMode::On } else { NriMode::Off };
                    cfg.nri.socket = socket.clone().into();
                })
                .await;
                let registered = sc.metrics.nri.registered.clone();
                if way == 2 {
                    until(Duration::from_secs(10), "registration", || registered.get() == 1).await;
                }
                Some(sc)
            } else {
                None
            };
            let reference = if way == 3 {
                match ReferencePlugin::start(&socket) {
                    Some(p) => Some(p),
                    None => {
                        if let Some(sc) = sc {
                            sc.stop().await;
                        }
                        continue;
                    }
                }
            } else {
                None
            };
            let before = runtime_clock().await;
            for i in 0..PODS {
                let (sid, calls) = timed_pod(&c, &format!("r{round}-{way}-{i}")).await;
                for (k, d) in calls.into_iter().enumerate() {
                    samples[k].push(d);
                }
                sids.push(sid);
            }
            if let (Some(before), Some(after)) = (before, runtime_clock().await) {
                for k in 0..3 {
                    served[way][k].0 += after[k].0 - before[k].0;
                    served[way][k].1 += after[k].1 - before[k].1;
                }
            }
            drop(reference);
            if let Some(sc) = sc {
                let text = sc.metrics.encode_text();
                let sample = |name: &str| {
                    text.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                };
                answers.0 += sample("plegd_nri_answer_duration_seconds_sum").unwrap_or(0.0);
                answers.1 += sample("plegd_nri_answer_duration_seconds_count").unwrap_or(0.0) as u64;
                answers.2 += sample("plegd_nri_answer_duration_seconds_bucket{le=\"0.001\"}").unwrap_or(0.0) as u64;
                sc.stop().await;
            }
        }
        // Each round starts from the same node: its pods go (a node that keeps
        // hundreds of pods serves every call more slowly).
        for sid in sids.drain(..) {
            remove_pod(&c, &sid).await;
        }
    }
    assert_eq!(times[2][2].len(), rounds * PODS, "every pod started with plegd registered");
    assert!(answers.1 >= (rounds * PODS * 2) as u64, "plegd answered the runtime's calls: {answers:?}");
    // The ways that ran (the reference plugin's only where it is built).
    let ran: Vec<usize> = (0..WAYS.len()).filter(|&w| !times[w][0].is_empty()).collect();
    let names: Vec<&str> = ran.iter().map(|&w| WAYS[w]).collect();
    let mut line = format!(
        "containerd {} caller-timed, {} pods each way in {rounds} rounds, p50/p99 ms with {}:",
        env.version,
        rounds * PODS,
        names.join(", ")
    );
    for (k, call) in TIMED_CALLS.iter().enumerate() {
        let cells: Vec<String> = ran
            .iter()
            .map(|&w| format!("{:.1}/{:.1}", quantile_ms(&mut times[w][k], 0.5), quantile_ms(&mut times[w][k], 0.99)))
            .collect();
        line.push_str(&format!(" {call} {};", cells.join(", ")));
    }
    line.push_str(&format!(
        " plegd's answer (read to write) mean {:.0} µs over {} calls, {} of them within 1 ms",
        answers.0 / answers.1 as f64 * 1e6,
        answers.1,
        answers.2
    ));
    if std::env::var("PLEGD_E2E_METRICS").is_ok_and(|a| !a.is_empty()) {
        for &way in &ran {
            for (k, &(_, n)) in served[way].iter().enumerate() {
                assert_eq!(n as usize, rounds * PODS, "containerd counted each {} with {}", TIMED_CALLS[k], WAYS[way]);
            }
        }
        line.push_str(&format!(
            "; on containerd's own clock, mean ms (± the caller-timed samples' standard error) with {}:",
            names.join(", ")
        ));
        for (k, call) in TIMED_CALLS.iter().enumerate() {
            let cells: Vec<String> = ran
                .iter()
                .map(|&w| {
                    let mean = served[w][k].0 / served[w][k].1 * 1e3;
                    format!("{mean:.2}±{:.2}", standard_error_ms(&times[w][k]))
                })
                .collect();
            line.push_str(&format!(" {call} {};", cells.join(", ")));
        }
    } else {
        line.push_str("; *** containerd's own clock not read: PLEGD_E2E_METRICS (its metrics listener) is unset ***");
    }
    figure(&line);
}
