//! A client in another language (Python grpcio, compiling plegd.v1's proto itself)
//! works against plegd's socket. Needs python3 with grpcio and grpcio-tools; `.ci/run`
//! installs them.

mod support;

use std::time::Duration;

use plegd::cri::spec::{ContainerSpec, PodSpec};
use support::start_plegd;

#[tokio::test]
#[ignore = "needs python3 with grpcio and grpcio-tools (pip install grpcio grpcio-tools); .ci/run installs them"]
async fn a_python_grpcio_client_watches_resumes_and_lists() {
    let probe = std::process::Command::new("python3").args(["-c", "import grpc, grpc_tools"]).output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "\n\n*** python3 with grpcio and grpcio-tools is required: pip install grpcio grpcio-tools ***\n"
    );
    let p = start_plegd(|_| {}).await;
    p.h.run_pod(&PodSpec::new("default", "before"), &[ContainerSpec::new("app")]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let socket = p.socket.trim_start_matches("unix://").to_string();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/watch_client.py");
    let child = tokio::process::Command::new("python3").args([script, &socket, "4"]).output();
    let churn = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        for i in 0..2 {
            p.h.run_pod(&PodSpec::new("default", &format!("after-{i}")), &[ContainerSpec::new("app")]).await;
        }
    };
    let (out, ()) = tokio::join!(child, churn);
    let out = out.expect("python3 runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python client failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(v["snapshot"], 1, "{v}");
    assert_eq!(v["epoch"], p.app.journal().epoch());
    let revisions: Vec<u64> = v["revisions"].as_array().unwrap().iter().map(|r| r.as_u64().unwrap()).collect();
    let first = v["synced_revision"].as_u64().unwrap() + 1;
    assert_eq!(revisions, (first..first + 4).collect::<Vec<_>>(), "consecutive revisions after synced");
    assert_eq!(v["resumed_revision"], revisions[1], "resuming after the first event yields the second");
    assert_eq!(v["events"][0], "CONTAINER_STARTED");
    assert_eq!(v["pods"], 3);
    assert_eq!(v["bad_selector"], "INVALID_ARGUMENT");
    p.stop().await;
}
