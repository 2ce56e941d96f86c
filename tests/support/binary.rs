//! The plegd binary as a process over the simulated runtime: started on a state dir and
//! ready, stopped as a rollout or a crash stops it, watched from a revision, and the
//! journal's view of containers beside the runtime's truth.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use plegd::proto::plegd as api;
use plegd::proto::plegd::watch_event::Kind;
use plegd::sim::SimRuntime;
use tokio::time::Instant;

/// A running `plegd run`, killed when dropped.
pub struct Binary {
    pub child: Child,
    pub socket: String,
    pub bin: String,
    /// Its admin listener (`/metrics`, `/readyz`).
    pub admin: std::net::SocketAddr,
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a turn of plegd ends.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    /// SIGTERM, as a rollout stops a pod: plegd must end with status 0.
    Term,
    /// `kill -9`.
    Kill,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `bin` on the runtime at `endpoint`, its journal in `state`, its API socket in
/// `dir/api`, relisting every 100 ms and off NRI (a node's own runtime is not the one
/// under test: `PLEGD_NRI=off`), and waits until it is ready.
pub async fn start(bin: &str, endpoint: &str, state: &Path, dir: &Path) -> Binary {
    start_with(bin, endpoint, state, dir, &["--relist-period", "100ms"]).await
}

/// [`start`] with the flags `extra` instead of the 100 ms relist period.
pub async fn start_with(bin: &str, endpoint: &str, state: &Path, dir: &Path, extra: &[&str]) -> Binary {
    let admin: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let socket = format!("unix://{}", dir.join("api/plegd.sock").display());
    let child = Command::new(bin)
        .args(["run", "--runtime-endpoint", endpoint, "--listen", &socket])
        .args(["--admin-addr", &admin.to_string(), "--debug-addr", "127.0.0.1:0"])
        .args(extra)
        .arg("--state-dir")
        .arg(state)
        // Off NRI unless `extra` says otherwise, by the environment: a build from before
        // NRI (tests/upgrade.rs) ignores it, and would refuse the flag.
        .env("PLEGD_NRI", "off")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start plegd");
    let p = Binary { child, socket, bin: bin.to_owned(), admin };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready =
            tokio::net::TcpStream::connect(admin).await.is_ok() && super::http(admin, "GET", "/readyz").await.0 == 200;
        if ready {
            return p;
        }
        assert!(Instant::now() < deadline, "{bin} never became ready");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Ends `p` as `how` says.
pub fn stop(mut p: Binary, how: Stop) {
    match how {
        Stop::Term => {
            let ok = Command::new("kill").args(["-TERM", &p.child.id().to_string()]).status().unwrap();
            assert!(ok.success());
            let status = p.child.wait().unwrap();
            assert!(status.success(), "{} ends on SIGTERM with status 0: {status}", p.bin);
        }
        Stop::Kill => {
            p.child.kill().unwrap();
            p.child.wait().unwrap();
        }
    }
}

pub type Stream = tonic::Streaming<api::WatchEvent>;

/// A Watch from `since` in `epoch`, and the stream's first message (its start).
pub async fn open(p: &Binary, since: u64, epoch: u64) -> (Stream, api::StreamStart) {
    let mut s = plegd::cli::client::connect(&p.socket)
        .unwrap()
        .watch(api::WatchRequest { since_revision: since, epoch, ..Default::default() })
        .await
        .expect("watch")
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(5), s.message()).await.expect("in time").unwrap().unwrap();
    let Some(Kind::Start(start)) = first.kind else { panic!("no epoch first: {first:?}") };
    (s, start)
}

/// Every event the stream sends until it is quiet for 2 s: revision → event. A reset
/// fails the test.
pub async fn replay(s: &mut Stream) -> BTreeMap<u64, api::LifecycleEvent> {
    let mut replayed = BTreeMap::new();
    while let Ok(Some(Ok(Some(ev)))) =
        tokio::time::timeout(Duration::from_secs(2), async { Some(s.message().await) }).await
    {
        match ev.kind {
            Some(Kind::Event(e)) => {
                replayed.insert(ev.revision, e);
            }
            Some(Kind::Reset(r)) => panic!("reset {r:?}"),
            _ => {}
        }
    }
    replayed
}

/// The journal's view of every container and sandbox (id → `kind:state`), from a
/// snapshot.
pub async fn view(p: &Binary) -> BTreeMap<String, String> {
    let mut snap =
        plegd::cli::client::connect(&p.socket).unwrap().watch(api::WatchRequest::default()).await.unwrap().into_inner();
    let mut view = BTreeMap::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), snap.message()).await.unwrap().unwrap().unwrap();
        match ev.kind {
            Some(Kind::Snapshot(pod)) => {
                for c in pod.containers {
                    view.insert(c.id.clone(), format!("container:{}", c.state));
                }
                for sb in pod.sandboxes {
                    view.insert(sb.id.clone(), format!("sandbox:{}", sb.state));
                }
            }
            Some(Kind::Synced(_)) => return view,
            _ => {}
        }
    }
}

/// The runtime's containers and sandboxes, as [`view`] names them.
pub async fn truth(sim: &SimRuntime) -> BTreeMap<String, String> {
    let mut truth = BTreeMap::new();
    for sb in sim.list_pod_sandbox(None).await.unwrap() {
        let state = if sb.state == 0 { api::SandboxState::Ready } else { api::SandboxState::Notready };
        truth.insert(sb.id, format!("sandbox:{}", state as i32));
    }
    for c in sim.list_containers_cri(None).await.unwrap() {
        let state = match c.state {
            0 => api::ContainerState::Created,
            1 => api::ContainerState::Running,
            2 => api::ContainerState::Exited,
            _ => api::ContainerState::Unknown,
        };
        truth.insert(c.id, format!("container:{}", state as i32));
    }
    truth
}

/// Churn on the simulated runtime in the background: `pods` pods of two containers,
/// populated now, then a step every `every`, until the token is cancelled.
pub async fn churning(
    sim: &SimRuntime,
    pods: usize,
    every: Duration,
) -> (tokio_util::sync::CancellationToken, tokio::task::JoinHandle<()>) {
    use plegd::sim::churn::{Churn, ChurnConfig};
    let mut churn = Churn::new(sim.clone(), ChurnConfig { pods, containers_per_pod: 2, churn_per_sec: 0.0 });
    churn.populate().await;
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move {
            while !stop.is_cancelled() {
                churn.step().await;
                tokio::time::sleep(every).await;
            }
        }
    });
    (stop, task)
}
