//! Reading one pod's full status from the runtime (the kubelet's `GetPodStatus`).

use std::time::SystemTime;

use super::records::RuntimePod;
use crate::cri::{CriError, RuntimeService};
use crate::model::{ContainerStatus, PodStatus, SandboxState, SandboxStatus};

/// Reads the status of every sandbox and container the listing showed for `pod`.
/// Objects that vanished since the listing (NotFound) are skipped; any other error
/// fails the inspection. When no sandbox is ready and the fresh status has no IPs,
/// `previous_ips` are kept, as the kubelet keeps a dead pod's IP.
pub async fn inspect_pod<R: RuntimeService>(
    runtime: &R,
    pod: &RuntimePod,
    previous_ips: &[String],
) -> Result<PodStatus, CriError> {
    let observed_at = SystemTime::now();
    // Every status call of the pod at once: one round trip instead of one per object.
    let (sandbox_results, container_results) = futures_util::future::join(
        futures_util::future::join_all(pod.sandboxes.iter().map(|s| runtime.pod_sandbox_status(&s.id))),
        futures_util::future::join_all(pod.containers.iter().map(|c| runtime.container_status(&c.id))),
    )
    .await;
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
    let mut containers = Vec::with_capacity(pod.containers.len());
    for res in container_results {
        match res {
            Ok(st) => containers.push(ContainerStatus::from_cri(&st)),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
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
    let ips = if ips.is_empty() && !any_ready { previous_ips.to_vec() } else { ips };
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

/// Lists one pod the way a full listing would show it: its sandboxes (by the kubelet's
/// pod-UID label, plus any sandbox ids already known or named by a hint) and their
/// containers (by sandbox, plus any carrying the pod's UID label). `None` when the
/// runtime has nothing of the pod.
pub async fn list_pod<R: RuntimeService>(
    runtime: &R,
    uid: &str,
    known_sandboxes: &std::collections::BTreeSet<String>,
) -> Result<Option<super::records::RuntimePod>, CriError> {
    use crate::cri::spec::POD_UID_LABEL;
    use crate::proto::runtime as cri;
    use futures_util::future::join_all;
    let by_label: std::collections::HashMap<String, String> = [(POD_UID_LABEL.to_owned(), uid.to_owned())].into();
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
/// relist would, without touching the cache: `/debug/pods?view=runtime`.
pub async fn read_all<R: RuntimeService>(runtime: &R, concurrency: usize) -> Result<Vec<PodStatus>, CriError> {
    use futures_util::StreamExt;
    let (sandboxes, containers) = list_everything(runtime).await?;
    let pods = super::records::group_pods(sandboxes, containers);
    let mut out: Vec<PodStatus> = futures_util::stream::iter(pods.into_values())
        .map(|p| async move { inspect_pod(runtime, &p, &[]).await })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    out.sort_by(|a, b| a.uid.cmp(&b.uid));
    Ok(out)
}
