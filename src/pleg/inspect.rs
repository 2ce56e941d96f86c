//! Reading one pod's full status from the runtime (the kubelet's `GetPodStatus`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use futures_util::future::join_all;

use super::PlegState;
use super::records::{RuntimeContainer, RuntimePod};
use crate::cri::{CriError, RuntimeService};
use crate::host::Host;
use crate::labels::Labels;
use crate::model::{ContainerState, ContainerStatus, PodStatus, Process, SandboxState, SandboxStatus};
use crate::proto::runtime as cri;

/// Statuses read before the listing they belong to came back: a targeted relist asks
/// for the statuses of the objects it already knows at the same time as it lists the
/// pod, so the common read costs one round trip instead of two.
#[derive(Debug)]
pub struct Prefetched {
    /// When the read began; the pod's `observed_at`.
    pub observed_at: SystemTime,
    /// Sandbox statuses by id.
    pub sandboxes: HashMap<String, Result<cri::PodSandboxStatus, CriError>>,
    /// Container statuses by id.
    pub containers: HashMap<String, Result<cri::ContainerStatus, CriError>>,
    /// What the verbose statuses said of the sandboxes' and containers' processes: a
    /// new container's process costs no round trip of its own.
    pub verbose: Verbose,
}

/// Verbose facts read ahead, by id.
#[derive(Debug, Default)]
pub struct Verbose {
    /// Containers'.
    pub containers: HashMap<String, crate::cri::verbose::ContainerVerbose>,
    /// Sandboxes'.
    pub sandboxes: HashMap<String, crate::cri::verbose::SandboxVerbose>,
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
        let sandbox_known = |id: &str| {
            previous.is_some_and(|p| p.sandboxes.iter().any(|o| o.id == id && (o.pid != 0 || !o.netns_path.is_empty())))
        };
        let container_known =
            |id: &str| previous.is_some_and(|p| p.containers.iter().any(|o| o.id == id && o.process.is_some()));
        let sandbox_reads = join_all(sandboxes.into_iter().map(|id| async move {
            let res = if sandbox_known(&id) {
                runtime.pod_sandbox_status(&id).await.map(|st| (st, Default::default()))
            } else {
                runtime.pod_sandbox_status_verbose(&id).await
            };
            (id, res)
        }));
        let container_reads = join_all(containers.into_iter().map(|id| async move {
            let res = if container_known(&id) {
                runtime.container_status(&id).await.map(|st| (st, Default::default()))
            } else {
                runtime.container_status_verbose(&id).await
            };
            (id, res)
        }));
        let (sandbox_reads, container_reads) = futures_util::future::join(sandbox_reads, container_reads).await;
        let mut verbose = Verbose::default();
        let mut sandboxes = HashMap::new();
        for (id, res) in sandbox_reads {
            let st = res.map(|(st, v)| {
                verbose.sandboxes.insert(id.clone(), v);
                st
            });
            sandboxes.insert(id, st);
        }
        let mut containers = HashMap::new();
        for (id, res) in container_reads {
            let st = res.map(|(st, v)| {
                verbose.containers.insert(id.clone(), v);
                st
            });
            containers.insert(id, st);
        }
        Self { observed_at, sandboxes, containers, verbose }
    }

    /// No statuses read ahead: everything the listing shows is read.
    pub fn none() -> Self {
        Self {
            observed_at: SystemTime::now(),
            sandboxes: HashMap::new(),
            containers: HashMap::new(),
            verbose: Verbose::default(),
        }
    }

    /// A prefetched sandbox status the listing can use (see [`usable`]).
    fn sandbox(&mut self, listed: &RuntimeContainer) -> Option<Result<cri::PodSandboxStatus, CriError>> {
        usable(self.sandboxes.remove(&listed.id)?, listed, |st| PlegState::of_sandbox(SandboxState::from_cri(st.state)))
    }

    /// A prefetched container status the listing can use (see [`usable`]).
    fn container(&mut self, listed: &RuntimeContainer) -> Option<Result<cri::ContainerStatus, CriError>> {
        usable(self.containers.remove(&listed.id)?, listed, |st| {
            PlegState::of_container(ContainerState::from_cri(st.state))
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
/// and reading only the rest. A prefetched NotFound stands: an id the runtime has
/// forgotten never comes back.
pub async fn inspect_prefetched<R: RuntimeService>(
    runtime: &R,
    host: Option<&Host>,
    pod: &RuntimePod,
    previous: Option<&PodStatus>,
    mut prefetched: Prefetched,
) -> Result<PodStatus, CriError> {
    let observed_at = prefetched.observed_at;
    let verbose = std::mem::take(&mut prefetched.verbose);
    let sandbox_reads: Vec<_> = pod.sandboxes.iter().map(|s| (s, prefetched.sandbox(s))).collect();
    let container_reads: Vec<_> = pod.containers.iter().map(|c| (c, prefetched.container(c))).collect();
    // What a verbose read ahead said stands only with its status: one read in another
    // state than the listing's (a container read while still created) is read again.
    let mut verbose = verbose;
    for (s, pre) in &sandbox_reads {
        if pre.is_none() {
            verbose.sandboxes.remove(&s.id);
        }
    }
    for (c, pre) in &container_reads {
        if pre.is_none() {
            verbose.containers.remove(&c.id);
        }
    }
    // Every status call still needed, at once: one round trip instead of one per object
    // (verbose when processes are read: a new object's process costs no call of its own).
    let knows_sandbox = |id: &str| {
        previous.is_some_and(|p| p.sandboxes.iter().any(|o| o.id == id && (o.pid != 0 || !o.netns_path.is_empty())))
    };
    let knows_container =
        |id: &str| previous.is_some_and(|p| p.containers.iter().any(|o| o.id == id && o.process.is_some()));
    let (sandbox_results, container_results) = futures_util::future::join(
        join_all(sandbox_reads.into_iter().map(|(s, pre)| async move {
            match pre {
                Some(res) => (res, None),
                None if host.is_some() && !knows_sandbox(&s.id) => {
                    match runtime.pod_sandbox_status_verbose(&s.id).await {
                        Ok((st, v)) => (Ok(st), Some((s.id.clone(), v))),
                        Err(e) => (Err(e), None),
                    }
                }
                None => (runtime.pod_sandbox_status(&s.id).await, None),
            }
        })),
        join_all(container_reads.into_iter().map(|(c, pre)| async move {
            match pre {
                Some(res) => (res, None),
                None if host.is_some() && !knows_container(&c.id) => {
                    match runtime.container_status_verbose(&c.id).await {
                        Ok((st, v)) => (Ok(st), Some((c.id.clone(), v))),
                        Err(e) => (Err(e), None),
                    }
                }
                None => (runtime.container_status(&c.id).await, None),
            }
        })),
    )
    .await;
    let sandbox_results: Vec<_> = sandbox_results
        .into_iter()
        .map(|(res, v)| {
            if let Some((id, v)) = v {
                verbose.sandboxes.insert(id, v);
            }
            res
        })
        .collect();
    let container_results: Vec<_> = container_results
        .into_iter()
        .map(|(res, v)| {
            if let Some((id, v)) = v {
                verbose.containers.insert(id, v);
            }
            res
        })
        .collect();
    let mut sandboxes = Vec::with_capacity(pod.sandboxes.len());
    let mut newest = None;
    for res in sandbox_results {
        match res {
            Ok(st) => {
                let converted = SandboxStatus::from_cri(&st);
                if newest.as_ref().is_none_or(|(_, n): &(_, SandboxStatus)| n.created_at < converted.created_at) {
                    newest = Some((st, converted.clone()));
                }
                sandboxes.push(converted);
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    let mut fresh = Vec::with_capacity(pod.containers.len());
    for res in container_results {
        match res {
            Ok(st) => fresh.push(ContainerStatus::from_cri(&st)),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    if let Some(host) = host {
        futures_util::future::join(
            enrich_containers(runtime, host, &mut fresh, previous, &verbose.containers),
            enrich_sandboxes(runtime, &mut sandboxes, previous, &verbose.sandboxes),
        )
        .await;
    }
    let mut containers: Vec<_> = fresh.into_iter().map(|c| share_unchanged(c, previous)).collect();
    sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
    containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    let (name, namespace, labels, annotations, ips) = match &newest {
        Some((raw, conv)) => {
            let md = raw.metadata.clone().unwrap_or_default();
            let mut ips = Vec::new();
            if conv.state == SandboxState::Ready && !conv.ip.is_empty() {
                ips.push(conv.ip.clone());
                ips.extend(conv.additional_ips.iter().cloned());
            }
            (md.name, md.namespace, raw.labels.iter().collect(), raw.annotations.iter().collect(), ips)
        }
        None => (pod.name.clone(), pod.namespace.clone(), Default::default(), Default::default(), Vec::new()),
    };
    let any_ready = sandboxes.iter().any(|s| s.state == SandboxState::Ready);
    let ips = match previous {
        Some(p) if ips.is_empty() && !any_ready => p.ips.clone(),
        _ => ips,
    };
    let (labels, annotations) = match previous {
        Some(p) => (same_or(labels, &p.labels), same_or(annotations, &p.annotations)),
        None => (labels, annotations),
    };
    Ok(PodStatus {
        uid: pod.uid.clone(),
        name: if name.is_empty() { pod.name.clone() } else { name },
        namespace: if namespace.is_empty() { pod.namespace.clone() } else { namespace },
        labels,
        annotations,
        ips,
        sandboxes,
        containers,
        observed_at,
    })
}

/// Gives each container its process: the previous status's where it had one, else
/// what the runtime's verbose status and the host say — once per container (a runtime that names no PID gives an empty process, not asked again).
/// A failed verbose read leaves it for the next read of the pod.
async fn enrich_containers<R: RuntimeService>(
    runtime: &R,
    host: &Host,
    containers: &mut [ContainerStatus],
    previous: Option<&PodStatus>,
    read_ahead: &HashMap<String, crate::cri::verbose::ContainerVerbose>,
) {
    let mut ask = Vec::new();
    for (i, c) in containers.iter_mut().enumerate() {
        let known = previous.and_then(|p| p.containers.iter().find(|o| o.id == c.id)).and_then(|o| o.process.clone());
        match known {
            Some(p) => c.process = Some(p),
            None if c.state != ContainerState::Created
                && read_ahead.get(&c.id).is_some_and(|v| v.pid != 0 || c.state != ContainerState::Running) =>
            {
                c.process = process_of(host, &c.id, &read_ahead[&c.id], c.state == ContainerState::Running).await;
            }
            // A container seen first after it exited still has the PID and cgroup it
            // ran with (a lookup by them finds it), read without the host's word.
            None if c.state != ContainerState::Created => ask.push(i),
            None => {}
        }
    }
    let reads = join_all(ask.iter().map(|&i| runtime.container_status_verbose(&containers[i].id))).await;
    for (i, read) in ask.into_iter().zip(reads) {
        match read {
            // A running container the runtime gives no PID yet: asked again next time.
            Ok((_, verbose)) if verbose.pid == 0 && containers[i].state == ContainerState::Running => {}
            Ok((_, verbose)) => {
                let running = containers[i].state == ContainerState::Running;
                containers[i].process = process_of(host, &containers[i].id, &verbose, running).await;
            }
            Err(e) => {
                tracing::debug!(container = %containers[i].id, error = %e, "verbose status failed; asked again at the next read")
            }
        }
    }
}

/// A container's process from its verbose status and the host: the cgroup the kernel
/// shows for the PID (any cgroup driver), else the one the spec names. The host is
/// asked only while the container runs: after, the PID may be another process's. The
/// host is read off the async threads; a read that does not answer leaves the process
/// unread (`None`), to be read again at the next read of the pod.
async fn process_of(
    host: &Host,
    id: &str,
    v: &crate::cri::verbose::ContainerVerbose,
    running: bool,
) -> Option<Process> {
    let (id, pid, cgroups_path) = (id.to_owned(), v.pid, v.cgroups_path.clone());
    let read = host
        .off_thread(move |host| {
            // The process is the container's only if the kernel puts it in the
            // container's cgroup: a PID reused since the runtime's answer is another
            // process's.
            let seen = if running { host.process(pid) } else { None }
                .filter(|p| p.cgroup.as_deref().is_none_or(|cg| crate::host::belongs_to(cg, &id, &cgroups_path)));
            let cgroup_id = seen
                .as_ref()
                .and_then(|p| p.cgroup_id)
                .or_else(|| crate::host::cgroup_path_of(&cgroups_path).and_then(|c| host.cgroup_id(&c)));
            let namespaces = if seen.is_some() { host.namespaces(pid) } else { Default::default() };
            (cgroup_id, seen.and_then(|p| p.start_ticks), namespaces)
        })
        .await;
    let (cgroup_id, start_ticks, namespaces) = match read {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(pid = v.pid, error = %e, "the host's /proc did not answer; the container's process is read again later");
            return None;
        }
    };
    Some(Process {
        pid: v.pid,
        cgroup_path: v.cgroups_path.clone(),
        cgroup_id: cgroup_id.unwrap_or(0),
        start_ticks: start_ticks.unwrap_or(0),
        namespaces,
    })
}

/// Gives each ready sandbox its PID and network namespace: the previous status's, or
/// the runtime's verbose status once.
async fn enrich_sandboxes<R: RuntimeService>(
    runtime: &R,
    sandboxes: &mut [SandboxStatus],
    previous: Option<&PodStatus>,
    read_ahead: &HashMap<String, crate::cri::verbose::SandboxVerbose>,
) {
    let mut ask = Vec::new();
    for (i, s) in sandboxes.iter_mut().enumerate() {
        let known = previous
            .and_then(|p| p.sandboxes.iter().find(|o| o.id == s.id))
            .filter(|o| o.pid != 0 || !o.netns_path.is_empty());
        match known {
            Some(o) => (s.pid, s.netns_path) = (o.pid, o.netns_path.clone()),
            None if s.state == SandboxState::Ready && read_ahead.contains_key(&s.id) => {
                let v = &read_ahead[&s.id];
                (s.pid, s.netns_path) = (v.pid, v.netns_path.clone());
            }
            None if s.state == SandboxState::Ready => ask.push(i),
            None => {}
        }
    }
    let reads = join_all(ask.iter().map(|&i| runtime.pod_sandbox_status_verbose(&sandboxes[i].id))).await;
    for (i, read) in ask.into_iter().zip(reads) {
        if let Ok((_, v)) = read {
            (sandboxes[i].pid, sandboxes[i].netns_path) = (v.pid, v.netns_path);
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
    c.process = process_of(host, &c.id, &verbose, c.state == ContainerState::Running).await;
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

/// Lists one pod the way a full listing would show it: its sandboxes (by the kubelet's
/// pod-UID label, plus any sandbox ids already known or named by a hint) and their
/// containers (by sandbox, plus any carrying the pod's UID label). `None` when the
/// runtime has nothing of the pod.
pub async fn list_pod<R: RuntimeService>(
    runtime: &R,
    uid: &str,
    known_sandboxes: &std::collections::BTreeSet<String>,
) -> Result<Option<super::records::RuntimePod>, CriError> {
    use crate::labels::kubelet::POD_UID;
    let by_label: std::collections::HashMap<String, String> = [(POD_UID.to_owned(), uid.to_owned())].into();
    let containers_of = |id: &str| {
        runtime.list_containers(Some(cri::ContainerFilter { pod_sandbox_id: id.to_owned(), ..Default::default() }))
    };
    // One round trip for the common case: the label queries and the containers of the
    // sandboxes the hint already named, all at once.
    let (sandboxes, by_label_containers, known_containers) = futures_util::future::join3(
        runtime
            .list_pod_sandboxes(Some(cri::PodSandboxFilter { label_selector: by_label.clone(), ..Default::default() })),
        runtime.list_containers(Some(cri::ContainerFilter { label_selector: by_label, ..Default::default() })),
        join_all(known_sandboxes.iter().map(|id| containers_of(id))),
    )
    .await;
    let mut sandboxes = sandboxes?;
    for id in known_sandboxes {
        if !sandboxes.iter().any(|s| &s.id == id) {
            let found = runtime
                .list_pod_sandboxes(Some(cri::PodSandboxFilter { id: id.clone(), ..Default::default() }))
                .await?;
            sandboxes.extend(found.into_iter().filter(|s| s.id == *id));
        }
    }
    let mut per_sandbox: Vec<(String, Vec<cri::Container>)> = Vec::with_capacity(sandboxes.len());
    for (id, found) in known_sandboxes.iter().zip(known_containers) {
        per_sandbox.push((id.clone(), found?));
    }
    // Sandboxes the hint did not name cost a second round trip.
    let unnamed: Vec<&str> =
        sandboxes.iter().map(|s| s.id.as_str()).filter(|id| !known_sandboxes.contains(*id)).collect();
    for (id, found) in unnamed.iter().zip(join_all(unnamed.iter().map(|id| containers_of(id))).await) {
        per_sandbox.push(((*id).to_owned(), found?));
    }
    let mut containers = by_label_containers?;
    for (id, found) in per_sandbox {
        if !sandboxes.iter().any(|s| s.id == id) {
            continue;
        }
        for c in found {
            if c.pod_sandbox_id == id && !containers.iter().any(|x| x.id == c.id) {
                containers.push(c);
            }
        }
    }
    Ok(super::records::group_pods(sandboxes, containers).remove(uid))
}

/// Lists every sandbox and container, decoding only what grouping and diffing need.
pub async fn list_everything<R: RuntimeService>(
    runtime: &R,
) -> Result<(Vec<crate::proto::runtime::PodSandbox>, Vec<crate::proto::runtime::Container>), CriError> {
    decode_listing(runtime, &runtime.list_encoded().await?).await
}

/// Decodes a full listing's projection; one that needs the kubelet's labels to be
/// grouped (a sandbox without a UID, an orphaned container) is read again in full.
pub async fn decode_listing<R: RuntimeService>(
    runtime: &R,
    listing: &crate::cri::brief::EncodedListing,
) -> Result<(Vec<crate::proto::runtime::PodSandbox>, Vec<crate::proto::runtime::Container>), CriError> {
    let (sandboxes, containers) = listing.decode().map_err(|(method, source)| CriError::Malformed {
        method,
        endpoint: runtime.endpoint().into(),
        source,
    })?;
    if let Some(full) = crate::cri::brief::into_full(sandboxes, containers) {
        return Ok(full);
    }
    Ok((runtime.list_pod_sandboxes(None).await?, runtime.list_containers(None).await?))
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
    let (sandboxes, containers) = list_everything(runtime).await?;
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
}
