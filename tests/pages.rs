//! The pages for people on the debug listener, over HTTP against a plegd on the
//! simulated runtime: the list and its filters, a pod's timeline (across a restart of
//! plegd), bad input, unknown pods, escaping, and that the admin listener has none of it.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use plegd::cri::spec::{ContainerSpec, PodSpec};
use support::{SimHarness, http, start_plegd, start_plegd_on};

/// Polls `path` until `pred` holds for its body (or fails after 10 s with the last body).
async fn until(addr: SocketAddr, path: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = http(addr, "GET", path).await;
        if code == 200 && pred(&body) {
            return body;
        }
        assert!(tokio::time::Instant::now() < deadline, "GET {path} never matched; last answer {code}:\n{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Attempts `from..to` of `name`, each dying with exit 1 `Error`; returns their ids.
async fn crash(h: &SimHarness, pod: &PodSpec, sid: &str, name: &str, from: u32, to: u32) -> Vec<String> {
    let mut ids = Vec::new();
    for attempt in from..to {
        let id = h.start_container(pod, sid, &ContainerSpec::new(name).attempt(attempt)).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        h.sim.exit_container(&id, 1, "Error");
        tokio::time::sleep(Duration::from_millis(300)).await;
        ids.push(id);
    }
    ids
}

/// The response head and body of a GET, for the headers.
async fn raw_get(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf).to_string()
}

#[tokio::test]
async fn the_list_marks_trouble_and_its_filters_change_it() {
    let p = start_plegd(|_| {}).await;
    let checkout = PodSpec::new("shop", "checkout").label("app", "checkout");
    let (sid, _) = p.h.run_pod(&checkout, &[ContainerSpec::new("proxy")]).await;
    crash(&p.h, &checkout, &sid, "app", 0, 4).await;
    let indexer = PodSpec::new("batch", "indexer").label("app", "indexer");
    let (_, ids) = p.h.run_pod(&indexer, &[ContainerSpec::new("worker")]).await;
    p.h.sim.exit_container(&ids[0], 137, "OOMKilled");
    let hostile = PodSpec::new("default", "<img src=x onerror=alert(1)>").label("note", "\"><script>alert(2)</script>");
    p.h.run_pod(&hostile, &[ContainerSpec::new("c")]).await;
    let a = p.app.debug_addr();

    let list = until(a, "/", |b| {
        b.contains("OOMKilled (exit 137)")
            && b.contains("crash-looping</span>")
            && b.contains("onerror=alert(1)&gt;</a>")
    })
    .await;
    assert!(list.contains(">checkout</a>") && list.contains(">indexer</a>"), "{list}");
    assert!(list.contains("<tr class=\"container crashloop\" data-container=\"app\">"), "{list}");
    assert!(list.contains("<tr class=\"container oom\" data-container=\"worker\">"), "{list}");
    assert!(list.contains("Error (exit 1)"));
    assert!(list.contains("<td class=\"num restarts\">3</td>"), "the fourth attempt is the third restart");
    // What the runtime names is text, never markup.
    assert!(!list.contains("<img src=x") && !list.contains("<script>alert"), "{list}");
    assert!(list.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(list.contains("note=&quot;&gt;&lt;script&gt;alert(2)&lt;/script&gt;"));

    let shop = until(a, "/?namespace=shop", |_| true).await;
    assert!(shop.contains(">checkout</a>") && !shop.contains(">indexer</a>"), "{shop}");
    assert!(shop.contains("<input name=\"namespace\" list=\"namespaces\" value=\"shop\""), "the form keeps the filter");
    let sel = until(a, "/?selector=app%20in%20(indexer,other)", |_| true).await;
    assert!(sel.contains(">indexer</a>") && !sel.contains(">checkout</a>"), "{sel}");
    let none = until(a, "/?namespace=nowhere", |_| true).await;
    assert!(none.contains("No pod matches these filters."));
    let sorted = until(a, "/?sort=-restarts", |_| true).await;
    assert!(sorted.find(">checkout</a>").unwrap() < sorted.find(">indexer</a>").unwrap(), "most restarts first");

    for (path, says) in [
        ("/?selector=app%20in%20(web", "invalid label selector"),
        ("/?selector=%3D%3D", "invalid label selector"),
        ("/?sort=colour", "invalid sort=&quot;colour&quot;"),
        ("/?color=red", "unknown parameter"),
    ] {
        let (code, body) = http(a, "GET", path).await;
        assert_eq!(code, 400, "{path}: {body}");
        assert!(body.contains("<p class=\"error\" role=\"alert\">") && body.contains(says), "{path}: {body}");
    }
    p.stop().await;
}

#[tokio::test]
async fn a_pods_page_draws_each_attempt_and_keeps_it_across_a_restart_of_plegd() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_path_buf();
    let tune = move |c: &mut plegd::config::RunConfig| c.state_dir = Some(state.clone());
    let p = start_plegd(tune.clone()).await;
    let checkout = PodSpec::new("shop", "checkout").label("app", "checkout");
    let (sid, _) = p.h.run_pod(&checkout, &[ContainerSpec::new("proxy")]).await;
    crash(&p.h, &checkout, &sid, "app", 0, 3).await;
    let indexer = PodSpec::new("batch", "indexer");
    let (_, ids) = p.h.run_pod(&indexer, &[ContainerSpec::new("worker")]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    p.h.sim.exit_container(&ids[0], 137, "OOMKilled");
    let a = p.app.debug_addr();
    let path = format!("/pods/{}", checkout.uid);
    let page = until(a, &path, |b| b.matches("<g class=\"death\"").count() == 3).await;
    assert_eq!(page.matches("<g class=\"attempt").count(), 4, "three attempts of app, one of proxy:\n{page}");
    assert_eq!(page.matches("data-lane=\"app\" data-id=").count(), 3);
    assert!(page.contains(">1 Error</text>"));
    assert!(page.contains("<title>shop/checkout · plegd</title>"));
    assert!(page.contains("CONTAINER_DIED · revision "), "a death's title names its event");
    let oom = until(a, &format!("/pods/{}", indexer.uid), |b| b.contains("<g class=\"death oom\"")).await;
    assert!(oom.contains(">OOM 137</text>") && oom.contains("exit 137 · OOMKilled"), "{oom}");

    // A restart of plegd: the journal keeps the history, and the start is on the page.
    let h = p.stop_plegd().await;
    let p = start_plegd_on(h, tune).await;
    let a = p.app.debug_addr();
    crash(&p.h, &checkout, &sid, "app", 3, 4).await;
    let page = until(a, &path, |b| b.matches("data-lane=\"app\" data-id=").count() == 4).await;
    assert!(page.matches("<g class=\"plegd-start\">").count() >= 1, "{page}");
    assert_eq!(page.matches("plegd started (plegd ").count(), 2, "both starts are listed:\n{page}");
    assert!(page.contains("plegd not running"), "the stop and the start bound a window");
    p.stop().await;
}

#[tokio::test]
async fn unknown_pods_stale_checks_headers_and_the_admin_listener() {
    let p = start_plegd(|_| {}).await;
    let pod = PodSpec::new("default", "web");
    p.h.run_pod(&pod, &[ContainerSpec::new("app")]).await;
    let a = p.app.debug_addr();
    until(a, &format!("/pods/{}", pod.uid), |b| b.contains("data-lane=\"app\"")).await;

    let (code, body) = http(a, "GET", "/pods/no-such-pod").await;
    assert_eq!(code, 404);
    assert!(body.contains("plegd has seen no change of a pod with uid <code>no-such-pod</code>"), "{body}");
    let (code, body) = http(a, "GET", "/pods/%3Cb%3E").await;
    assert_eq!(code, 404);
    assert!(body.contains("<code>&lt;b&gt;</code>"), "{body}");
    let (code, body) = http(a, "GET", &format!("/pods/{}?x=1", pod.uid)).await;
    assert_eq!(code, 400, "{body}");

    // The page's token answers 204 while nothing changed, and the page once it did.
    let since = |b: &str| {
        let i = b.find("data-since=\"").unwrap() + 12;
        b[i..i + b[i..].find('"').unwrap()].to_string()
    };
    // (Once the node is quiet: the first relists and the stream's start move it.)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let token = loop {
        let token = since(&http(a, "GET", &format!("/pods/{}", pod.uid)).await.1);
        let (code, body) = http(a, "GET", &format!("/pods/{}?since={token}", pod.uid)).await;
        if code == 204 {
            assert_eq!(body, "");
            break token;
        }
        assert!(tokio::time::Instant::now() < deadline, "never 204: {code}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    p.h.run_pod(&PodSpec::new("default", "other"), &[ContainerSpec::new("x")]).await;
    let newer = until(a, &format!("/pods/{}?since={token}", pod.uid), |b| b.contains("<main")).await;
    assert_ne!(since(&newer), token);
    let (code, _) = http(a, "GET", &format!("/?since={}", since(&newer))).await;
    assert!(code == 204 || code == 200, "{code}");

    let head = raw_get(a, "/").await.to_ascii_lowercase();
    assert!(head.contains("content-type: text/html; charset=utf-8"), "{head}");
    assert!(head.contains("content-security-policy: default-src 'none'; style-src 'nonce-"), "{head}");

    // The metrics port, which the DaemonSet exposes, has no pages.
    for path in ["/", "/pods/x", &format!("/pods/{}", pod.uid)] {
        let (code, body) = http(p.app.admin_addr(), "GET", path).await;
        assert_eq!(code, 404, "{path} on the admin listener: {body}");
        assert!(body.contains("--debug-addr"), "{body}");
    }
    // The JSON endpoints are as they were.
    let (code, body) = http(a, "GET", &format!("/debug/pods/{}/timeline", pod.uid)).await;
    assert_eq!(code, 200);
    assert!(body.starts_with("{\"") && body.contains("\"changes\""), "{body}");
    p.stop().await;
}
