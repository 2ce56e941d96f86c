//! What the benches that run plegd as a process share: their flags and the processes.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `plegd` binary of this build.
pub const BIN: &str = env!("CARGO_BIN_EXE_plegd");

/// The value after flag `name`, or `default`.
pub fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.windows(2).find(|w| w[0] == name).and_then(|w| w[1].parse().ok()).unwrap_or(default)
}

/// A child process, killed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `plegd ARGS` with its output discarded.
pub fn spawn(args: &[&str]) -> Proc {
    Proc(Command::new(BIN).args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn plegd"))
}

/// Waits up to a minute for `p` (a socket) to appear.
pub fn wait_path(p: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !p.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `plegd sim` serving `pods` pods of `cpp` containers with `churn` changes a second on
/// `dir/cri.sock`, once it listens; returns it and its endpoint.
pub fn sim(dir: &std::path::Path, pods: usize, cpp: usize, churn: f64) -> (Proc, String) {
    sim_with(dir, pods, cpp, churn, &[])
}

/// [`sim`] with the further flags `extra`.
pub fn sim_with(dir: &std::path::Path, pods: usize, cpp: usize, churn: f64, extra: &[&str]) -> (Proc, String) {
    let cri = format!("unix://{}", dir.join("cri.sock").display());
    let args =
        ["--pods", &pods.to_string(), "--containers-per-pod", &cpp.to_string(), "--churn-per-sec", &churn.to_string()];
    let sim = spawn(&[&["sim", "--listen", &cri][..], &args, extra].concat());
    wait_path(&dir.join("cri.sock"));
    (sim, cri)
}

/// The arguments of `plegd run` against `cri` in `mode`, its API on `api`, its journal
/// in `state` (a temporary dir; "" for memory only).
pub fn run_args<'a>(cri: &'a str, api: &'a str, mode: &'a str, state: &'a str) -> [&'a str; 11] {
    [
        "run",
        "--runtime-endpoint",
        cri,
        "--listen",
        api,
        "--admin-addr",
        "127.0.0.1:0",
        "--mode",
        mode,
        "--state-dir",
        state,
    ]
}
