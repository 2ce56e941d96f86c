//! `plegd run`'s flags (clap, one flattened argument struct per subsystem, every flag
//! with a `PLEGD_…` variable) and their one fallible conversion to the validated
//! [`RunConfig`] that `app` builds from. The other commands' flags live in `cli`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::uds::parse_unix_endpoint;

/// Flags of the CRI client.
#[derive(Debug, Args)]
pub struct RuntimeArgs {
    /// CRI runtime socket.
    #[arg(long, env = "PLEGD_RUNTIME_ENDPOINT", default_value = "unix:///run/containerd/containerd.sock")]
    pub runtime_endpoint: String,
    /// Deadline of each CRI call.
    #[arg(long, env = "PLEGD_RUNTIME_REQUEST_TIMEOUT", default_value = "2s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub runtime_request_timeout: Duration,
}

/// Flags of the PLEG.
#[derive(Debug, Args)]
pub struct PlegArgs {
    /// auto: use the CRI event stream when the runtime has it; generic: relist only;
    /// evented: require the stream, still relisting as a safety net.
    #[arg(long, env = "PLEGD_MODE", value_enum, default_value = "auto")]
    pub mode: crate::pleg::evented::Mode,
    /// Safety-net relist period while the event stream is healthy.
    #[arg(long, env = "PLEGD_EVENTED_RELIST_PERIOD", default_value = "300s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub evented_relist_period: Duration,
    /// While the event stream is trusted, a full relist still runs this often, so a
    /// stream that stays connected but stops delivering hides a change no longer (an
    /// unchanged listing costs two list calls and a hash); 0s: only the safety net.
    #[arg(long, env = "PLEGD_STREAM_CHECK_PERIOD", default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub stream_check_period: Duration,
    /// Relist period.
    #[arg(long, env = "PLEGD_RELIST_PERIOD", default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub relist_period: Duration,
    /// Health: the longest time without a completed relist.
    #[arg(long, env = "PLEGD_RELIST_THRESHOLD", default_value = "3m", value_parser = parse_duration, allow_hyphen_values = true)]
    pub relist_threshold: Duration,
    /// Pods inspected at once during a relist.
    #[arg(long, env = "PLEGD_INSPECT_CONCURRENCY", default_value_t = 8)]
    pub inspect_concurrency: usize,
    /// Longest time one pod's inspection may take before it is retried next relist.
    #[arg(long, env = "PLEGD_INSPECT_TIMEOUT", default_value = "5s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub inspect_timeout: Duration,
}

/// Flags of the gRPC API.
#[derive(Debug, Args)]
pub struct ApiArgs {
    /// gRPC API socket (created with mode 0660 in a directory made 0750; a stale
    /// socket file is replaced).
    #[arg(long, env = "PLEGD_LISTEN", default_value = "unix:///run/plegd/plegd.sock")]
    pub listen: String,
    /// Peer UIDs allowed to connect (comma-separated or repeated); none: socket
    /// permissions only.
    #[arg(long, env = "PLEGD_ALLOW_UID", value_delimiter = ',')]
    pub allow_uid: Vec<u32>,
    /// Peer GIDs allowed to connect.
    #[arg(long, env = "PLEGD_ALLOW_GID", value_delimiter = ',')]
    pub allow_gid: Vec<u32>,
    /// Events buffered per watcher before it is reset as a slow consumer.
    #[arg(long, env = "PLEGD_WATCH_BUFFER", default_value_t = 4096)]
    pub watch_buffer: usize,
    /// Watch streams one peer uid may hold open at once — for uid 0, each process, as
    /// every root agent shares it (0: no cap); past it a Watch gets RESOURCE_EXHAUSTED.
    #[arg(long, env = "PLEGD_MAX_WATCH_STREAMS_PER_UID", default_value_t = 256)]
    pub max_watch_streams_per_uid: usize,
    /// Watch streams on the node whose client has not read for 10 s that plegd keeps,
    /// whoever their peers are; past it the connections of the longest stalled are
    /// closed (0: no ceiling).
    #[arg(long, env = "PLEGD_MAX_STALLED_WATCH_STREAMS", default_value_t = 64)]
    pub max_stalled_watch_streams: usize,
    /// A watch stream idle this long gets a bookmark.
    #[arg(long, env = "PLEGD_BOOKMARK_INTERVAL", default_value = "30s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub bookmark_interval: Duration,
}

/// Flags of the journal.
#[derive(Debug, Args)]
pub struct JournalArgs {
    /// Events kept for resuming watchers (within the byte budgets below).
    #[arg(long, env = "PLEGD_JOURNAL_CAPACITY", default_value_t = 100_000)]
    pub journal_capacity: usize,
    /// Where the journal and the pods as its last events left them are kept, so that
    /// revisions, the epoch and resumes survive a restart of plegd; "" keeps everything
    /// in memory (a new epoch at every start).
    #[arg(long, env = "PLEGD_STATE_DIR", default_value = "/var/lib/plegd", value_parser = parse_state_dir)]
    pub state_dir: PathBuf,
    /// Bytes of the newest event records kept in memory for live fan-out and recent
    /// resumes (older ones are replayed from disk). Suffixes: KiB, MiB, GiB.
    #[arg(long, env = "PLEGD_JOURNAL_MEMORY_BUDGET", default_value = "8MiB", value_parser = parse_bytes)]
    pub journal_memory_budget: u64,
    /// Bytes of the journal's database file in use (records, index, SQLite's own
    /// pages); the oldest revisions are compacted away beyond it (a resume from one
    /// gets REVISION_TOO_OLD). The WAL adds up to a second of commits.
    #[arg(long, env = "PLEGD_JOURNAL_DISK_BUDGET", default_value = "256MiB", value_parser = parse_bytes)]
    pub journal_disk_budget: u64,
}

/// Flags of the sync loop, the work queues and the reconcilers.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// Workers per reconciler.
    #[arg(long, env = "PLEGD_WORKERS", default_value_t = 4)]
    pub workers: usize,
    /// How long sync-loop event records are kept for the debug API (the first hour
    /// after start is kept for good).
    #[arg(long, env = "PLEGD_HISTORY_RETENTION", default_value = "24h", value_parser = parse_duration, allow_hyphen_values = true)]
    pub history_retention: Duration,
    /// Bytes of memory the history's records may take, as the allocator counts them
    /// (≈ 150 bytes a record: ≈ 20,000 records, 24 h of 14 events a minute, ≈ 2.5
    /// minutes of a node making 115 events/s); the oldest go first beyond it.
    #[arg(long, env = "PLEGD_HISTORY_MEMORY_BUDGET", default_value = "3MiB", value_parser = parse_bytes)]
    pub history_memory_budget: u64,
    /// Periodic healing resync of the sync loop (0: off).
    #[arg(long, env = "PLEGD_RESYNC_PERIOD", default_value = "5m", value_parser = parse_duration, allow_hyphen_values = true)]
    pub resync_period: Duration,
    /// Garbage-collect dead containers (`--gc` alone means on; `--gc=dry-run` only logs).
    #[arg(long, env = "PLEGD_GC", value_enum, default_value = "off", num_args = 0..=1, default_missing_value = "on", require_equals = true)]
    pub gc: crate::reconcile::GcMode,
    /// Dead containers kept per container name.
    #[arg(long, env = "PLEGD_GC_KEEP", default_value_t = 1)]
    pub gc_keep: usize,
    /// Only dead containers older than this are removed.
    #[arg(long, env = "PLEGD_GC_MIN_AGE", default_value = "1m", value_parser = parse_duration, allow_hyphen_values = true)]
    pub gc_min_age: Duration,
    /// Deaths within --crashloop-window that make a crash loop.
    #[arg(long, env = "PLEGD_CRASHLOOP_DEATHS", default_value_t = 3)]
    pub crashloop_deaths: usize,
    /// The crash-loop window.
    #[arg(long, env = "PLEGD_CRASHLOOP_WINDOW", default_value = "10m", value_parser = parse_duration, allow_hyphen_values = true)]
    pub crashloop_window: Duration,
    /// A crash loop clears when the container has run this long.
    #[arg(long, env = "PLEGD_CRASHLOOP_CLEAR_AFTER", default_value = "2m", value_parser = parse_duration, allow_hyphen_values = true)]
    pub crashloop_clear_after: Duration,
    /// First retry delay of a failed reconcile (doubles per failure).
    #[arg(long, env = "PLEGD_RETRY_BASE", default_value = "5ms", value_parser = parse_duration, allow_hyphen_values = true)]
    pub retry_base: Duration,
    /// Longest retry delay.
    #[arg(long, env = "PLEGD_RETRY_MAX", default_value = "1000s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub retry_max: Duration,
    /// Retries per second across all keys (token bucket).
    #[arg(long, env = "PLEGD_RETRY_QPS", default_value_t = 10.0)]
    pub retry_qps: f64,
    /// Token bucket burst.
    #[arg(long, env = "PLEGD_RETRY_BURST", default_value_t = 100)]
    pub retry_burst: u32,
}

/// Flags of the admin HTTP server.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// HTTP: metrics and health, for Prometheus and the kubelet's probes (nothing that
    /// names the node's pods).
    #[arg(long, env = "PLEGD_ADMIN_ADDR", default_value = "127.0.0.1:9477")]
    pub admin_addr: SocketAddr,
    /// HTTP: the debug API (pods, timelines, history, queues, resync) and the pages;
    /// keep it on loopback unless every local user and pod may read the node's pods.
    #[arg(long, env = "PLEGD_DEBUG_ADDR", default_value = "127.0.0.1:9478")]
    pub debug_addr: SocketAddr,
}

/// Flags of the container lookup.
#[derive(Debug, Args)]
pub struct LookupArgs {
    /// How long `GetContainer` still answers for a removed container (tombstones are
    /// also bounded: 10,000 and 8 MiB, the oldest dropped first).
    #[arg(long, env = "PLEGD_TOMBSTONE_RETENTION", default_value = "1h", value_parser = parse_duration, allow_hyphen_values = true)]
    pub tombstone_retention: Duration,
    /// Where the host's /proc and /sys/fs/cgroup are mounted (for PIDs and cgroup ids;
    /// the DaemonSet mounts them under /host).
    #[arg(long, env = "PLEGD_HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
}

/// Flags of the OTLP export.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// OpenTelemetry Collector to export lifecycle events to, as OTLP log records over
    /// gRPC (`http://host:4317`); none: no export.
    #[arg(long, env = "PLEGD_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// A header sent with each export (`name=value`; repeat or comma-separate).
    #[arg(long, env = "PLEGD_OTLP_HEADER", value_delimiter = ',')]
    pub otlp_header: Vec<String>,
    /// PEM file of the CAs an https:// collector's certificate must chain to (default:
    /// the public web's roots, built in).
    #[arg(long, env = "PLEGD_OTLP_CA_FILE")]
    pub otlp_ca_file: Option<PathBuf>,
}

/// Flags of the process's memory.
#[derive(Debug, Args)]
pub struct MemoryArgs {
    /// How often heap a burst freed is given back to the kernel (glibc's `malloc_trim`);
    /// `0s`: never.
    #[arg(long, env = "PLEGD_MEMORY_TRIM_PERIOD", default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub memory_trim_period: Duration,
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Flags of logging.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, env = "PLEGD_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Log filter (`info`, `plegd=debug`, …); overrides RUST_LOG.
    #[arg(long, env = "PLEGD_LOG_LEVEL")]
    pub log_level: Option<String>,
}

/// `plegd run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// CRI client.
    #[command(flatten)]
    pub runtime: RuntimeArgs,
    /// PLEG.
    #[command(flatten)]
    pub pleg: PlegArgs,
    /// gRPC API.
    #[command(flatten)]
    pub api: ApiArgs,
    /// The journal's flags.
    #[command(flatten)]
    pub journal: JournalArgs,
    /// Sync loop, work queues, reconcilers.
    #[command(flatten)]
    pub sync: SyncArgs,
    /// Admin HTTP.
    #[command(flatten)]
    pub admin: AdminArgs,
    /// Container lookup.
    #[command(flatten)]
    pub lookup: LookupArgs,
    /// OTLP export.
    #[command(flatten)]
    pub export: ExportArgs,
    /// Memory.
    #[command(flatten)]
    pub memory: MemoryArgs,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
    /// The node's name: what the API names (`ListPods`, `synced`) and `k8s.node.name` of
    /// exported records (default: the host name, lowercased as the kubelet does).
    #[arg(long, env = "PLEGD_NODE_NAME")]
    pub node_name: Option<String>,
    /// The kubelet's Pods API socket (KEP-4188), the source of pods' identity where the
    /// kubelet serves it; "" turns it off (every identity inferred from the node).
    #[arg(long, env = "PLEGD_KUBELET_PODS_SOCKET", default_value = crate::kubelet::DEFAULT_SOCKET)]
    pub kubelet_pods_socket: String,
    /// Register as an NRI observer plugin with the runtime: the runtime's own word on
    /// each change, as a hint beside the CRI event stream. auto: where the socket exists.
    #[arg(long, env = "PLEGD_NRI", value_enum, default_value_t = crate::nri::NriMode::Auto)]
    pub nri: crate::nri::NriMode,
    /// The runtime's NRI socket.
    #[arg(long, env = "PLEGD_NRI_SOCKET", default_value = crate::nri::DEFAULT_SOCKET)]
    pub nri_socket: PathBuf,
    /// Check the flags and exit: 0 with nothing started when they are valid, the usage
    /// error otherwise (what a chart or a manifest passes can be checked before a rollout).
    #[arg(long)]
    pub check_config: bool,
}

/// A flag with a value that parses but makes no sense.
#[derive(Debug, thiserror::Error)]
#[error("invalid value for {flag}: {reason}")]
pub struct ConfigError {
    /// The flag.
    pub flag: &'static str,
    /// Why.
    pub reason: String,
}

/// The sidecar's validated configuration: one part per subsystem, each with the flags'
/// defaults as its `Default`, and what several subsystems share, held once: the state
/// dir and the host. Each part builds its subsystem (`app` hands it the shared parts and
/// a registry); the subsystems' own configs leave the shared parts empty here.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Where the journal, the tombstones, the export cursor and the run log are kept;
    /// `None`: memory only.
    pub state_dir: Option<PathBuf>,
    /// The host's `/proc` and `/sys/fs/cgroup`: the relister, the lookup and the runtime
    /// view read processes there.
    pub host: crate::host::Host,
    /// The CRI runtime plegd watches.
    pub runtime: crate::cri::client::RuntimeConfig,
    /// The PLEG: mode, relister, the stream's safety net and check, health.
    pub pleg: crate::pleg::PlegConfig,
    /// The HTTP listeners.
    pub admin: crate::admin::AdminConfig,
    /// The API's socket and policies.
    pub api: crate::grpc::ApiConfig,
    /// The journal: capacity, byte budgets, and the buffer per watcher.
    pub journal: crate::journal::JournalConfig,
    /// Sync loop and reconcilers.
    pub sync: crate::reconcile::SyncConfig,
    /// Giving freed heap back.
    pub memory: crate::memory::ScavengerConfig,
    /// The container lookup and its tombstones.
    pub lookup: crate::lookup::LookupConfig,
    /// OTLP export, if on.
    pub export: Option<crate::export::ExportConfig>,
    /// The kubelet's Pods API, the source of pods' identity where it is served.
    pub kubelet: crate::kubelet::KubeletConfig,
    /// The NRI observer plugin.
    pub nri: crate::nri::NriConfig,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            state_dir: Some(PathBuf::from(crate::journal::STATE_DIR)),
            host: crate::host::Host::default(),
            runtime: Default::default(),
            pleg: Default::default(),
            admin: Default::default(),
            api: Default::default(),
            journal: crate::journal::JournalConfig::default(),
            sync: Default::default(),
            memory: Default::default(),
            lookup: crate::lookup::LookupConfig::in_memory(crate::lookup::LookupConfig::default().retention),
            export: None,
            kubelet: crate::kubelet::KubeletConfig { pods_socket: Some(PathBuf::from(crate::kubelet::DEFAULT_SOCKET)) },
            nri: Default::default(),
        }
    }
}

fn invalid(flag: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError { flag, reason: reason.into() }
}

fn positive(flag: &'static str, d: Duration) -> Result<Duration, ConfigError> {
    if d.is_zero() { Err(invalid(flag, "must be greater than zero")) } else { Ok(d) }
}

impl TryFrom<&RunArgs> for RunConfig {
    type Error = ConfigError;

    fn try_from(a: &RunArgs) -> Result<Self, ConfigError> {
        let runtime_socket = parse_unix_endpoint(&a.runtime.runtime_endpoint)
            .map_err(|e| invalid("--runtime-endpoint", e.to_string()))?;
        let relist_period = positive("--relist-period", a.pleg.relist_period)?;
        let relist_threshold = positive("--relist-threshold", a.pleg.relist_threshold)?;
        if relist_threshold <= relist_period {
            return Err(invalid("--relist-threshold", "must be longer than --relist-period"));
        }
        if a.pleg.inspect_concurrency == 0 {
            return Err(invalid("--inspect-concurrency", "must be at least 1"));
        }
        let node_name = node_name(a.node_name.as_deref())?;
        Ok(Self {
            state_dir: (!a.journal.state_dir.as_os_str().is_empty()).then(|| a.journal.state_dir.clone()),
            host: crate::host::Host::new(&a.lookup.host_root),
            runtime: crate::cri::client::RuntimeConfig {
                endpoint: format!("unix://{}", runtime_socket.display()),
                request_timeout: positive("--runtime-request-timeout", a.runtime.runtime_request_timeout)?,
            },
            pleg: crate::pleg::PlegConfig {
                mode: a.pleg.mode,
                relist_period,
                concurrency: a.pleg.inspect_concurrency,
                inspect_timeout: positive("--inspect-timeout", a.pleg.inspect_timeout)?,
                net_period: positive("--evented-relist-period", a.pleg.evented_relist_period)?,
                stream_check: a.pleg.stream_check_period,
                threshold: relist_threshold,
                stream: Default::default(),
            },
            admin: crate::admin::AdminConfig { addr: a.admin.admin_addr, debug_addr: a.admin.debug_addr },
            api: crate::grpc::ApiConfig {
                socket: parse_unix_endpoint(&a.api.listen).map_err(|e| invalid("--listen", e.to_string()))?,
                allow_uids: a.api.allow_uid.clone(),
                allow_gids: a.api.allow_gid.clone(),
                bookmark_interval: positive("--bookmark-interval", a.api.bookmark_interval)?,
                max_wait: Duration::from_secs(300),
                handshake_timeout: Duration::from_secs(10),
                max_watch_streams_per_uid: a.api.max_watch_streams_per_uid,
                max_stalled_watch_streams: a.api.max_stalled_watch_streams,
                stalled_after: crate::grpc::STALLED_AFTER,
                node_name: node_name.clone(),
            },
            journal: journal_config(&a.journal, a.api.watch_buffer)?,
            sync: sync_config(&a.sync)?,
            memory: crate::memory::ScavengerConfig { period: a.memory.memory_trim_period },
            lookup: crate::lookup::LookupConfig::in_memory(a.lookup.tombstone_retention),
            export: export_config(&a.export, &node_name)?,
            kubelet: crate::kubelet::KubeletConfig { pods_socket: kubelet_pods_socket(&a.kubelet_pods_socket)? },
            nri: nri_config(a.nri, &a.nri_socket)?,
        })
    }
}

impl RunConfig {
    /// A config for a sidecar on `endpoint` with defaults elsewhere (tests, the demo,
    /// embedders): the journal in memory (no state dir), the HTTP listeners on
    /// ephemeral ports, so that many can run at once, no kubelet Pods API (the node's
    /// kubelet runs other pods) and no NRI plugin (the node's runtime is another).
    /// Tune it by setting its parts.
    pub fn for_endpoint(endpoint: &str) -> Result<Self, ConfigError> {
        let socket = parse_unix_endpoint(endpoint).map_err(|e| invalid("--runtime-endpoint", e.to_string()))?;
        let mut cfg = Self::default();
        cfg.runtime.endpoint = format!("unix://{}", socket.display());
        cfg.state_dir = None;
        cfg.kubelet.pods_socket = None;
        cfg.nri.mode = crate::nri::NriMode::Off;
        let ephemeral = SocketAddr::from(([127, 0, 0, 1], 0));
        cfg.admin = crate::admin::AdminConfig { addr: ephemeral, debug_addr: ephemeral };
        Ok(cfg)
    }
}

fn journal_config(j: &JournalArgs, watch_buffer: usize) -> Result<crate::journal::JournalConfig, ConfigError> {
    if j.journal_capacity == 0 {
        return Err(invalid("--journal-capacity", "must be at least 1"));
    }
    if watch_buffer == 0 {
        return Err(invalid("--watch-buffer", "must be at least 1"));
    }
    if j.journal_memory_budget < 64 << 10 {
        return Err(invalid("--journal-memory-budget", "must be at least 64KiB"));
    }
    if j.journal_disk_budget < 1 << 20 {
        return Err(invalid("--journal-disk-budget", "must be at least 1MiB"));
    }
    Ok(crate::journal::JournalConfig {
        capacity: j.journal_capacity,
        client_buffer: watch_buffer,
        memory_budget: j.journal_memory_budget,
        disk_budget: j.journal_disk_budget,
    })
}

/// `--nri` and `--nri-socket`: the socket must be an absolute path.
fn nri_config(mode: crate::nri::NriMode, socket: &std::path::Path) -> Result<crate::nri::NriConfig, ConfigError> {
    if !socket.is_absolute() {
        return Err(invalid("--nri-socket", format!("{} is not an absolute path", socket.display())));
    }
    Ok(crate::nri::NriConfig { mode, socket: socket.to_owned() })
}

/// `--kubelet-pods-socket`: a path, or "" (also `""` as a manifest may quote it) for off.
fn kubelet_pods_socket(flag: &str) -> Result<Option<PathBuf>, ConfigError> {
    let flag = flag.trim();
    if flag.is_empty() || flag == "\"\"" {
        return Ok(None);
    }
    if !flag.starts_with('/') {
        return Err(invalid("--kubelet-pods-socket", format!("{flag:?} is not an absolute path (\"\" turns it off)")));
    }
    Ok(Some(PathBuf::from(flag)))
}

/// The node's name, held once for every part that says it: `--node-name`, else the
/// host name lowercased (the kubelet's default node name). A name Kubernetes could not
/// give a node (a DNS subdomain) is refused.
fn node_name(flag: Option<&str>) -> Result<String, ConfigError> {
    let Some(name) = flag.filter(|n| !n.is_empty()) else { return Ok(crate::host::host_name().to_lowercase()) };
    // A DNS-1123 subdomain, as Kubernetes validates a node's name: 253 bytes at most,
    // with no cap per label (a host name of 64 characters makes a valid node).
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(invalid(
            "--node-name",
            format!("{name:?} is not a node name (lowercase letters, digits, '-' and '.', as Kubernetes names nodes)"),
        ));
    }
    Ok(name.to_owned())
}

fn export_config(e: &ExportArgs, node: &str) -> Result<Option<crate::export::ExportConfig>, ConfigError> {
    let Some(endpoint) = e.otlp_endpoint.as_deref().filter(|s| !s.is_empty()) else { return Ok(None) };
    let mut cfg = crate::export::ExportConfig::new(endpoint, node);
    if let Some(path) = &e.otlp_ca_file {
        let pem = std::fs::read(path).map_err(|err| invalid("--otlp-ca-file", format!("{}: {err}", path.display())))?;
        if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
            return Err(invalid("--otlp-ca-file", format!("{} holds no PEM certificate", path.display())));
        }
        cfg.ca_pem = Some(pem);
    }
    for h in &e.otlp_header {
        let (k, v) = h.split_once('=').ok_or_else(|| {
            invalid(
                "--otlp-header",
                "an argument is not name=value (it is not shown: it may hold a secret)".to_string(),
            )
        })?;
        cfg.headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    // The endpoint and headers are checked here, at start, not when the first export
    // is due.
    cfg.check().map_err(|e| match e {
        crate::export::ExportError::Endpoint { reason, .. } => invalid("--otlp-endpoint", reason),
        crate::export::ExportError::Header { name, problem } => {
            invalid("--otlp-header", format!("{name:?}: {problem}"))
        }
    })?;
    Ok(Some(cfg))
}

/// A state dir; empty is allowed and means none (clap's path parser refuses it).
fn parse_state_dir(s: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(s))
}

/// A size in bytes: a number with an optional binary suffix (`KiB`, `MiB`, `GiB`; `K`,
/// `M`, `G` and `Ki`, `Mi`, `Gi` mean the same).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size (like 8MiB)"))?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "Ki" | "KiB" | "KB" => 10,
        "M" | "Mi" | "MiB" | "MB" => 20,
        "G" | "Gi" | "GiB" | "GB" => 30,
        other => return Err(format!("unknown size unit {other:?} in {s:?} (use KiB, MiB or GiB)")),
    };
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("{s:?} is too large"))
}

fn sync_config(s: &SyncArgs) -> Result<crate::reconcile::SyncConfig, ConfigError> {
    if s.workers == 0 {
        return Err(invalid("--workers", "must be at least 1"));
    }
    if s.crashloop_deaths < 2 {
        return Err(invalid("--crashloop-deaths", "must be at least 2"));
    }
    if !s.retry_qps.is_finite() || s.retry_qps <= 0.0 {
        return Err(invalid("--retry-qps", "must be a number > 0"));
    }
    if s.retry_base > s.retry_max {
        return Err(invalid("--retry-base", "must not exceed --retry-max"));
    }
    Ok(crate::reconcile::SyncConfig {
        workers: s.workers,
        history_retention: positive("--history-retention", s.history_retention)?,
        history_budget: usize::try_from(s.history_memory_budget)
            .map_err(|_| invalid("--history-memory-budget", "too large"))?,
        resync_period: (!s.resync_period.is_zero()).then_some(s.resync_period),
        rate_limit: crate::workqueue::RateLimit {
            base: s.retry_base,
            max: s.retry_max,
            qps: s.retry_qps,
            burst: s.retry_burst.max(1),
        },
        gc: crate::reconcile::GcConfig { mode: s.gc, keep: s.gc_keep, min_age: s.gc_min_age },
        crashloop: crate::reconcile::CrashLoopConfig {
            deaths: s.crashloop_deaths,
            window: positive("--crashloop-window", s.crashloop_window)?,
            clear_after: positive("--crashloop-clear-after", s.crashloop_clear_after)?,
        },
    })
}

/// Parses `500ms`, `1s`, `3m`, `24h`, `1h30m`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(s).map_err(|e| format!("{e} (expected a duration such as 500ms, 1s, 3m, 24h)"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Run {
        #[command(flatten)]
        run: RunArgs,
    }

    fn run_args(extra: &[&str]) -> Result<RunConfig, String> {
        let mut argv = vec!["plegd"];
        argv.extend_from_slice(extra);
        let a = Run::try_parse_from(argv).map_err(|e| e.to_string())?;
        RunConfig::try_from(&a.run).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_follow_the_contract() {
        let c = run_args(&[]).unwrap();
        assert_eq!(c.runtime.endpoint, "unix:///run/containerd/containerd.sock");
        assert_eq!(c.pleg.relist_period, Duration::from_secs(1));
        assert_eq!(c.pleg.threshold, Duration::from_secs(180));
        assert_eq!(c.admin.addr, "127.0.0.1:9477".parse().unwrap());
    }

    #[test]
    fn the_flags_defaults_and_the_configs_defaults_are_the_same() {
        let from_flags = run_args(&[]).unwrap();
        // Every part, field by field, as `Debug` spells them.
        assert_eq!(format!("{from_flags:#?}"), format!("{:#?}", RunConfig::default()));
    }

    #[test]
    fn a_config_for_an_endpoint_is_the_defaults_in_memory_on_ephemeral_ports() {
        let c = RunConfig::for_endpoint("unix:///tmp/x.sock").unwrap();
        assert_eq!(c.runtime.endpoint, "unix:///tmp/x.sock");
        assert!(c.state_dir.is_none());
        assert_eq!((c.admin.addr.port(), c.admin.debug_addr.port()), (0, 0));
        assert_eq!(format!("{:?}", c.pleg), format!("{:?}", RunConfig::default().pleg));
        let e = RunConfig::for_endpoint("tcp://1.2.3.4:5").unwrap_err().to_string();
        assert!(e.contains("--runtime-endpoint"), "{e}");
    }

    #[test]
    fn a_non_unix_endpoint_names_the_flag() {
        let e = run_args(&["--runtime-endpoint", "tcp://1.2.3.4:5"]).unwrap_err();
        assert!(e.starts_with("invalid value for --runtime-endpoint"), "{e}");
    }

    #[test]
    fn a_malformed_duration_names_the_flag() {
        let e = run_args(&["--relist-period", "soon"]).unwrap_err();
        assert!(e.contains("--relist-period"), "{e}");
        let e = run_args(&["--relist-period", "0s"]).unwrap_err();
        assert!(e.contains("--relist-period"), "{e}");
        let e = run_args(&["--relist-threshold", "1s", "--relist-period", "2s"]).unwrap_err();
        assert!(e.contains("--relist-threshold"), "{e}");
    }

    #[test]
    fn the_memory_trim_period_defaults_to_ten_seconds_takes_zero_as_off_and_names_itself_when_malformed() {
        assert_eq!(run_args(&[]).unwrap().memory.period, crate::memory::DEFAULT_PERIOD);
        assert_eq!(run_args(&["--memory-trim-period", "0s"]).unwrap().memory.period, Duration::ZERO);
        assert_eq!(run_args(&["--memory-trim-period", "1m"]).unwrap().memory.period, Duration::from_secs(60));
        let e = run_args(&["--memory-trim-period", "often"]).unwrap_err();
        assert!(e.contains("--memory-trim-period"), "{e}");
    }

    #[test]
    fn a_negative_duration_is_refused_naming_its_flag_not_taken_for_another_flag() {
        for flag in ["--memory-trim-period", "--relist-period", "--bookmark-interval", "--history-retention"] {
            let e = run_args(&[flag, "-5s"]).unwrap_err();
            assert!(e.contains(flag), "{flag} -5s: {e}");
        }
    }

    #[test]
    fn durations_accept_bare_seconds_and_units() {
        assert_eq!(parse_duration("300").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn otlp_settings_are_checked_at_start_and_a_bad_one_names_its_flag() {
        assert!(run_args(&[]).unwrap().export.is_none(), "off unless asked");
        let on =
            run_args(&["--otlp-endpoint", "http://10.0.0.1:4317", "--node-name", "n1", "--otlp-header", "X-Key=abc"])
                .unwrap()
                .export
                .expect("on");
        assert_eq!((on.node.as_str(), on.headers.clone()), ("n1", vec![("x-key".to_string(), "abc".to_string())]));
        assert!(run_args(&["--otlp-endpoint", "https://collector.example:4317"]).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let not_pem = dir.path().join("ca.txt");
        std::fs::write(&not_pem, "hello").unwrap();
        for (args, flag) in [
            (vec!["--otlp-endpoint", "ftp://x:1"], "--otlp-endpoint"),
            (vec!["--otlp-endpoint", "not a url"], "--otlp-endpoint"),
            (vec!["--otlp-endpoint", "http://x:1", "--otlp-header", "novalue"], "--otlp-header"),
            (vec!["--otlp-endpoint", "http://x:1", "--otlp-header", "bad key=v"], "--otlp-header"),
            (vec!["--otlp-endpoint", "https://x:1", "--otlp-ca-file", "/nonexistent/ca.pem"], "--otlp-ca-file"),
            (vec!["--otlp-endpoint", "https://x:1", "--otlp-ca-file", not_pem.to_str().unwrap()], "--otlp-ca-file"),
            (vec!["--otlp-endpoint", "http://x:1", "--otlp-header", "x-key=a\r\nx-evil: 1"], "--otlp-header"),
            (vec!["--otlp-endpoint", "http://x:1", "--otlp-header", "x-key=a\0b"], "--otlp-header"),
            (vec!["--otlp-endpoint", "http://x:99999"], "--otlp-endpoint"),
            (vec!["--otlp-endpoint", "http://x:0"], "--otlp-endpoint"),
            (vec!["--otlp-endpoint", "http://x:4317/v1/logs"], "--otlp-endpoint"),
        ] {
            let e = run_args(&args).unwrap_err();
            assert!(e.contains(flag), "{args:?}: {e}");
        }
    }

    #[test]
    fn a_bad_otlp_setting_never_prints_a_secret() {
        for (args, secret) in [
            (vec!["--otlp-endpoint", "http://x:1", "--otlp-header", "Bearer s3cr3t-token"], "s3cr3t-token"),
            (vec!["--otlp-endpoint", "http://x:1", "--otlp-header", "authorization=Bearer s3cr3t\u{7f}"], "s3cr3t"),
            (vec!["--otlp-endpoint", "http://x:1", "--otlp-header", "bad key=s3cr3t"], "s3cr3t"),
            (vec!["--otlp-endpoint", "http://user:s3cr3t@collector:4317"], "s3cr3t"),
            (vec!["--otlp-endpoint", "http://s3cr3t@collector:4317"], "s3cr3t"),
            (vec!["--otlp-endpoint", "http://u:s3/cr3t@collector:4317"], "s3/cr3t"),
        ] {
            let e = run_args(&args).unwrap_err();
            assert!(!e.contains(secret), "{args:?} printed the secret: {e}");
            assert!(e.contains("--otlp-"), "{args:?}: {e}");
        }
        assert_eq!(crate::export::redacted("http://u:pw@h:4317/x"), "http://***@h:4317/x");
        assert_eq!(crate::export::redacted("http://t0ken@h:4317"), "http://***@h:4317");
        assert_eq!(crate::export::redacted("http://h:4317"), "http://h:4317");
    }

    #[test]
    fn nri_is_auto_by_default_on_the_runtimes_socket_and_a_relative_socket_or_unknown_mode_is_refused() {
        let d = run_args(&[]).unwrap().nri;
        assert_eq!(
            (d.mode, d.socket.as_path()),
            (crate::nri::NriMode::Auto, std::path::Path::new("/var/run/nri/nri.sock"))
        );
        assert_eq!(run_args(&["--nri=off"]).unwrap().nri.mode, crate::nri::NriMode::Off);
        let e = run_args(&["--nri-socket=nri.sock"]).unwrap_err();
        assert!(e.contains("--nri-socket") && e.contains("absolute"), "{e}");
        assert!(run_args(&["--nri=maybe"]).unwrap_err().contains("--nri"));
    }

    #[test]
    fn the_kubelet_pods_socket_is_on_by_default_off_when_empty_and_a_relative_path_is_refused() {
        let on = run_args(&[]).unwrap().kubelet.pods_socket;
        assert_eq!(on.as_deref(), Some(std::path::Path::new("/var/lib/kubelet/pods-api/pods-api.sock")));
        for off in ["--kubelet-pods-socket=", "--kubelet-pods-socket=\"\""] {
            assert_eq!(run_args(&[off]).unwrap().kubelet.pods_socket, None, "{off}");
        }
        let e = run_args(&["--kubelet-pods-socket=pods.sock"]).unwrap_err();
        assert!(e.contains("--kubelet-pods-socket") && e.contains("absolute"), "{e}");
    }

    #[test]
    fn the_node_name_is_held_once_for_the_api_and_the_export_and_a_bad_one_is_refused() {
        let cfg = run_args(&["--node-name", "node-a.example", "--otlp-endpoint", "http://c:4317"]).unwrap();
        assert_eq!(cfg.api.node_name, "node-a.example");
        assert_eq!(cfg.export.unwrap().node, "node-a.example");
        let default = run_args(&[]).unwrap();
        assert_eq!(default.api.node_name, crate::host::host_name().to_lowercase(), "the host name, as the kubelet's");
        assert_eq!(run_args(&[&format!("--node-name={}", "a".repeat(64))]).unwrap().api.node_name.len(), 64);
        for bad in ["Node-A", "node_a", "-a", "a..b", &"a".repeat(254)] {
            let e = run_args(&[&format!("--node-name={bad}")]).unwrap_err();
            assert!(e.contains("--node-name") && e.contains("not a node name"), "{bad}: {e}");
        }
    }
}
