//! The command line's top: `plegd run | demo | sim | watch | pods`. `run`'s flags are
//! `config`'s; the client commands, the demo and the simulated runtime (never imported
//! by the layers below) live here.

pub mod client;
pub mod demo;
mod execute;
pub mod trouble;

pub use execute::{Failure, execute};

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::{ConfigError, LogArgs, RunArgs, parse_duration};
use crate::sim::EventsMode;
use crate::sim::churn::ChurnConfig;

/// plegd: a node-local container lifecycle observer for CRI runtimes.
#[derive(Debug, Parser)]
#[command(name = "plegd", version = crate::VERSION, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Threads that run plegd's tasks. One core serves a node (the relist, the event
    /// stream and tens of watchers) and keeps plegd's CPU and memory bounded; more help
    /// only with hundreds of busy watchers.
    #[arg(
        long,
        global = true,
        env = "PLEGD_WORKER_THREADS",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..=256)
    )]
    pub worker_threads: u16,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
// Parsed once at start; boxing the big variant would only obscure the clap derive.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run the sidecar next to a CRI runtime.
    Run(RunArgs),
    /// Run the simulated runtime with pod churn and the sidecar against it, and show
    /// the lifecycle events live. Needs nothing installed.
    Demo(DemoArgs),
    /// Serve the simulated CRI runtime on a unix socket.
    Sim(SimArgs),
    /// Print lifecycle events from a running plegd (reconnects and resumes by itself).
    Watch(WatchArgs),
    /// List the pods a running plegd has cached.
    Pods(PodsArgs),
    /// Find one container by id, cgroup id, PID, log file, pod and name, or namespace,
    /// running or recently removed.
    #[command(visible_alias = "inspect")]
    Get(GetArgs),
}

/// `plegd get`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("key").required(true).args(["id", "cgroup_id", "pid", "log_path", "pod_uid", "mnt_ns", "pid_ns", "cgroup_path", "pod_ip"])))]
pub struct GetArgs {
    /// plegd's gRPC socket.
    #[arg(long, env = "PLEGD_SOCKET", default_value = "unix:///run/plegd/plegd.sock")]
    pub socket: String,
    /// Container id.
    #[arg(long)]
    pub id: Option<String>,
    /// cgroup id (the cgroup directory's inode, as eBPF tools report it).
    #[arg(long)]
    pub cgroup_id: Option<u64>,
    /// Host PID of any process of the container.
    #[arg(long)]
    pub pid: Option<u32>,
    /// A log file the container wrote (`/var/log/pods/…/<attempt>.log`, rotated or not,
    /// or its `/var/log/containers/…` link).
    #[arg(long)]
    pub log_path: Option<String>,
    /// A pod's uid, with `--container-name` (and `--attempt`).
    #[arg(long, requires = "container_name")]
    pub pod_uid: Option<String>,
    /// The container's name in the pod.
    #[arg(long, requires = "pod_uid")]
    pub container_name: Option<String>,
    /// The container's attempt (0: the first).
    #[arg(long, requires = "pod_uid", default_value_t = 0)]
    pub attempt: u32,
    /// The inode of the container's mount namespace.
    #[arg(long)]
    pub mnt_ns: Option<u64>,
    /// The inode of the container's PID namespace.
    #[arg(long)]
    pub pid_ns: Option<u64>,
    /// A cgroup path (`0::/kubepods.slice/…` as `/proc/PID/cgroup` has it, or a path
    /// under the cgroup root or `/sys/fs/cgroup`).
    #[arg(long)]
    pub cgroup_path: Option<String>,
    /// A pod address (v4 or v6): the pod that held it, at `--at` (default now).
    #[arg(long)]
    pub pod_ip: Option<String>,
    /// With `--pod-ip`: the moment, RFC 3339 (`2026-11-30T07:12:48Z`).
    #[arg(
        long,
        value_parser = humantime::parse_rfc3339_weak,
        conflicts_with_all = ["id", "cgroup_id", "pid", "log_path", "pod_uid", "mnt_ns", "pid_ns", "cgroup_path"]
    )]
    pub at: Option<std::time::SystemTime>,
    /// Output: readable lines, or JSON.
    #[arg(short = 'o', long, env = "PLEGD_OUTPUT", value_enum, default_value = "text")]
    pub output: OutputFormat,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
}

impl GetArgs {
    /// The request's key.
    pub fn key(&self) -> crate::proto::plegd::get_container_request::Key {
        use crate::proto::plegd::get_container_request::Key;
        if let Some(id) = &self.id {
            return Key::ContainerId(id.clone());
        }
        if let Some(cg) = self.cgroup_id {
            return Key::CgroupId(cg);
        }
        if let Some(path) = &self.log_path {
            return Key::LogPath(path.clone());
        }
        if let Some(uid) = &self.pod_uid {
            return Key::Container(crate::proto::plegd::ContainerRef {
                pod_uid: uid.clone(),
                container_name: self.container_name.clone().unwrap_or_default(),
                attempt: self.attempt,
            });
        }
        if let Some(ns) = self.mnt_ns {
            return Key::MntNs(ns);
        }
        if let Some(ns) = self.pid_ns {
            return Key::PidNs(ns);
        }
        if let Some(path) = &self.cgroup_path {
            return Key::CgroupPath(path.clone());
        }
        if let Some(ip) = &self.pod_ip {
            return Key::PodIp(ip.clone());
        }
        Key::Pid(self.pid.unwrap_or_default())
    }
}

/// Which plegd to talk to, and which pods.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// plegd's gRPC socket.
    #[arg(long, env = "PLEGD_SOCKET", default_value = "unix:///run/plegd/plegd.sock")]
    pub socket: String,
    /// Only pods in this namespace.
    #[arg(long, short = 'n', env = "PLEGD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Only the pod with this name.
    #[arg(long, env = "PLEGD_POD")]
    pub pod: Option<String>,
    /// Only the pod with this UID.
    #[arg(long, env = "PLEGD_POD_UID")]
    pub pod_uid: Option<String>,
    /// Only pods whose sandbox labels match this Kubernetes label selector.
    #[arg(long, short = 'l', env = "PLEGD_SELECTOR")]
    pub selector: Option<String>,
    /// Output: readable lines or a table, or JSON.
    #[arg(short = 'o', long, env = "PLEGD_OUTPUT", value_enum, default_value = "text")]
    pub output: OutputFormat,
}

/// `plegd watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Connection and filters.
    #[command(flatten)]
    pub client: ClientArgs,
    /// Resume after this revision instead of starting with a snapshot.
    #[arg(long, env = "PLEGD_SINCE", default_value_t = 0)]
    pub since: u64,
    /// Only these event types (repeat or comma-separate): CONTAINER_STARTED,
    /// CONTAINER_DIED, CONTAINER_REMOVED, CONTAINER_CHANGED, POD_SYNC, CRASH_LOOP,
    /// CRASH_LOOP_CLEARED.
    #[arg(long = "type", short = 't', env = "PLEGD_TYPE", value_delimiter = ',')]
    pub types: Vec<crate::model::event::EventType>,
    /// Also print the snapshot's pods in text output.
    #[arg(long, env = "PLEGD_SHOW_SNAPSHOT")]
    pub show_snapshot: bool,
    /// The epoch `--since` belongs to (from a stream's `start` or `synced`); a plegd
    /// with another journal then answers with a reset and a snapshot instead of
    /// carrying on from its own revisions.
    #[arg(long, env = "PLEGD_EPOCH", default_value_t = 0)]
    pub epoch: u64,
    /// Check every message against the Watch invariants (epoch first, no gap without a
    /// reset, no bookmark ahead of an event, snapshot then synced); violations go to
    /// stderr and the command exits 1.
    #[arg(long, env = "PLEGD_VERIFY")]
    pub verify: bool,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
}

/// `plegd pods`.
#[derive(Debug, Args)]
pub struct PodsArgs {
    /// Connection and filters.
    #[command(flatten)]
    pub client: ClientArgs,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
}

impl ClientArgs {
    /// The server-side filter.
    pub fn filter(&self) -> crate::proto::plegd::PodFilter {
        crate::proto::plegd::PodFilter {
            namespace: self.namespace.clone().unwrap_or_default(),
            pod_uid: self.pod_uid.clone().unwrap_or_default(),
            pod_name: self.pod.clone().unwrap_or_default(),
            label_selector: self.selector.clone().unwrap_or_default(),
        }
    }
}

/// Flags of the simulated runtime's churn.
#[derive(Debug, Args)]
pub struct ChurnArgs {
    /// Pods kept alive.
    #[arg(long, env = "PLEGD_PODS", default_value_t = 20)]
    pub pods: usize,
    /// Containers per pod.
    #[arg(long, env = "PLEGD_CONTAINERS_PER_POD", default_value_t = 2)]
    pub containers_per_pod: usize,
    /// Changes per second.
    #[arg(long, env = "PLEGD_CHURN_PER_SEC", default_value_t = 5.0)]
    pub churn_per_sec: f64,
}

/// `plegd demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Stop after this long (default: run until Ctrl-C).
    #[arg(long, env = "PLEGD_DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Pod churn.
    #[command(flatten)]
    pub churn: ChurnArgs,
    /// Relist period.
    #[arg(long, env = "PLEGD_RELIST_PERIOD", default_value = "1s", value_parser = parse_duration)]
    pub relist_period: Duration,
    /// HTTP: metrics, health, debug (port 0 picks a free port).
    #[arg(long, env = "PLEGD_ADMIN_ADDR", default_value = "127.0.0.1:0")]
    pub admin_addr: SocketAddr,
    /// Output: readable lines, or JSON lines.
    #[arg(short = 'o', long, env = "PLEGD_OUTPUT", value_enum, default_value = "text")]
    pub output: OutputFormat,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
}

/// How client commands print.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Readable lines or tables.
    Text,
    /// JSON lines.
    Json,
}

/// `plegd sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Socket to serve the CRI on.
    #[arg(long, env = "PLEGD_SIM_LISTEN", default_value = "unix:///run/plegd/sim.sock")]
    pub listen: String,
    /// Pod churn.
    #[command(flatten)]
    pub churn: ChurnArgs,
    /// How GetContainerEvents behaves.
    #[arg(long, env = "PLEGD_SIM_EVENTS", value_enum, default_value = "stream")]
    pub events: EventsMode,
    /// Write the simulated node's processes and cgroups under this directory (`proc/`,
    /// `sys/fs/cgroup/`), for `plegd run --host-root` with the same directory.
    #[arg(long, env = "PLEGD_SIM_HOST_ROOT")]
    pub host_root: Option<std::path::PathBuf>,
    /// Serves a simulated kubelet Pods API on this socket, naming each pod's controller
    /// as the controllers' naming says, for `plegd run --kubelet-pods-socket` with it.
    #[arg(long, env = "PLEGD_SIM_PODS_API", conflicts_with = "trouble")]
    pub pods_api: Option<std::path::PathBuf>,
    /// Adds pods in trouble to the churn: shop/checkout crash-loops, batch/indexer is
    /// OOM-killed, default/hostile carries markup in its labels (for the pages' tests).
    #[arg(long, env = "PLEGD_SIM_TROUBLE")]
    pub trouble: bool,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
}

/// Validates the churn flags.
pub fn churn_config(a: &ChurnArgs) -> Result<ChurnConfig, ConfigError> {
    if !a.churn_per_sec.is_finite() || a.churn_per_sec < 0.0 {
        return Err(ConfigError { flag: "--churn-per-sec", reason: "must be a number ≥ 0".into() });
    }
    Ok(ChurnConfig { pods: a.pods, containers_per_pod: a.containers_per_pod, churn_per_sec: a.churn_per_sec })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::proto::plegd::get_container_request::Key;

    fn key(args: &[&str]) -> Result<Key, String> {
        let cli =
            Cli::try_parse_from(std::iter::once("plegd").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        match cli.command {
            Command::Get(g) => Ok(g.key()),
            other => Err(format!("not get: {other:?}")),
        }
    }

    #[test]
    fn plegd_get_takes_each_key_and_exactly_one() {
        assert_eq!(
            key(&["get", "--log-path", "/var/log/pods/a_b_c/d/0.log"]),
            Ok(Key::LogPath("/var/log/pods/a_b_c/d/0.log".into()))
        );
        assert_eq!(
            key(&["get", "--pod-uid", "u", "--container-name", "app", "--attempt", "2"]),
            Ok(Key::Container(crate::proto::plegd::ContainerRef {
                pod_uid: "u".into(),
                container_name: "app".into(),
                attempt: 2
            }))
        );
        assert_eq!(key(&["get", "--mnt-ns", "4026532001"]), Ok(Key::MntNs(4_026_532_001)));
        assert_eq!(key(&["get", "--pid-ns", "4026532002"]), Ok(Key::PidNs(4_026_532_002)));
        assert_eq!(key(&["get", "--cgroup-path", "0::/k/c"]), Ok(Key::CgroupPath("0::/k/c".into())));
        assert_eq!(
            key(&["get", "--pod-ip", "fd00::9", "--at", "2026-11-30T07:12:48Z"]),
            Ok(Key::PodIp("fd00::9".into()))
        );
        assert!(key(&["get", "--id", "c", "--at", "2026-11-30T07:12:48Z"]).is_err(), "--at is --pod-ip's");
        assert!(key(&["get", "--pod-ip", "fd00::9", "--at", "yesterday"]).is_err(), "a time");
        assert!(key(&["get", "--pod-uid", "u"]).is_err(), "a pod needs the container's name");
        assert!(key(&["get", "--pid", "1", "--mnt-ns", "2"]).is_err(), "one key");
        assert!(key(&["get"]).is_err(), "a key");
    }
}
