//! A real Prometheus scrapes plegd on the simulated runtime; `promtool` checks the
//! exposition and the alert rules. Needs Debian's `prometheus` package (`.ci/run`
//! installs it).

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use plegd::cri::spec::{ContainerSpec, PodSpec};
use support::{http, start_plegd};

const NEEDS: &str = "needs Debian's prometheus package (apt-get install prometheus); .ci/run installs it";

fn require(bin: &str) {
    let ok = Command::new(bin).arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(ok, "\n\n*** {bin} not found: this test {NEEDS} ***\n");
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn query(prom: std::net::SocketAddr, q: &str) -> serde_json::Value {
    let enc: String = q
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"_-.".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }
        })
        .collect();
    let (code, body) = http(prom, "GET", &format!("/api/v1/query?query={enc}")).await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["data"]["result"].clone()
}

#[tokio::test]
#[ignore = "needs Debian's prometheus package (apt-get install prometheus); .ci/run installs it"]
async fn prometheus_scrapes_plegd_and_promtool_finds_nothing_wrong() {
    require("prometheus");
    require("promtool");
    let p = start_plegd(|c| c.sync.gc.mode = plegd::reconcile::GcMode::On).await;
    p.h.run_pod(&PodSpec::new("default", "web"), &[ContainerSpec::new("app")]).await;
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let prom: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: plegd\n    static_configs:\n      - targets: ['{}']\n",
            p.app.admin_addr()
        ),
    )
    .unwrap();
    let _prom = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={prom}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let up = if tokio::net::TcpStream::connect(prom).await.is_ok() {
            query(prom, "up{job=\"plegd\"}").await
        } else {
            serde_json::Value::Null
        };
        if up[0]["value"][1] == "1" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "Prometheus never scraped plegd: {up}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for series in [
        "plegd_pleg_relist_duration_seconds_count",
        "plegd_pleg_last_seen_seconds",
        "plegd_lifecycle_events_total",
        "plegd_cri_requests_total",
        "workqueue_depth{name=\"crashloop\"}",
        "workqueue_adds_total{name=\"gc\"}",
        "workqueue_queue_duration_seconds_count",
        "process_resident_memory_bytes",
    ] {
        let r = query(prom, series).await;
        assert!(!r.as_array().unwrap().is_empty(), "{series} is not in Prometheus");
    }
    let relists = query(prom, "plegd_pleg_relist_duration_seconds_count").await;
    assert!(relists[0]["value"][1].as_str().unwrap().parse::<f64>().unwrap() > 0.0);

    // promtool: the exposition plegd serves to plain clients is clean.
    let (_, text) = http(p.app.admin_addr(), "GET", "/metrics").await;
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    check.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // promtool: the chart's rules (the PrometheusRule's spec) are valid rules.
    let rules_file = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/plegd/rules/plegd.yaml");
    let out = Command::new("promtool").args(["check", "rules"]).arg(rules_file).output().unwrap();
    assert!(
        out.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    p.stop().await;
}
