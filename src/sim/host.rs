//! The simulated node's processes and cgroups: each started container and sandbox gets
//! a PID (the lowest one freed first, so PIDs are reused as soon as possible — the case
//! a lookup must not get wrong) and a cgroup named as containerd's systemd driver
//! names it. Given a root (`plegd sim --host-root`), the node is also written there as
//! the kernel shows it: `proc/<pid>/{cgroup,stat}` while the process lives and
//! `sys/fs/cgroup/<path>/` while its cgroup exists, and `proc/stat`'s task count, so
//! plegd run with the same `--host-root` reads the simulated node like a real one.
//!
//! A real kernel hands a freed PID out again only after its allocator went round the
//! whole PID range; this node hands it out at once. Its task count says the same as a
//! real one would: taking a freed PID again counts a whole round of tasks
//! ([`PID_MAX`]).

use std::collections::BTreeSet;
use std::path::PathBuf;

/// PIDs the simulated node hands out start here: above the PIDs a real machine uses,
/// so a plegd reading the real `/proc` never mistakes one for a real process.
pub const FIRST_PID: u32 = 4_100_000;

/// The simulated node's `kernel.pid_max`.
pub const PID_MAX: u64 = 4_194_304;

/// A process the simulated node started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimProcess {
    /// Its PID.
    pub pid: u32,
    /// Its start, clock ticks after the simulated boot.
    pub start_ticks: u64,
}

/// The simulated node's PIDs and, with a root, its `/proc` and cgroupfs.
#[derive(Debug)]
pub struct SimHost {
    root: Option<PathBuf>,
    next: u32,
    freed: BTreeSet<u32>,
    ticks: u64,
    /// Tasks started since the simulated boot (`/proc/stat` `processes`).
    forks: u64,
}

impl SimHost {
    /// A node that writes itself under `root`, if given.
    pub fn new(root: Option<PathBuf>) -> Self {
        if let Some(root) = &root {
            // A cgroup v2 node.
            let base = root.join("sys/fs/cgroup");
            let _ = std::fs::create_dir_all(&base);
            let _ = std::fs::write(base.join("cgroup.controllers"), "cpuset cpu io memory pids\n");
            // The node's init, outside every pod.
            let init = root.join("proc/1");
            let _ = std::fs::create_dir_all(&init);
            let _ = std::fs::write(init.join("cgroup"), "0::/init.scope\n");
            let _ = std::fs::write(init.join("stat"), "1 (init) S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0\n");
            write_namespaces(&init, HOST_NS);
            let _ = std::fs::create_dir_all(root.join("proc/sys/kernel"));
            let _ = std::fs::write(root.join("proc/sys/kernel/pid_max"), format!("{PID_MAX}\n"));
        }
        let host = Self { root, next: FIRST_PID, freed: BTreeSet::new(), ticks: 1000, forks: 1000 };
        host.write_forks();
        host
    }

    /// `proc/stat` with the task count.
    fn write_forks(&self) {
        if let Some(root) = &self.root {
            let _ = std::fs::write(
                root.join("proc/stat"),
                format!("cpu  0 0 0 0\nprocesses {}\nprocs_running 1\n", self.forks),
            );
        }
    }

    /// Another process took a freed PID: as on a real node, the PID allocator went
    /// round the whole range first.
    pub fn count_round(&mut self) {
        self.forks += PID_MAX;
        self.write_forks();
    }

    /// The cgroups path containerd's systemd driver sets for a container of a pod.
    pub fn cgroups_path(pod_uid: &str, id: &str) -> String {
        format!("kubepods-besteffort-pod{}.slice:cri-containerd:{id}", pod_uid.replace('-', "_"))
    }

    /// Starts a process in the cgroup `cgroups_path` names (creating the cgroup).
    pub fn spawn(&mut self, cgroups_path: &str) -> SimProcess {
        let reused = self.freed.pop_first();
        let pid = reused.unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        });
        self.forks += if reused.is_some() { PID_MAX } else { 1 };
        self.write_forks();
        self.ticks += 7;
        let p = SimProcess { pid, start_ticks: self.ticks };
        if let Some(root) = &self.root {
            let cgroup = crate::host::cgroup_path_of(cgroups_path).unwrap_or_else(|| cgroups_path.to_owned());
            let _ = std::fs::create_dir_all(root.join("sys/fs/cgroup").join(cgroup.trim_start_matches('/')));
            let dir = root.join("proc").join(pid.to_string());
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::write(dir.join("cgroup"), format!("0::{cgroup}\n"));
            let _ = std::fs::write(
                dir.join("stat"),
                format!("{pid} (sim) S 1 {pid} {pid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0\n", p.start_ticks),
            );
            // Namespaces of its own, numbered after its start (unique on this node).
            write_namespaces(&dir, NS_BASE + p.start_ticks * 8);
        }
        p
    }

    /// The process exited: its PID is free for the next one, its cgroup is gone.
    pub fn exit(&mut self, p: &SimProcess, cgroups_path: &str) {
        if p.pid == 0 {
            return;
        }
        self.freed.insert(p.pid);
        if let Some(root) = &self.root {
            let _ = std::fs::remove_dir_all(root.join("proc").join(p.pid.to_string()));
            if let Some(cgroup) = crate::host::cgroup_path_of(cgroups_path) {
                let _ = std::fs::remove_dir(root.join("sys/fs/cgroup").join(cgroup.trim_start_matches('/')));
            }
        }
    }
}

/// The host's own namespaces' inodes (a real kernel's first ones are 4026531835 on).
pub const HOST_NS: u64 = 4_026_531_835;
/// Where the simulated processes' namespaces are numbered from.
const NS_BASE: u64 = 4_026_600_000;

/// `ns/{pid,mnt,net,uts,ipc,cgroup,user}` links of a `/proc/PID` directory, the inodes
/// numbered from `base` in that order.
fn write_namespaces(dir: &std::path::Path, base: u64) {
    let ns = dir.join("ns");
    let _ = std::fs::create_dir_all(&ns);
    for (i, name) in ["pid", "mnt", "net", "uts", "ipc", "cgroup", "user"].iter().enumerate() {
        let _ = std::os::unix::fs::symlink(format!("{name}:[{}]", base + i as u64), ns.join(name));
    }
}

/// A digest-like hex string of `s` (64 hex digits), stable across runs.
pub fn digest_of(s: &str, salt: u64) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ salt;
    let mut out = String::with_capacity(64);
    for round in 0..4u64 {
        for b in s.bytes().chain(round.to_le_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        out.push_str(&format!("{h:016x}"));
    }
    out
}

/// `repo@sha256:…` for an image reference `repo[:tag]`, as containerd resolves it.
pub fn image_ref_of(image: &str) -> String {
    if image.is_empty() {
        return String::new();
    }
    let repo = match image.rfind(':') {
        Some(i) if !image[i..].contains('/') => &image[..i],
        _ => image,
    };
    let repo = repo.split('@').next().unwrap_or(repo);
    format!("{repo}@sha256:{}", digest_of(image, 1))
}

/// `sha256:…`, the image's id on the node.
pub fn image_id_of(image: &str) -> String {
    if image.is_empty() { String::new() } else { format!("sha256:{}", digest_of(image, 2)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_pid_is_the_next_one_handed_out() {
        let mut h = SimHost::new(None);
        let a = h.spawn("x");
        let b = h.spawn("x");
        assert_eq!((a.pid, b.pid), (FIRST_PID, FIRST_PID + 1));
        h.exit(&a, "x");
        let c = h.spawn("x");
        assert_eq!(c.pid, a.pid, "reused");
        assert!(c.start_ticks > a.start_ticks, "a new process, a later start");
    }

    #[test]
    fn the_node_is_written_under_the_root_as_the_kernel_shows_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = SimHost::new(Some(dir.path().to_owned()));
        let path = SimHost::cgroups_path("u-1", "abc");
        let p = h.spawn(&path);
        let host = crate::host::Host::new(dir.path());
        let seen = host.process(p.pid).expect("a process");
        assert_eq!(
            seen.cgroup.as_deref(),
            Some("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu_1.slice/cri-containerd-abc.scope")
        );
        assert_eq!(seen.start_ticks, Some(p.start_ticks));
        assert!(host.cgroup_id(seen.cgroup.as_deref().unwrap()).is_some());
        h.exit(&p, &path);
        assert_eq!(host.process(p.pid), None);
    }

    #[test]
    fn an_image_resolves_to_a_stable_digest_of_its_repository() {
        let r = image_ref_of("registry.k8s.io/pause:3.10");
        assert!(
            r.starts_with("registry.k8s.io/pause@sha256:") && r.len() == "registry.k8s.io/pause@sha256:".len() + 64
        );
        assert_eq!(r, image_ref_of("registry.k8s.io/pause:3.10"));
        assert_ne!(image_id_of("a"), image_id_of("b"));
        assert!(image_ref_of("localhost:5000/app").starts_with("localhost:5000/app@sha256:"));
    }
}
