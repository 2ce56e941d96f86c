//! Listing what the runtime holds: one pod alone (by its UID label and the sandboxes
//! already known), or everything at once (the full relist's listing, decoded only as far
//! as grouping needs). Listing names objects and their states; reading their statuses is
//! [`super::inspect`]'s job.

use futures_util::future::join_all;

use super::records::RuntimePod;
use crate::cri::{CriError, RuntimeService};
use crate::proto::runtime as cri;

/// Lists one pod the way a full listing would show it: its sandboxes (by the kubelet's
/// pod-UID label, plus any sandbox ids already known or named by a hint) and their
/// containers (by sandbox, plus any carrying the pod's UID label). `None` when the
/// runtime has nothing of the pod.
pub async fn list_pod<R: RuntimeService>(
    runtime: &R,
    uid: &str,
    known_sandboxes: &std::collections::BTreeSet<String>,
) -> Result<Option<RuntimePod>, CriError> {
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
) -> Result<(Vec<cri::PodSandbox>, Vec<cri::Container>), CriError> {
    decode_listing(runtime, &runtime.list_encoded().await?).await
}

/// Decodes a full listing's projection; one that needs the kubelet's labels to be
/// grouped (a sandbox without a UID, an orphaned container) is read again in full.
pub async fn decode_listing<R: RuntimeService>(
    runtime: &R,
    listing: &crate::cri::brief::EncodedListing,
) -> Result<(Vec<cri::PodSandbox>, Vec<cri::Container>), CriError> {
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
