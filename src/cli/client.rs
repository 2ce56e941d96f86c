//! The client commands `plegd watch` and `plegd pods`: talk to a running plegd over its
//! socket, print readable lines or JSON, and (watch) reconnect and resume on their own.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::cli::OutputFormat;
use crate::model::rfc3339;
use crate::proto::plegd as api;
use crate::proto::plegd::pod_lifecycle_client::PodLifecycleClient;

/// Errors of the client commands.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket does not exist or is not a unix endpoint: a usage error.
    #[error("--socket: {0}")]
    Socket(String),
    /// plegd refused the request.
    #[error("plegd answered {code:?}: {message}", code = .0.code(), message = .0.message())]
    Status(#[from] tonic::Status),
    /// Writing the output failed (a closed pipe ends quietly).
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
    /// `--verify` found messages that break the Watch invariants.
    #[error("--verify: {0} watch invariant violations (listed above)")]
    Verify(u64),
}

impl ClientError {
    /// Whether this is the user's mistake (exit 64).
    pub fn is_usage(&self) -> bool {
        match self {
            Self::Socket(_) => true,
            Self::Status(s) => s.code() == tonic::Code::InvalidArgument,
            Self::Output(_) | Self::Verify(_) => false,
        }
    }
}

/// Connects to plegd's socket, checking first that it exists.
pub fn connect(socket: &str) -> Result<PodLifecycleClient<tonic::transport::Channel>, ClientError> {
    let path: PathBuf = crate::uds::parse_unix_endpoint(socket).map_err(|e| ClientError::Socket(e.to_string()))?;
    if !path.exists() {
        return Err(ClientError::Socket(format!("{} does not exist (is plegd running?)", path.display())));
    }
    Ok(PodLifecycleClient::new(crate::uds::lazy_channel(path)).max_decoding_message_size(64 * 1024 * 1024))
}

/// What `plegd watch` asks for.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    /// Resume after this revision (0: snapshot).
    pub since: u64,
    /// Server-side filter.
    pub filter: api::PodFilter,
    /// Event types.
    pub types: Vec<api::LifecycleEventType>,
    /// Output.
    pub json: bool,
    /// Print the snapshot too (text output shows only events by default).
    pub show_snapshot: bool,
    /// The epoch `since` belongs to (0: unknown; plegd then trusts the revision).
    pub epoch: u64,
    /// Check every message against the Watch invariants and report violations.
    pub verify: bool,
}

/// `plegd watch`: prints events until shutdown; on a broken stream reconnects with
/// backoff and resumes where its copy was last complete (after `synced`, an event
/// after it, or a bookmark; never mid-snapshot or after a reset), with the epoch the
/// stream told, so it never carries on into a restarted plegd's revisions. With
/// `verify`, every message is checked against the Watch invariants
/// ([`crate::watchcheck`]); violations go to stderr and make the command fail.
pub async fn watch(socket: &str, opts: WatchOptions, shutdown: CancellationToken) -> Result<(), ClientError> {
    let mut client = connect(socket)?;
    let filtered = opts.filter != api::PodFilter::default() || !opts.types.is_empty();
    let mut checker = crate::watchcheck::WatchChecker::new(filtered).resuming_from(opts.since, opts.epoch);
    let mut violations = 0u64;
    let (mut since, mut epoch) = (opts.since, opts.epoch);
    let result = watch_loop(&mut client, &opts, &shutdown, &mut checker, &mut violations, &mut since, &mut epoch).await;
    if opts.verify {
        eprintln!(
            "plegd watch --verify: {} events, {} resets, {} bookmarks checked; {violations} violations",
            checker.events, checker.resets, checker.bookmarks
        );
        if violations > 0 && result.is_ok() {
            return Err(ClientError::Verify(violations));
        }
    }
    result
}

#[allow(clippy::too_many_arguments)]
async fn watch_loop(
    client: &mut PodLifecycleClient<tonic::transport::Channel>,
    opts: &WatchOptions,
    shutdown: &CancellationToken,
    checker: &mut crate::watchcheck::WatchChecker,
    violations: &mut u64,
    since: &mut u64,
    epoch: &mut u64,
) -> Result<(), ClientError> {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    let mut out = std::io::stdout().lock();
    loop {
        let req = api::WatchRequest {
            since_revision: *since,
            filter: Some(opts.filter.clone()),
            types: opts.types.iter().map(|t| *t as i32).collect(),
            epoch: *epoch,
        };
        checker.reconnect();
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            r = client.watch(req) => r,
        };
        let mut stream = match stream {
            Ok(s) => s.into_inner(),
            Err(s) if s.code() == tonic::Code::InvalidArgument => return Err(s.into()),
            Err(s) => {
                eprintln!("plegd watch: {}; retrying", s.message());
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(backoff.next_delay()) => continue,
                }
            }
        };
        loop {
            let msg = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                m = stream.message() => m,
            };
            match msg {
                Ok(Some(ev)) => {
                    backoff.reset();
                    if let Some(api::watch_event::Kind::Start(start)) = &ev.kind
                        && checker.is_foreign(start)
                    {
                        // Resumed without an epoch into another plegd's journal: what
                        // follows are its revisions, not ours. Start over.
                        eprintln!(
                            "plegd watch: plegd's journal changed (epoch {}); starting over with a snapshot",
                            start.epoch
                        );
                        checker.start_over();
                        (*since, *epoch) = (0, 0);
                        break;
                    }
                    if let Err(v) = checker.observe(&ev) {
                        *violations += 1;
                        if opts.verify {
                            eprintln!("plegd watch --verify: {v}");
                        }
                    }
                    // The resume point moves only where the copy is complete.
                    (*since, *epoch) = checker.resume_point().unwrap_or((0, 0));
                    if let Some(line) = render(&ev, opts.json, opts.show_snapshot) {
                        if let Err(e) = writeln!(out, "{line}") {
                            return if e.kind() == std::io::ErrorKind::BrokenPipe { Ok(()) } else { Err(e.into()) };
                        }
                        let _ = out.flush();
                    }
                }
                Ok(None) => break,
                Err(s) => {
                    eprintln!(
                        "plegd watch: stream broke ({}); resuming after revision {since} (0: a fresh snapshot)",
                        s.message()
                    );
                    break;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(backoff.next_delay()) => {}
        }
    }
}

fn render(ev: &api::WatchEvent, json: bool, show_snapshot: bool) -> Option<String> {
    use api::watch_event::Kind;
    if json {
        return Some(watch_event_json(ev).to_string());
    }
    match ev.kind.as_ref()? {
        Kind::Event(e) => Some(format_event(e)),
        Kind::Snapshot(p) if show_snapshot => {
            Some(format!("snapshot      {}/{}  rev {}", p.namespace, p.name, ev.revision))
        }
        Kind::Snapshot(_) => None,
        Kind::Synced(s) => Some(format!(
            "# synced: {} pods on node {} at revision {} (epoch {})",
            s.pods, s.node_name, ev.revision, s.epoch
        )),
        Kind::Reset(r) => Some(format!(
            "# reset ({}): {}",
            api::ResetReason::try_from(r.reason).map(|r| r.as_str_name()).unwrap_or("?"),
            r.message
        )),
        Kind::Bookmark(_) => None,
        Kind::Start(s) => Some(format!("# stream: epoch {}{}", s.epoch, if s.resumed { ", resumed" } else { "" })),
    }
}

fn ts_to_system(ts: &prost_types::Timestamp) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::new(ts.seconds.max(0) as u64, ts.nanos.max(0) as u32)
}

fn ts_json(ts: &Option<prost_types::Timestamp>) -> Value {
    ts.as_ref().map_or(Value::Null, |t| Value::String(rfc3339(ts_to_system(t))))
}

/// One readable line for an event.
pub fn format_event(e: &api::LifecycleEvent) -> String {
    let observed = e.observed_at.as_ref().map(ts_to_system).unwrap_or(std::time::UNIX_EPOCH);
    let time = rfc3339(observed);
    let clock = time.get(11..23).unwrap_or(&time).to_string();
    let kind = api::LifecycleEventType::try_from(e.r#type).map(|t| t.as_str_name()).unwrap_or("?");
    let source = api::EventSource::try_from(e.source).map(|t| t.as_str_name()).unwrap_or("?");
    let container = if e.is_sandbox {
        "(sandbox)"
    } else if e.container_name.is_empty() {
        "-"
    } else {
        &e.container_name
    };
    let id = if e.container_id.is_empty() { "-" } else { crate::model::short_id(&e.container_id) };
    let latency = e
        .runtime_timestamp
        .as_ref()
        .and_then(|t| observed.duration_since(ts_to_system(t)).ok())
        .map(|l| format!("{:.1}ms", l.as_secs_f64() * 1e3))
        .unwrap_or_else(|| "-".into());
    let died = e.r#type == api::LifecycleEventType::ContainerDied as i32;
    let exit = e
        .pod
        .as_ref()
        .and_then(|p| p.containers.iter().find(|c| c.id == e.container_id))
        .filter(|_| died)
        .map(|c| format!("  exit {}", c.exit_code))
        .unwrap_or_default();
    let pod = format!("{}/{}", e.pod_namespace, e.pod_name);
    let msg = if e.message.is_empty() { String::new() } else { format!("  {}", e.message) };
    format!("{clock:<12}  {kind:<18}  {source:<10}  {pod:<32}  {container:<14}  {id:<12}  {latency}{exit}{msg}")
}

/// A pod as JSON.
pub fn pod_json(p: &api::PodStatus) -> Value {
    json!({
        "uid": p.uid, "name": p.name, "namespace": p.namespace,
        "labels": p.labels, "annotations": p.annotations, "ips": p.ips,
        "sandboxes": p.sandboxes.iter().map(|s| json!({
            "id": s.id, "attempt": s.attempt,
            "state": api::SandboxState::try_from(s.state).map(|x| x.as_str_name()).unwrap_or("?"),
            "created_at": ts_json(&s.created_at), "ip": s.ip, "additional_ips": s.additional_ips,
            "runtime_handler": s.runtime_handler, "pid": s.pid, "netns_path": s.netns_path,
        })).collect::<Vec<_>>(),
        "containers": p.containers.iter().map(container_json).collect::<Vec<_>>(),
        "observed_at": ts_json(&p.observed_at),
        "error": if p.error.is_empty() { Value::Null } else { Value::String(p.error.clone()) },
        "identity": p.identity.as_ref().map(identity_json),
    })
}

/// A pod's identity as JSON.
fn identity_json(i: &api::PodIdentity) -> Value {
    let owner =
        |w: &Option<api::WorkloadRef>| w.as_ref().map(|w| json!({"kind": w.kind, "name": w.name, "uid": w.uid}));
    json!({
        "node_name": i.node_name, "controller": owner(&i.controller), "workload": owner(&i.workload),
        "qos_class": i.qos_class, "priority": i.priority, "priority_class_name": i.priority_class_name,
        "service_account": i.service_account, "runtime_class": i.runtime_class,
        "pod_ips": i.pod_ips, "host_ips": i.host_ips,
        "source": api::IdentitySource::try_from(i.source).map(|x| x.as_str_name()).unwrap_or("?"),
    })
}

/// The workload column: `Kind/name`, `-` for none.
fn workload_cell(p: &api::PodStatus) -> String {
    p.identity
        .as_ref()
        .and_then(|i| i.workload.as_ref())
        .map_or_else(|| "-".into(), |w| format!("{}/{}", w.kind, w.name))
}

/// A container as JSON.
pub fn container_json(c: &api::ContainerInfo) -> Value {
    json!({
        "id": c.id, "name": c.name, "attempt": c.attempt,
        "state": api::ContainerState::try_from(c.state).map(|x| x.as_str_name()).unwrap_or("?"),
        "created_at": ts_json(&c.created_at), "started_at": ts_json(&c.started_at),
        "finished_at": ts_json(&c.finished_at), "exit_code": c.exit_code, "reason": c.reason,
        "message": c.message, "image": c.image, "image_ref": c.image_ref, "image_id": c.image_id,
        "pid": c.pid, "cgroup_path": c.cgroup_path, "cgroup_id": c.cgroup_id, "log_path": c.log_path,
        "namespaces": c.namespaces.as_ref().map(|n| json!({
            "pid": n.pid, "mnt": n.mnt, "net": n.net, "uts": n.uts, "ipc": n.ipc, "cgroup": n.cgroup, "user": n.user,
        })),
        "resources": c.resources.as_ref().map(|r| json!({
            "cpu_shares": r.cpu_shares, "cpu_quota": r.cpu_quota, "cpu_period": r.cpu_period,
            "memory_limit_bytes": r.memory_limit_bytes,
        })),
        "labels": c.labels, "annotations": c.annotations,
    })
}

/// An event as JSON.
pub fn event_json(e: &api::LifecycleEvent) -> Value {
    json!({
        "pod_uid": e.pod_uid, "pod_namespace": e.pod_namespace, "pod_name": e.pod_name,
        "type": api::LifecycleEventType::try_from(e.r#type).map(|x| x.as_str_name()).unwrap_or("?"),
        "container_id": e.container_id, "container_name": e.container_name, "is_sandbox": e.is_sandbox,
        "source": api::EventSource::try_from(e.source).map(|x| x.as_str_name()).unwrap_or("?"),
        "observed_at": ts_json(&e.observed_at), "runtime_timestamp": ts_json(&e.runtime_timestamp),
        "pod": e.pod.as_ref().map_or(Value::Null, pod_json),
        "message": e.message,
    })
}

/// A watch message as JSON: `{"revision": N, "<kind>": {...}}`.
pub fn watch_event_json(ev: &api::WatchEvent) -> Value {
    use api::watch_event::Kind;
    let (k, v) = match &ev.kind {
        Some(Kind::Event(e)) => ("event", event_json(e)),
        Some(Kind::Snapshot(p)) => ("snapshot", pod_json(p)),
        Some(Kind::Synced(s)) => ("synced", json!({"epoch": s.epoch, "pods": s.pods, "node_name": s.node_name})),
        Some(Kind::Reset(r)) => (
            "reset",
            json!({"reason": api::ResetReason::try_from(r.reason).map(|x| x.as_str_name()).unwrap_or("?"), "message": r.message}),
        ),
        Some(Kind::Bookmark(_)) => ("bookmark", json!({})),
        Some(Kind::Start(s)) => ("start", json!({"epoch": s.epoch, "resumed": s.resumed})),
        None => ("unknown", Value::Null),
    };
    json!({ "revision": ev.revision, k: v })
}

/// `plegd get`: one GetContainer call, printed as lines or JSON.
pub async fn get(
    socket: &str,
    key: api::get_container_request::Key,
    at: Option<prost_types::Timestamp>,
    output: OutputFormat,
) -> Result<(), ClientError> {
    let mut client = connect(socket)?;
    let resp = client.get_container(api::GetContainerRequest { key: Some(key), at }).await?.into_inner();
    let (pod, c) = (resp.pod.unwrap_or_default(), resp.container.unwrap_or_default());
    let mut out = std::io::stdout().lock();
    let removed_at = resp.removed_at.as_ref().map(|t| ts_json(&Some(*t)));
    if output == OutputFormat::Json {
        let v = json!({
            "pod": pod_json(&pod),
            "container": container_json(&c),
            "removed": resp.removed,
            "removed_at": removed_at,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v).unwrap_or_default())?;
        return Ok(());
    }
    let state = api::ContainerState::try_from(c.state).map(|s| s.as_str_name()).unwrap_or("UNKNOWN");
    writeln!(out, "pod:        {}/{} ({})", pod.namespace, pod.name, pod.uid)?;
    writeln!(out, "container:  {} #{} {}", c.name, c.attempt, c.id)?;
    writeln!(
        out,
        "state:      {state}{}",
        if c.reason.is_empty() { String::new() } else { format!(" ({}, exit {})", c.reason, c.exit_code) }
    )?;
    writeln!(out, "image:      {}  {}", c.image, c.image_ref)?;
    if c.pid != 0 {
        writeln!(out, "pid:        {}", c.pid)?;
    }
    writeln!(out, "cgroup:     {} (id {})", c.cgroup_path, c.cgroup_id)?;
    if !c.log_path.is_empty() {
        writeln!(out, "log:        {}", c.log_path)?;
    }
    if let Some(n) = &c.namespaces {
        writeln!(out, "namespaces: pid {} mnt {} net {}", n.pid, n.mnt, n.net)?;
    }
    if let Some(at) = removed_at {
        writeln!(out, "removed:    {}", at.as_str().unwrap_or_default())?;
    }
    Ok(())
}

/// `plegd pods`: one ListPods call, printed as a table or JSON.
pub async fn pods(socket: &str, filter: api::PodFilter, output: OutputFormat) -> Result<(), ClientError> {
    let mut client = connect(socket)?;
    let resp = client.list_pods(api::ListPodsRequest { filter: Some(filter) }).await?.into_inner();
    let mut out = std::io::stdout().lock();
    if output == OutputFormat::Json {
        let v = json!({
            "revision": resp.revision, "epoch": resp.epoch, "node_name": resp.node_name,
            "pods": resp.pods.iter().map(pod_json).collect::<Vec<_>>(),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v).unwrap_or_default())?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<16}  {:<28}  {:<36}  {:<24}  {:<15}  {:<9}  CONTAINERS",
        "NAMESPACE", "NAME", "UID", "WORKLOAD", "IP", "SANDBOX"
    )?;
    for p in &resp.pods {
        let sandbox = p
            .sandboxes
            .first()
            .map_or("-", |s| if s.state == api::SandboxState::Ready as i32 { "Ready" } else { "NotReady" });
        let containers: Vec<String> = p
            .containers
            .iter()
            .map(|c| {
                let st = match api::ContainerState::try_from(c.state) {
                    Ok(api::ContainerState::Running) => "running".to_string(),
                    Ok(api::ContainerState::Exited) => format!("exited({})", c.exit_code),
                    Ok(api::ContainerState::Created) => "created".to_string(),
                    _ => "unknown".to_string(),
                };
                format!("{}#{}:{st}", c.name, c.attempt)
            })
            .collect();
        let ip = p.ips.first().map_or("-", String::as_str);
        writeln!(
            out,
            "{:<16}  {:<28}  {:<36}  {:<24}  {:<15}  {:<9}  {}",
            p.namespace,
            p.name,
            p.uid,
            workload_cell(p),
            ip,
            sandbox,
            containers.join(" ")
        )?;
    }
    writeln!(out, "# {} pods on node {} at revision {}", resp.pods.len(), resp.node_name, resp.revision)?;
    Ok(())
}
