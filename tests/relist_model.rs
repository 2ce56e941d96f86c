//! Property: for any sequence of runtime changes with full and single-pod relists in
//! between, each relist emits exactly the state table's events per container (against
//! what plegd last reported of it), and after the last relist the cache equals the
//! runtime. A container that exits or goes between a relist's listing and its read is
//! told both steps in that relist; plegd restarted from what it published (the
//! journal's view) goes on from what it told, missing nothing and telling nothing twice.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use plegd::cache;
use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::model::event::EventType;
use plegd::model::{ContainerState, SandboxState};
use plegd::pleg::PlegConfig;
use plegd::pleg::generic::GenericPleg;
use plegd::pleg::health::PlegHealth;
use plegd::pleg::schedule::{Reason, Why};
use plegd::pleg::{PlegState, transition_events};
use plegd::sim::{Fault, FaultAction, SimRuntime};
use proptest::prelude::*;
use tokio::time::Instant;

#[derive(Clone, Debug)]
enum Op {
    RunPod,
    AddContainer {
        pod: usize,
        name: u8,
    },
    Exit {
        container: usize,
        code: i32,
    },
    Stop {
        container: usize,
    },
    RemoveContainer {
        container: usize,
    },
    StopPod {
        pod: usize,
    },
    RemovePod {
        pod: usize,
    },
    KillSandbox {
        pod: usize,
    },
    CreateOnly {
        pod: usize,
        name: u8,
    },
    /// A container is started in the pod; a full relist lists it running, and before
    /// its status is read it exits (or is stopped and removed).
    ChangesDuringRead {
        pod: usize,
        name: u8,
        removed: bool,
    },
    /// plegd restarts, seeded from what it published, and relists.
    Restart,
    /// A targeted relist of one pod, as a CRI event triggers.
    PodRelist {
        pod: usize,
    },
    Relist,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::RunPod),
        4 => (any::<usize>(), 0u8..3).prop_map(|(pod, name)| Op::AddContainer { pod, name }),
        1 => (any::<usize>(), 0u8..3).prop_map(|(pod, name)| Op::CreateOnly { pod, name }),
        2 => (any::<usize>(), prop_oneof![Just(0), Just(1), Just(137)]).prop_map(|(container, code)| Op::Exit { container, code }),
        1 => any::<usize>().prop_map(|container| Op::Stop { container }),
        1 => any::<usize>().prop_map(|container| Op::RemoveContainer { container }),
        1 => any::<usize>().prop_map(|pod| Op::StopPod { pod }),
        1 => any::<usize>().prop_map(|pod| Op::RemovePod { pod }),
        1 => any::<usize>().prop_map(|pod| Op::KillSandbox { pod }),
        2 => any::<usize>().prop_map(|pod| Op::PodRelist { pod }),
        3 => Just(Op::Relist),
        1 => (any::<usize>(), 0u8..3, any::<bool>()).prop_map(|(pod, name, removed)| Op::ChangesDuringRead { pod, name, removed }),
        1 => Just(Op::Restart),
    ]
}

/// The runtime's truth: every id's PLEG state, and per pod its containers and sandboxes.
async fn truth(sim: &SimRuntime) -> (HashMap<String, PlegState>, BTreeMap<String, PodTruth>) {
    let mut states = HashMap::new();
    let mut pods: BTreeMap<String, PodTruth> = BTreeMap::new();
    let mut sandbox_pod = HashMap::new();
    for s in sim.list_pod_sandbox(None).await.unwrap() {
        let uid = s.metadata.as_ref().unwrap().uid.clone();
        let state = SandboxState::from_cri(s.state);
        states.insert(s.id.clone(), PlegState::of_sandbox(state));
        sandbox_pod.insert(s.id.clone(), uid.clone());
        pods.entry(uid).or_default().sandboxes.insert(s.id, state);
    }
    for c in sim.list_containers_cri(None).await.unwrap() {
        let st = sim.container_status_cri(&c.id).await.unwrap();
        let state = ContainerState::from_cri(st.state);
        states.insert(c.id.clone(), PlegState::of_container(state));
        let uid = sandbox_pod[&c.pod_sandbox_id].clone();
        pods.entry(uid).or_default().containers.insert(c.id, (state, st.exit_code));
    }
    (states, pods)
}

#[derive(Debug, Default, PartialEq, Eq)]
struct PodTruth {
    sandboxes: BTreeMap<String, SandboxState>,
    containers: BTreeMap<String, (ContainerState, i32)>,
}

struct World {
    sim: SimRuntime,
    pods: Vec<(PodSpec, String)>,
    containers: Vec<String>,
    attempts: HashMap<(usize, u8), u32>,
}

impl World {
    async fn apply(&mut self, op: &Op) {
        let pick = |n: usize, len: usize| if len == 0 { None } else { Some(n % len) };
        match *op {
            Op::RunPod => {
                let spec = PodSpec::new("ns", &format!("p{}", self.pods.len()));
                let sid = self.sim.run_pod_sandbox(spec.run_request()).await.unwrap();
                self.pods.push((spec, sid));
            }
            Op::AddContainer { pod, name } | Op::CreateOnly { pod, name } => {
                self.add(pod, name, matches!(op, Op::AddContainer { .. })).await;
            }
            Op::Exit { container, code } => {
                if let Some(c) = pick(container, self.containers.len()) {
                    self.sim.exit_container(&self.containers[c], code, "Error");
                }
            }
            Op::Stop { container } => {
                if let Some(c) = pick(container, self.containers.len()) {
                    let _ = self.sim.stop_container(&self.containers[c]).await;
                }
            }
            Op::RemoveContainer { container } => {
                if let Some(c) = pick(container, self.containers.len()) {
                    self.sim.remove_container_cri(&self.containers[c]).await.unwrap();
                }
            }
            Op::StopPod { pod } => {
                if let Some(p) = pick(pod, self.pods.len()) {
                    let _ = self.sim.stop_pod_sandbox(&self.pods[p].1).await;
                }
            }
            Op::RemovePod { pod } => {
                if let Some(p) = pick(pod, self.pods.len()) {
                    self.sim.remove_pod_sandbox(&self.pods[p].1).await.unwrap();
                }
            }
            Op::KillSandbox { pod } => {
                if let Some(p) = pick(pod, self.pods.len()) {
                    self.sim.kill_sandbox(&self.pods[p].1);
                }
            }
            Op::Relist | Op::PodRelist { .. } | Op::ChangesDuringRead { .. } | Op::Restart => {}
        }
    }

    /// Creates container `name` in pod `pod` (any pod, modulo), started if `start`.
    async fn add(&mut self, pod: usize, name: u8, start: bool) -> Option<String> {
        let p = if self.pods.is_empty() { return None } else { pod % self.pods.len() };
        let attempt = self.attempts.entry((p, name)).or_insert(0);
        let spec = ContainerSpec::new(&format!("c{name}")).attempt(*attempt);
        *attempt += 1;
        let (pod_spec, sid) = &self.pods[p];
        let id = self.sim.create_container(pod_spec.create_request(sid, &spec)).await.ok()?;
        self.containers.push(id.clone());
        if start {
            self.sim.start_container(&id).await.ok()?;
        }
        Some(id)
    }
}

type Events = tokio::sync::mpsc::Receiver<Vec<plegd::model::event::PodLifecycleEvent>>;

/// A relister on `sim` with its own cache, seeded with `seed` (a restart) when given.
fn relister(
    sim: &SimRuntime,
    seed: Option<Vec<std::sync::Arc<plegd::model::PodStatus>>>,
) -> (GenericPleg<SimRuntime>, cache::PodCache, Events) {
    let (writer, reader) = cache::new();
    let (tx, rx) = tokio::sync::mpsc::channel(1_000_000);
    let cfg = PlegConfig {
        relist_period: Duration::from_secs(1),
        concurrency: 4,
        inspect_timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let pleg = GenericPleg::new(
        sim.clone(),
        writer,
        tx,
        PlegHealth::new(Duration::from_secs(180)),
        plegd::pleg::metrics::PlegMetrics::register(&mut Default::default()),
        cfg,
        Default::default(),
    );
    let pleg = match seed {
        Some(pods) => pleg.with_seed(pods),
        None => pleg,
    };
    (pleg, reader, rx)
}

fn check(ops: Vec<Op>) -> Result<(), TestCaseError> {
    // Paused time: a status read delayed by the runtime is overtaken by a change at a
    // known moment.
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    rt.block_on(async move {
        let sim = SimRuntime::new();
        let (mut pleg, mut reader, mut rx) = relister(&sim, None);
        let mut world = World { sim: sim.clone(), pods: Vec::new(), containers: Vec::new(), attempts: HashMap::new() };
        // What plegd has reported of each id, and each id's pod.
        let mut seen: HashMap<String, PlegState> = HashMap::new();
        let mut owner: HashMap<String, String> = HashMap::new();
        // What plegd published of each pod last: the journal's view, a restart's seed.
        let mut view: BTreeMap<String, std::sync::Arc<plegd::model::PodStatus>> = BTreeMap::new();
        let mut ops = ops;
        ops.push(Op::Relist);
        for op in &ops {
            world.apply(op).await;
            // What the listing showed of ids changed during the read, where it differs.
            let mut listed: HashMap<String, PlegState> = HashMap::new();
            // The pod a targeted relist reads (`None`: a full relist).
            let only: Option<String> = match *op {
                Op::Relist => None,
                Op::PodRelist { pod } if !world.pods.is_empty() => {
                    let uid = world.pods[pod % world.pods.len()].0.uid.clone();
                    let why = Why::because(Reason::StreamEvent, Instant::now());
                    pleg.read_pods(vec![(uid.clone(), why)]).await;
                    Some(uid)
                }
                Op::ChangesDuringRead { pod, name, removed } => {
                    let Some(id) = world.add(pod, name, true).await else { continue };
                    let (before, _) = truth(&sim).await;
                    let slow = FaultAction::Delay(Duration::from_millis(100));
                    sim.inject(Fault {
                        method: "ContainerStatus",
                        target: Some(id.clone()),
                        action: slow,
                        times: Some(1),
                    });
                    let meanwhile = async {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        if removed {
                            let _ = sim.stop_container(&id).await;
                            sim.remove_container_cri(&id).await.unwrap();
                        } else {
                            sim.exit_container(&id, 2, "Error");
                        }
                    };
                    let (relisted, ()) = tokio::join!(pleg.relist(), meanwhile);
                    relisted.unwrap();
                    sim.clear_faults();
                    listed.insert(id.clone(), before[&id]);
                    Some(String::new())
                }
                Op::Restart => {
                    (pleg, reader, rx) = relister(&sim, Some(view.values().cloned().collect()));
                    None
                }
                _ => continue,
            };
            let only = only.filter(|uid| !uid.is_empty());
            if only.is_none() && !matches!(op, Op::ChangesDuringRead { .. }) {
                pleg.relist().await.unwrap();
            }
            let (mut now, pods) = truth(&sim).await;
            for (uid, t) in &pods {
                for id in t.sandboxes.keys().chain(t.containers.keys()) {
                    owner.insert(id.clone(), uid.clone());
                }
            }
            if let Some(uid) = &only {
                // Only the pod's own ids move.
                now.retain(|id, _| owner.get(id) == Some(uid));
                for (id, state) in &seen {
                    if owner.get(id) != Some(uid) {
                        now.insert(id.clone(), *state);
                    }
                }
            }
            let mut got: BTreeMap<String, Vec<EventType>> = BTreeMap::new();
            let mut sent = Vec::new();
            while let Ok(evs) = rx.try_recv() {
                sent.extend(evs);
            }
            for ev in sent {
                prop_assert!(ev.kind != EventType::PodSync, "no re-inspection happened, so no POD_SYNC");
                match &ev.pod {
                    Some(pod) => view.insert(ev.pod_uid.to_string(), pod.clone()),
                    None => view.remove(&*ev.pod_uid),
                };
                got.entry(ev.container_id.clone()).or_default().push(ev.kind);
            }
            let mut want: BTreeMap<String, Vec<EventType>> = BTreeMap::new();
            for id in seen.keys().chain(now.keys()).chain(listed.keys()) {
                let before = seen.get(id).copied().unwrap_or(PlegState::NonExistent);
                let after = now.get(id).copied().unwrap_or(PlegState::NonExistent);
                // Changed during the read: the listing's step, then the read's.
                let evs = match listed.get(id) {
                    Some(&at_listing) => {
                        [transition_events(before, at_listing), transition_events(at_listing, after)].concat()
                    }
                    None => transition_events(before, after).to_vec(),
                };
                if !evs.is_empty() {
                    want.insert(id.clone(), evs);
                }
            }
            prop_assert_eq!(&got, &want, "events after {:?}", op);
            seen = now;
        }
        // The cache equals the runtime after the last relist.
        let (_, pods) = truth(&sim).await;
        let mut cached: BTreeMap<String, PodTruth> = BTreeMap::new();
        for entry in reader.snapshot() {
            prop_assert!(entry.error.is_none());
            let st = entry.status.as_ref().unwrap();
            let t = cached.entry(entry.uid.to_string()).or_default();
            for s in &st.sandboxes {
                t.sandboxes.insert(s.id.clone(), s.state);
            }
            for c in &st.containers {
                t.containers.insert(c.id.clone(), (c.state, c.exit_code));
            }
        }
        prop_assert_eq!(cached, pods);
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn relists_follow_the_state_table_and_the_cache_converges_to_the_runtime(ops in prop::collection::vec(op(), 1..60)) {
        check(ops)?;
    }
}
