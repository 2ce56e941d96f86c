//! A pod's timeline read back from disk: what consecutive statuses hold alike is held
//! once, as the live journal holds it.

use super::super::*;
use super::durable::{cfg, event, status};

#[test]
fn a_timeline_read_from_disk_holds_each_unchanged_container_once_not_once_per_event() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    // A crash-looping pod of 22 containers: each event, one container changes.
    let mut containers: Vec<Arc<crate::model::ContainerStatus>> = (0..22)
        .map(|i| {
            Arc::new(crate::model::ContainerStatus {
                id: format!("c{i}"),
                name: format!("n{i}"),
                labels: [("app", "loop")].into(),
                ..Default::default()
            })
        })
        .collect();
    for n in 0..1000usize {
        let i = n % 22;
        let mut c = crate::model::ContainerStatus::clone(&containers[i]);
        c.attempt += 1;
        containers[i] = Arc::new(c);
        let pod = Arc::new(PodStatus { containers: containers.clone(), ..(*status("loop", "loop", true)).clone() });
        j.append(event("loop", EventType::ContainerDied, Some(pod))).unwrap();
    }
    drop(j);
    // A new journal over the same state dir reads the timeline from disk.
    let j = Journal::open(&cfg(), &Place::at(dir.path()), JournalMetrics::throwaway()).unwrap();
    let t = j.timeline("loop").expect("a timeline");
    assert_eq!(t.len(), 1000);
    let distinct: std::collections::HashSet<*const crate::model::ContainerStatus> =
        t.iter().flat_map(|e| e.event.pod.as_ref().unwrap().containers.iter().map(Arc::as_ptr)).collect();
    assert!(distinct.len() <= 1000 + 22, "{} container statuses held for 1,000 events", distinct.len());
    // And what is read is what was written.
    let last = t.last().unwrap().event.pod.as_ref().unwrap();
    assert_eq!(last.containers.len(), 22);
    assert_eq!(last.containers.iter().map(|c| c.attempt).sum::<u32>(), 1000);
}
