//! Pod churn for the simulated runtime: keeps a population of pods and changes them at
//! a steady rate the way a busy node does (deaths, restarts, replacements, stops).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::SimRuntime;
use super::kubelet::{SimKubelet, pod_of};
use crate::cri::spec::{ContainerSpec, PodSpec};

/// How much churn to make.
#[derive(Clone, Debug)]
pub struct ChurnConfig {
    /// Pods kept alive.
    pub pods: usize,
    /// Containers in each pod.
    pub containers_per_pod: usize,
    /// Changes per second (0: populate only).
    pub churn_per_sec: f64,
}

/// The churn driver.
pub struct Churn {
    sim: SimRuntime,
    cfg: ChurnConfig,
    pods: Vec<LivePod>,
    serial: u64,
    /// The kubelet's Pods API, told of each pod run and deleted.
    kubelet: Option<SimKubelet>,
}

struct LivePod {
    spec: PodSpec,
    sandbox_id: String,
    containers: Vec<LiveContainer>,
}

struct LiveContainer {
    spec: ContainerSpec,
    id: String,
    /// The previous attempt, kept dead like the kubelet keeps one for logs.
    previous: Option<String>,
}

const NAMESPACES: [&str; 3] = ["default", "kube-system", "monitoring"];
const APPS: [&str; 4] = ["web", "api", "cache", "worker"];

/// A pod named and labelled as the controller behind its app makes them: `web` and
/// `api` a Deployment's, `cache` a StatefulSet's, `worker` a CronJob's Job's.
fn controlled_pod(ns: &str, app: &str, serial: u64) -> PodSpec {
    let generated = generated_suffix(serial);
    let spec = match app {
        "cache" => {
            let name = format!("{app}-{serial}");
            PodSpec::new(ns, &name)
                .label("controller-revision-hash", "cache-6b8f9d7c5")
                .label("statefulset.kubernetes.io/pod-name", &name)
        }
        "worker" => {
            // Scheduled within the last day, as a CronJob's Job is named.
            let minute =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() / 60);
            let job = format!("{app}-{}", minute - serial % 1440);
            PodSpec::new(ns, &format!("{job}-{generated}"))
                .label("batch.kubernetes.io/job-name", &job)
                .label("job-name", &job)
        }
        _ => {
            let hash = if app == "web" { "5f7b9c6d48" } else { "7c9d6b5f84" };
            PodSpec::new(ns, &format!("{app}-{hash}-{generated}")).label("pod-template-hash", hash)
        }
    };
    // On the pod network: the simulated runtime gives it an address.
    PodSpec { host_network: false, ..spec.label("app", app) }
}

/// Five characters from the API server's `generateName` alphabet, one string per serial.
fn generated_suffix(mut serial: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| {
            let c = ALPHABET[(serial % ALPHABET.len() as u64) as usize] as char;
            serial /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

impl Churn {
    /// A driver for `sim`.
    pub fn new(sim: SimRuntime, cfg: ChurnConfig) -> Self {
        Self { sim, cfg, pods: Vec::new(), serial: 0, kubelet: None }
    }

    /// Tells `kubelet`'s Pods API of every pod run and deleted, as the kubelet would.
    pub fn with_kubelet(mut self, kubelet: SimKubelet) -> Self {
        self.kubelet = Some(kubelet);
        self
    }

    async fn add_pod(&mut self) {
        self.serial += 1;
        let app = APPS[self.serial as usize % APPS.len()];
        let ns = NAMESPACES[self.serial as usize % NAMESPACES.len()];
        let spec = controlled_pod(ns, app, self.serial);
        let Ok(sandbox_id) = self.sim.run_pod_sandbox(spec.run_request()).await else { return };
        let mut containers = Vec::new();
        for i in 0..self.cfg.containers_per_pod {
            let c = ContainerSpec::new(if i == 0 { app } else { "sidecar" });
            let c = if i > 0 { ContainerSpec { name: format!("sidecar-{i}"), ..c } } else { c };
            if let Ok(id) = self.sim.create_container(spec.create_request(&sandbox_id, &c)).await {
                let _ = self.sim.start_container(&id).await;
                containers.push(LiveContainer { spec: c, id, previous: None });
            }
        }
        if let Some(kubelet) = &self.kubelet {
            let ip = self.sim.pod_sandbox_status(&sandbox_id).await.ok().and_then(|s| s.network).map(|n| n.ip);
            let names: Vec<&str> = containers.iter().map(|c| c.spec.name.as_str()).collect();
            kubelet.put(pod_of(&spec, &names, &ip.unwrap_or_default(), std::time::SystemTime::now()));
        }
        self.pods.push(LivePod { spec, sandbox_id, containers });
    }

    /// Creates pods until the population is reached.
    pub async fn populate(&mut self) {
        while self.pods.len() < self.cfg.pods {
            self.add_pod().await;
        }
    }

    /// Makes one random change.
    pub async fn step(&mut self) {
        if self.pods.is_empty() {
            self.populate().await;
            return;
        }
        let p = fastrand::usize(..self.pods.len());
        match fastrand::u8(..10) {
            // A container's process dies with some exit code.
            0..=2 => {
                let pod = &self.pods[p];
                if let Some(c) = pod.containers.get(fastrand::usize(..pod.containers.len().max(1))) {
                    let code = [0, 1, 2, 137][fastrand::usize(..4)];
                    let reason = if code == 0 { "Completed" } else { "Error" };
                    self.sim.exit_container(&c.id, code, reason);
                }
            }
            // The kubelet restarts a dead container as the next attempt.
            3..=5 => {
                let pod = &mut self.pods[p];
                let sandbox_id = pod.sandbox_id.clone();
                for c in pod.containers.iter_mut() {
                    let exited = self
                        .sim
                        .container_status_cri(&c.id)
                        .await
                        .is_ok_and(|s| s.state == crate::proto::runtime::ContainerState::ContainerExited as i32);
                    if !exited {
                        continue;
                    }
                    if let Some(old) = c.previous.take() {
                        let _ = self.sim.remove_container_cri(&old).await;
                    }
                    let next = c.spec.clone().attempt(c.spec.attempt + 1);
                    if let Ok(id) = self.sim.create_container(pod.spec.create_request(&sandbox_id, &next)).await {
                        let _ = self.sim.start_container(&id).await;
                        c.previous = Some(std::mem::replace(&mut c.id, id));
                        c.spec = next;
                    }
                    break;
                }
            }
            // A pod is deleted and another one scheduled.
            6..=7 => {
                let pod = self.pods.swap_remove(p);
                let _ = self.sim.stop_pod_sandbox(&pod.sandbox_id).await;
                let _ = self.sim.remove_pod_sandbox(&pod.sandbox_id).await;
                if let Some(kubelet) = &self.kubelet {
                    kubelet.delete(&pod.spec.uid, false);
                }
                self.add_pod().await;
                // What a test that churns a node while plegd is away waits for.
                tracing::debug!(removed = %pod.spec.name, "churn replaced a pod");
            }
            // The kubelet stops a container (a failed probe, say).
            _ => {
                let pod = &self.pods[p];
                if let Some(c) = pod.containers.first() {
                    let _ = self.sim.stop_container(&c.id).await;
                }
            }
        }
    }

    /// Populates, then churns at the configured rate until shutdown.
    pub async fn run(mut self, shutdown: CancellationToken) {
        self.populate().await;
        if self.cfg.churn_per_sec <= 0.0 {
            return;
        }
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / self.cfg.churn_per_sec));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => self.step().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::Labels;
    use crate::model::workload::{WorkloadKind, infer};

    #[test]
    fn every_churned_pod_is_named_and_labelled_as_its_controller_makes_it() {
        let mut names = std::collections::HashSet::new();
        for serial in 1..2_000 {
            let app = APPS[serial as usize % APPS.len()];
            let spec = controlled_pod("default", app, serial);
            assert!(names.insert(spec.name.clone()), "{} named twice", spec.name);
            let w = infer(&spec.name, &spec.labels.iter().collect::<Labels>(), std::time::SystemTime::now())
                .expect(&spec.name);
            let want = match app {
                "cache" => WorkloadKind::StatefulSet,
                "worker" => WorkloadKind::CronJob,
                _ => WorkloadKind::Deployment,
            };
            assert_eq!((w.workload.kind, w.workload.name.as_str()), (want, app), "{}", spec.name);
            assert!(!spec.host_network);
        }
    }

    #[tokio::test]
    async fn with_a_kubelet_its_pods_api_holds_each_running_pod_with_its_controller_and_address() {
        let sim = SimRuntime::new();
        let kubelet = SimKubelet::default();
        let cfg = ChurnConfig { pods: 12, containers_per_pod: 2, churn_per_sec: 0.0 };
        let mut churn = Churn::new(sim.clone(), cfg).with_kubelet(kubelet.clone());
        for _ in 0..300 {
            churn.step().await;
        }
        let served = kubelet.pods();
        let mut uids: Vec<&str> = served.iter().map(|p| p.metadata.as_ref().unwrap().uid()).collect();
        let mut running: Vec<&str> = churn.pods.iter().map(|p| p.spec.uid.as_str()).collect();
        uids.sort_unstable();
        running.sort_unstable();
        assert_eq!(uids, running, "every pod run is served, every pod deleted is gone");
        for live in &churn.pods {
            let pod = served.iter().find(|p| p.metadata.as_ref().unwrap().uid() == live.spec.uid).unwrap();
            let meta = pod.metadata.as_ref().unwrap();
            let labels: Labels = live.spec.labels.iter().collect();
            let w = infer(&live.spec.name, &labels, std::time::SystemTime::now()).unwrap();
            let owner = &meta.owner_references[0];
            assert_eq!((owner.kind(), owner.name()), (w.controller.kind.name(), w.controller.name.as_str()));
            let ip = sim.pod_sandbox_status(&live.sandbox_id).await.unwrap().network.unwrap().ip;
            let status = pod.status.as_ref().unwrap();
            assert_eq!(status.pod_i_ps.iter().map(|i| i.ip()).collect::<Vec<_>>(), [ip.as_str()]);
            assert_eq!(pod.spec.as_ref().unwrap().containers.len(), 2);
        }
    }
}
