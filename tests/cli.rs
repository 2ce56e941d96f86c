//! The `plegd` binary: usage errors, a runtime that is missing at start, the demo and
//! graceful shutdown.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_plegd");

fn plegd(args: &[&str]) -> Output {
    Command::new(BIN).args(args).env_remove("RUST_LOG").output().expect("run plegd")
}

fn assert_usage_error(args: &[&str], names: &str) {
    let out = plegd(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line, no usage dump: {stderr}");
    assert!(stderr.contains(names), "{args:?}: the error names {names}: {stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"), "{stderr}");
}

#[test]
fn check_config_accepts_valid_flags_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("plegd.sock");
    let state = dir.path().join("state");
    let out = plegd(&[
        "run",
        "--check-config",
        &format!("--listen=unix://{}", sock.display()),
        &format!("--state-dir={}", state.display()),
        "--runtime-endpoint=unix:///nonexistent/containerd.sock",
        "--allow-uid=1000000000,65534",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("the configuration is valid"), "{stdout}");
    assert!(!sock.exists() && !state.exists(), "nothing bound or created");
}

#[test]
fn check_config_refuses_invalid_flags_as_run_does() {
    assert_usage_error(&["run", "--check-config", "--relist-threshold", "0s"], "--relist-threshold");
    assert_usage_error(&["run", "--check-config", "--journal-memory-budget", "8 parsecs"], "--journal-memory-budget");
}

#[test]
fn an_unknown_flag_is_a_one_line_usage_error() {
    assert_usage_error(&["run", "--bogus"], "--bogus");
}

#[test]
fn a_malformed_duration_names_the_flag() {
    assert_usage_error(&["run", "--relist-period", "soon"], "--relist-period");
    assert_usage_error(&["run", "--relist-threshold", "0s"], "--relist-threshold");
}

#[test]
fn a_worker_thread_count_out_of_range_names_the_flag() {
    assert_usage_error(&["run", "--worker-threads", "0"], "--worker-threads");
    assert_usage_error(&["sim", "--worker-threads", "many"], "--worker-threads");
    let out = Command::new(BIN).args(["run"]).env("PLEGD_WORKER_THREADS", "257").output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--worker-threads"));
}

#[test]
fn sim_never_replaces_a_file_it_is_asked_to_serve_the_pods_api_at() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pods-api.sock");
    std::fs::write(&file, "not a socket").unwrap();
    let cri = format!("unix://{}", dir.path().join("cri.sock").display());
    assert_usage_error(&["sim", "--listen", &cri, "--pods-api", &file.display().to_string()], "--pods-api");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a socket", "left as it was");
}

#[test]
fn an_endpoint_that_is_not_unix_names_the_flag() {
    assert_usage_error(&["run", "--runtime-endpoint", "tcp://127.0.0.1:1"], "--runtime-endpoint");
}

#[test]
fn a_bad_admin_address_and_a_bad_log_filter_name_their_flags() {
    assert_usage_error(&["run", "--admin-addr", "localhost"], "--admin-addr");
    assert_usage_error(&["run", "--log-level", "plegd=loud"], "--log-level");
    assert_usage_error(&["run", "--log-format", "xml"], "--log-format");
}

#[test]
fn flags_can_come_from_the_environment() {
    let out = Command::new(BIN).args(["run"]).env("PLEGD_RELIST_PERIOD", "never").output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--relist-period"));
}

#[test]
fn help_lists_every_flag_with_its_environment_variable() {
    let out = plegd(&["run", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for (flag, env) in [
        ("--runtime-endpoint", "PLEGD_RUNTIME_ENDPOINT"),
        ("--relist-period", "PLEGD_RELIST_PERIOD"),
        ("--relist-threshold", "PLEGD_RELIST_THRESHOLD"),
        ("--admin-addr", "PLEGD_ADMIN_ADDR"),
        ("--log-format", "PLEGD_LOG_FORMAT"),
        ("--worker-threads", "PLEGD_WORKER_THREADS"),
    ] {
        assert!(help.contains(flag) && help.contains(env), "{flag} / {env} missing from:\n{help}");
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    Some((code, body))
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sigterm(child: &Child) {
    let ok = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(ok.success());
}

#[test]
fn a_runtime_missing_at_start_is_not_ready_then_ready_once_it_appears() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/containerd.sock");
    let endpoint = format!("unix://{}", socket.display());
    let port = free_port();
    let mut sidecar = Killed(
        Command::new(BIN)
            .args(["run", "--runtime-endpoint", &endpoint, "--admin-addr", &format!("127.0.0.1:{port}")])
            .args(["--debug-addr", "127.0.0.1:0"])
            .args(["--listen", &format!("unix://{}", dir.path().join("api/plegd.sock").display())])
            .args(["--state-dir", &dir.path().join("state").display().to_string()])
            .args(["--relist-period", "100ms"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for("the admin server", Duration::from_secs(10), || get(port, "/livez").is_some());
    assert_eq!(get(port, "/livez").unwrap().0, 200);
    let (code, body) = get(port, "/readyz").unwrap();
    assert_eq!(code, 503, "{body}");
    let (code, body) = get(port, "/healthz").unwrap();
    assert_eq!((code, body.lines().next()), (500, Some("PLEG is not healthy: pleg has yet to be successful")));
    assert!(body.contains("last relist failed: ") && body.contains("No such file"), "the cause is named: {body}");

    let _sim = Killed(
        Command::new(BIN)
            .args(["sim", "--listen", &endpoint, "--pods", "3", "--churn-per-sec", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("readiness", Duration::from_secs(15), || get(port, "/readyz").is_some_and(|(c, _)| c == 200));
    assert_eq!(get(port, "/healthz").unwrap().0, 200);
    // Ready means the first relist is done; the simulator may still have been creating
    // its pods then (it serves while it populates), so they may arrive a relist later.
    wait_for("the runtime's three pods in the cache", Duration::from_secs(10), || {
        get(port, "/metrics").is_some_and(|(_, m)| m.contains("plegd_cache_pods 3"))
    });
    let metrics = get(port, "/metrics").unwrap().1;
    assert!(metrics.contains("plegd_cri_requests_total{method=\"ListPodSandbox\",code=\"OK\"}"), "{metrics}");

    sigterm(&sidecar.0);
    let started = Instant::now();
    let status = loop {
        if let Some(s) = sidecar.0.try_wait().unwrap() {
            break s;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no graceful exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    let mut stderr = String::new();
    sidecar.0.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(stderr.contains("not reachable yet"), "the wait for the runtime is logged: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_sigterm_while_waiting_for_another_plegds_state_dir_exits_zero_at_once() {
    // A rollout: the old pod still holds the state dir, the new one waits for it (up
    // to 20 s) — and the kubelet gives up on the rollout and stops the new one.
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state").display().to_string();
    let spawn = |n: usize, port: u16| {
        Command::new(BIN)
            .args(["run", "--runtime-endpoint", "unix:///nonexistent/cri.sock", "--debug-addr", "127.0.0.1:0"])
            .args(["--admin-addr", &format!("127.0.0.1:{port}"), "--state-dir", &state])
            .args(["--listen", &format!("unix://{}", dir.path().join(format!("api{n}.sock")).display())])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let first_port = free_port();
    let _first = Killed(spawn(1, first_port));
    wait_for("the first plegd", Duration::from_secs(10), || get(first_port, "/livez").is_some());
    let mut second = Killed(spawn(2, free_port()));
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = second.0.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = Vec::new();
    while !log.iter().any(|l: &String| l.contains("waiting up to")) {
        log.push(rx.recv_timeout(Duration::from_secs(10)).expect("the second plegd says it waits for the state dir"));
    }
    sigterm(&second.0);
    let asked = Instant::now();
    let status = loop {
        if let Some(s) = second.0.try_wait().unwrap() {
            break s;
        }
        assert!(asked.elapsed() < Duration::from_secs(5), "SIGTERM ignored while waiting for the state dir: {log:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{log:?}");
    reader.join().unwrap(); // stderr is closed: every line is in
    log.extend(rx.try_iter());
    assert!(log.iter().any(|l| l.contains("before it had started")), "the early exit is said: {log:?}");
    assert!(!log.iter().any(|l| l.contains("panicked") || l.contains("ERROR")), "{log:?}");
    assert_eq!(get(first_port, "/livez").map(|r| r.0), Some(200), "the holder goes on");
}

#[test]
fn an_admin_address_in_use_is_a_clear_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("unix://{}", dir.path().join("plegd.sock").display());
    let out = plegd(&[
        "run",
        "--runtime-endpoint",
        "unix:///nonexistent/cri.sock",
        "--admin-addr",
        &addr,
        "--listen",
        &listen,
        "--state-dir",
        "",
        "--debug-addr",
        "127.0.0.1:0",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot listen on") && stderr.contains(&addr), "{stderr}");
}

#[test]
fn the_demo_shows_lifecycle_events_and_exits_zero() {
    let out = plegd(&["demo", "--duration", "3s", "--pods", "4", "--churn-per-sec", "5", "--relist-period", "200ms"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.lines().filter(|l| l.contains("CONTAINER_STARTED")).count() >= 8, "{stdout}");
    assert!(stderr.contains("/metrics"), "the demo says where the metrics are: {stderr}");
    assert!(stderr.contains("events,"), "the demo ends with a summary: {stderr}");
}

#[test]
fn a_log_filter_lets_debug_and_trace_lines_through_and_the_default_keeps_them_out() {
    // The subscriber's own level cap must not sit below the filter: `RUST_LOG=plegd=debug`
    // must give debug lines.
    let demo = ["demo", "--duration", "1s", "--pods", "2", "--relist-period", "200ms"];
    let traced = plegd(&[&demo[..], &["--log-level", "plegd=trace"]].concat());
    let stderr = String::from_utf8_lossy(&traced.stderr);
    assert_eq!(traced.status.code(), Some(0), "{stderr}");
    assert!(stderr.lines().any(|l| l.contains(" TRACE ") && l.contains("relist done")), "{stderr}");
    let default = plegd(&demo);
    let stderr = String::from_utf8_lossy(&default.stderr);
    assert_eq!(default.status.code(), Some(0), "{stderr}");
    assert!(!stderr.lines().any(|l| l.contains(" DEBUG ") || l.contains(" TRACE ")), "{stderr}");
}

#[test]
fn the_demo_prints_json_lines_with_o_json() {
    let out = plegd(&["demo", "--duration", "2s", "--pods", "2", "-o", "json", "--relist-period", "200ms"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first = stdout.lines().next().expect("at least one event");
    let v: serde_json::Value = serde_json::from_str(first).unwrap();
    assert_eq!(v["type"], "CONTAINER_STARTED");
    // The first event comes from the startup relist or from the event stream.
    assert!(matches!(v["source"].as_str(), Some("RELIST" | "CRI_EVENT")), "{v}");
    assert!(v["pod"]["uid"].is_string());
}

#[test]
fn evented_mode_is_not_ready_without_a_stream_and_ready_with_one() {
    for (events, want) in [("unimplemented", 503), ("stream", 200)] {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("unix://{}", dir.path().join("cri.sock").display());
        let _sim = Killed(
            Command::new(BIN)
                .args(["sim", "--listen", &endpoint, "--pods", "2", "--churn-per-sec", "0", "--events", events])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        wait_for("the simulated runtime", Duration::from_secs(10), || dir.path().join("cri.sock").exists());
        let port = free_port();
        let _sidecar = Killed(
            Command::new(BIN)
                .args(["run", "--mode", "evented", "--runtime-endpoint", &endpoint, "--state-dir", ""])
                .args(["--debug-addr", "127.0.0.1:0"])
                .args(["--listen", &format!("unix://{}", dir.path().join("plegd.sock").display())])
                .args(["--admin-addr", &format!("127.0.0.1:{port}"), "--relist-period", "100ms"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        wait_for("the first relist", Duration::from_secs(10), || get(port, "/healthz").is_some_and(|(c, _)| c == 200));
        wait_for("readiness to settle", Duration::from_secs(10), || {
            get(port, "/readyz").is_some_and(|(c, _)| c == want)
        });
        let (_, body) = get(port, "/readyz").unwrap();
        if want == 503 {
            assert!(body.contains("requires the CRI event stream"), "{body}");
        }
        let metrics = get(port, "/metrics").unwrap().1;
        let mode = if want == 200 { "evented" } else { "generic" };
        assert!(metrics.contains(&format!("plegd_pleg_mode{{mode=\"{mode}\"}} 1")), "{metrics}");
    }
}

#[test]
fn an_unknown_mode_names_the_flag() {
    assert_usage_error(&["run", "--mode", "fast"], "--mode");
}

/// A `plegd sim` and a `plegd run` on it, in a temporary directory.
struct Node {
    dir: tempfile::TempDir,
    sim: Killed,
    run: Option<Killed>,
    port: u16,
}

impl Node {
    fn api(&self) -> String {
        format!("unix://{}", self.dir.path().join("api/plegd.sock").display())
    }

    fn start_run(&mut self) {
        let endpoint = format!("unix://{}", self.dir.path().join("cri.sock").display());
        let port = self.port;
        self.run = Some(Killed(
            Command::new(BIN)
                .args(["run", "--runtime-endpoint", &endpoint, "--listen", &self.api()])
                .args(["--debug-addr", "127.0.0.1:0"])
                .args(["--state-dir", &self.dir.path().join("state").display().to_string()])
                .args(["--admin-addr", &format!("127.0.0.1:{port}"), "--relist-period", "200ms"])
                .args(["--node-name", "node-under-test"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        ));
        wait_for("plegd ready", Duration::from_secs(15), || get(port, "/readyz").is_some_and(|(c, _)| c == 200));
    }

    fn start(pods: usize, churn: f64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("unix://{}", dir.path().join("cri.sock").display());
        let sim = Killed(
            Command::new(BIN)
                .args([
                    "sim",
                    "--listen",
                    &endpoint,
                    "--pods",
                    &pods.to_string(),
                    "--churn-per-sec",
                    &churn.to_string(),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        wait_for("the simulated runtime", Duration::from_secs(10), || dir.path().join("cri.sock").exists());
        let mut node = Self { dir, sim, run: None, port: free_port() };
        node.start_run();
        node
    }
}

#[test]
fn pods_lists_the_cache_as_a_table_and_as_json() {
    let node = Node::start(4, 0.0);
    let out = plegd(&["pods", "--socket", &node.api()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.starts_with("NAMESPACE"), "{table}");
    assert!(table.contains("# 4 pods on node node-under-test at revision"), "{table}");
    let out = plegd(&["pods", "--socket", &node.api(), "-o", "json", "-n", "default"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pods = v["pods"].as_array().unwrap();
    assert_eq!(v["node_name"], "node-under-test");
    assert!(!pods.is_empty() && pods.iter().all(|p| p["namespace"] == "default"));
    assert!(pods[0]["containers"][0]["state"].as_str().unwrap().starts_with("CONTAINER_STATE_"));
    // The churn's pods are a Deployment's, a StatefulSet's, a CronJob's: named so, inferred.
    for p in pods {
        let id = &p["identity"];
        assert_eq!(
            (id["node_name"].as_str(), id["source"].as_str()),
            (Some("node-under-test"), Some("INFERRED")),
            "{p}"
        );
        assert!(["Deployment", "StatefulSet", "CronJob"].contains(&id["workload"]["kind"].as_str().unwrap()), "{p}");
        assert_eq!(id["pod_ips"], p["ips"], "{p}");
        assert!(p["ips"][0].as_str().unwrap().starts_with("10.244."), "{p}");
    }
    assert!(
        table.lines().nth(1).is_some_and(|l| l.contains("Deployment/") || l.contains("Set/") || l.contains("CronJob/")),
        "{table}"
    );
    let _ = &node.sim;
}

#[test]
fn watch_and_pods_refuse_a_missing_socket_and_a_bad_selector_with_status_64() {
    assert_usage_error(&["watch", "--socket", "unix:///nonexistent/plegd.sock"], "--socket");
    assert_usage_error(&["pods", "--socket", "unix:///nonexistent/plegd.sock"], "--socket");
    let node = Node::start(1, 0.0);
    assert_usage_error(&["pods", "--socket", &node.api(), "--selector", "app in web"], "parenthesised");
    assert_usage_error(&["watch", "--socket", &node.api(), "--type", "EXPLODED"], "--type");
}

#[test]
fn watch_prints_json_lines_and_survives_a_plegd_restart() {
    use std::io::BufRead;
    let mut node = Node::start(3, 4.0);
    let mut watch = Killed(
        Command::new(BIN)
            .args(["watch", "--socket", &node.api(), "-o", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = watch.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let v: serde_json::Value = serde_json::from_str(&line).expect("every line is JSON");
            if tx.send(v).is_err() {
                return;
            }
        }
    });
    let next = |what: &str| rx.recv_timeout(Duration::from_secs(15)).unwrap_or_else(|_| panic!("no {what}"));
    let first = next("first message");
    assert!(first["start"]["epoch"].as_u64().is_some(), "every stream opens with its epoch: {first}");
    let mut v = next("the snapshot");
    while v.get("synced").is_none() {
        assert!(v.get("snapshot").is_some(), "{v}");
        v = next("synced");
    }
    let epoch = v["synced"]["epoch"].as_u64().unwrap();
    let ev = loop {
        let v = next("an event");
        if v.get("event").is_some() {
            break v;
        }
    };
    assert!(ev["event"]["type"].as_str().unwrap().starts_with("CONTAINER_"), "{ev}");
    // plegd restarts on its state dir: the watcher reconnects by itself and resumes in
    // the same epoch, without a reset, and events go on.
    node.run = None;
    node.start_run();
    let start = loop {
        let v = next("the stream's start after the restart");
        assert!(v.get("reset").is_none(), "a restart keeping the state dir resets nobody: {v}");
        if v.get("start").is_some() {
            break v;
        }
    };
    assert_eq!(start["start"]["epoch"].as_u64(), Some(epoch), "{start}");
    assert_eq!(start["start"]["resumed"], true, "{start}");
    let ev = loop {
        let v = next("an event after the restart");
        assert!(v.get("reset").is_none(), "{v}");
        if v.get("event").is_some() {
            break v;
        }
    };
    assert!(ev["event"]["type"].as_str().unwrap().starts_with("CONTAINER_"), "{ev}");
}

#[test]
fn a_state_dir_that_cannot_be_created_and_a_bad_budget_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "").unwrap();
    let state = file.join("state").display().to_string();
    let listen = format!("unix://{}", dir.path().join("plegd.sock").display());
    let out = plegd(&[
        "run",
        "--state-dir",
        &state,
        "--listen",
        &listen,
        "--admin-addr",
        "127.0.0.1:0",
        "--debug-addr",
        "127.0.0.1:0",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("--state-dir") && stderr.contains(&state), "names the flag and the path: {stderr}");
    assert_usage_error(&["run", "--journal-memory-budget", "8XB"], "--journal-memory-budget");
    assert_usage_error(&["run", "--journal-disk-budget", "12KiB"], "--journal-disk-budget");
}

#[test]
fn version_and_the_build_info_metric_name_the_same_revision() {
    let out = plegd(&["--version"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let (version, revision) = (env!("CARGO_PKG_VERSION"), env!("PLEGD_REVISION"));
    assert_eq!(text.trim(), format!("plegd {version} ({revision})"));
    assert!(!revision.is_empty(), "build.rs names a revision, `unknown` at worst");
    let metrics = plegd::app::Metrics::new();
    let sample = format!("plegd_build_info{{version=\"{version}\",revision=\"{revision}\"}} 1");
    for (format, text) in [("OpenMetrics", metrics.encode()), ("text", metrics.encode_text())] {
        assert!(text.lines().any(|l| l == sample), "{format}: no {sample} in\n{text}");
    }
}
