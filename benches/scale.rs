//! plegd at scale, nothing changing: `plegd sim` holding `--pods` pods of
//! `--containers` containers, `plegd run --mode generic` (a full relist every second)
//! with its journal in a fresh state dir, as processes of this build. Once the simulator
//! holds every container, reports how long plegd takes from its start to `/readyz` 200, then its CPU share over `--seconds` and
//! its RSS at the end, with `--watchers` `plegd watch` clients connected once ready.
//! `cargo bench --bench scale` runs the two loads of the targets one after the
//! other (5,000 × 4 without watchers; 1,000 × 5 with 10); with `--pods N` it runs that
//! one load. With `--before PATH` each load runs first with the `plegd` at PATH (an
//! earlier build), then with this one, back to back, and both lines are printed: a
//! before/after pair on a shared machine sees the same load. With `--pods-api` instead,
//! each load runs twice, back to back, with the simulator serving a kubelet Pods API that
//! names every pod's controller, node and address: plegd once told not to watch it
//! (`--kubelet-pods-socket ""`, identities inferred) and once watching it.
#![allow(missing_docs)]

mod support;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use support::{BIN, Proc, arg, run_args, sim, sim_with, spawn, wait_path};

/// CPU seconds and RSS bytes of a process.
fn usage(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
    let ticks = |n: usize| f.get(n - 3).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    ((ticks(14) + ticks(15)) / 100.0, rss_kib * 1024.0)
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The whole answer to `GET path` on plegd's admin port, status line first.
fn get(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes()).ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

/// Whether `GET /readyz` answers 200.
fn ready(port: u16) -> bool {
    get(port, "/readyz").is_some_and(|r| r.split(' ').nth(1) == Some("200"))
}

/// Waits until the simulated runtime at `cri` holds `n` containers: it listens before
/// it has made its pods, and plegd's start is timed against a runtime that is all there.
fn populated(cri: &str, n: usize) {
    use plegd::cri::RuntimeService;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    rt.block_on(async {
        let client = plegd::cri::client::CriClient::new(
            cri,
            Default::default(),
            plegd::cri::metrics::CriMetrics::register(&mut Default::default()),
        )
        .unwrap();
        while client.list_containers(None).await.map_or(0, |c| c.len()) < n {
            assert!(Instant::now() < deadline, "the simulated runtime never held its {n} containers");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}

/// Whether plegd's `/metrics` on `port` says its Pods API watch is up.
fn pods_api_up(port: u16) -> bool {
    get(port, "/metrics").is_some_and(|m| m.lines().any(|l| l == "plegd_kubelet_pods_api_up 1"))
}

/// One load: returns (seconds to ready, share of a core, RSS in MiB). `pods_api`: the
/// simulator serves a kubelet Pods API, and plegd watches it (`Some(true)`) or is told
/// there is none (`Some(false)`); `None`: neither (a build from before the flag).
fn measure(
    bin: &str,
    pods: usize,
    containers: usize,
    watchers: usize,
    secs: u64,
    pods_api: Option<bool>,
) -> (f64, f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = dir.path().join("pods-api.sock").display().to_string();
    let (_sim, cri) = match pods_api {
        Some(_) => sim_with(dir.path(), pods, containers, 0.0, &["--pods-api", &kubelet]),
        None => sim(dir.path(), pods, containers, 0.0),
    };
    populated(&cri, pods * containers);
    let api = format!("unix://{}", dir.path().join("plegd.sock").display());
    let admin = format!("127.0.0.1:{}", free_port());
    let state = dir.path().join("state").display().to_string();
    let started = Instant::now();
    // `run_args`, with an admin port known here (to ask `/readyz`) and a debug listener
    // on any port (another plegd on the machine may hold the default one).
    let mut args = run_args(&cri, &api, "generic", &state);
    args[6] = &admin;
    let mut args = [&args[..], &["--debug-addr", "127.0.0.1:0", "--relist-period", "1s"]].concat();
    if let Some(watch) = pods_api {
        args.extend(["--kubelet-pods-socket", if watch { kubelet.as_str() } else { "" }]);
    }
    let run = Proc(
        std::process::Command::new(bin)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn plegd"),
    );
    let port = admin.rsplit_once(':').unwrap().1.parse().unwrap();
    while !ready(port) {
        assert!(started.elapsed() < Duration::from_secs(300), "plegd never got ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    let to_ready = started.elapsed().as_secs_f64();
    while pods_api == Some(true) && !pods_api_up(port) {
        assert!(started.elapsed() < Duration::from_secs(300), "plegd never watched the simulated Pods API");
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_path(&dir.path().join("plegd.sock"));
    let _watchers: Vec<_> = (0..watchers).map(|_| spawn(&["watch", "--socket", &api])).collect();
    // The start's burst (the first relist, the journal's first commits) settles.
    std::thread::sleep(Duration::from_secs(5));
    let pid = run.0.id();
    let (c0, _) = usage(pid);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let (c1, rss) = usage(pid);
    (to_ready, (c1 - c0) / t0.elapsed().as_secs_f64() * 100.0, rss / 1048576.0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs = arg(&args, "--seconds", 30u64);
    let loads = match arg(&args, "--pods", 0usize) {
        0 => vec![(5000, 4, 0), (1000, 5, 10)],
        pods => vec![(pods, arg(&args, "--containers", 5usize), arg(&args, "--watchers", 0usize))],
    };
    let before = args.windows(2).find(|w| w[0] == "--before").map(|w| w[1].clone());
    let mut runs: Vec<(&str, &str, Option<bool>)> = match &before {
        Some(b) => vec![("before", b.as_str(), None), ("after", BIN, None)],
        None => vec![("", BIN, None)],
    };
    if args.iter().any(|a| a == "--pods-api") {
        runs = vec![("inferred", BIN, Some(false)), ("kubelet Pods API", BIN, Some(true))];
    }
    for (pods, containers, watchers) in loads {
        for &(name, bin, pods_api) in &runs {
            let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
            let (to_ready, cpu, rss) = measure(bin, pods, containers, watchers, secs, pods_api);
            println!(
                "scale{name_sep}{name} (generic, 1 s relist, journal on disk, nothing changing): {pods} pods × \
                 {containers} containers, {watchers} watchers: ready after {to_ready:.1} s, plegd CPU {cpu:.2}% of a \
                 core over {secs} s, RSS {rss:.1} MiB (load average at the start {load})",
                name_sep = if name.is_empty() { "" } else { " " },
                load = load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
            );
        }
    }
}
