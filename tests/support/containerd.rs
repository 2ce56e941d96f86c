//! What the end-to-end tests against a real containerd share: where `tests/e2e/run.sh`
//! started it (`PLEGD_E2E_*`), a CRI client on it, its control script, and the figures
//! the runner prints.

use std::process::Command;
use std::time::Duration;

use plegd::cri::client::{ClientOptions, CriClient};
use plegd::cri::spec::PodSpec;
use plegd::proto::runtime as cri;

/// Why an end-to-end test is ignored in a plain `cargo test`.
pub const NEEDS: &str =
    "needs a real containerd: run tests/e2e/run.sh (it installs and starts containerd 1.6, 1.7 and 2.1)";

/// The containerd under test.
pub struct Env {
    /// Its CRI endpoint.
    pub endpoint: String,
    /// `1.6`, `1.7` or `2.1`.
    pub version: String,
    /// The script that stops, starts and queries it (`tests/e2e/ctl.sh`).
    pub ctl: String,
}

/// The containerd `tests/e2e/run.sh` started; says loudly when there is none.
pub fn env() -> Env {
    let get = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| {
            panic!("\n\n*** {k} is not set: this end-to-end test {NEEDS}. It cannot run without containerd. ***\n")
        })
    };
    Env { endpoint: get("PLEGD_E2E_ENDPOINT"), version: get("PLEGD_E2E_VERSION"), ctl: get("PLEGD_E2E_CTL") }
}

impl Env {
    /// A CRI client with deadlines for a loaded two-core machine.
    pub fn client(&self) -> CriClient {
        let opts = ClientOptions {
            timeout: Duration::from_secs(10),
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
        };
        CriClient::new(&self.endpoint, opts, plegd::cri::metrics::CriMetrics::register(&mut Default::default()))
            .unwrap()
    }

    /// Runs the control script's `action` (`stop`, `start`, `kill`, …) on this version.
    pub fn ctl(&self, action: &str) {
        let out = Command::new(&self.ctl).args([action, &self.version]).output().unwrap();
        assert!(out.status.success(), "{action}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Whether this containerd has the CRI event stream (1.6 has none).
    pub fn has_stream(&self) -> bool {
        self.version != "1.6"
    }
}

/// Records a measured figure in `$PLEGD_E2E_FIGURES` (the runner prints them).
pub fn figure(line: &str) {
    use std::io::Write;
    println!("FIGURE {line}");
    if let Ok(path) = std::env::var("PLEGD_E2E_FIGURES") {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        writeln!(f, "{line}").unwrap();
    }
}

/// Runs a pod's sandbox as the kubelet would; returns its id.
pub async fn run_pod(c: &CriClient, pod: &PodSpec) -> String {
    c.raw().run_pod_sandbox(pod.run_request()).await.expect("RunPodSandbox").into_inner().pod_sandbox_id
}

/// Creates and starts a container; returns its id and when StartContainer returned.
pub async fn start(
    c: &CriClient,
    pod: &PodSpec,
    sid: &str,
    spec: &plegd::cri::spec::ContainerSpec,
) -> (String, tokio::time::Instant) {
    let mut raw = c.raw();
    let id =
        raw.create_container(pod.create_request(sid, spec)).await.expect("CreateContainer").into_inner().container_id;
    raw.start_container(cri::StartContainerRequest { container_id: id.clone() }).await.expect("StartContainer");
    (id, tokio::time::Instant::now())
}

/// Stops and removes a pod's sandbox (its containers go with it).
pub async fn remove_pod(c: &CriClient, sid: &str) {
    let mut raw = c.raw();
    raw.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: sid.into() }).await.expect("StopPodSandbox");
    raw.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: sid.into() })
        .await
        .expect("RemovePodSandbox");
}
