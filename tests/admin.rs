//! The admin HTTP surface: every path, with good and bad input.

mod support;

use std::time::Duration;

use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::sim::{Fault, FaultAction};
use support::{http, start_plegd};

fn strip_observed(v: &serde_json::Value) -> serde_json::Value {
    let mut pods = v["pods"].as_array().unwrap().clone();
    for p in &mut pods {
        p.as_object_mut().unwrap().remove("observed_at");
        p.as_object_mut().unwrap().remove("error");
    }
    serde_json::Value::Array(pods)
}

#[tokio::test]
async fn every_path_answers_and_bad_input_gets_a_clear_status() {
    let p = start_plegd(|_| {}).await;
    let pod = PodSpec::new("default", "web").label("app", "web");
    let (_, ids) = p.h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    p.h.sim.exit_container(&ids[0], 2, "Error");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let a = p.app.admin_addr();

    let (code, m) = http(a, "GET", "/metrics").await;
    assert_eq!(code, 200);
    for name in [
        "plegd_pleg_relist_duration_seconds_bucket",
        "plegd_pleg_relist_interval_seconds_count",
        "plegd_pleg_last_seen_seconds",
        "plegd_pleg_mode{mode=\"evented\"} 1",
        // Either path may see the death first (events or a 200 ms relist).
        "plegd_lifecycle_events_total{type=\"CONTAINER_DIED\",source=",
        "plegd_event_delivery_latency_seconds_bucket",
        "plegd_cri_requests_total{method=\"ListPodSandbox\",code=\"OK\"}",
        "plegd_cri_request_duration_seconds_bucket",
        "plegd_cache_pods 1",
        "plegd_running_containers{state=\"exited\"} 1",
        "plegd_journal_revision",
        "plegd_watch_clients 0",
        "workqueue_adds_total{name=\"crashloop\"}",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "plegd_memory_trims_total",
        "plegd_memory_returned_bytes_total",
        "plegd_memory_trim_seconds_total",
        "# TYPE plegd_lifecycle_events_total counter",
    ] {
        assert!(m.contains(name), "{name} missing from /metrics");
    }
    for (path, want) in [("/livez", 200), ("/healthz", 200), ("/readyz", 200)] {
        assert_eq!(http(a, "GET", path).await.0, want, "{path}");
    }

    // Nothing on the metrics port names the node's pods: the debug API is elsewhere.
    let (code, body) = http(a, "GET", "/debug/pods").await;
    assert_eq!(code, 404);
    assert!(body.contains("--debug-addr"), "{body}");
    let a = p.app.debug_addr();
    let (code, body) = http(a, "GET", "/debug/pods").await;
    assert_eq!(code, 200);
    let cache: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(cache["view"], "cache");
    assert_eq!(cache["pods"][0]["uid"], pod.uid.as_str());
    assert_eq!(cache["pods"][0]["containers"][0]["exit_code"], 2);
    let (code, body) = http(a, "GET", "/debug/pods?view=runtime").await;
    assert_eq!(code, 200);
    let runtime: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(runtime["view"], "runtime");
    assert_eq!(strip_observed(&runtime), strip_observed(&cache), "once quiet, the runtime and the cache agree");

    let (code, body) = http(a, "GET", &format!("/debug/pods/{}/timeline", pod.uid)).await;
    assert_eq!(code, 200);
    let tl: serde_json::Value = serde_json::from_str(&body).unwrap();
    let changes = tl["changes"].as_array().unwrap();
    let kinds: Vec<&str> = changes.iter().map(|c| c["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"CONTAINER_STARTED"));
    assert_eq!(kinds.last(), Some(&"CONTAINER_DIED"));
    assert_eq!(changes.last().unwrap()["exit_code"], 2);
    let revs: Vec<u64> = changes.iter().map(|c| c["revision"].as_u64().unwrap()).collect();
    assert!(revs.windows(2).all(|w| w[0] < w[1]), "oldest first: {revs:?}");
    assert!(changes.iter().all(|c| c["source"].is_string()));
    assert_eq!(tl["epoch"].as_u64(), Some(p.app.journal().epoch()), "the journal the revisions belong to");

    assert_eq!(http(a, "GET", "/debug/events?last=5").await.0, 200);
    assert_eq!(http(a, "GET", "/debug/queue").await.0, 200);
    assert_eq!(http(a, "POST", "/debug/resync").await.0, 202);
    // What makes plegd work is paced: a second resync within the second is refused,
    // saying when to come back.
    let (code, body) = http(a, "POST", "/debug/resync").await;
    assert_eq!(code, 429, "{body}");
    assert!(body.contains("once a second"), "{body}");

    for (method, path, want) in [
        ("GET", "/debug/pods?view=bogus", 400),
        ("GET", "/debug/pods?x=1", 400),
        ("GET", "/debug/pods/no-such-pod/timeline", 404),
        ("GET", "/debug/events?until=nope", 400),
        ("GET", "/debug/resync", 405),
        ("GET", "/nope", 404),
        ("GET", "/metrics", 404),
    ] {
        let (code, body) = http(a, method, path).await;
        assert_eq!(code, want, "{method} {path}: {body}");
        if want != 405 {
            assert!(!body.trim().is_empty(), "{method} {path} explains itself");
        }
    }
    assert_eq!(http(p.app.admin_addr(), "POST", "/metrics").await.0, 405);
    p.stop().await;
}

/// A connection to `to` from the loopback address `from` (127.0.0.0/8 is all ours).
async fn connect_from(from: [u8; 4], to: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let sock = tokio::net::TcpSocket::new_v4()?;
    sock.bind(std::net::SocketAddr::from((from, 0)))?;
    sock.connect(to).await
}

#[tokio::test]
async fn half_open_requests_are_capped_and_cut_off_and_the_probes_still_answer() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let p = start_plegd(|_| {}).await;
    let a = p.app.admin_addr();
    let limits = plegd::admin::HttpLimits::ADMIN;
    // Neighbours on many addresses open more connections than the cap, each with a
    // request whose headers never end.
    let mut held = Vec::new();
    for i in 0..limits.max_connections + 20 {
        let from = [127, 0, 1, 2 + (i / limits.per_source) as u8];
        let mut c = connect_from(from, a).await.unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ").await.unwrap();
        held.push(c);
    }
    // Those past the cap take the places of the oldest, which are closed at once.
    let mut closed = 0;
    for c in held.iter_mut().take(40) {
        let mut buf = [0u8; 64];
        // A close with the request unread is a reset, or an end of stream.
        if let Ok(Ok(0) | Err(_)) = tokio::time::timeout(Duration::from_millis(200), c.read(&mut buf)).await {
            closed += 1;
        }
    }
    assert!(closed >= 20, "{closed} of the first 40 connections were closed to make room");
    // The header deadline frees every slot; then the probes answer again.
    let limit = limits.header_read_timeout + Duration::from_secs(3);
    let t0 = tokio::time::Instant::now();
    let mut open = held.len();
    for c in &mut held {
        let mut buf = [0u8; 256];
        let left = limit.saturating_sub(t0.elapsed());
        match tokio::time::timeout(left, c.read(&mut buf)).await {
            Ok(Ok(_)) | Ok(Err(_)) => open -= 1,
            Err(_) => break,
        }
    }
    assert_eq!(open, 0, "half-open requests outlived the header deadline");
    drop(held);
    assert_eq!(http(a, "GET", "/readyz").await.0, 200);
    let (_, m) = http(a, "GET", "/metrics").await;
    let refused = m
        .lines()
        .find_map(|l| l.strip_prefix("plegd_http_connections_refused_total{listener=\"admin\"} "))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(refused >= 20.0, "connections closed at the cap are counted: {refused}");
    p.stop().await;
}

#[tokio::test]
async fn a_neighbour_that_keeps_reconnecting_never_locks_the_probes_out() {
    use tokio::io::AsyncWriteExt;
    let p = start_plegd(|_| {}).await;
    let a = p.app.admin_addr();
    // One neighbour (one address) opens connections as fast as plegd closes them, each
    // idle, for ten seconds: more than the header deadline, so slots turn over.
    let stop = tokio_util::sync::CancellationToken::new();
    let attacker = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut held = std::collections::VecDeque::new();
            let mut opened = 0u64;
            while !stop.is_cancelled() {
                match connect_from([127, 0, 0, 2], a).await {
                    Ok(mut c) => {
                        let _ = c.write_all(b"GET /livez HTTP/1.1\r\n").await;
                        held.push_back(c);
                        opened += 1;
                        if held.len() > 400 {
                            held.pop_front();
                        }
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
                tokio::task::yield_now().await;
            }
            opened
        }
    });
    // The kubelet probes from another address every 200 ms meanwhile.
    let (mut ok, mut tried) = (0, 0);
    let t0 = tokio::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        tried += 1;
        if matches!(support::try_http(a, "GET", "/livez").await, Ok((200, _))) {
            ok += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.cancel();
    let opened = attacker.await.unwrap();
    assert!(opened > plegd::admin::HttpLimits::ADMIN.per_source as u64, "the neighbour opened {opened} connections");
    assert_eq!(ok, tried, "{ok} of {tried} probes answered while a neighbour kept reconnecting");
    p.stop().await;
}

/// The kubelet probes from the node's address, which every host process shares (and
/// which a pod network's veth pair shows as well): a user that holds connections open
/// from it — idle keep-alives, or requests it never finishes — must not make the probes
/// fail, or the liveness probe restarts plegd for ever.
#[tokio::test]
async fn a_user_holding_connections_from_the_probes_own_address_never_makes_a_probe_fail() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let p = start_plegd(|_| {}).await;
    let a = p.app.admin_addr();
    let cap = plegd::admin::HttpLimits::ADMIN.per_source;
    let mut held = Vec::new();
    // Idle keep-alives: one request each, answered, the connection kept.
    for _ in 0..cap {
        let mut c = tokio::net::TcpStream::connect(a).await.unwrap();
        c.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 512];
        let n = c.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
        held.push(c);
    }
    // And as many that never finish their headers.
    for _ in 0..cap {
        let mut c = tokio::net::TcpStream::connect(a).await.unwrap();
        c.write_all(b"GET /livez HTTP/1.1\r\n").await.unwrap();
        held.push(c);
    }
    let mut ok = 0;
    for _ in 0..10 {
        if matches!(support::try_http(a, "GET", "/livez").await, Ok((200, _))) {
            ok += 1;
        }
        // The user takes its places back between probes.
        for _ in 0..4 {
            if let Ok(mut c) = tokio::net::TcpStream::connect(a).await {
                let _ = c.write_all(b"GET /livez HTTP/1.1\r\n").await;
                held.push(c);
            }
        }
    }
    assert_eq!(ok, 10, "{ok} of 10 probes answered beside {} connections held from their address", held.len());
    p.stop().await;
}

#[tokio::test]
async fn healthz_reports_the_kubelets_message_and_readyz_follows() {
    let p = start_plegd(|c| {
        c.pleg.mode = plegd::pleg::evented::Mode::Generic;
        c.pleg.relist_period = Duration::from_millis(100);
        c.pleg.threshold = Duration::from_millis(400);
    })
    .await;
    let a = p.app.admin_addr();
    assert_eq!(http(a, "GET", "/healthz").await.0, 200);
    p.h.sim.inject(Fault {
        method: "ListPodSandbox",
        target: None,
        action: FaultAction::Error(tonic::Code::Internal, "stuck".into()),
        times: None,
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (code, body) = http(a, "GET", "/healthz").await;
    assert_eq!(code, 500);
    assert!(body.starts_with("PLEG is not healthy: pleg was last seen active "), "{body}");
    let mut lines = body.lines();
    assert!(lines.next().unwrap().ends_with("; threshold is 400ms"), "{body}");
    let detail = lines.next().unwrap_or_default();
    assert!(detail.starts_with("last relist failed: ") && detail.contains("stuck"), "the cause is named: {body}");
    let (code, body) = http(a, "GET", "/readyz").await;
    assert_eq!(code, 503);
    assert!(body.contains("PLEG is not healthy"), "{body}");
    assert_eq!(http(a, "GET", "/livez").await.0, 200, "the loop is alive, just failing");
    p.h.sim.clear_faults();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(http(a, "GET", "/healthz").await, (200, "ok\n".to_string()), "a good relist clears the cause");
    p.stop().await;
}
