//! The deployment files: every YAML document parses, the fields that matter are right,
//! and the alert and dashboard expressions only name metrics plegd exposes.

use std::collections::BTreeSet;

use serde_yaml::Value;

fn docs(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(format!("{}/manifests/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    serde_yaml::Deserializer::from_str(&text).map(|d| Value::deserialize(d).expect("valid YAML")).collect()
}

use serde::Deserialize;

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind}"))
}

/// Every metric family plegd registers, by its registered name: the committed list in
/// `tests/metric_names.txt`, which `tests/metric_names.rs` holds against the live
/// registry (prometheus-client leaves out families that have no series yet).
fn exposed() -> BTreeSet<String> {
    let list = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/metric_names.txt")).unwrap();
    let names: BTreeSet<String> =
        list.lines().filter_map(|l| l.strip_prefix("# HELP ")?.split(' ').next().map(str::to_owned)).collect();
    assert!(names.len() > 30, "found the registrations: {names:?}");
    names
}

fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' {
            cur.push(c);
        } else {
            if (cur.starts_with("plegd_") || cur.starts_with("workqueue_") || cur.starts_with("process_"))
                && !cur.is_empty()
            {
                out.push(std::mem::take(&mut cur));
            }
            cur.clear();
        }
    }
    out
}

fn assert_known(expr: &str, known: &BTreeSet<String>) {
    for name in metric_names(expr) {
        let family = ["_bucket", "_count", "_sum", "_total"]
            .iter()
            .fold(name.clone(), |n, s| n.strip_suffix(s).map(String::from).unwrap_or(n));
        assert!(known.contains(&name) || known.contains(&family), "{name} in {expr:?} is not a metric plegd exposes");
    }
}

/// Every label of `selector` is on the pods, with the same value.
fn assert_selects(selector: &Value, labels: &Value) {
    let selector = selector.as_mapping().expect("a selector");
    assert!(!selector.is_empty(), "an empty selector selects everything");
    for (k, v) in selector {
        assert_eq!(labels.get(k), Some(v), "{k:?} selects the pods");
    }
}

#[test]
fn the_daemonset_mounts_the_socket_directory_and_probes_the_admin_port() {
    let d = docs("daemonset.yaml");
    let ds = find(&d, "DaemonSet");
    let spec = &ds["spec"]["template"]["spec"];
    assert_selects(&ds["spec"]["selector"]["matchLabels"], &ds["spec"]["template"]["metadata"]["labels"]);
    let c = &spec["containers"][0];
    let args: Vec<&str> = c["args"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(args[0], "run");
    assert!(args.contains(&"--runtime-endpoint=unix:///run/containerd/containerd.sock"));
    let vols = spec["volumes"].as_sequence().unwrap();
    let containerd = vols.iter().find(|v| v["name"] == "runtime-run").unwrap();
    assert_eq!(containerd["hostPath"]["path"], "/run/containerd", "the directory, not the socket file");
    assert_eq!(containerd["hostPath"]["type"], "Directory");
    let mounts = c["volumeMounts"].as_sequence().unwrap();
    assert!(mounts.iter().any(|m| m["mountPath"] == "/run/containerd"));
    assert!(mounts.iter().any(|m| m["mountPath"] == "/run/plegd"));
    // The journal's state dir is the node's, so a new pod continues the journal.
    let state = args.iter().find_map(|a| a.strip_prefix("--state-dir=")).expect("--state-dir is set");
    let mount = mounts.iter().find(|m| m["mountPath"] == state).expect("the state dir is mounted");
    let vol = vols.iter().find(|v| v["name"] == mount["name"]).unwrap();
    assert_eq!(vol["hostPath"]["path"], state, "a hostPath, not an emptyDir that dies with the pod");
    for k in ["requests", "limits"] {
        for r in ["cpu", "memory"] {
            assert!(c["resources"][k][r].is_string(), "resources.{k}.{r}");
        }
    }
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["ports"][0]["name"], "admin");
    assert_eq!(c["ports"][0]["containerPort"], 9477);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    // Every API peer's process is named by the kernel (each root agent its own holder).
    assert_eq!(spec["hostPID"], true, "hostPID: peers in other pods are not all PID 0");
    // The API socket's directory is the host's /run/plegd: per boot, outside the state
    // dir, where the journal's lineage mark lives.
    let run = mounts.iter().find(|m| m["mountPath"] == "/run/plegd").unwrap();
    let vol = vols.iter().find(|v| v["name"] == run["name"]).unwrap();
    assert_eq!(vol["hostPath"]["path"], "/run/plegd");
}

#[test]
fn the_podmonitor_selects_the_daemonsets_pods_on_the_admin_port() {
    let ds = docs("daemonset.yaml");
    let labels = &find(&ds, "DaemonSet")["spec"]["template"]["metadata"]["labels"];
    let pm = docs("podmonitor.yaml");
    let pm = find(&pm, "PodMonitor");
    assert_selects(&pm["spec"]["selector"]["matchLabels"], labels);
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["port"], "admin");
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["path"], "/metrics");
}

#[test]
fn the_alerts_cover_what_the_issue_asks_and_name_real_metrics() {
    let known = exposed();
    let pr = docs("prometheusrule.yaml");
    let rules = find(&pr, "PrometheusRule")["spec"]["groups"][0]["rules"].as_sequence().unwrap().clone();
    let names: Vec<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
    for want in ["PlegdPLEGUnhealthy", "PlegdRelistSlow", "PlegdEventStreamDown", "PlegdWatchResetsRising"] {
        assert!(names.contains(&want), "{want} missing");
    }
    for r in &rules {
        let expr = r["expr"].as_str().unwrap();
        assert_known(expr, &known);
        assert!(r["labels"]["severity"].is_string());
        assert!(r["annotations"]["summary"].is_string());
    }
}

#[test]
fn the_dashboard_parses_and_queries_real_metrics() {
    let known = exposed();
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/grafana-dashboard.json")).unwrap();
    let d: serde_json::Value = serde_json::from_str(&text).unwrap();
    let panels = d["panels"].as_array().unwrap();
    assert!(panels.len() >= 8);
    let mut ids = BTreeSet::new();
    for p in panels {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "panel ids are unique");
        for t in p["targets"].as_array().unwrap() {
            assert_known(t["expr"].as_str().unwrap(), &known);
        }
    }
}

#[test]
fn the_containerfile_ships_one_static_binary_in_an_empty_image_and_the_offline_script_builds_that_same_stage() {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/Containerfile")).unwrap();
    let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "a builder and the image");
    assert!(froms[0].ends_with(" AS build"));
    assert_eq!(froms[1], "FROM scratch AS image", "nothing but the binary: no libc, no shell");
    let build: Vec<&str> = text.lines().skip_while(|l| *l != froms[0]).take_while(|l| *l != froms[1]).collect();
    assert!(
        build.iter().any(|l| l.contains("+crt-static")) && build.iter().any(|l| l.contains("--locked")),
        "a static, locked build"
    );
    let image: Vec<&str> = text.lines().skip_while(|l| *l != froms[1]).collect();
    let copies: Vec<&str> = image.iter().copied().filter(|l| l.starts_with("COPY")).collect();
    assert_eq!(
        copies,
        [
            "COPY --from=build /plegd /usr/local/bin/plegd",
            "COPY --from=build /plegd.cdx.json /usr/share/sbom/plegd.cdx.json"
        ],
        "only the binary and its SBOM go into the image"
    );
    assert!(image.iter().any(|l| l.starts_with("USER ")));
    assert!(image.iter().any(|l| l.starts_with("ENTRYPOINT [\"/usr/local/bin/plegd\"]")));
    let msrv = env!("CARGO_PKG_RUST_VERSION");
    assert!(froms[0].contains(&format!("rust:{msrv}")), "the builder uses the crate's rust-version {msrv}");

    // The offline build feeds its own static binary to that same stage, so the two
    // images have one layout, and names the image as the DaemonSet does.
    let script = std::fs::read_to_string(format!("{root}/scripts/build-image.sh")).unwrap();
    for needed in ["--target image", "--build-context \"build=", "+crt-static", "-f Containerfile", "--timestamp 0"] {
        assert!(script.contains(needed), "scripts/build-image.sh uses {needed}");
    }
    let ds = docs("daemonset.yaml");
    let image_name = find(&ds, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["image"].as_str().unwrap();
    assert!(
        script.contains("manifests/daemonset.yaml"),
        "the script reads the image name ({image_name}) from the manifest"
    );
}
