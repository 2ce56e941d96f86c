//! The gRPC PodLifecycle API over plegd's real unix socket.

mod support;

use std::time::Duration;

use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::proto::plegd as api;
use plegd::proto::plegd::watch_event::Kind;
use plegd::sim::churn::{Churn, ChurnConfig};
use support::start_plegd;
use tonic::Code;

type Stream = tonic::Streaming<api::WatchEvent>;

/// Opens a Watch stream and reads its first message, which tells the journal's epoch.
async fn watch(p: &support::Plegd, req: api::WatchRequest) -> Stream {
    let mut s = p.client().watch(req).await.expect("watch").into_inner();
    let first = next(&mut s).await;
    let Some(Kind::Start(start)) = first.kind else { panic!("the stream did not open with its epoch: {first:?}") };
    assert_eq!(start.epoch, p.app.journal().epoch());
    s
}

async fn next(s: &mut Stream) -> api::WatchEvent {
    tokio::time::timeout(Duration::from_secs(10), s.message()).await.expect("a message in time").unwrap().expect("open")
}

/// Reads the snapshot through `synced`; returns (pods, revision, epoch).
async fn read_snapshot(s: &mut Stream) -> (Vec<api::PodStatus>, u64, u64) {
    let mut pods = Vec::new();
    loop {
        let ev = next(s).await;
        match ev.kind.unwrap() {
            Kind::Snapshot(p) => pods.push(p),
            Kind::Synced(sy) => {
                assert_eq!(sy.pods as usize, pods.len());
                assert!(!sy.node_name.is_empty(), "synced names the node");
                return (pods, ev.revision, sy.epoch);
            }
            Kind::Bookmark(_) => {}
            other => panic!("unexpected before synced: {other:?}"),
        }
    }
}

fn churn(p: &support::Plegd, pods: usize) -> Churn {
    Churn::new(p.h.sim.clone(), ChurnConfig { pods, containers_per_pod: 2, churn_per_sec: 0.0 })
}

#[tokio::test]
async fn watch_sends_a_snapshot_then_synced_then_every_later_event_with_churn_running() {
    let p = start_plegd(|cfg| cfg.api.node_name = "node-7".into()).await;
    let mut c = churn(&p, 10);
    c.populate().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut s = watch(&p, api::WatchRequest::default()).await;
    for _ in 0..30 {
        c.step().await;
    }
    let (pods, rev, epoch) = read_snapshot(&mut s).await;
    assert!(!pods.is_empty());
    assert_eq!(epoch, p.app.journal().epoch());
    let listed = p.client().list_pods(api::ListPodsRequest::default()).await.unwrap().into_inner();
    assert_eq!(listed.node_name, "node-7", "ListPods names the node");
    for _ in 0..30 {
        c.step().await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let last = p.app.journal().revision();
    assert!(last > rev, "churn made events");
    let mut expect = rev + 1;
    while expect <= last {
        let ev = next(&mut s).await;
        if let Some(Kind::Event(_)) = ev.kind {
            assert_eq!(ev.revision, expect, "no gap, no repeat between the snapshot and the live events");
            expect += 1;
        }
    }
    p.stop().await;
}

/// Reads events (skipping other messages) until one at `until` or `count` events.
async fn read_events(s: &mut Stream, until: u64, count: usize) -> Vec<(u64, api::LifecycleEvent)> {
    let mut out = Vec::new();
    while out.len() < count && out.last().is_none_or(|(r, _)| *r < until) {
        let ev = next(s).await;
        match ev.kind {
            Some(Kind::Event(e)) => out.push((ev.revision, e)),
            Some(Kind::Reset(r)) => panic!("unexpected reset {r:?}"),
            _ => {}
        }
    }
    out
}

#[tokio::test]
async fn a_resumed_stream_equals_a_continuous_one() {
    let p = start_plegd(|_| {}).await;
    let mut c = churn(&p, 8);
    c.populate().await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut continuous = watch(&p, api::WatchRequest::default()).await;
    let (_, r0, epoch) = read_snapshot(&mut continuous).await;
    assert!(r0 > 0);
    for _ in 0..20 {
        c.step().await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    // A client reads five events, loses its connection, and resumes after the last.
    let mut b1 = watch(&p, api::WatchRequest { since_revision: r0, epoch, ..Default::default() }).await;
    let mut resumed = read_events(&mut b1, u64::MAX, 5).await;
    drop(b1);
    for _ in 0..20 {
        c.step().await;
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let end = p.app.journal().revision();
    let last = resumed.last().unwrap().0;
    let mut b2 = watch(&p, api::WatchRequest { since_revision: last, epoch, ..Default::default() }).await;
    resumed.extend(read_events(&mut b2, end, usize::MAX).await);
    let all = read_events(&mut continuous, end, usize::MAX).await;
    assert_eq!(resumed.len(), all.len());
    assert!(resumed == all, "the resumed stream is the continuous one, event for event");
    assert_eq!(all.first().unwrap().0, r0 + 1);
    p.stop().await;
}

#[tokio::test]
async fn a_revision_no_longer_kept_gets_a_reset_then_a_fresh_snapshot() {
    let p = start_plegd(|c| c.journal.capacity = 5).await;
    let mut c = churn(&p, 6);
    c.populate().await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(p.app.journal().revision() > 10);
    let mut s = watch(&p, api::WatchRequest { since_revision: 1, ..Default::default() }).await;
    let ev = next(&mut s).await;
    let Some(Kind::Reset(r)) = ev.kind else { panic!("{ev:?}") };
    assert_eq!(r.reason, api::ResetReason::RevisionTooOld as i32);
    let (pods, _, _) = read_snapshot(&mut s).await;
    assert_eq!(pods.len(), 6);
    let mut s = watch(&p, api::WatchRequest { since_revision: 1, epoch: 42, ..Default::default() }).await;
    let Some(Kind::Reset(_)) = next(&mut s).await.kind else { panic!("another epoch resets") };
    let metrics = p.app.metrics().encode();
    assert!(metrics.contains("plegd_watch_resets_total{reason=\"REVISION_TOO_OLD\"} 2"), "{metrics}");
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_is_reset_while_a_fast_one_keeps_up() {
    let p = start_plegd(|c| c.journal.client_buffer = 2048).await;
    let mut slow = watch(&p, api::WatchRequest::default()).await;
    let mut fast = watch(&p, api::WatchRequest::default()).await;
    let (_, mut fast_rev, _) = read_snapshot(&mut fast).await;
    let fast_reader = tokio::spawn(async move {
        let mut n = 0u64;
        while let Ok(Ok(Some(ev))) = tokio::time::timeout(Duration::from_secs(3), fast.message()).await {
            match ev.kind {
                Some(Kind::Reset(r)) => panic!("the fast client was reset: {r:?}"),
                Some(Kind::Event(_)) => {
                    assert_eq!(ev.revision, fast_rev + 1, "the fast client sees every revision");
                    fast_rev = ev.revision;
                    n += 1;
                }
                _ => {}
            }
        }
        (n, fast_rev)
    });
    // Thousands of events (each carrying its pod's status) while the slow client reads
    // nothing: hundreds of pods start, then all go away.
    // Far more than the 2,048-event buffer plus what HTTP/2 flow-control windows hold.
    // Until plegd has published a burst: its revision stops moving (a fixed sleep made
    // this depend on how fast plegd took a burst through the stream or a relist).
    let settled = |j: plegd::journal::Journal| async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut last = j.revision();
        loop {
            tokio::time::sleep(Duration::from_millis(400)).await;
            let now = j.revision();
            if now == last || tokio::time::Instant::now() > deadline {
                return now;
            }
            last = now;
        }
    };
    for round in 0..6 {
        let mut c = churn(&p, 250);
        c.populate().await;
        settled(p.app.journal().clone()).await;
        for s in p.h.sim.list_pod_sandbox(None).await.unwrap() {
            p.h.sim.remove_pod_sandbox(&s.id).await.unwrap();
        }
        let revision = settled(p.app.journal().clone()).await;
        assert!(revision > 1500 * (round + 1), "volume: {revision}");
    }
    let (n, fast_last) = fast_reader.await.unwrap();
    assert!(n > 12_000, "the fast client saw the churn: {n} events");
    assert_eq!(fast_last, p.app.journal().revision(), "and is current");
    // Now the slow client reads: what was buffered, then a reset and a fresh snapshot.
    let mut saw_reset = false;
    let mut read = 0;
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), slow.message())
            .await
            .unwrap_or_else(|_| panic!("no reset after {read} messages"))
            .unwrap()
            .unwrap();
        read += 1;
        match ev.kind.unwrap() {
            Kind::Reset(r) => {
                assert_eq!(r.reason, api::ResetReason::SlowConsumer as i32);
                saw_reset = true;
            }
            Kind::Synced(_) if saw_reset => break,
            _ => {}
        }
    }
    let metrics = p.app.metrics().encode();
    assert!(metrics.contains("plegd_watch_resets_total{reason=\"SLOW_CONSUMER\"} 1"), "{metrics}");
    p.stop().await;
}

#[tokio::test]
async fn filters_select_pods_and_event_types_on_the_server() {
    let p = start_plegd(|_| {}).await;
    let web = PodSpec::new("shop", "web").label("app", "web").label("tier", "front");
    let db = PodSpec::new("shop", "db").label("app", "db");
    let other = PodSpec::new("other", "web").label("app", "web");
    let mut s = watch(
        &p,
        api::WatchRequest {
            filter: Some(api::PodFilter {
                namespace: "shop".into(),
                label_selector: "app in (web),tier!=back".into(),
                ..Default::default()
            }),
            types: vec![api::LifecycleEventType::ContainerDied as i32],
            ..Default::default()
        },
    )
    .await;
    read_snapshot(&mut s).await;
    let mut ids = std::collections::HashMap::new();
    for pod in [&web, &db, &other] {
        let (_, c) = p.h.run_pod(pod, &[ContainerSpec::new("app")]).await;
        ids.insert(pod.uid.clone(), c[0].clone());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for pod in [&db, &other, &web] {
        p.h.sim.exit_container(&ids[&pod.uid], 1, "Error");
    }
    let ev = next(&mut s).await;
    let Some(Kind::Event(e)) = ev.kind else { panic!("{ev:?}") };
    assert_eq!((e.pod_uid.as_str(), e.r#type), (web.uid.as_str(), api::LifecycleEventType::ContainerDied as i32));
    assert!(tokio::time::timeout(Duration::from_millis(700), s.message()).await.is_err(), "nothing else matches");

    let list = p
        .client()
        .list_pods(api::ListPodsRequest {
            filter: Some(api::PodFilter { pod_name: "web".into(), ..Default::default() }),
        })
        .await
        .unwrap()
        .into_inner();
    let mut names: Vec<_> = list.pods.iter().map(|p| format!("{}/{}", p.namespace, p.name)).collect();
    names.sort();
    assert_eq!(names, ["other/web", "shop/web"]);
    assert_eq!(list.epoch, p.app.journal().epoch());
    let by_uid = p
        .client()
        .list_pods(api::ListPodsRequest {
            filter: Some(api::PodFilter { pod_uid: db.uid.clone(), ..Default::default() }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_uid.pods.len(), 1);
    p.stop().await;
}

#[tokio::test]
async fn a_bad_selector_is_an_invalid_argument_that_names_the_problem() {
    let p = start_plegd(|_| {}).await;
    let bad = api::PodFilter { label_selector: "app in web".into(), ..Default::default() };
    let e = p
        .client()
        .watch(api::WatchRequest { filter: Some(bad.clone()), ..Default::default() })
        .await
        .expect_err("refused");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("parenthesised"), "{}", e.message());
    let e = p.client().list_pods(api::ListPodsRequest { filter: Some(bad) }).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = p.client().watch(api::WatchRequest { types: vec![77], ..Default::default() }).await.expect_err("refused");
    assert!(e.message().contains("unknown event type 77"));
    p.stop().await;
}

#[tokio::test]
async fn a_peer_not_in_the_allowlist_is_refused_and_counted() {
    let p = start_plegd(|c| c.api.allow_uids = vec![4242]).await;
    let e = p.client().list_pods(api::ListPodsRequest::default()).await.unwrap_err();
    // A refused peer learns why, in gRPC's words, on every call; it is served nothing.
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("--allow-uid") && e.message().contains("uid"), "{e:?}");
    let mut s = p.client().watch(api::WatchRequest::default()).await;
    if let Ok(stream) = &mut s {
        let first = stream.get_mut().message().await;
        assert!(first.is_err_and(|e| e.code() == Code::PermissionDenied), "a refused peer's Watch sends nothing");
    } else {
        assert_eq!(s.unwrap_err().code(), Code::PermissionDenied);
    }
    let metrics = p.app.metrics().encode();
    assert!(
        metrics.contains("plegd_api_connections_refused_total 1")
            || metrics.contains("plegd_api_connections_refused_total 2"),
        "{metrics}"
    );
    p.stop().await;
    let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap();
    let p = start_plegd(|c| c.api.allow_uids = vec![me]).await;
    p.client().list_pods(api::ListPodsRequest::default()).await.expect("our own uid is allowed");
    p.stop().await;
    // A supplementary group of ours that is neither our uid nor our primary group.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> Vec<u32> {
        let line = status.lines().find_map(|l| l.strip_prefix(name)).unwrap_or_default();
        line.split_whitespace().filter_map(|v| v.parse().ok()).collect()
    };
    let primary = field("Gid:")[0];
    match field("Groups:").into_iter().find(|g| *g != primary) {
        Some(extra) => {
            let p = start_plegd(|c| c.api.allow_gids = vec![extra]).await;
            p.client().list_pods(api::ListPodsRequest::default()).await.expect("a supplementary group is allowed");
            p.stop().await;
        }
        None => eprintln!("this process has no supplementary group besides its primary one"),
    }
}

#[tokio::test]
async fn a_refused_peer_cannot_hold_a_connection_open() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let p = start_plegd(|c| c.api.allow_uids = vec![4242]).await;
    let path = p.socket.trim_start_matches("unix://").to_owned();
    let mut conn = tokio::net::UnixStream::connect(&path).await.unwrap();
    // The HTTP/2 preface and an empty SETTINGS frame, then nothing.
    conn.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").await.unwrap();
    let t0 = std::time::Instant::now();
    let mut buf = [0u8; 4096];
    let closed = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "a refused peer's idle connection stayed open for 20 s");
    assert!(t0.elapsed() >= Duration::from_secs(5), "not closed before it could read why: {:?}", t0.elapsed());
    p.stop().await;
}

/// `setpriv`, to run a client as another user; `None` (said loudly) when this process is
/// not root and so cannot.
fn setpriv(why_not: &str) -> Option<&'static str> {
    let Some(setpriv) = ["/usr/bin/setpriv", "/bin/setpriv"].into_iter().find(|p| std::path::Path::new(p).exists())
    else {
        panic!("this test needs setpriv (util-linux) to run a client as another user");
    };
    if std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap() != 0 {
        eprintln!("\n*** not root: cannot run a client as another user; {why_not} ***\n");
        return None;
    }
    Some(setpriv)
}

/// Lets every user reach plegd's socket (the socket 0666, its directories 0755), so that
/// only the allowlists and the caps decide.
fn open_socket_to_everyone(p: &support::Plegd) {
    use std::os::unix::fs::PermissionsExt;
    let sock = p.socket.trim_start_matches("unix://").to_owned();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut dir = std::path::Path::new(&sock);
    while let Some(parent) = dir.parent() {
        if parent == std::path::Path::new("/tmp") || parent == std::path::Path::new("/") {
            break;
        }
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir = parent;
    }
}

#[tokio::test]
async fn a_peer_is_allowed_by_a_supplementary_group_and_told_why_when_refused() {
    // Another user (nobody) whose primary group is its own and whose supplementary
    // group is the allowed one, through `plegd pods` as a separate process.
    let Some(setpriv) = setpriv("the supplementary-group case is checked only by grpc::tests") else { return };
    let p = start_plegd(|c| c.api.allow_gids = vec![4242]).await;
    open_socket_to_everyone(&p);
    let run_as = |groups: &str| {
        let (setpriv, socket) = (setpriv.to_owned(), p.socket.clone());
        let groups = groups.to_owned();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(setpriv)
                .args(["--reuid", "65534", "--regid", "65534", "--groups", &groups, "--"])
                .args([env!("CARGO_BIN_EXE_plegd"), "pods", "--socket", &socket])
                .output()
                .unwrap()
        })
    };
    let allowed = run_as("4242").await.unwrap();
    assert!(allowed.status.success(), "{}", String::from_utf8_lossy(&allowed.stderr));
    let refused = run_as("4343").await.unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("uid 65534") && err.contains("--allow-gid"), "the refusal says why: {err}");
    p.stop().await;
}

#[tokio::test]
async fn garbage_on_the_socket_drops_that_connection_only() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let p = start_plegd(|c| c.api.handshake_timeout = Duration::from_millis(500)).await;
    let mut good = watch(&p, api::WatchRequest::default()).await;
    read_snapshot(&mut good).await;
    let path = p.socket.trim_start_matches("unix://").to_string();
    for garbage in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        &[0xffu8; 4096][..],
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00",
    ] {
        let mut raw = tokio::net::UnixStream::connect(&path).await.unwrap();
        let _ = raw.write_all(garbage).await;
        let mut buf = vec![0u8; 1024];
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match raw.read(&mut buf).await {
                    Ok(0) | Err(_) => return true,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert_eq!(closed, Ok(true), "the garbage connection is closed");
    }
    p.h.run_pod(&PodSpec::new("default", "after"), &[ContainerSpec::new("app")]).await;
    let ev = next(&mut good).await;
    assert!(matches!(ev.kind, Some(Kind::Event(_))), "the good stream still works: {ev:?}");
    p.client().list_pods(api::ListPodsRequest::default()).await.expect("and new calls work");
    p.stop().await;
}

#[tokio::test]
async fn an_oversized_request_is_refused_and_the_server_goes_on() {
    let p = start_plegd(|_| {}).await;
    let huge = api::PodFilter { label_selector: format!("app={}", "a".repeat(200_000)), ..Default::default() };
    let e = p.client().list_pods(api::ListPodsRequest { filter: Some(huge) }).await.unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    p.client().list_pods(api::ListPodsRequest::default()).await.expect("the next call works");
    // Watch has its own route (shared event encodings): the same limit holds there.
    let huge = api::PodFilter { label_selector: format!("app={}", "a".repeat(200_000)), ..Default::default() };
    let e = p.client().watch(api::WatchRequest { filter: Some(huge), ..Default::default() }).await.unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    let mut s = watch(&p, api::WatchRequest::default()).await;
    read_snapshot(&mut s).await;
    p.stop().await;
}

/// Polls `cond` every 20 ms for up to 5 s.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_watcher_that_goes_away_is_unsubscribed_and_shutdown_ends_the_others_cleanly() {
    let p = start_plegd(|_| {}).await;
    let before = p.app.journal().subscribers();
    let mut streams = Vec::new();
    for _ in 0..3 {
        let mut s = watch(&p, api::WatchRequest::default()).await;
        read_snapshot(&mut s).await;
        streams.push(s);
    }
    assert_eq!(p.app.journal().subscribers(), before + 3);
    assert!(p.app.metrics().encode().contains("plegd_watch_clients 3"));
    // Two clients go away without a word: their subscriptions and counts go with them.
    streams.truncate(1);
    eventually("two subscriptions dropped", || p.app.journal().subscribers() == before + 1).await;
    eventually("the gauge counts one client", || p.app.metrics().encode().contains("plegd_watch_clients 1")).await;
    // The one left gets a clean end of stream at shutdown, not a broken connection.
    let mut last = streams.pop().unwrap();
    let ending = tokio::spawn(async move {
        loop {
            match last.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => return Ok(()),
                Err(status) => return Err(status),
            }
        }
    });
    p.stop().await;
    let end = tokio::time::timeout(Duration::from_secs(5), ending).await.expect("the stream ends at shutdown");
    end.unwrap().expect("a clean end of stream");
}

#[tokio::test]
async fn two_hundred_concurrent_watchers_all_see_the_same_events() {
    let p = start_plegd(|_| {}).await;
    // As agents hold them: a few channels, many streams on each (one process may keep
    // 64 connections open; `grpc::connections`).
    let channels: Vec<_> = (0..4).map(|_| p.client()).collect();
    let mut streams = Vec::new();
    for i in 0..200 {
        let mut s = channels[i % 4].clone().watch(api::WatchRequest::default()).await.expect("watch").into_inner();
        assert!(matches!(next(&mut s).await.kind, Some(Kind::Start(_))), "the epoch first");
        read_snapshot(&mut s).await;
        streams.push(s);
    }
    let mut c = churn(&p, 5);
    c.populate().await;
    for _ in 0..20 {
        c.step().await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let end = p.app.journal().revision();
    assert!(end > 10);
    let mut set = tokio::task::JoinSet::new();
    for mut s in streams {
        set.spawn(async move {
            let mut revs = Vec::new();
            while revs.last().copied().unwrap_or(0) < end {
                let ev = next(&mut s).await;
                if let Some(Kind::Event(_)) = ev.kind {
                    revs.push(ev.revision);
                }
            }
            revs
        });
    }
    let want: Vec<u64> = (1..=end).collect();
    let mut n = 0;
    while let Some(r) = set.join_next().await {
        assert_eq!(r.unwrap(), want);
        n += 1;
    }
    assert_eq!(n, 200);
    assert!(p.app.metrics().encode().contains("plegd_watch_clients 200"));
    p.stop().await;
}

#[tokio::test]
async fn get_pod_status_waits_for_a_newer_status_up_to_the_deadline() {
    let p = start_plegd(|_| {}).await;
    let pod = PodSpec::new("default", "web");
    let (_, ids) = p.h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let now = plegd::model::system_to_timestamp(std::time::SystemTime::now());
    let got = p
        .client()
        .get_pod_status(api::GetPodStatusRequest { pod_uid: pod.uid.clone(), min_timestamp: None })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.pod.unwrap().containers.len(), 1);
    // Nothing newer than "now" is cached: the call makes plegd read the pod afresh (the
    // stream is up, so full relists are minutes apart) and answers with that read.
    let mut req = tonic::Request::new(api::GetPodStatusRequest { pod_uid: pod.uid.clone(), min_timestamp: Some(now) });
    req.set_timeout(Duration::from_secs(5));
    let got = p.client().get_pod_status(req).await.unwrap().into_inner();
    let ts = got.timestamp.unwrap();
    assert!((ts.seconds, ts.nanos) > (now.seconds, now.nanos), "the answer is newer than asked");
    assert_eq!(got.pod.unwrap().containers[0].state, api::ContainerState::Running as i32);
    assert!(!got.not_found);
    // After the container dies, a status newer than its death shows it.
    p.h.sim.exit_container(&ids[0], 3, "Error");
    let after = plegd::model::system_to_timestamp(std::time::SystemTime::now());
    let mut req =
        tonic::Request::new(api::GetPodStatusRequest { pod_uid: pod.uid.clone(), min_timestamp: Some(after) });
    req.set_timeout(Duration::from_secs(5));
    let got = p.client().get_pod_status(req).await.unwrap().into_inner();
    let c = &got.pod.unwrap().containers[0];
    assert_eq!((c.state, c.exit_code), (api::ContainerState::Exited as i32, 3));
    // A time later than plegd's clock (a client's clock ahead, or stepped forward) is
    // "newer than now": the next read answers it, not a wait of an hour. Past the year
    // 2262 (beyond a nanosecond count) too, rather than wrapping to 1970.
    for secs in
        [std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64 + 3600, i64::MAX]
    {
        let future = prost_types::Timestamp { seconds: secs, nanos: 0 };
        let before = plegd::model::system_to_timestamp(plegd::clock::now());
        let mut req =
            tonic::Request::new(api::GetPodStatusRequest { pod_uid: pod.uid.clone(), min_timestamp: Some(future) });
        req.set_timeout(Duration::from_secs(3));
        let got = p.client().get_pod_status(req).await.unwrap().into_inner();
        let ts = got.timestamp.unwrap();
        assert!((ts.seconds, ts.nanos) > (before.seconds, before.nanos), "{secs}: a read after the call");
    }
    let e = p.client().get_pod_status(api::GetPodStatusRequest::default()).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let bad = prost_types::Timestamp { seconds: 1, nanos: -1 };
    let e = p
        .client()
        .get_pod_status(api::GetPodStatusRequest { pod_uid: pod.uid.clone(), min_timestamp: Some(bad) })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("nanos"), "{e:?}");
    p.stop().await;
}

#[tokio::test]
async fn a_timestamp_passed_back_is_answered_only_by_a_strictly_newer_read() {
    let p = start_plegd(|_| {}).await;
    let pod = PodSpec::new("default", "web");
    p.h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut min = plegd::model::system_to_timestamp(plegd::clock::now());
    for i in 0..30 {
        let mut req =
            tonic::Request::new(api::GetPodStatusRequest { pod_uid: pod.uid.clone(), min_timestamp: Some(min) });
        req.set_timeout(Duration::from_secs(5));
        let got = p.client().get_pod_status(req).await.unwrap().into_inner();
        let ts = got.timestamp.unwrap();
        assert!((ts.seconds, ts.nanos) > (min.seconds, min.nanos), "call {i}: {ts:?} is not newer than {min:?}");
        min = ts;
    }
    p.stop().await;
}

/// `plegd_cri_requests_total{method=…}` summed over codes.
fn cri_calls(p: &support::Plegd, method: &str) -> f64 {
    let text = p.app.metrics().encode_text();
    let prefix = format!("plegd_cri_requests_total{{method=\"{method}\"");
    text.lines().filter(|l| l.starts_with(&prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

#[tokio::test]
async fn waiting_readers_cannot_make_plegd_hammer_the_runtime() {
    let p = start_plegd(|_| {}).await;
    let pod = PodSpec::new("default", "web");
    p.h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ask = |uid: String| {
        let mut client = p.client();
        async move {
            let now = plegd::model::system_to_timestamp(plegd::clock::now());
            let mut req = tonic::Request::new(api::GetPodStatusRequest { pod_uid: uid, min_timestamp: Some(now) });
            req.set_timeout(Duration::from_secs(2));
            client.get_pod_status(req).await
        }
    };
    // 2,000 readers wait on pods that do not exist: none makes plegd search for it.
    let (lists, t0) = (cri_calls(&p, "ListPodSandbox"), std::time::Instant::now());
    let asks: Vec<_> = (0..2000).map(|i| ask(format!("made-up-{i}"))).collect();
    futures_util::future::join_all(asks).await;
    let listed = cri_calls(&p, "ListPodSandbox") - lists;
    let checks = (t0.elapsed().as_secs_f64() / 10.0).ceil() + 1.0;
    assert!(listed <= checks, "2,000 waits on made-up pods cost {listed} ListPodSandbox calls");
    // 500 readers wait on one real pod: its reads are paced.
    let t0 = std::time::Instant::now();
    let reads = cri_calls(&p, "ListPodSandbox");
    let asks: Vec<_> = (0..500).map(|_| ask(pod.uid.clone())).collect();
    let answers = futures_util::future::join_all(asks).await;
    let answered = answers.iter().filter(|a| a.is_ok()).count();
    if let Some(Err(e)) = answers.iter().find(|a| a.is_err()) {
        eprintln!("a reader not answered: {e:?}");
    }
    let reads = cri_calls(&p, "ListPodSandbox") - reads;
    let allowed = f64::from(plegd::pleg::generic::DEMAND_READS_BURST)
        + plegd::pleg::generic::DEMAND_READS_PER_SEC * t0.elapsed().as_secs_f64()
        + 2.0;
    assert!(reads <= allowed, "500 waits on one pod cost {reads} listings (allowed {allowed})");
    assert!(answered > 0, "and they are answered: {answered}");
    // A pod whose reads fail: readers waiting on it do not hurry its retries past the
    // pace either (each read fails and answers them with the error at once, so they
    // come back for more).
    let failing = PodSpec::new("default", "failing");
    let (_, ids) = p.h.run_pod(&failing, &[ContainerSpec::new("app")]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    p.h.sim.inject(plegd::sim::Fault {
        method: "ContainerStatus",
        target: Some(ids[0].clone()),
        action: plegd::sim::FaultAction::Error(Code::Unknown, "failed to read the task's state".into()),
        times: None,
    });
    p.h.sim.stop_container(&ids[0]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t0 = std::time::Instant::now();
    let reads = cri_calls(&p, "ListPodSandbox");
    let until = t0 + Duration::from_secs(2);
    let loops: Vec<_> = (0..20)
        .map(|_| async {
            while std::time::Instant::now() < until {
                let _ = ask(failing.uid.clone()).await;
            }
        })
        .collect();
    futures_util::future::join_all(loops).await;
    let reads = cri_calls(&p, "ListPodSandbox") - reads;
    let secs = t0.elapsed().as_secs_f64();
    // The pace, plus the failed read's own retry every relist period (200 ms here), plus
    // the full relists of the stream check (every 10 s).
    let allowed = f64::from(plegd::pleg::generic::DEMAND_READS_BURST)
        + plegd::pleg::generic::DEMAND_READS_PER_SEC * secs
        + secs / 0.2
        + secs / 10.0
        + 3.0;
    assert!(
        reads <= allowed,
        "20 readers asking again and again on a failing pod cost {reads} listings in {secs:.1} s (allowed {allowed})"
    );
    // And it is still read: its retry every relist period goes on (the fault bites).
    assert!(reads >= 3.0, "a failing pod is read again at its retries: {reads} listings in {secs:.1} s");
    p.stop().await;
}

#[tokio::test]
async fn a_client_that_connects_before_the_first_relist_gets_the_pods_not_an_empty_snapshot() {
    use plegd::sim::{Fault, FaultAction};
    let h = support::SimHarness::start().await;
    for i in 0..3 {
        h.run_pod(&PodSpec::new("default", &format!("early-{i}")), &[ContainerSpec::new("app")]).await;
    }
    // The first listing takes a while: clients arrive before plegd has read anything.
    h.sim.inject(Fault {
        method: "ListPodSandbox",
        target: None,
        action: FaultAction::Delay(Duration::from_millis(700)),
        times: Some(1),
    });
    let mut cfg = plegd::config::RunConfig::for_endpoint(&h.endpoint).unwrap();
    cfg.api.socket = h.dir.path().join("api/plegd.sock");
    let (shutdown, tracker) = (tokio_util::sync::CancellationToken::new(), tokio_util::task::TaskTracker::new());
    let app = plegd::app::start(&cfg, &tracker, &shutdown).await.unwrap();
    let socket = format!("unix://{}", cfg.api.socket.display());
    let mut client = plegd::cli::client::connect(&socket).unwrap();
    assert!(app.readiness().check().is_err(), "the clients come before the first relist");
    let listed = client.list_pods(api::ListPodsRequest::default()).await.unwrap().into_inner();
    assert_eq!(listed.pods.len(), 3, "ListPods waits for the first relist");
    let mut s = client.watch(api::WatchRequest::default()).await.unwrap().into_inner();
    let mut snapshots = 0;
    loop {
        let m = tokio::time::timeout(Duration::from_secs(5), s.message()).await.unwrap().unwrap().unwrap();
        match m.kind {
            Some(api::watch_event::Kind::Snapshot(_)) => snapshots += 1,
            Some(api::watch_event::Kind::Synced(sy)) => {
                assert_eq!((sy.pods, snapshots), (3, 3), "the snapshot holds the node's pods");
                break;
            }
            _ => {}
        }
    }
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    h.stop().await;
}

#[tokio::test]
async fn a_waiting_get_pod_status_does_not_hold_up_shutdown() {
    let p = start_plegd(|_| {}).await;
    let mut client = p.client();
    let waiter = tokio::spawn(async move {
        // A pod that never comes, waited on with a long deadline.
        let future = plegd::model::system_to_timestamp(plegd::clock::now() + Duration::from_secs(3600));
        let mut req = tonic::Request::new(api::GetPodStatusRequest {
            pod_uid: "no-such-pod".into(),
            min_timestamp: Some(future),
        });
        req.set_timeout(Duration::from_secs(30));
        client.get_pod_status(req).await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t0 = std::time::Instant::now();
    p.stop().await;
    assert!(t0.elapsed() < Duration::from_secs(3), "shutdown waited {:?} for a GetPodStatus", t0.elapsed());
    let answer = waiter.await.unwrap();
    assert!(answer.as_ref().is_err_and(|e| e.code() == Code::Unavailable) || answer.is_ok(), "{answer:?}");
}

#[tokio::test]
async fn idle_streams_get_bookmarks_at_the_current_revision() {
    let p = start_plegd(|c| c.api.bookmark_interval = Duration::from_millis(200)).await;
    let mut s = watch(&p, api::WatchRequest::default()).await;
    let (_, rev, _) = read_snapshot(&mut s).await;
    let ev = next(&mut s).await;
    assert!(matches!(ev.kind, Some(Kind::Bookmark(_))), "{ev:?}");
    assert_eq!(ev.revision, rev);
    p.stop().await;
}

#[tokio::test]
async fn a_busy_stream_gets_no_bookmarks_and_one_that_goes_quiet_does() {
    let p = start_plegd(|c| c.api.bookmark_interval = Duration::from_millis(1000)).await;
    let mut s = watch(&p, api::WatchRequest::default()).await;
    read_snapshot(&mut s).await;
    // An event every 100 ms for 3 s: three bookmark intervals, none of them idle.
    let journal = p.app.journal().clone();
    let feeder = tokio::spawn(async move {
        for i in 0..30 {
            journal.append(plegd::model::event::PodLifecycleEvent {
                pod_uid: format!("busy-{i}").into(),
                pod_namespace: "default".into(),
                pod_name: format!("busy-{i}").into(),
                kind: plegd::model::event::EventType::PodSync,
                container_id: String::new(),
                container_name: "".into(),
                is_sandbox: false,
                source: plegd::model::event::EventSource::Relist,
                observed_at: std::time::SystemTime::now(),
                runtime_timestamp: None,
                pod: None,
                message: String::new(),
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut events = 0;
    while events < 30 {
        match next(&mut s).await.kind {
            Some(Kind::Event(_)) => events += 1,
            other => panic!("only events while busy, got {other:?}"),
        }
    }
    feeder.await.unwrap();
    let quiet = tokio::time::Instant::now();
    let ev = next(&mut s).await;
    assert!(matches!(ev.kind, Some(Kind::Bookmark(_))), "{ev:?}");
    assert!(quiet.elapsed() < Duration::from_millis(2500), "bookmark after {:?}", quiet.elapsed());
    p.stop().await;
}

#[tokio::test]
async fn the_socket_serves_grpc_health_once_ready() {
    use tonic_health::pb::health_client::HealthClient;
    let p = start_plegd(|_| {}).await;
    let path = std::path::PathBuf::from(p.socket.trim_start_matches("unix://"));
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions()) & 0o777;
    assert_eq!(mode, 0o660);
    let mut h = HealthClient::new(plegd::uds::lazy_channel(path));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let r = h
            .check(tonic_health::pb::HealthCheckRequest { service: "plegd.v1.PodLifecycle".into() })
            .await
            .map(|r| r.into_inner().status);
        if r.as_ref().ok() == Some(&(tonic_health::pb::health_check_response::ServingStatus::Serving as i32)) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never SERVING: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    p.stop().await;
}

#[tokio::test]
async fn a_client_that_stalls_past_the_bookmark_interval_never_gets_a_bookmark_ahead_of_queued_events() {
    use plegd::model::event::{EventSource, EventType, PodLifecycleEvent};
    let p = start_plegd(|c| {
        c.api.bookmark_interval = Duration::from_millis(20);
        c.journal.client_buffer = 100_000;
    })
    .await;
    let mut checker = plegd::watchcheck::WatchChecker::new(false);
    let mut s = p.client().watch(api::WatchRequest::default()).await.unwrap().into_inner();
    // The stream has subscribed once its snapshot is in: the events below follow it.
    loop {
        let m = next(&mut s).await;
        checker.observe(&m).unwrap();
        if matches!(m.kind, Some(Kind::Synced(_))) {
            break;
        }
    }
    // Big pods, so the transport's window fills and events queue behind it.
    let labels: std::collections::BTreeMap<String, String> =
        (0..40).map(|i| (format!("label-{i}"), "x".repeat(60))).collect();
    let status = std::sync::Arc::new(plegd::model::PodStatus {
        labels: labels.into_iter().collect(),
        ..plegd::model::PodStatus::empty("stall", "ns", "stall")
    });
    for round in 0..3 {
        for i in 0..1500 {
            p.app.journal().append(PodLifecycleEvent {
                pod_uid: "stall".into(),
                pod_namespace: "ns".into(),
                pod_name: "stall".into(),
                kind: if i % 2 == 0 { EventType::ContainerStarted } else { EventType::ContainerDied },
                container_id: format!("c{round}-{i}"),
                container_name: "c".into(),
                is_sandbox: false,
                source: EventSource::Relist,
                observed_at: std::time::SystemTime::now(),
                runtime_timestamp: None,
                pod: Some(status.clone()),
                message: String::new(),
            });
        }
        // The client stalls for many bookmark intervals, then reads everything.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let target = p.app.journal().revision();
        let mut last = 0;
        while last < target {
            let m = next(&mut s).await;
            if let Err(v) = checker.observe(&m) {
                panic!("{v}");
            }
            if matches!(m.kind, Some(Kind::Event(_))) {
                last = m.revision;
            }
        }
    }
    assert!(checker.events >= 4500);
    p.stop().await;
}

/// The status a Watch is refused with, whether at the call or as the stream's first
/// message; `what` names the stream for the failure.
async fn refused_watch(p: &support::Plegd, what: &str) -> tonic::Status {
    match p.client().watch(api::WatchRequest::default()).await {
        Err(e) => e,
        Ok(mut s) => s.get_mut().message().await.expect_err(&format!("{what} is refused")),
    }
}

#[tokio::test]
async fn a_peer_that_holds_its_cap_of_watch_streams_gets_no_more_until_it_closes_one() {
    let p = start_plegd(|c| c.api.max_watch_streams_per_uid = 3).await;
    let mut held: Vec<Stream> = Vec::new();
    for _ in 0..3 {
        held.push(watch(&p, api::WatchRequest::default()).await);
    }
    // The fourth: RESOURCE_EXHAUSTED, naming the flag, whether at the call or as the
    // stream's first message.
    let refused = refused_watch(&p, "a fourth stream").await;
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("--max-watch-streams-per-uid"), "{refused:?}");
    assert!(p.app.metrics().encode().contains("plegd_api_watch_streams_refused_total 1"));
    // Everything else is still served, and the streams held still deliver.
    p.client().list_pods(api::ListPodsRequest::default()).await.expect("ListPods is served");
    let pod = PodSpec::new("default", "after-the-cap");
    p.h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    for s in &mut held {
        loop {
            let m = next(s).await;
            if let Some(Kind::Event(e)) = m.kind
                && e.pod.as_ref().is_some_and(|p| p.uid == pod.uid)
            {
                break;
            }
        }
    }
    // One closed: a new one is served.
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let served = match p.client().watch(api::WatchRequest::default()).await {
            Ok(mut s) => s.get_mut().message().await.is_ok(),
            Err(_) => false,
        };
        if served {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no stream served after one of the three closed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    p.stop().await;
}

#[tokio::test]
async fn the_watch_cap_holds_a_non_root_uid_as_a_whole_and_each_root_process_alone() {
    use std::process::Stdio;
    use tokio::io::AsyncBufReadExt;
    let Some(setpriv) = setpriv("the cap per holder is checked for this process only") else { return };
    let p = start_plegd(|c| c.api.max_watch_streams_per_uid = 2).await;
    open_socket_to_everyone(&p);
    // `plegd watch` clients, in their own processes; refused, they say why and retry.
    let watcher = |as_nobody: bool| {
        let mut cmd = if as_nobody {
            let mut c = tokio::process::Command::new(setpriv);
            c.args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--", env!("CARGO_BIN_EXE_plegd")]);
            c
        } else {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_plegd"))
        };
        cmd.args(["watch", "--socket", &p.socket]);
        cmd.stdout(Stdio::null()).stderr(Stdio::piped()).kill_on_drop(true).spawn().unwrap()
    };
    let open =
        || p.app.metrics().encode().lines().find_map(|l| l.strip_prefix("plegd_watch_clients ").map(str::to_owned));
    let until_open = |n: usize| {
        let open = &open;
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while open().as_deref() != Some(&n.to_string()) {
                assert!(tokio::time::Instant::now() < deadline, "never {n} streams open: {:?}", open());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    // Two processes of uid 65534 take its two streams; a third process of it is refused.
    let nobody = [watcher(true), watcher(true)];
    until_open(2).await;
    let mut third = watcher(true);
    let mut lines = tokio::io::BufReader::new(third.stderr.take().unwrap()).lines();
    let said = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("the third client is refused within 10 s")
        .unwrap()
        .unwrap_or_default();
    assert!(said.contains("peer uid 65534") && said.contains("--max-watch-streams-per-uid"), "{said}");
    assert_eq!(open().as_deref(), Some("2"), "the third is not served");
    // Root's processes are each held alone: this process takes two and is refused a
    // third, while another root process is still served.
    let mut mine = Vec::new();
    for _ in 0..2 {
        mine.push(watch(&p, api::WatchRequest::default()).await);
    }
    let refused = refused_watch(&p, "a third stream of this process").await;
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("(uid 0)"), "{refused:?}");
    let root_child = watcher(false);
    until_open(5).await;
    drop((nobody, third, root_child, mine));
    p.stop().await;
}

/// The value of a metric with no labels.
fn metric_value(p: &support::Plegd, name: &str) -> f64 {
    p.app
        .metrics()
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} "))?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_watch_streams_past_the_node_ceiling_are_closed_whoever_holds_them() {
    let p = start_plegd(|c| {
        c.api.max_stalled_watch_streams = 4;
        c.api.stalled_after = Duration::from_millis(300);
    })
    .await;
    // Twelve streams, each on its own connection, that are never read.
    let mut held = Vec::new();
    for _ in 0..12 {
        held.push(p.client().watch(api::WatchRequest::default()).await.expect("served"));
    }
    // A client that reads everything, all along.
    let mut reader = watch(&p, api::WatchRequest::default()).await;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::<String>::new()));
    let reading = {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Ok(Some(m)) = reader.message().await {
                if let Some(Kind::Event(e)) = m.kind {
                    seen.lock().unwrap().insert(e.pod_name);
                }
            }
        })
    };
    // Events large enough to fill every unread stream's transport buffers (a client takes
    // 2 MiB per stream unread, the server buffers 400 KiB more).
    let mut big = ContainerSpec::new("big");
    big.annotations.insert("note".into(), "x".repeat(256 << 10));
    for i in 0..8 {
        p.h.run_pod(&PodSpec::new("default", &format!("big-{i}")), &[big.clone()]).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while metric_value(&p, "plegd_api_stalled_watch_connections_closed_total") < 8.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "stalled streams were not closed: {} closed, {} open",
            metric_value(&p, "plegd_api_stalled_watch_connections_closed_total"),
            metric_value(&p, "plegd_watch_clients")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // What is left: at most the ceiling of stalled streams, and the reader.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while metric_value(&p, "plegd_watch_clients") > 5.0 {
        assert!(tokio::time::Instant::now() < deadline, "{} streams open", metric_value(&p, "plegd_watch_clients"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The reader was never touched: it sees the next pod too.
    p.h.run_pod(&PodSpec::new("default", "after"), &[ContainerSpec::new("app")]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.lock().unwrap().contains("after") {
        assert!(tokio::time::Instant::now() < deadline, "the reading client lost its stream");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!((0..8).all(|i| seen.lock().unwrap().contains(&format!("big-{i}"))));
    reading.abort();
    drop(held);
    p.stop().await;
}
