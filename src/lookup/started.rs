//! The runtime's word that a container started — its process and cgroup, from NRI's
//! `POST_START_CONTAINER`, heard before `StartContainer` returns — held until plegd has
//! read the container itself. A PID whose cgroup names a container plegd published as
//! created, and whose cgroup is where the runtime said it put the container, is then
//! answered at once, the container running with that process, instead of after a
//! runtime read. The word places nothing the kernel does not confirm: the process's
//! cgroup must name the container and lie in the cgroup the runtime said.
//!
//! Bounded: at most [`MAX`] words, each kept [`FOR`]. The words have a lock of their own,
//! so the runtime's call that brings one never waits for the index.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ContainerLookup, Found};
use crate::host::{HostProcess, placed_in};
use crate::model::{ContainerState, Process};

/// Words held at most; past it the oldest half goes.
const MAX: usize = 4096;
/// How long a word is held: plegd reads the container well within it.
const FOR: Duration = Duration::from_secs(60);

/// What the runtime said of a started container.
#[derive(Clone, Debug)]
pub(super) struct Started {
    pid: u32,
    cgroup_path: String,
    at: Instant,
}

/// The words, by container id.
#[derive(Default)]
pub(super) struct StartedWords(HashMap<String, Started>);

impl StartedWords {
    /// `found` (a container published without its process) as running with the process
    /// the runtime said, when the kernel's `process` is in the cgroup the runtime said.
    pub(super) fn place(&self, found: &Found, process: &HostProcess) -> Option<Found> {
        // Only a container plegd last saw created: one it saw exit is not started again.
        if found.container.state != ContainerState::Created || found.removed_at.is_some() {
            return None;
        }
        let word = self.0.get(&found.container.id).filter(|w| w.at.elapsed() < FOR)?;
        let cgroup = process.cgroup.as_deref()?;
        if word.cgroup_path.is_empty() || !placed_in(cgroup, &word.cgroup_path) {
            return None;
        }
        let mut container = (*found.container).clone();
        container.state = ContainerState::Running;
        container.process = Some(Process {
            pid: word.pid,
            cgroup_path: word.cgroup_path.clone(),
            cgroup_id: process.cgroup_id.unwrap_or(0),
            start_ticks: 0,
            namespaces: Default::default(),
        });
        Some(Found { pod: found.pod.clone(), container: Arc::new(container), removed_at: None })
    }
}

impl ContainerLookup {
    /// The runtime said container `id` started as process `pid` in cgroup
    /// `cgroup_path` (NRI's `POST_START_CONTAINER`). Takes only the words' own lock, held
    /// for one insert (or one look by a lookup): never the index's, which a batch of
    /// events being learned holds longer.
    pub fn started(&self, id: &str, pid: u32, cgroup_path: &str) {
        if pid == 0 || cgroup_path.is_empty() {
            return;
        }
        let mut guard = self.started.lock().expect("started words lock");
        let words = &mut guard.0;
        if words.len() >= MAX {
            words.retain(|_, w| w.at.elapsed() < FOR);
            if words.len() >= MAX {
                let mut ats: Vec<Instant> = words.values().map(|w| w.at).collect();
                ats.sort();
                let cut = ats[MAX / 2];
                words.retain(|_, w| w.at > cut);
            }
        }
        words.insert(id.to_owned(), Started { pid, cgroup_path: cgroup_path.to_owned(), at: Instant::now() });
    }
}
