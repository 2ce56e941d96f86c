//! Whose a pod is, inferred from what the node holds: the pod's name and the labels the
//! built-in controllers put on the pods they create. This is the fallback where no
//! kubelet says it; what it returns is a guess by construction, and every surface that
//! shows it says it was inferred.
//!
//! The rules are the controllers' naming: a Deployment's ReplicaSet is named
//! `<deployment>-<pod-template-hash>` and its pods `<replicaset>-<5 chars>`; a
//! StatefulSet's pods `<statefulset>-<ordinal>`; a DaemonSet's pods `<daemonset>-<5
//! chars>`; a Job's pods carry `batch.kubernetes.io/job-name` (older: `job-name`), and a
//! CronJob's Jobs are named `<cronjob>-<scheduled minute>`. A Job named with another
//! number at its end (`migrate-1732924800`, seconds; `backup-20241130`, a date) is not a
//! CronJob's: the number must be a minute shortly before the pod was made.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::labels::Labels;

/// The kinds of controller plegd can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    /// `apps/v1` Deployment.
    Deployment,
    /// `apps/v1` ReplicaSet.
    ReplicaSet,
    /// `apps/v1` StatefulSet.
    StatefulSet,
    /// `apps/v1` DaemonSet.
    DaemonSet,
    /// `batch/v1` Job.
    Job,
    /// `batch/v1` CronJob.
    CronJob,
}

impl WorkloadKind {
    const ALL: [Self; 6] =
        [Self::Deployment, Self::ReplicaSet, Self::StatefulSet, Self::DaemonSet, Self::Job, Self::CronJob];

    /// The kind as an owner reference names it (`ReplicaSet`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::Deployment => "Deployment",
            Self::ReplicaSet => "ReplicaSet",
            Self::StatefulSet => "StatefulSet",
            Self::DaemonSet => "DaemonSet",
            Self::Job => "Job",
            Self::CronJob => "CronJob",
        }
    }

    /// The kind an owner reference names; `None` for a kind no built-in controller has.
    pub fn of(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == kind)
    }

    /// The OpenTelemetry resource attribute that names a workload of this kind.
    pub fn attribute(self) -> &'static str {
        match self {
            Self::Deployment => "k8s.deployment.name",
            Self::ReplicaSet => "k8s.replicaset.name",
            Self::StatefulSet => "k8s.statefulset.name",
            Self::DaemonSet => "k8s.daemonset.name",
            Self::Job => "k8s.job.name",
            Self::CronJob => "k8s.cronjob.name",
        }
    }
}

/// One controller of a pod, by kind and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Its kind.
    pub kind: WorkloadKind,
    /// Its name.
    pub name: String,
}

/// A pod's controllers as the node can infer them: the direct one and, where there is
/// one above it, the workload at the top of the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InferredWorkload {
    /// The pod's own controller (a ReplicaSet for a Deployment's pod).
    pub controller: Owner,
    /// The top of the chain (the Deployment, the CronJob); the controller itself when
    /// nothing is above it.
    pub workload: Owner,
}

impl InferredWorkload {
    /// Every owner named, the controller first, each once.
    pub fn owners(&self) -> impl Iterator<Item = &Owner> {
        std::iter::once(&self.controller).chain((self.workload != self.controller).then_some(&self.workload))
    }
}

/// How long before its pod a CronJob's Job may be scheduled: its
/// `startingDeadlineSeconds` and the Job's retries make a pod late, never by weeks.
const SCHEDULED_BEFORE: Duration = Duration::from_secs(35 * 24 * 3600);

/// The workload behind pod `name` with `labels`, made at `made` (its sandbox's creation;
/// when unknown, any time shortly after), where the controllers' labels and naming say
/// it; `None` for a pod no built-in controller's marks fit (a bare pod, a static pod, a
/// custom controller's).
pub fn infer(name: &str, labels: &Labels, made: SystemTime) -> Option<InferredWorkload> {
    let own = |kind, name: &str| Owner { kind, name: name.to_owned() };
    let alone = |o: Owner| InferredWorkload { controller: o.clone(), workload: o };
    let job =
        ["batch.kubernetes.io/job-name", "job-name"].into_iter().find_map(|k| labels.get(k).filter(|j| !j.is_empty()));
    if let Some(job) = job {
        let controller = own(WorkloadKind::Job, job);
        return Some(match cronjob_of(job, made) {
            Some(cron) => InferredWorkload { controller, workload: own(WorkloadKind::CronJob, cron) },
            None => alone(controller),
        });
    }
    if let Some(hash) = labels.get("pod-template-hash").filter(|h| !h.is_empty()) {
        let replicaset = strip_suffix(name, is_generated)?;
        let controller = own(WorkloadKind::ReplicaSet, replicaset);
        return Some(match replicaset.strip_suffix(hash).and_then(|d| d.strip_suffix('-')).filter(|d| !d.is_empty()) {
            Some(deployment) => InferredWorkload { controller, workload: own(WorkloadKind::Deployment, deployment) },
            None => alone(controller),
        });
    }
    labels.get("controller-revision-hash")?;
    if labels.get("statefulset.kubernetes.io/pod-name") == Some(name) {
        let set = strip_suffix(name, |s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))?;
        return Some(alone(own(WorkloadKind::StatefulSet, set)));
    }
    if labels.get("pod-template-generation").is_some() {
        return Some(alone(own(WorkloadKind::DaemonSet, strip_suffix(name, is_generated)?)));
    }
    None
}

/// The workload above a controller the kubelet named (`kind`, `name`) for a pod with
/// `labels` made at `made`: a ReplicaSet's Deployment (its name is the Deployment's and
/// the pod's `pod-template-hash`), a Job's CronJob (its name ends in the scheduled
/// minute); `None` where the controller is the top.
pub fn above(kind: &str, name: &str, labels: &Labels, made: SystemTime) -> Option<Owner> {
    let own = |kind, name: &str| Some(Owner { kind, name: name.to_owned() });
    match kind {
        "ReplicaSet" => {
            let hash = labels.get("pod-template-hash").filter(|h| !h.is_empty())?;
            let deployment = name.strip_suffix(hash)?.strip_suffix('-').filter(|d| !d.is_empty())?;
            own(WorkloadKind::Deployment, deployment)
        }
        "Job" => own(WorkloadKind::CronJob, cronjob_of(name, made)?),
        _ => None,
    }
}

/// `name` without its last `-part`, when `part` passes `test` and something is left.
fn strip_suffix(name: &str, test: impl Fn(&str) -> bool) -> Option<&str> {
    let (head, tail) = name.rsplit_once('-')?;
    (!head.is_empty() && test(tail)).then_some(head)
}

/// The five characters the API server appends to a `generateName`: lowercase letters
/// and digits without vowels or the digits 0, 1 and 3.
fn is_generated(s: &str) -> bool {
    s.len() == 5 && s.bytes().all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
}

/// The CronJob whose Job this is: its name ends in the scheduled time in minutes since
/// the epoch, at most a day after `made` and [`SCHEDULED_BEFORE`] before it.
fn cronjob_of(job: &str, made: SystemTime) -> Option<&str> {
    let minute_of = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() / 60);
    let latest = minute_of(made + Duration::from_secs(24 * 3600));
    let earliest = minute_of(made.checked_sub(SCHEDULED_BEFORE).unwrap_or(UNIX_EPOCH));
    strip_suffix(job, |s| {
        s.bytes().all(|b| b.is_ascii_digit()) && s.parse::<u64>().is_ok_and(|m| (earliest..=latest).contains(&m))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|&(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// 2026-11-30 03:00 UTC, minute 29,408,580.
    fn made() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(29_408_580 * 60)
    }

    fn infer(name: &str, labels: &Labels) -> Option<InferredWorkload> {
        super::infer(name, labels, made())
    }

    fn names(w: &InferredWorkload) -> Vec<(WorkloadKind, &str)> {
        w.owners().map(|o| (o.kind, o.name.as_str())).collect()
    }

    #[test]
    fn a_deployments_pod_names_its_replicaset_and_the_deployment_above_it() {
        let w = infer("web-7d9f8b6c5d-x2k9p", &labels(&[("pod-template-hash", "7d9f8b6c5d"), ("app", "web")])).unwrap();
        assert_eq!(names(&w), [(WorkloadKind::ReplicaSet, "web-7d9f8b6c5d"), (WorkloadKind::Deployment, "web")]);
    }

    #[test]
    fn a_replicaset_not_named_for_its_hash_is_the_workload_itself() {
        let w = infer("cache-x2k9p", &labels(&[("pod-template-hash", "7d9f8b6c5d")])).unwrap();
        assert_eq!(names(&w), [(WorkloadKind::ReplicaSet, "cache")]);
    }

    #[test]
    fn a_statefulsets_pod_is_its_name_without_the_ordinal() {
        let l =
            labels(&[("controller-revision-hash", "db-6f7c9"), ("statefulset.kubernetes.io/pod-name", "db-main-12")]);
        assert_eq!(names(&infer("db-main-12", &l).unwrap()), [(WorkloadKind::StatefulSet, "db-main")]);
    }

    #[test]
    fn a_daemonsets_pod_is_its_name_without_the_generated_suffix() {
        let l = labels(&[("controller-revision-hash", "5b7c"), ("pod-template-generation", "3")]);
        assert_eq!(names(&infer("node-exporter-9mzqt", &l).unwrap()), [(WorkloadKind::DaemonSet, "node-exporter")]);
    }

    #[test]
    fn a_cronjobs_pod_names_its_job_and_the_cronjob() {
        let l = labels(&[("batch.kubernetes.io/job-name", "backup-29408520"), ("job-name", "backup-29408520")]);
        let w = infer("backup-29408520-7pq2x", &l).unwrap();
        assert_eq!(names(&w), [(WorkloadKind::Job, "backup-29408520"), (WorkloadKind::CronJob, "backup")]);
        let old = labels(&[("job-name", "migrate")]);
        assert_eq!(names(&infer("migrate-abcde", &old).unwrap()), [(WorkloadKind::Job, "migrate")]);
    }

    #[test]
    fn a_job_named_with_a_number_that_is_no_scheduled_minute_of_its_pod_is_no_cronjobs() {
        for job in [
            "migrate-1732924800", // kubectl create job migrate-$(date +%s): seconds
            "backup-20241130",    // a date, read as a minute: 2008
            "report-29458980",    // a minute 35 days after the pod
            "report-29356740",    // a minute 36 days before it
        ] {
            let l = labels(&[("batch.kubernetes.io/job-name", job)]);
            assert_eq!(names(&infer(&format!("{job}-7pq2x"), &l).unwrap()), [(WorkloadKind::Job, job)], "{job}");
        }
        let late = labels(&[("batch.kubernetes.io/job-name", "report-29398500")]);
        assert_eq!(infer("report-29398500-7pq2x", &late).unwrap().workload.kind, WorkloadKind::CronJob, "a week late");
    }

    #[test]
    fn a_pod_without_a_controllers_marks_has_no_inferred_workload() {
        assert_eq!(infer("kube-apiserver-node-a", &labels(&[("tier", "control-plane")])), None);
        assert_eq!(infer("web", &labels(&[("pod-template-hash", "abc")])), None, "no generated suffix");
        assert_eq!(infer("web-abcde", &labels(&[("pod-template-hash", "abc")])), None, "vowels are never generated");
        let sts = labels(&[("controller-revision-hash", "x"), ("statefulset.kubernetes.io/pod-name", "other-0")]);
        assert_eq!(infer("db-0", &sts), None, "the pod-name label must be the pod's");
        assert_eq!(
            infer("-9mzqt", &labels(&[("controller-revision-hash", "x"), ("pod-template-generation", "1")])),
            None
        );
    }

    proptest::proptest! {
        #[test]
        fn whatever_the_labels_an_inferred_name_is_a_non_empty_prefix_of_the_pods_or_a_labels(
            name in "[a-z0-9-]{0,20}",
            keys in proptest::collection::vec(proptest::sample::select(vec![
                "pod-template-hash", "controller-revision-hash", "pod-template-generation",
                "statefulset.kubernetes.io/pod-name", "job-name", "batch.kubernetes.io/job-name"]), 0..4),
            values in proptest::collection::vec("[a-z0-9-]{0,12}", 4),
        ) {
            let l: Labels = keys.iter().zip(&values).map(|(k, v)| (k.to_string(), v.clone())).collect();
            if let Some(w) = infer(&name, &l) {
                for o in w.owners() {
                    proptest::prop_assert!(!o.name.is_empty());
                    let from_label = l.iter().any(|(_, v)| v.starts_with(&o.name));
                    proptest::prop_assert!(name.starts_with(&o.name) || from_label, "{o:?} from {name:?} {l:?}");
                }
            }
        }
    }
}
