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
//! a caller must handle. A read can also block (the kernel's cgroup locks, or a root
//! that is not a kernel's files at all): async callers read through
//! [`Host::off_thread`], which runs at most [`READERS`] reads at once on blocking
//! threads and stops waiting after [`READ_TIMEOUT`], so a stuck read holds up nothing
//! else plegd does.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The inode of each namespace of a process (0: not read).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Namespaces {
    /// PID namespace.
    pub pid: u64,
    /// Mount namespace.
    pub mnt: u64,
    /// Network namespace.
    pub net: u64,
    /// UTS namespace.
    pub uts: u64,
    /// IPC namespace.
    pub ipc: u64,
    /// cgroup namespace.
    pub cgroup: u64,
    /// User namespace.
    pub user: u64,
}

/// The host's filesystem as plegd sees it.
#[derive(Clone, Debug)]
pub struct Host {
    root: PathBuf,
    /// Turns to read off the async threads (shared by every clone).
    readers: Arc<tokio::sync::Semaphore>,
}

/// Reads of the host's files under way at once; more are refused ([`HostBusy`]).
pub const READERS: usize = 4;

/// How long an async caller waits for one read of the host's files.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// A read of the host's files that could not be done in time: every reader is busy
/// (reads that do not return), or this one did not return within [`READ_TIMEOUT`].
#[derive(Debug, thiserror::Error)]
#[error("reading the host's /proc and cgroupfs under {root} did not answer within {timeout:?}")]
pub struct HostBusy {
    /// `--host-root`.
    pub root: String,
    /// The wait.
    pub timeout: Duration,
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
        Self { root: root.into(), readers: Arc::new(tokio::sync::Semaphore::new(READERS)) }
    }

    /// Runs `read` on a blocking thread, at most [`READERS`] at once, waiting at most
    /// [`READ_TIMEOUT`] for a turn and the answer. A read that never returns keeps its
    /// turn (and its thread) until it does; the caller is answered [`HostBusy`].
    pub async fn off_thread<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Host) -> T + Send + 'static,
    ) -> Result<T, HostBusy> {
        let busy = || HostBusy { root: self.root.display().to_string(), timeout: READ_TIMEOUT };
        let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
        let permit = tokio::time::timeout_at(deadline, self.readers.clone().acquire_owned())
            .await
            .map_err(|_| busy())?
            .map_err(|_| busy())?;
        let host = self.clone();
        let task = tokio::task::spawn_blocking(move || {
            let _turn = permit;
            read(&host)
        });
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(v)) => Ok(v),
            _ => Err(busy()),
        }
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

    /// The inodes of the process's namespaces (`/proc/PID/ns/*` name `type:[inode]`; 0
    /// for one that cannot be read: reading another user's needs `CAP_SYS_PTRACE`).
    pub fn namespaces(&self, pid: u32) -> Namespaces {
        let ns = |name: &str| -> u64 {
            if pid == 0 {
                return 0;
            }
            std::fs::read_link(self.proc(pid, &format!("ns/{name}")))
                .ok()
                .and_then(|target| namespace_inode(&target.to_string_lossy()))
                .unwrap_or(0)
        };
        Namespaces {
            pid: ns("pid"),
            mnt: ns("mnt"),
            net: ns("net"),
            uts: ns("uts"),
            ipc: ns("ipc"),
            cgroup: ns("cgroup"),
            user: ns("user"),
        }
    }

    /// Whether any process on the host is in the `kind` (`mnt`, `pid`) namespace with this
    /// inode now; `None` when plegd cannot tell: the host's processes are not visible
    /// here, or a process's namespace cannot be read (another user's, without
    /// `CAP_SYS_PTRACE`). One `readlink`
    /// per process: run it off the async threads.
    pub fn namespace_in_use(&self, kind: &str, inode: u64) -> Option<bool> {
        if !self.sees_processes() {
            return None;
        }
        let dir = std::fs::read_dir(self.root.join("proc")).ok()?;
        let pids = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok());
        for pid in pids {
            match std::fs::read_link(self.proc(pid, &format!("ns/{kind}"))) {
                Ok(target) if namespace_inode(&target.to_string_lossy()) == Some(inode) => return Some(true),
                Ok(_) => {}
                // The process ended since the listing.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                // Another user's process, without CAP_SYS_PTRACE: it may hold the inode.
                Err(_) => return None,
            }
        }
        Some(false)
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

/// The inode a `/proc/PID/ns/*` link names (`mnt:[4026531840]`).
pub fn namespace_inode(target: &str) -> Option<u64> {
    let (_, rest) = target.split_once(":[")?;
    rest.strip_suffix(']')?.parse().ok()
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

/// The container a process's cgroup path places it in: the **outermost** component
/// that a container runtime names after a container — `cri-containerd-<id>.scope`,
/// `crio-<id>.scope`, `docker-<id>.scope`, `<slice>:cri-containerd:<id>`, or the bare
/// `<id>` directory of the cgroupfs driver. Anything below it (a container nested in
/// it, a child cgroup a process made and named after another container) is inside that
/// container. A component of another shape that merely holds 64 hex digits (a user's
/// `systemd-run --scope --unit=<id>`) names nothing; conmon's `crio-conmon-<id>.scope`
/// is not the container's. The caller still checks [`placed_in`]: the name alone is
/// chosen by whoever made the cgroup.
pub fn container_id_in(cgroup: &str) -> Option<&str> {
    cgroup.split('/').find_map(runtime_named)
}

/// The container id of one cgroup path component, where its shape is a runtime's.
fn runtime_named(part: &str) -> Option<&str> {
    const PREFIXES: [&str; 3] = ["cri-containerd", "crio", "docker"];
    let hex = |id: &str| id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit());
    if hex(part) {
        return Some(part);
    }
    // `cri-containerd-<id>.scope`, `crio-<id>.scope` (systemd), `crio-<id>` (CRI-O's
    // cgroupfs manager).
    if let Some((prefix, id)) = part.strip_suffix(".scope").unwrap_or(part).rsplit_once('-')
        && PREFIXES.contains(&prefix)
        && hex(id)
    {
        return Some(id);
    }
    if part.ends_with(".scope") {
        return None;
    }
    // containerd's systemd-style path under the cgroupfs driver: `slice:prefix:id`.
    let mut f = part.rsplitn(3, ':');
    let (id, prefix, _slice) = (f.next()?, f.next()?, f.next()?);
    (PREFIXES.contains(&prefix) && hex(id)).then_some(id)
}

/// Whether a process's cgroup (as `/proc/PID/cgroup` shows it) is at or below the cgroup
/// the runtime set for a container (`cgroupsPath`, either driver's form). The process's
/// path may be relative to plegd's own cgroup namespace (leading `/..` components): then,
/// and for a relative `cgroupsPath` (placed under the runtime's own cgroup), the
/// container's path must appear whole in the process's, ending at the container's own
/// component; otherwise it must be its beginning.
pub fn placed_in(process_cgroup: &str, cgroups_path: &str) -> bool {
    // A `slice:prefix:name` path is systemd's unit — or, under the cgroupfs driver, a
    // directory of that very name below the runtime's own cgroup.
    let expanded = cgroups_path.contains(':').then(|| cgroup_path_of(cgroups_path)).flatten();
    expanded.is_some_and(|p| placed_at(process_cgroup, &p)) || placed_at(process_cgroup, cgroups_path)
}

fn placed_at(process_cgroup: &str, expanded: &str) -> bool {
    let container: Vec<&str> = expanded.split('/').filter(|c| !c.is_empty()).collect();
    let all: Vec<&str> = process_cgroup.split('/').filter(|c| !c.is_empty()).collect();
    let outside_ns = all.iter().take_while(|c| **c == "..").count();
    let process = &all[outside_ns..];
    let Some(leaf) = container.last() else { return false };
    let Some(at) = process.iter().position(|c| c == leaf) else { return false };
    let run = &process[..=at];
    match (expanded.starts_with('/'), outside_ns > 0) {
        (true, false) => run == container.as_slice(),
        // Only the part below plegd's namespace is shown: it is the container's path's end.
        (true, true) => container.ends_with(run),
        (false, false) => run.ends_with(&container),
        (false, true) => run.ends_with(&container) || container.ends_with(run),
    }
}

/// Whether a process whose cgroup is `cgroup` is container `id`'s, whose cgroup the
/// runtime set to `cgroups_path` (empty: the runtime did not say): the cgroup names no
/// container or names this one, and lies at or below the container's. A cgroup that
/// names no container (a host whose runtime puts containers elsewhere) is taken at the
/// runtime's word.
pub fn belongs_to(cgroup: &str, id: &str, cgroups_path: &str) -> bool {
    match container_id_in(cgroup) {
        None => true,
        Some(named) => named == id && (cgroups_path.is_empty() || placed_in(cgroup, cgroups_path)),
    }
}

/// Whether a cgroup path lies in a tree that unprivileged users may be given: systemd's
/// `user.slice` (each user's `user@UID.service` manager can make scopes and slices
/// there, named as it likes). A container runtime never puts pods' containers there.
pub fn user_delegated(cgroup: &str) -> bool {
    cgroup.split('/').any(|c| c == "user.slice" || (c.starts_with("user@") && c.ends_with(".service")))
}

/// Whether a cgroup path lies in the kubelet's pod hierarchy (`/kubepods…` at its top,
/// after any `/..` of plegd's own cgroup namespace): where a runtime puts pods'
/// containers, and where an unprivileged user cannot make cgroups.
pub fn under_kubepods(cgroup: &str) -> bool {
    cgroup.split('/').find(|c| !c.is_empty() && *c != "..").is_some_and(|top| top.starts_with("kubepods"))
}

/// The host's PID allocation, for telling whether a PID can have been handed to another
/// process since a container's process took it. Linux gives out PIDs in a cycle from a
/// cursor, skipping those in use: once a PID is taken, it comes round again only after
/// the cursor went round the whole range, which takes at least half of it in new tasks
/// while no more than half the range is in use. `/proc/stat`'s `processes` counts every
/// fork and thread since boot, in every PID namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PidClock {
    /// Tasks created since boot (`/proc/stat` `processes`).
    pub forks: u64,
    /// When the host booted (`/proc/stat` `btime`, seconds since the epoch).
    pub boot: u64,
}

impl PidClock {
    /// New tasks after a container's process took its PID within which the PID cannot
    /// have been another process's: a quarter of the PIDs above the reserved 300. The
    /// other quarter of the half-range is left for the tasks made between the process's
    /// start and plegd's first sight of it (plegd takes a count only within
    /// [`FRESH_START`] of the start).
    pub fn window(pid_max: u64) -> u64 {
        pid_max.saturating_sub(300) / 4
    }
}

/// How soon after a container's start plegd must see it running for its task count to
/// stand for the moment its PID was taken.
pub const FRESH_START: Duration = Duration::from_secs(5);

impl Host {
    /// The host's task count and boot time now, or `None` when `/proc/stat` is not
    /// readable.
    pub fn pid_clock(&self) -> Option<PidClock> {
        let stat = std::fs::read_to_string(self.root.join("proc/stat")).ok()?;
        let field = |name: &str| stat.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse().ok());
        Some(PidClock { forks: field("processes ")?, boot: field("btime ").unwrap_or(0) })
    }

    /// `kernel.pid_max` (32768, the smallest default, when it is not readable).
    pub fn pid_max(&self) -> u64 {
        std::fs::read_to_string(self.root.join("proc/sys/kernel/pid_max"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(32_768)
    }
}

/// The kernel's host name: the node's name when `--node-name` is not given.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
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
    fn the_outermost_runtime_named_component_is_the_container_and_other_names_are_nothing() {
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let outer = format!("/kubepods.slice/kubepods-pod1.slice/cri-containerd-{a}.scope");
        // A process of A in a child cgroup it named after B is still A's.
        assert_eq!(container_id_in(&format!("{outer}/{b}")), Some(a.as_str()));
        assert_eq!(container_id_in(&format!("{outer}/cri-containerd-{b}.scope")), Some(a.as_str()));
        // Docker in Docker: the inner container is inside A.
        assert_eq!(container_id_in(&format!("{outer}/docker/{b}")), Some(a.as_str()));
        // A user's own scope named after B is not a runtime's name.
        assert_eq!(
            container_id_in(&format!("/user.slice/user-1000.slice/user@1000.service/app.slice/{b}.scope")),
            None
        );
        assert_eq!(container_id_in(&format!("/user.slice/run-{b}.scope")), None);
        // CRI-O's cgroupfs manager: `crio-<id>` without `.scope`.
        assert_eq!(container_id_in(&format!("/kubepods/besteffort/pod1/crio-{b}")), Some(b.as_str()));
        // conmon's scope is CRI-O's monitor, not the container.
        assert_eq!(container_id_in(&format!("/kubepods.slice/crio-conmon-{b}.scope")), None);
    }

    #[test]
    fn a_process_is_placed_in_a_container_only_at_or_below_the_cgroup_the_runtime_set() {
        let id = "c".repeat(64);
        let systemd = format!("kubepods-besteffort-pod1.slice:cri-containerd:{id}");
        let path = format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-{id}.scope"
        );
        assert!(placed_in(&path, &systemd));
        assert!(placed_in(&format!("{path}/docker/{}", "d".repeat(64)), &systemd), "a nested container");
        assert!(!placed_in(
            &format!("/user.slice/user-1000.slice/user@1000.service/cri-containerd-{id}.scope"),
            &systemd
        ));
        assert!(!placed_in(&format!("/evil{path}"), &systemd), "the runtime's path, but not at the top");
        // Seen from inside plegd's own cgroup namespace.
        assert!(placed_in(&format!("/../../kubepods-besteffort-pod1.slice/cri-containerd-{id}.scope"), &systemd));
        assert!(!placed_in(&format!("/../../user@1000.service/cri-containerd-{id}.scope"), &systemd));
        // The cgroupfs driver, absolute and relative to the runtime's cgroup.
        assert!(placed_in(&format!("/kubepods/besteffort/pod1/{id}"), &format!("/kubepods/besteffort/pod1/{id}")));
        assert!(!placed_in(&format!("/tmp/{id}"), &format!("/kubepods/besteffort/pod1/{id}")));
        assert!(placed_in(&format!("/system.slice/containerd.service/k8s.io/{id}"), &format!("k8s.io/{id}")));
        // containerd's cgroupfs driver given a systemd-shaped path: a directory of that name.
        let literal = format!("kubepods-pod1.slice:cri-containerd:{id}");
        assert!(placed_in(&format!("/system.slice/containerd.service/{literal}"), &literal));
        assert!(user_delegated("/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope"));
        assert!(!user_delegated(&path));
        assert!(!placed_in("/", &systemd));
        assert!(!placed_in(&path, ""));
    }

    #[test]
    fn only_the_kubepods_hierarchy_at_the_top_is_the_kubelets() {
        assert!(under_kubepods("/kubepods.slice/x"));
        assert!(under_kubepods("/kubepods/besteffort/x"));
        assert!(under_kubepods("/../../kubepods-besteffort-pod1.slice/x"));
        assert!(!under_kubepods("/user.slice/user@1000.service/kubepods.slice/x"));
        assert!(!under_kubepods("/"));
    }

    #[test]
    fn the_pid_clock_is_the_kernels_task_count_since_boot() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new(dir.path());
        assert_eq!(host.pid_clock(), None);
        assert_eq!(host.pid_max(), 32_768);
        std::fs::create_dir_all(dir.path().join("proc/sys/kernel")).unwrap();
        std::fs::write(
            dir.path().join("proc/stat"),
            "cpu  1 2 3\nctxt 99\nbtime 1\nprocesses 123456\nprocs_running 1\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("proc/sys/kernel/pid_max"), "4194304\n").unwrap();
        assert_eq!(host.pid_clock(), Some(PidClock { forks: 123_456, boot: 1 }));
        assert_eq!(host.pid_max(), 4_194_304);
        assert_eq!(PidClock::window(32_768), 8_117);
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
