//! What the node's kernel says of a process, read under `--host-root` (where the host's
//! `/proc` and `/sys/fs/cgroup` are mounted; `/` when plegd runs on the host or with
//! `hostPID`): the process's cgroup path, the cgroup's id (the directory's inode, the
//! id eBPF tools and the kernel report), the process's start time, and the container
//! id a cgroup path names.
//!
//! On a cgroup v2 host the id is the unified hierarchy's (what `bpf_get_current_cgroup_id`
//! returns). On a v1 or hybrid host whose containers are not in the unified hierarchy it
//! is the `memory` hierarchy's directory, the one v1-aware agents key on.
//!
//! Every read is of small files and may fail: a process that has exited, a host
//! without cgroup v2, a root not mounted. Failures are answers (`None`), never errors
//! a caller must handle.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The host's filesystem as plegd sees it.
#[derive(Clone, Debug)]
pub struct Host {
    root: PathBuf,
}

/// A process as the kernel shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostProcess {
    /// Its cgroup path (`/kubepods.slice/…`): the unified hierarchy's, or on a v1 host
    /// the `memory` hierarchy's.
    pub cgroup: Option<String>,
    /// That cgroup's id, when its directory is readable.
    pub cgroup_id: Option<u64>,
    /// Its start time, clock ticks after boot (`/proc/PID/stat` field 22): with the
    /// PID, it names one process for the life of the boot.
    pub start_ticks: Option<u64>,
}

impl Default for Host {
    fn default() -> Self {
        Self::new("/")
    }
}

impl Host {
    /// The host under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn proc(&self, pid: u32, file: &str) -> PathBuf {
        self.root.join("proc").join(pid.to_string()).join(file)
    }

    /// Whether the host's processes are visible here (its `/proc`, with PID 1 in it):
    /// only then does "no such process" mean the process is gone.
    pub fn sees_processes(&self) -> bool {
        self.root.join("proc/1/stat").exists()
    }

    /// The process with this PID now, or `None` when there is none (or `/proc` is not
    /// readable).
    pub fn process(&self, pid: u32) -> Option<HostProcess> {
        if pid == 0 {
            return None;
        }
        let stat = std::fs::read_to_string(self.proc(pid, "stat")).ok();
        let cgroup = std::fs::read_to_string(self.proc(pid, "cgroup")).ok();
        if stat.is_none() && cgroup.is_none() {
            return None;
        }
        let found = cgroup.as_deref().and_then(|text| self.placed(text));
        Some(HostProcess {
            cgroup: found.as_ref().map(|(path, _)| path.clone()),
            cgroup_id: found.and_then(|(path, dir)| inode(&dir.join(path.trim_start_matches('/')))),
            start_ticks: stat.as_deref().and_then(start_ticks),
        })
    }

    /// Where a `/proc/PID/cgroup` places the process: its path and the hierarchy's
    /// mount. The unified hierarchy where the process sits below its root, else the
    /// `memory` hierarchy (v1).
    fn placed(&self, text: &str) -> Option<(String, PathBuf)> {
        let base = self.root.join("sys/fs/cgroup");
        if let Some(path) = unified_cgroup(text).filter(|p| p != "/") {
            for dir in [base.clone(), base.join("unified")] {
                if dir.join("cgroup.controllers").exists() {
                    return Some((path, dir));
                }
            }
            return Some((path, base));
        }
        let memory = text.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            controllers.split(',').any(|c| c == "memory").then(|| path.trim().to_owned())
        })?;
        Some((memory, base.join("memory")))
    }

    /// The id of the cgroup at `path` (as a runtime's spec names it, expanded), in the
    /// unified hierarchy if the host mounts one at `/sys/fs/cgroup`, else in `memory`.
    pub fn cgroup_id(&self, path: &str) -> Option<u64> {
        let base = self.root.join("sys/fs/cgroup");
        let rel = path.trim_start_matches('/');
        if base.join("cgroup.controllers").exists() {
            return inode(&base.join(rel));
        }
        inode(&base.join("memory").join(rel)).or_else(|| inode(&base.join(rel)))
    }
}

fn inode(dir: &Path) -> Option<u64> {
    std::fs::metadata(dir).ok().filter(|m| m.is_dir()).map(|m| m.ino())
}

/// The unified hierarchy's line (`0::/path`) of a `/proc/PID/cgroup`.
pub fn unified_cgroup(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix("0::")).map(|p| p.trim().to_owned()).filter(|p| !p.is_empty())
}

/// Field 22 of `/proc/PID/stat` (the command, field 2, may hold spaces and parentheses:
/// fields are counted after its last `)`).
pub fn start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After `)`: field 3 (state) is the first; field 22 is the 20th.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The cgroup v2 path a runtime's `cgroupsPath` names: a path as it is, or systemd's
/// `slice:prefix:name` expanded the way runc does (`a-b.slice` sits in `a.slice`).
pub fn cgroup_path_of(cgroups_path: &str) -> Option<String> {
    if cgroups_path.starts_with('/') {
        return Some(cgroups_path.to_owned());
    }
    let mut parts = cgroups_path.split(':');
    let (slice, prefix, name) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !slice.ends_with(".slice") || name.is_empty() {
        return None;
    }
    let mut path = String::new();
    let stem = slice.trim_end_matches(".slice");
    let mut acc = String::new();
    for (i, part) in stem.split('-').enumerate() {
        if i > 0 {
            acc.push('-');
        }
        acc.push_str(part);
        path.push('/');
        path.push_str(&acc);
        path.push_str(".slice");
    }
    let unit = if name.ends_with(".slice") {
        name.to_owned()
    } else if prefix.is_empty() {
        format!("{name}.scope")
    } else {
        format!("{prefix}-{name}.scope")
    };
    path.push('/');
    path.push_str(&unit);
    Some(path)
}

/// The container id a cgroup path names: the last component that holds 64 hex
/// digits (`cri-containerd-<id>.scope`, `crio-<id>.scope`, `/kubepods/…/<id>`).
pub fn container_id_in(cgroup: &str) -> Option<&str> {
    cgroup.rsplit('/').find_map(|part| {
        let part = part.strip_suffix(".scope").unwrap_or(part);
        let id = part.rsplit(['-', ':']).next()?;
        (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unified_line_of_a_proc_cgroup_is_the_cgroup_v2_path() {
        let text = "12:memory:/kubepods/x\n0::/kubepods.slice/cri-containerd-ab.scope\n";
        assert_eq!(unified_cgroup(text).as_deref(), Some("/kubepods.slice/cri-containerd-ab.scope"));
        assert_eq!(unified_cgroup("12:memory:/kubepods/x\n"), None, "cgroup v1 only");
    }

    #[test]
    fn the_start_time_is_read_after_a_command_that_holds_parentheses_and_spaces() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(start_ticks(stat), Some(987654));
        assert_eq!(start_ticks("garbage"), None);
    }

    #[test]
    fn a_systemd_cgroups_path_expands_like_runc() {
        assert_eq!(
            cgroup_path_of("kubepods-besteffort-pod12.slice:cri-containerd:abc").as_deref(),
            Some("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12.slice/cri-containerd-abc.scope")
        );
        assert_eq!(cgroup_path_of("/kubepods/besteffort/pod1/abc").as_deref(), Some("/kubepods/besteffort/pod1/abc"));
        assert_eq!(cgroup_path_of("nonsense"), None);
        assert_eq!(cgroup_path_of(""), None);
    }

    #[test]
    fn a_container_id_is_found_in_each_runtimes_cgroup_layout() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for path in [
            format!("/kubepods.slice/kubepods-pod1.slice/cri-containerd-{id}.scope"),
            format!("/kubepods.slice/kubepods-pod1.slice/crio-{id}.scope"),
            format!("/kubepods/besteffort/pod1/{id}"),
            format!("/system.slice/containerd.service/kubepods-pod1.slice:cri-containerd:{id}"),
        ] {
            assert_eq!(container_id_in(&path), Some(id), "{path}");
        }
        assert_eq!(container_id_in("/user.slice/session-2.scope"), None);
        assert_eq!(container_id_in("/"), None);
    }

    #[test]
    fn a_process_and_its_cgroup_are_read_under_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        std::fs::create_dir_all(dir.path().join("sys/fs/cgroup")).unwrap();
        std::fs::write(dir.path().join("sys/fs/cgroup/cgroup.controllers"), "cpu memory\n").unwrap();
        std::fs::create_dir_all(dir.path().join("proc/77")).unwrap();
        std::fs::write(dir.path().join("proc/77/cgroup"), "0::/pods/c1\n").unwrap();
        std::fs::write(dir.path().join("proc/77/stat"), "77 (sh) S 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 555 0 0")
            .unwrap();
        std::fs::create_dir_all(dir.path().join("sys/fs/cgroup/pods/c1")).unwrap();
        let p = host.process(77).expect("the process is there");
        assert_eq!(p.cgroup.as_deref(), Some("/pods/c1"));
        assert_eq!(p.start_ticks, Some(555));
        let ino = std::fs::metadata(dir.path().join("sys/fs/cgroup/pods/c1")).unwrap().ino();
        assert_eq!(p.cgroup_id, Some(ino));
        assert_eq!(host.cgroup_id("/pods/c1"), Some(ino));
        assert_eq!(host.cgroup_id("/pods/none"), None);
        assert_eq!(host.process(78), None);
        assert_eq!(host.process(0), None);
    }

    #[test]
    fn on_a_v1_host_the_memory_hierarchy_places_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        std::fs::create_dir_all(dir.path().join("proc/9")).unwrap();
        std::fs::write(dir.path().join("proc/9/cgroup"), "5:pids:/k/c2\n4:cpu,memory:/k/c2\n0::/\n").unwrap();
        std::fs::create_dir_all(dir.path().join("sys/fs/cgroup/memory/k/c2")).unwrap();
        let ino = std::fs::metadata(dir.path().join("sys/fs/cgroup/memory/k/c2")).unwrap().ino();
        let p = host.process(9).unwrap();
        assert_eq!((p.cgroup.as_deref(), p.cgroup_id), (Some("/k/c2"), Some(ino)));
        assert_eq!(host.cgroup_id("/k/c2"), Some(ino));
    }
}
