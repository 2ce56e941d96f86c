//! Reading one pod's full status from the runtime (the kubelet's `GetPodStatus`): each
//! sandbox's and container's status, asked once per read. While the previous status does
//! not hold an object's process yet, its status is asked verbose, and the verbose part
//! travels with that status ([`StatusRead`]): a new container's process costs no call of
//! its own, and a runtime that names no PID is asked again at the next read, not twice
//! in one. Listing what to read is [`super::list`]'s job.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use futures_util::future::join_all;

use super::records::{RuntimeContainer, RuntimePod};
use super::state::PlegState;
use crate::cri::verbose::{ContainerVerbose, SandboxVerbose};
use crate::cri::{CriError, RuntimeService};
use crate::host::Host;
use crate::labels::Labels;
use crate::model::{ContainerState, ContainerStatus, PodStatus, Process, SandboxState, SandboxStatus};
use crate::proto::runtime as cri;

/// One status call's answer: the status, and what its verbose form said of the object's
/// process when the call asked for it (`None`: asked plain, the process being known).
#[derive(Debug)]
pub struct StatusRead<S, V> {
    /// The CRI status.
    pub status: S,
    /// The verbose facts read with it.
    pub verbose: Option<V>,
}

/// A sandbox's status read.
pub type SandboxRead = StatusRead<cri::PodSandboxStatus, SandboxVerbose>;
/// A container's status read.
pub type ContainerRead = StatusRead<cri::ContainerStatus, ContainerVerbose>;

/// Reads a sandbox's status, verbose when `verbose`.
async fn read_sandbox<R: RuntimeService>(runtime: &R, id: &str, verbose: bool) -> Result<SandboxRead, CriError> {
    if verbose {
        let (status, v) = runtime.pod_sandbox_status_verbose(id).await?;
        return Ok(StatusRead { status, verbose: Some(v) });
    }
    Ok(StatusRead { status: runtime.pod_sandbox_status(id).await?, verbose: None })
}

/// Reads a container's status, verbose when `verbose`.
async fn read_container_status<R: RuntimeService>(
    runtime: &R,
    id: &str,
    verbose: bool,
) -> Result<ContainerRead, CriError> {
    if verbose {
        let (status, v) = runtime.container_status_verbose(id).await?;
        return Ok(StatusRead { status, verbose: Some(v) });
    }
    Ok(StatusRead { status: runtime.container_status(id).await?, verbose: None })
}

/// Statuses read before the listing they belong to came back: a targeted relist asks
/// for the statuses of the objects it already knows at the same time as it lists the
/// pod, so the common read costs one round trip instead of two.
#[derive(Debug)]
pub struct Prefetched {
    /// When the read began; the pod's `observed_at`.
    pub observed_at: SystemTime,
    /// Sandbox statuses by id.
    pub sandboxes: HashMap<String, Result<SandboxRead, CriError>>,
    /// Container statuses by id.
    pub containers: HashMap<String, Result<ContainerRead, CriError>>,
}

impl Prefetched {
    /// Reads the statuses of these sandboxes and containers, all at once; verbose for
    /// those whose process `previous` does not hold yet.
    pub async fn read<R: RuntimeService>(
        runtime: &R,
        sandboxes: impl IntoIterator<Item = String>,
        containers: impl IntoIterator<Item = String>,
        previous: Option<&PodStatus>,
    ) -> Self {
        let observed_at = SystemTime::now();
        let sandbox_reads = join_all(sandboxes.into_iter().map(|id| async move {
            let verbose = previous.and_then(|p| p.known_sandbox_process(&id)).is_none();
            let read = read_sandbox(runtime, &id, verbose).await;
            (id, read)
        }));
        let container_reads = join_all(containers.into_iter().map(|id| async move {
            let verbose = previous.and_then(|p| p.known_process(&id)).is_none();
            let read = read_container_status(runtime, &id, verbose).await;
            (id, read)
        }));
        let (sandboxes, containers) = futures_util::future::join(sandbox_reads, container_reads).await;
        Self { observed_at, sandboxes: sandboxes.into_iter().collect(), containers: containers.into_iter().collect() }
    }

    /// No statuses read ahead: everything the listing shows is read.
    pub fn none() -> Self {
        Self { observed_at: SystemTime::now(), sandboxes: HashMap::new(), containers: HashMap::new() }
    }

    /// A prefetched sandbox status the listing can use (see [`usable`]).
    fn sandbox(&mut self, listed: &RuntimeContainer) -> Option<Result<SandboxRead, CriError>> {
        usable(self.sandboxes.remove(&listed.id)?, listed, |r| {
            PlegState::of_sandbox(SandboxState::from_cri(r.status.state))
        })
    }

    /// A prefetched container status the listing can use (see [`usable`]).
    fn container(&mut self, listed: &RuntimeContainer) -> Option<Result<ContainerRead, CriError>> {
        usable(self.containers.remove(&listed.id)?, listed, |r| {
            PlegState::of_container(ContainerState::from_cri(r.status.state))
        })
    }
}

/// A prefetched status stands when it was read without error and in the state the
/// listing shows, or when the runtime had forgotten the id (NotFound); anything else
/// (a status older than the listing, a transient error) is read again.
fn usable<T>(
    prefetched: Result<T, CriError>,
    listed: &RuntimeContainer,
    state: impl Fn(&T) -> PlegState,
) -> Option<Result<T, CriError>> {
    match prefetched {
        Ok(st) if state(&st) == listed.state => Some(Ok(st)),
        Err(e) if e.is_not_found() => Some(Err(e)),
        _ => None,
    }
}

/// Reads the status of every sandbox and container the listing showed for `pod`.
/// Objects that vanished since the listing (NotFound) are skipped; any other error
/// fails the inspection. When no sandbox is ready and the fresh status has no IPs, the
/// `previous` status's IPs are kept, as the kubelet keeps a dead pod's IP; its
/// containers and labels that read the same again are shared, not copied.
pub async fn inspect_pod<R: RuntimeService>(
    runtime: &R,
    host: Option<&Host>,
    pod: &RuntimePod,
    previous: Option<&PodStatus>,
) -> Result<PodStatus, CriError> {
    inspect_prefetched(runtime, host, pod, previous, Prefetched::none()).await
}

/// As [`inspect_pod`], using the statuses already read where they match the listing
/// and reading only the rest, each once. A prefetched NotFound stands: an id the
/// runtime has forgotten never comes back. Without a `host`, no process is read.
pub async fn inspect_prefetched<R: RuntimeService>(
    runtime: &R,
    host: Option<&Host>,
    pod: &RuntimePod,
    previous: Option<&PodStatus>,
    mut prefetched: Prefetched,
) -> Result<PodStatus, CriError> {
    let sandbox_reads: Vec<_> = pod.sandboxes.iter().map(|s| (s, prefetched.sandbox(s))).collect();
    let container_reads: Vec<_> = pod.containers.iter().map(|c| (c, prefetched.container(c))).collect();
    // Every status call still needed, at once: one round trip instead of one per object.
    let unknown = |known: bool| host.is_some() && !known;
    let (sandbox_reads, container_reads) = futures_util::future::join(
        join_all(sandbox_reads.into_iter().map(|(s, pre)| async move {
            match pre {
                Some(read) => read,
                None => {
                    let verbose = unknown(previous.and_then(|p| p.known_sandbox_process(&s.id)).is_some());
                    read_sandbox(runtime, &s.id, verbose).await
                }
            }
        })),
        join_all(container_reads.into_iter().map(|(c, pre)| async move {
            match pre {
                Some(read) => read,
                None => {
                    let verbose = unknown(previous.and_then(|p| p.known_process(&c.id)).is_some());
                    read_container_status(runtime, &c.id, verbose).await
                }
            }
        })),
    )
    .await;
    let sandbox_reads = present(sandbox_reads)?;
    let container_reads = present(container_reads)?;
    let mut sandboxes: Vec<SandboxStatus> = sandbox_reads.iter().map(|r| sandbox_status(r, previous)).collect();
    let mut containers: Vec<_> = container_reads.iter().map(|r| ContainerStatus::from_cri(&r.status)).collect();
    give_processes(&mut containers, &container_reads, host, previous).await;
    // Into a new allocation: collecting a `Vec`'s own `into_iter` reuses its buffer, and
    // the status would keep room for whole `ContainerStatus`es to hold pointers.
    let mut containers: Vec<Arc<ContainerStatus>> = {
        let mut shared = Vec::with_capacity(containers.len());
        shared.extend(containers.into_iter().map(|c| share_unchanged(c, previous)));
        shared
    };
    let about = About::of(pod, &sandbox_reads, previous);
    sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
    containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    Ok(PodStatus {
        uid: pod.uid.clone(),
        name: about.name,
        namespace: about.namespace,
        labels: about.labels,
        annotations: about.annotations,
        ips: about.ips,
        sandboxes,
        containers,
        observed_at: prefetched.observed_at,
    })
}

/// The reads of objects that still exist: NotFound (removed since the listing) is left
/// out; any other failure fails them all.
fn present<T>(reads: Vec<Result<T, CriError>>) -> Result<Vec<T>, CriError> {
    let mut out = Vec::with_capacity(reads.len());
    for read in reads {
        match read {
            Ok(r) => out.push(r),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// What a pod's status says of the pod itself: its newest sandbox's metadata, labels,
/// annotations and (while ready) IPs; the listing's names without a sandbox; the
/// previous status's IPs while no sandbox is ready and none are read, and its labels
/// where they read the same.
struct About {
    name: String,
    namespace: String,
    labels: Labels,
    annotations: Labels,
    ips: Vec<String>,
}

impl About {
    fn of(pod: &RuntimePod, sandboxes: &[SandboxRead], previous: Option<&PodStatus>) -> Self {
        // The first of the newest, as the reads came.
        let newest = sandboxes.iter().rev().max_by_key(|r| r.status.created_at).map(|r| &r.status);
        let mut about = match newest {
            Some(raw) => {
                let md = raw.metadata.clone().unwrap_or_default();
                let mut ips = Vec::new();
                let net = raw.network.as_ref();
                let ready = SandboxState::from_cri(raw.state) == SandboxState::Ready;
                if let Some(net) = net.filter(|n| ready && !n.ip.is_empty()) {
                    ips.push(net.ip.clone());
                    ips.extend(net.additional_ips.iter().map(|p| p.ip.clone()));
                }
                let or = |s: String, listed: &str| if s.is_empty() { listed.to_owned() } else { s };
                Self {
                    name: or(md.name, &pod.name),
                    namespace: or(md.namespace, &pod.namespace),
                    labels: raw.labels.iter().collect(),
                    annotations: raw.annotations.iter().collect(),
                    ips,
                }
            }
            None => Self {
                name: pod.name.clone(),
                namespace: pod.namespace.clone(),
                labels: Labels::default(),
                annotations: Labels::default(),
                ips: Vec::new(),
            },
        };
        if let Some(p) = previous {
            let any_ready = sandboxes.iter().any(|r| SandboxState::from_cri(r.status.state) == SandboxState::Ready);
            if about.ips.is_empty() && !any_ready {
                about.ips = p.ips.clone();
            }
            about.labels = same_or(about.labels, &p.labels);
            about.annotations = same_or(about.annotations, &p.annotations);
        }
        about
    }
}

/// A sandbox's status, with its PID and network namespace: the previous status's, or
/// what its verbose status said when it was read ready; and the address it held.
fn sandbox_status(read: &SandboxRead, previous: Option<&PodStatus>) -> SandboxStatus {
    let mut s = SandboxStatus::from_cri(&read.status);
    // containerd reports no address once the sandbox's network is torn down: the
    // sandbox keeps the one it held, as it keeps its PID.
    if s.ip.is_empty()
        && let Some(held) = previous.and_then(|p| p.sandboxes.iter().find(|b| b.id == s.id && !b.ip.is_empty()))
    {
        (s.ip, s.additional_ips) = (held.ip.clone(), held.additional_ips.clone());
    }
    match (previous.and_then(|p| p.known_sandbox_process(&s.id)), &read.verbose) {
        (Some(known), _) => (s.pid, s.netns_path) = (known.pid, known.netns_path.clone()),
        (None, Some(v)) if s.state == SandboxState::Ready => (s.pid, s.netns_path) = (v.pid, v.netns_path.clone()),
        (None, _) => {}
    }
    s
}

/// Gives each container its process: the previous status's where it had one, else what
/// the verbose status read with it and the host say, the host read once for the whole
/// pod off the async threads. A container seen first after it exited still has the PID
/// and cgroup it ran with (a lookup by them finds it), read without the host's word; a
/// running one the runtime names no PID for is left without, to be asked again
/// (verbose) at the next read, as is every one when the host does not answer.
async fn give_processes(
    containers: &mut [ContainerStatus],
    reads: &[ContainerRead],
    host: Option<&Host>,
    previous: Option<&PodStatus>,
) {
    let mut ask = Vec::new();
    for (i, (c, read)) in containers.iter_mut().zip(reads).enumerate() {
        let running = c.state == ContainerState::Running;
        match (previous.and_then(|p| p.known_process(&c.id)), &read.verbose) {
            (Some(known), _) => c.process = Some(known.clone()),
            (None, Some(v)) if c.state != ContainerState::Created && (v.pid != 0 || !running) => {
                ask.push((i, ProcessAsk { id: c.id.clone(), verbose: v.clone(), running }));
            }
            (None, _) => {}
        }
    }
    let Some(host) = host.filter(|_| !ask.is_empty()) else { return };
    let read = host.off_thread(move |host| ask.into_iter().map(|(i, a)| (i, a.read(host))).collect::<Vec<_>>()).await;
    match read {
        Ok(found) => found.into_iter().for_each(|(i, p)| containers[i].process = Some(p)),
        Err(e) => {
            tracing::warn!(error = %e, "the host's /proc did not answer; the containers' processes are read again later")
        }
    }
}

/// What the host is asked of one container's process.
struct ProcessAsk {
    id: String,
    verbose: crate::cri::verbose::ContainerVerbose,
    running: bool,
}

impl ProcessAsk {
    /// The process from the verbose status and the host: the cgroup the kernel shows
    /// for the PID (any cgroup driver), else the one the spec names. The host is asked
    /// only while the container runs: after, the PID may be another process's. Blocks.
    fn read(&self, host: &Host) -> Process {
        let (pid, cgroups_path) = (self.verbose.pid, &self.verbose.cgroups_path);
        // The process is the container's only if the kernel puts it in the container's
        // cgroup: a PID reused since the runtime's answer is another process's.
        let seen = if self.running { host.process(pid) } else { None }
            .filter(|p| p.cgroup.as_deref().is_none_or(|cg| crate::host::belongs_to(cg, &self.id, cgroups_path)));
        let cgroup_id = seen
            .as_ref()
            .and_then(|p| p.cgroup_id)
            .or_else(|| crate::host::cgroup_path_of(cgroups_path).and_then(|c| host.cgroup_id(&c)));
        let namespaces = if seen.is_some() { host.namespaces(pid) } else { Default::default() };
        Process {
            pid,
            cgroup_path: cgroups_path.clone(),
            cgroup_id: cgroup_id.unwrap_or(0),
            start_ticks: seen.and_then(|p| p.start_ticks).unwrap_or(0),
            namespaces,
        }
    }
}

/// One container read from the runtime at once (verbose: with its process), and the
/// pod it belongs to by its kubelet labels (uid, namespace, name): for a lookup that
/// cannot wait for the relister. `None` when the runtime does not know it or it is not
/// a pod's container.
pub async fn read_container<R: RuntimeService>(
    runtime: &R,
    host: &Host,
    id: &str,
) -> Result<Option<(PodStatus, ContainerStatus)>, CriError> {
    use crate::labels::kubelet::{POD_NAME, POD_NAMESPACE, POD_UID};
    let (st, verbose) = match runtime.container_status_verbose(id).await {
        Ok(read) => read,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    let label = |k: &str| st.labels.get(k).cloned().unwrap_or_default();
    let uid = label(POD_UID);
    if uid.is_empty() {
        return Ok(None);
    }
    let mut c = ContainerStatus::from_cri(&st);
    let ask = ProcessAsk { id: c.id.clone(), verbose, running: c.state == ContainerState::Running };
    c.process = match host.off_thread(move |host| ask.read(host)).await {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::warn!(error = %e, "the host's /proc did not answer; the container's process is read again later");
            None
        }
    };
    Ok(Some((PodStatus::empty(&uid, &label(POD_NAMESPACE), &label(POD_NAME)), c)))
}

/// `fresh`, or the previous status's copy of the same container when it reads the same.
fn share_unchanged(fresh: ContainerStatus, previous: Option<&PodStatus>) -> Arc<ContainerStatus> {
    match previous.and_then(|p| p.containers.iter().find(|c| c.id == fresh.id)) {
        Some(old) if **old == fresh => old.clone(),
        _ => Arc::new(fresh),
    }
}

/// `fresh`, or `previous` when both hold the same pairs.
fn same_or(fresh: Labels, previous: &Labels) -> Labels {
    if fresh == *previous { previous.clone() } else { fresh }
}

/// Reads every pod from the runtime afresh (list, group, inspect each), the way a
/// relist would, without touching the cache: `/debug/pods?view=runtime`. What plegd
/// reads once per container (its process) comes from `previous` (the cache) where it
/// has it, as the relister carries it: a container that has exited no longer says.
pub async fn read_all<R: RuntimeService>(
    runtime: &R,
    host: &Host,
    concurrency: usize,
    previous: &(dyn Fn(&str) -> Option<Arc<PodStatus>> + Send + Sync),
) -> Result<Vec<PodStatus>, CriError> {
    use futures_util::StreamExt;
    let (sandboxes, containers) = super::list::list_everything(runtime).await?;
    let pods = super::records::group_pods(sandboxes, containers);
    let mut out: Vec<PodStatus> = futures_util::stream::iter(pods.into_values())
        .map(|p| async move {
            let before = previous(&p.uid);
            inspect_pod(runtime, Some(host), &p, before.as_deref()).await
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    out.sort_by(|a, b| a.uid.cmp(&b.uid));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::spec::{ContainerSpec, PodSpec};
    use crate::model::ContainerState;
    use crate::pleg::list::list_pod;
    use crate::sim::{Fault, FaultAction, SimRuntime};

    async fn running_pod(sim: &SimRuntime, pod: &PodSpec, names: &[&str]) -> (String, Vec<String>) {
        let sid = sim.run_pod_sandbox(pod.run_request()).await.unwrap();
        let mut ids = Vec::new();
        for n in names {
            let id = sim.create_container(pod.create_request(&sid, &ContainerSpec::new(n))).await.unwrap();
            sim.start_container(&id).await.unwrap();
            ids.push(id);
        }
        (sid, ids)
    }

    #[tokio::test]
    async fn a_prefetched_status_is_used_when_it_matches_the_listing_and_read_again_when_older() {
        let sim = SimRuntime::new();
        let pod = PodSpec::new("ns", "p");
        let (sid, ids) = running_pod(&sim, &pod, &["a", "b"]).await;
        let prefetched = Prefetched::read(&sim, [sid.clone()], ids.clone(), None).await;
        // `b` exits after its status was read: the listing is newer than that status.
        assert!(sim.exit_container(&ids[1], 3, "Error"));
        // Reading `a` again would fail, so it must come from the prefetch.
        sim.inject(Fault {
            method: "ContainerStatus",
            target: Some(ids[0].clone()),
            action: FaultAction::Error(tonic::Code::Unavailable, "down".into()),
            times: None,
        });
        let listed = list_pod(&sim, &pod.uid, &[sid].into()).await.unwrap().expect("the pod is listed");
        let status =
            inspect_prefetched(&sim, Some(&Host::default()), &listed, None, prefetched).await.expect("inspection");
        let state = |id: &str| status.containers.iter().find(|c| c.id == id).map(|c| c.state);
        assert_eq!(state(&ids[0]), Some(ContainerState::Running));
        assert_eq!(state(&ids[1]), Some(ContainerState::Exited));
        assert_eq!(status.containers.iter().find(|c| c.id == ids[1]).map(|c| c.exit_code), Some(3));
    }

    #[tokio::test]
    async fn a_prefetched_not_found_drops_the_container_and_other_prefetch_errors_are_read_again() {
        let sim = SimRuntime::new();
        let pod = PodSpec::new("ns", "p");
        let (sid, ids) = running_pod(&sim, &pod, &["a", "b"]).await;
        // The first read of `a` fails transiently; `b` is reported gone.
        for (id, code) in [(&ids[0], tonic::Code::Unavailable), (&ids[1], tonic::Code::NotFound)] {
            sim.inject(Fault {
                method: "ContainerStatus",
                target: Some(id.clone()),
                action: FaultAction::Error(code, "injected".into()),
                times: Some(1),
            });
        }
        let prefetched = Prefetched::read(&sim, [sid.clone()], ids.clone(), None).await;
        let listed = list_pod(&sim, &pod.uid, &[sid].into()).await.unwrap().expect("the pod is listed");
        let status =
            inspect_prefetched(&sim, Some(&Host::default()), &listed, None, prefetched).await.expect("inspection");
        let found: Vec<&str> = status.containers.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(found, vec![ids[0].as_str()]);
    }

    #[tokio::test]
    async fn a_container_that_reads_the_same_again_is_shared_with_the_previous_status() {
        let sim = SimRuntime::new();
        let pod = PodSpec::new("ns", "p").label("app", "web");
        let (sid, ids) = running_pod(&sim, &pod, &["a", "b"]).await;
        let listed = list_pod(&sim, &pod.uid, &[sid.clone()].into()).await.unwrap().expect("the pod is listed");
        let first = inspect_pod(&sim, Some(&Host::default()), &listed, None).await.expect("inspection");
        assert!(sim.exit_container(&ids[1], 1, "Error"));
        let second = inspect_pod(&sim, Some(&Host::default()), &listed, Some(&first)).await.expect("inspection");
        let of = |s: &PodStatus, id: &str| s.containers.iter().find(|c| c.id == id).cloned().expect("listed");
        assert!(Arc::ptr_eq(&of(&first, &ids[0]), &of(&second, &ids[0])), "`a` did not change");
        assert!(!Arc::ptr_eq(&of(&first, &ids[1]), &of(&second, &ids[1])), "`b` exited");
        assert_eq!(of(&second, &ids[1]).state, ContainerState::Exited);
        assert_eq!(second.labels, first.labels);
        // Without a previous status nothing is shared, and the result is the same.
        let alone = inspect_pod(&sim, Some(&Host::default()), &listed, None).await.expect("inspection");
        assert!(!Arc::ptr_eq(&of(&alone, &ids[0]), &of(&second, &ids[0])));
        assert_eq!(alone.containers, second.containers);
    }

    #[tokio::test]
    async fn a_stopped_sandbox_keeps_the_address_it_held_though_the_runtime_reports_none() {
        let sim = SimRuntime::new();
        let pod = PodSpec { host_network: false, ..PodSpec::new("ns", "p") };
        let (sid, _) = running_pod(&sim, &pod, &["a"]).await;
        let listed = list_pod(&sim, &pod.uid, &[sid.clone()].into()).await.unwrap().expect("the pod is listed");
        let ready = inspect_pod(&sim, Some(&Host::default()), &listed, None).await.expect("inspection");
        let held = ready.sandboxes[0].ip.clone();
        assert!(held.starts_with("10.244."), "the pod network's address: {held:?}");
        assert_eq!(ready.ips, std::slice::from_ref(&held));
        sim.stop_pod_sandbox(&sid).await.unwrap();
        assert_eq!(sim.pod_sandbox_status(&sid).await.unwrap().network.unwrap().ip, "", "as containerd says it");
        let stopped = inspect_pod(&sim, Some(&Host::default()), &listed, Some(&ready)).await.expect("inspection");
        assert_eq!(stopped.sandboxes[0].ip, held, "the sandbox's own address, kept");
        assert_eq!(stopped.ips, std::slice::from_ref(&held), "the pod's, kept as the kubelet keeps it");
        // Read afresh (plegd restarted), nothing says what it held.
        let afresh = inspect_pod(&sim, Some(&Host::default()), &listed, None).await.expect("inspection");
        assert_eq!(afresh.sandboxes[0].ip, "");
        // The address is free again: the next pod takes it.
        let next = PodSpec { host_network: false, ..PodSpec::new("ns", "q") };
        let nid = sim.run_pod_sandbox(next.run_request()).await.unwrap();
        assert_eq!(sim.pod_sandbox_status(&nid).await.unwrap().network.unwrap().ip, held, "reused at once");
        let host = sim.run_pod_sandbox(PodSpec::new("ns", "h").run_request()).await.unwrap();
        assert_eq!(sim.pod_sandbox_status(&host).await.unwrap().network.unwrap().ip, "", "host network: none");
    }
}
