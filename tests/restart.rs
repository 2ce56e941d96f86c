//! plegd's own restart, with its state dir kept: the epoch and the revisions continue,
//! a client resumes without a reset, and what changed while plegd was down reaches it
//! as events with the runtime's timestamps and exit codes.

mod support;

use std::time::Duration;

use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::proto::plegd as api;
use plegd::proto::plegd::watch_event::Kind;
use support::{start_plegd, start_plegd_on};

type Stream = tonic::Streaming<api::WatchEvent>;

async fn next(s: &mut Stream, within: Duration) -> Option<api::WatchEvent> {
    tokio::time::timeout(within, s.message()).await.ok().map(|m| m.expect("stream ok").expect("stream open"))
}

/// A Watch resuming after `since` of `epoch`.
async fn resume(p: &support::Plegd, since: u64, epoch: u64) -> Stream {
    let req = api::WatchRequest { since_revision: since, epoch, ..Default::default() };
    p.client().watch(req).await.expect("watch").into_inner()
}

/// Waits until the journal holds `n` more events than `from`, and is quiet.
async fn settle(p: &support::Plegd, at_least: u64) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = p.app.journal().revision();
        tokio::time::sleep(Duration::from_millis(600)).await;
        if r >= at_least && p.app.journal().revision() == r {
            return r;
        }
        assert!(tokio::time::Instant::now() < deadline, "the journal never reached {at_least} (at {r})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_changed_while_plegd_was_down_reaches_a_resuming_client_as_events_with_exit_codes() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_owned();
    let tune = move |c: &mut plegd::config::RunConfig| c.state_dir = Some(dir.clone());
    let p = start_plegd(tune.clone()).await;
    let stays = PodSpec::new("ns", "stays").label("app", "web");
    let dies = PodSpec::new("ns", "dies").label("app", "web");
    let goes = PodSpec::new("ns", "goes").label("app", "db");
    let (_, stays_ids) = p.h.run_pod(&stays, &[ContainerSpec::new("main")]).await;
    let (_, dies_ids) =
        p.h.run_pod(&dies, &[ContainerSpec::new("main").exits_after(Duration::from_millis(2500), 3)]).await;
    let (goes_sandbox, goes_ids) = p.h.run_pod(&goes, &[ContainerSpec::new("main")]).await;
    // Three sandboxes and three containers started.
    let seen = settle(&p, 6).await;
    let epoch = p.app.journal().epoch();
    let h = p.stop_plegd().await;

    // While plegd is down: one container dies on its own (exit code 3), one pod is
    // taken away, one pod arrives.
    h.stop_container(&goes_ids[0]).await;
    h.remove_container(&goes_ids[0]).await;
    h.stop_pod(&goes_sandbox).await;
    h.remove_pod(&goes_sandbox).await;
    let arrives = PodSpec::new("ns", "arrives").label("app", "web");
    let (_, arrives_ids) = h.run_pod(&arrives, &[ContainerSpec::new("main")]).await;
    tokio::time::sleep(Duration::from_millis(3000)).await;

    let p = start_plegd_on(h, tune).await;
    assert_eq!(p.app.journal().epoch(), epoch, "the same journal");
    let mut s = resume(&p, seen, epoch).await;
    let Some(api::WatchEvent { kind: Some(Kind::Start(start)), .. }) = next(&mut s, Duration::from_secs(5)).await
    else {
        panic!("the stream opens with its epoch")
    };
    assert!(start.resumed && start.epoch == epoch, "resumed in the same epoch: {start:?}");
    let mut events = Vec::new();
    while let Some(ev) = next(&mut s, Duration::from_secs(2)).await {
        match ev.kind {
            Some(Kind::Event(e)) => {
                assert_eq!(ev.revision, seen + 1 + events.len() as u64, "revisions continue by one");
                events.push(e);
            }
            Some(Kind::Reset(r)) => panic!("a resume across a restart was reset: {r:?}"),
            _ => {}
        }
    }
    let kinds = |id: &str| -> Vec<api::LifecycleEventType> {
        events.iter().filter(|e| e.container_id == id).map(|e| e.r#type()).collect()
    };
    use api::LifecycleEventType as T;
    assert_eq!(kinds(&dies_ids[0]), [T::ContainerDied], "{events:#?}");
    let died = events.iter().find(|e| e.container_id == dies_ids[0]).unwrap();
    let status = died.pod.as_ref().and_then(|p| p.containers.iter().find(|c| c.id == dies_ids[0])).expect("its status");
    assert_eq!(status.exit_code, 3, "with the runtime's exit code");
    assert!(died.runtime_timestamp.is_some(), "and the runtime's time of death");
    assert_eq!(kinds(&goes_ids[0]), [T::ContainerDied, T::ContainerRemoved]);
    assert!(kinds(&goes_sandbox).contains(&T::ContainerRemoved));
    assert_eq!(kinds(&arrives_ids[0]), [T::ContainerStarted]);
    assert!(kinds(&stays_ids[0]).is_empty(), "nothing for what did not change");
    let of_stays: Vec<_> = events.iter().filter(|e| e.pod_uid == stays.uid).collect();
    assert!(of_stays.is_empty(), "not even a POD_SYNC for the pod that did not change: {of_stays:#?}");
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_a_state_dir_is_a_new_epoch_and_a_resume_is_reset() {
    let p = start_plegd(|_| {}).await;
    p.h.run_pod(&PodSpec::new("ns", "a"), &[ContainerSpec::new("main")]).await;
    let seen = settle(&p, 2).await;
    let epoch = p.app.journal().epoch();
    let h = p.stop_plegd().await;
    let p = start_plegd_on(h, |_| {}).await;
    assert_ne!(p.app.journal().epoch(), epoch);
    let mut s = resume(&p, seen, epoch).await;
    let mut reset = None;
    while let Some(ev) = next(&mut s, Duration::from_secs(2)).await {
        if let Some(Kind::Reset(r)) = ev.kind {
            reset = Some(r.reason());
            break;
        }
    }
    assert_eq!(reset, Some(api::ResetReason::RevisionTooOld));
    p.stop().await;
}

/// Found by the hour-long soak on containerd 2.1 (22 violations: one per quiescent
/// point, the same pod each time): a pod plegd had last published with no sandbox and
/// no container stayed in ListPods, and in every watcher's copy, although the runtime
/// no longer had it. After a restart the relister is seeded with it, reads it, finds it
/// gone, and has no container to report; the pod must still go, as a `POD_SYNC` with
/// no pod, in order after the last revision a client saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_published_empty_and_gone_from_the_runtime_is_let_go_after_a_restart() {
    use plegd::model::event::{EventSource, EventType, PodLifecycleEvent};
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_owned();
    let tune = move |c: &mut plegd::config::RunConfig| c.state_dir = Some(dir.clone());
    let p = start_plegd(tune.clone()).await;
    let real = PodSpec::new("ns", "real");
    p.h.run_pod(&real, &[ContainerSpec::new("main")]).await;
    settle(&p, 2).await;
    // What such an event leaves in the view: the pod, empty, that the runtime lacks.
    let ghost: std::sync::Arc<str> = "0d53c2b8-ghost".into();
    let empty = plegd::model::PodStatus::empty(&ghost, "ns", "ghost");
    p.app.journal().append(PodLifecycleEvent {
        pod_uid: ghost.clone(),
        pod_namespace: "ns".into(),
        pod_name: "ghost".into(),
        kind: EventType::ContainerDied,
        container_id: "gone-container".into(),
        container_name: "main".into(),
        is_sandbox: false,
        source: EventSource::Relist,
        observed_at: std::time::SystemTime::now(),
        runtime_timestamp: None,
        pod: Some(std::sync::Arc::new(empty)),
        message: String::new(),
    });
    assert!(p.app.journal().pods().iter().any(|s| *s.uid == *ghost), "the view holds the empty pod");
    let (seen, epoch) = (p.app.journal().revision(), p.app.journal().epoch());
    let h = p.stop_plegd().await;

    let p = start_plegd_on(h, tune).await;
    let mut s = resume(&p, seen, epoch).await;
    let mut let_go = None;
    while let Some(ev) = next(&mut s, Duration::from_secs(3)).await {
        if let Some(Kind::Event(e)) = ev.kind
            && e.pod_uid == *ghost
        {
            let_go = Some((ev.revision, e));
        }
    }
    let (revision, e) = let_go.expect("an event lets the empty pod go");
    assert!(revision > seen, "after what the client saw");
    assert_eq!((e.r#type(), e.pod.is_none()), (api::LifecycleEventType::PodSync, true), "{e:?}");
    assert!(p.app.journal().pods().iter().all(|s| *s.uid != *ghost), "the view lets it go");
    let listed = p.client().list_pods(api::ListPodsRequest::default()).await.unwrap().into_inner().pods;
    assert!(listed.iter().all(|s| s.uid != *ghost), "ListPods lets it go: {listed:?}");
    assert!(listed.iter().any(|s| s.name == "real"), "and keeps the real pod");
}

/// containerd marks a container whose task it lost across its own restart exited 255
/// "Unknown" and amends the reason later with no event (tests/quiet_node.rs has the
/// running plegd's side). Amended while plegd is down, the new word reaches a client
/// resuming across plegd's restart as a `POD_SYNC` carrying it — found by review: the
/// restarted relister read the amended status into its cache and told nobody — and a
/// pod that did not change gets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_status_amended_while_plegd_was_down_reaches_a_resuming_client() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().to_owned();
    let tune = move |c: &mut plegd::config::RunConfig| c.state_dir = Some(dir.clone());
    let p = start_plegd(tune.clone()).await;
    let oom = PodSpec::new("ns", "oom");
    let quiet = PodSpec::new("ns", "quiet");
    let (_, ids) = p.h.run_pod(&oom, &[ContainerSpec::new("main")]).await;
    let (_, quiet_ids) = p.h.run_pod(&quiet, &[ContainerSpec::new("main")]).await;
    let started = settle(&p, 4).await;
    // The runtime restarts, having lost the container's task: plegd tells its death
    // with the word the runtime has for it then.
    assert_eq!(p.h.sim.restart_losing(&[&ids[0], &quiet_ids[0]]), 2);
    let seen = settle(&p, started + 2).await;
    let epoch = p.app.journal().epoch();
    let h = p.stop_plegd().await;
    // While plegd is down the runtime amends one of the two words.
    assert!(h.sim.amend_exit_reason(&ids[0], "OOMKilled"));

    let p = start_plegd_on(h, tune).await;
    // From revision 1 (0 asks for a snapshot): every event since the sandboxes started.
    let mut s = resume(&p, 1, epoch).await;
    let mut events = Vec::new();
    while let Some(ev) = next(&mut s, Duration::from_secs(3)).await {
        if let Some(Kind::Event(e)) = ev.kind {
            events.push((ev.revision, e));
        }
    }
    let word = |e: &api::LifecycleEvent, id: &str| {
        let c = e.pod.as_ref()?.containers.iter().find(|c| c.id == id)?;
        Some((c.exit_code, c.reason.clone()))
    };
    use api::LifecycleEventType as T;
    for (id, want) in [(&ids[0], "OOMKilled"), (&quiet_ids[0], "Unknown")] {
        let died: Vec<_> =
            events.iter().filter(|(_, e)| e.container_id == *id && e.r#type() == T::ContainerDied).collect();
        assert_eq!(died.len(), 1, "{id}: the death is told once: {events:#?}");
        assert_eq!(word(&died[0].1, id), Some((255, "Unknown".to_owned())), "as the runtime said it then");
        let last = events.iter().rev().find_map(|(_, e)| word(e, id));
        assert_eq!(
            last,
            Some((255, want.to_owned())),
            "{id}: a client's copy ends with the runtime's word: {events:#?}"
        );
    }
    let after: Vec<_> =
        events.iter().filter(|(r, _)| *r > seen).map(|(_, e)| (e.pod_name.clone(), e.r#type())).collect();
    assert_eq!(after, [("oom".to_owned(), T::PodSync)], "one POD_SYNC, for the amended pod alone");
    let listed = p.client().list_pods(api::ListPodsRequest::default()).await.unwrap().into_inner().pods;
    let listed_word =
        listed.iter().flat_map(|pod| &pod.containers).find(|c| c.id == ids[0]).map(|c| (c.exit_code, c.reason.clone()));
    assert_eq!(listed_word, Some((255, "OOMKilled".to_owned())), "ListPods has the amended word");
    p.stop().await;
}
