//! `GetContainer`'s rules, tried without any transport: a container the kernel runs
//! and plegd has not published is read from the runtime once however many ask, and
//! answered only where the runtime's word places the process; nothing is answered
//! before the first relist.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::super::resolver::{ContainerReader, DirectRead, LOOKUP_WAIT, ReadContainer, ResolveError, Resolver};
use super::super::*;
use super::{container, empty_host, event, pod};
use crate::journal::{Journal, JournalMetrics};
use crate::model::event::EventType;

/// A host where PID 600 runs in container `id`'s cgroup, and a lookup over it.
fn host_running(id: &str) -> (std::path::PathBuf, ContainerLookup) {
    let root = empty_host();
    std::fs::create_dir_all(root.join("proc/600")).unwrap();
    std::fs::write(root.join("proc/600/cgroup"), format!("0::/kubepods.slice/cri-containerd-{id}.scope\n")).unwrap();
    let cfg = LookupConfig::in_memory(Duration::from_secs(3600));
    let lookup = ContainerLookup::open(cfg, Host::new(&root), None, LookupMetrics::default()).unwrap().0;
    (root, lookup)
}

/// A reader that counts its reads and answers each with `answer` after 50 ms.
fn reader(answer: DirectRead) -> (ContainerReader, Arc<AtomicUsize>) {
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = reads.clone();
    let reader: ContainerReader = Arc::new(move |_id| {
        counted.fetch_add(1, Ordering::SeqCst);
        let answer = answer.clone();
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            answer
        })
    });
    (reader, reads)
}

fn primed_journal() -> Journal {
    let j = Journal::new(100, 100, JournalMetrics::throwaway());
    j.mark_primed();
    j
}

fn resolver(lookup: ContainerLookup, reader: Option<ContainerReader>, journal: Journal) -> Resolver {
    Resolver::new(lookup, reader, journal, crate::cache::new().1, CancellationToken::new())
}

/// The runtime's answer for container `id`, its process in `cgroup`.
fn runtime_says(id: &str, cgroup: &str) -> DirectRead {
    let mut c = (*container(id, ContainerState::Running, 600, 9, 0)).clone();
    c.process.as_mut().unwrap().cgroup_path = cgroup.into();
    let pod = (*pod("u1", vec![])).clone();
    DirectRead::Found(Box::new(ReadContainer { pod, container: c }))
}

#[tokio::test]
async fn an_unpublished_container_the_kernel_runs_is_read_from_the_runtime_once_however_many_ask() {
    let id = "b".repeat(64);
    let (_root, lookup) = host_running(&id);
    let (reader, reads) = reader(runtime_says(&id, &format!("/kubepods.slice/cri-containerd-{id}.scope")));
    let r = resolver(lookup, Some(reader), primed_journal());
    let asks = (0..8).map(|_| r.resolve(&LookupKey::Pid(600), Duration::from_secs(5)));
    for answer in futures_util::future::join_all(asks).await {
        let found = answer.expect("placed by the runtime's word");
        assert_eq!((found.container.id.as_str(), found.pod.uid.as_str(), found.removed_at), (id.as_str(), "u1", None));
    }
    assert_eq!(reads.load(Ordering::SeqCst), 1, "eight asks, one runtime read");
}

#[tokio::test]
async fn a_runtime_answer_that_does_not_place_the_process_is_refused_and_a_failed_read_is_unavailable() {
    let id = "b".repeat(64);
    let (_root, lookup) = host_running(&id);
    let key = LookupKey::Pid(600);
    // The runtime knows the container, with its process somewhere else.
    let (elsewhere, _) = reader(runtime_says(&id, "/kubepods.slice/another.scope"));
    let err = resolver(lookup.clone(), Some(elsewhere), primed_journal()).resolve(&key, Duration::from_secs(5)).await;
    assert!(
        matches!(&err, Err(ResolveError::NotFound(why)) if why.contains("not where the runtime put it")),
        "{err:?}"
    );
    // The read fails: nothing is learned, try again.
    let (failing, _) = reader(DirectRead::Failed("connection refused".into()));
    let err = resolver(lookup.clone(), Some(failing), primed_journal()).resolve(&key, Duration::from_secs(5)).await;
    assert!(matches!(&err, Err(ResolveError::Unavailable(why)) if why.contains("connection refused")), "{err:?}");
    // The runtime does not know it as a pod's container: remembered, not read again.
    let (pause, reads) = reader(DirectRead::NotAPodsContainer);
    let r = resolver(lookup, Some(pause), primed_journal());
    for _ in 0..3 {
        assert!(matches!(r.resolve(&key, Duration::from_secs(5)).await, Err(ResolveError::NotFound(_))));
    }
    assert_eq!(reads.load(Ordering::SeqCst), 1, "a sandbox's pause process is read once");
}

#[tokio::test(start_paused = true)]
async fn nothing_is_answered_before_the_first_relist_and_a_wait_for_an_unpublished_container_is_bounded() {
    let id = "b".repeat(64);
    let (_root, lookup) = host_running(&id);
    let journal = Journal::new(100, 100, JournalMetrics::throwaway());
    let r = resolver(lookup.clone(), None, journal.clone());
    let err = r.resolve(&LookupKey::Id(id.clone()), Duration::from_secs(3)).await;
    assert!(matches!(&err, Err(ResolveError::Unavailable(why)) if why.contains("first read")), "{err:?}");
    journal.mark_primed();
    // Without a reader, the call waits for plegd to publish the container: at most
    // LOOKUP_WAIT, then it is not found ...
    let t0 = tokio::time::Instant::now();
    let err = r.resolve(&LookupKey::Pid(600), Duration::from_secs(30)).await;
    assert!(matches!(&err, Err(ResolveError::NotFound(why)) if why.contains("has not published")), "{err:?}");
    assert_eq!(t0.elapsed(), LOOKUP_WAIT);
    // ... and published meanwhile, it is found.
    let waiting = tokio::spawn({
        let r = r.clone();
        async move { r.resolve(&LookupKey::Pid(600), Duration::from_secs(30)).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut started = (*container(&id, ContainerState::Running, 600, 9, 0)).clone();
    started.process.as_mut().unwrap().cgroup_path = format!("/kubepods.slice/cri-containerd-{id}.scope");
    lookup.observe([&event("u1", EventType::ContainerStarted, &id, Some(pod("u1", vec![Arc::new(started)])))]);
    let found = waiting.await.unwrap().expect("found once published");
    assert_eq!(found.container.id, id);
}
