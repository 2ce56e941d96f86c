//! A stderr that nobody reads any more (a log collector gone, `plegd run … 2>&1 | head`)
//! is no reason for any loop to stop: the real binary keeps relisting and publishing,
//! counts the log lines it could not write, and still shuts down on SIGTERM with
//! status 0.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::proto::plegd as api;
use plegd::proto::plegd::watch_event::Kind;
use tokio::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_plegd");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stderr_nobody_reads_stops_no_loop_and_sigterm_still_shuts_plegd_down() {
    let h = support::SimHarness::start().await;
    let state = tempfile::tempdir().unwrap();
    let admin: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let socket = format!("unix://{}", h.dir.path().join("api/plegd.sock").display());
    let mut child = Command::new(BIN)
        .args(["run", "--runtime-endpoint", &h.endpoint, "--listen", &socket, "--relist-period", "100ms"])
        .args(["--admin-addr", &admin.to_string(), "--debug-addr", "127.0.0.1:0"])
        .arg("--state-dir")
        .arg(state.path())
        // Every relist and event logs a line: the broken pipe is hit at once, in every task.
        .env("RUST_LOG", "trace")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start plegd");
    let deadline = Instant::now() + Duration::from_secs(15);
    while support::try_http(admin, "GET", "/readyz").await.map(|r| r.0).unwrap_or(0) != 200 {
        assert!(Instant::now() < deadline, "plegd never became ready");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Nothing reads stderr from now on: every write gets EPIPE.
    drop(child.stderr.take());

    for i in 0..5 {
        let pod = PodSpec::new("default", &format!("before-{i}"));
        h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, text) = support::http(admin, "GET", "/metrics").await;
    assert!(
        metric(&text, "plegd_log_lines_dropped_total") > 0.0,
        "plegd logged into the broken pipe (else this test proves nothing)"
    );

    // A watcher still gets every pod, and a change made now.
    let mut s = plegd::cli::client::connect(&socket)
        .unwrap()
        .watch(api::WatchRequest::default())
        .await
        .expect("watch")
        .into_inner();
    let mut pods = std::collections::BTreeSet::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), s.message()).await.expect("in time").unwrap().unwrap();
        match ev.kind {
            Some(Kind::Snapshot(p)) => {
                pods.insert(p.name);
            }
            Some(Kind::Synced(_)) => break,
            _ => {}
        }
    }
    assert_eq!(pods.len(), 5, "the snapshot holds every pod made after stderr broke: {pods:?}");
    h.run_pod(&PodSpec::new("default", "after"), &[ContainerSpec::new("app")]).await;
    let started = loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), s.message())
            .await
            .expect("the relister and the publisher still run")
            .unwrap()
            .unwrap();
        if let Some(Kind::Event(e)) = ev.kind
            && e.pod_name == "after"
            && !e.is_sandbox
            && e.r#type == api::LifecycleEventType::ContainerStarted as i32
        {
            break e;
        }
    };
    assert_eq!(started.container_name, "app");
    assert_eq!(support::http(admin, "GET", "/livez").await.0, 200, "every loop turns");

    // SIGTERM is heard and obeyed: a clean exit within the grace period.
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("SIGTERM was not obeyed within 15 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "a clean exit: {status:?}");
}
