//! What the simulated runtime does on its own, not asked by a CRI call: a container's
//! process exits, a sandbox dies, the runtime restarts having lost tasks, and amends a
//! lost exit status later; and the reaper that makes containers exit on schedule.

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{EXIT_CODE, SimRuntime, cri, resolve};

impl SimRuntime {
    /// Makes a running container exit on its own (its process died), as the runtime
    /// would report it; emits STOPPED. Returns false if it was not running.
    pub fn exit_container(&self, id: &str, code: i32, reason: &str) -> bool {
        let mut s = self.state();
        let Some(id) = resolve(&s.containers, id).cloned() else { return false };
        let c = s.containers.get_mut(&id).expect("resolved above");
        let sid = c.sandbox_id.clone();
        if !c.exit(code, reason) {
            return false;
        }
        let ev = s.event(&id, cri::ContainerEventType::ContainerStoppedEvent, &sid);
        drop(s);
        self.publish_now(vec![ev]);
        true
    }

    /// Restarts as containerd does when the tasks of `ids` died while it was down and
    /// their exit was lost with it: every open event stream ends, and those containers
    /// read exited 255 "Unknown" (containerd's words for a lost exit status), with no
    /// event. Returns how many were running.
    pub fn restart_losing(&self, ids: &[&str]) -> usize {
        let mut s = self.state();
        let mut lost = 0;
        for id in ids {
            if let Some(id) = resolve(&s.containers, id).cloned()
                && s.containers.get_mut(&id).expect("resolved above").exit(255, "Unknown")
            {
                lost += 1;
            }
        }
        drop(s);
        self.drop_event_streams();
        lost
    }

    /// Amends a dead container's reason with no event, as containerd does when it
    /// handles a `TaskOOM` after it recovered the task as lost (the code stays 255).
    /// Returns false if the container is not exited.
    pub fn amend_exit_reason(&self, id: &str, reason: &str) -> bool {
        let mut s = self.state();
        let Some(id) = resolve(&s.containers, id).cloned() else { return false };
        let c = s.containers.get_mut(&id).expect("resolved above");
        if c.state != cri::ContainerState::ContainerExited {
            return false;
        }
        c.reason = reason.to_owned();
        true
    }

    /// Makes a sandbox die on its own (its pause process exited); its containers are
    /// killed with it.
    pub fn kill_sandbox(&self, id: &str) -> bool {
        let mut s = self.state();
        let Some(id) = resolve(&s.sandboxes, id).cloned() else { return false };
        let events = s.stop_sandbox(&id);
        drop(s);
        let any = !events.is_empty();
        self.publish_now(events);
        any
    }

    /// Exits every container whose `plegd.sim/exit-after` has passed.
    fn reap_due(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut s = self.state();
        let mut due: Vec<_> = s
            .containers
            .values()
            .filter(|c| c.exit_at.is_some_and(|t| t <= now))
            .map(|c| (c.seq, c.id.clone()))
            .collect();
        due.sort();
        let mut events = Vec::new();
        for (_, id) in due {
            let c = s.containers.get_mut(&id).expect("listed above");
            let code = c.annotations.get(EXIT_CODE).and_then(|v| v.parse().ok()).unwrap_or(0);
            let reason = if code == 0 { "Completed" } else { "Error" };
            let sid = c.sandbox_id.clone();
            if c.exit(code, reason) {
                events.push(s.event(&id, cri::ContainerEventType::ContainerStoppedEvent, &sid));
            }
        }
        let next = s.containers.values().filter_map(|c| c.exit_at).min();
        drop(s);
        self.publish_now(events);
        next
    }

    /// Runs the reaper that makes containers exit on schedule, until shutdown.
    pub async fn run_reaper(self, shutdown: CancellationToken) {
        loop {
            let next = self.reap_due();
            let sleep = async {
                match next {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.inner.reaper.notified() => {}
                _ = sleep => {}
            }
        }
    }
}
