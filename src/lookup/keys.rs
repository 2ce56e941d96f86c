//! What a lookup asks by: the keys agents and collectors hold, and how a log file path
//! a collector holds is read.

/// What a lookup asks by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LookupKey {
    /// Container id.
    Id(String),
    /// cgroup id (the cgroup directory's inode).
    CgroupId(u64),
    /// Host PID of any process of the container.
    Pid(u32),
    /// A log file the container wrote ([`log_file`] says which forms).
    LogPath(LogFile),
    /// A pod's container by name and attempt.
    Attempt {
        /// The pod's uid.
        pod_uid: String,
        /// The container's name.
        name: String,
        /// Its attempt (0: the first).
        attempt: u32,
    },
    /// The inode of the container's init process's mount namespace.
    MntNs(u64),
    /// The inode of its PID namespace.
    PidNs(u64),
    /// A cgroup path as `/proc/PID/cgroup` names it, relative to the cgroup v2 root
    /// ([`cgroup_path`] says which forms are read).
    CgroupPath(String),
    /// A pod address (v4 or v6) at a moment: the pod that held it then.
    PodIp {
        /// The address.
        ip: std::net::IpAddr,
        /// The moment; `None`: now.
        at: Option<std::time::SystemTime>,
    },
}

/// A log file path, as a lookup reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogFile {
    /// The kubelet's `…/<namespace>_<pod>_<uid>/<container>/<attempt>.log`, without
    /// any rotation suffix: the file the runtime names as the container's log path.
    Attempt(String),
    /// A `/var/log/containers/<pod>_<namespace>_<container>-<id>.log` link.
    Link {
        /// The pod's name.
        pod: String,
        /// Its namespace.
        namespace: String,
        /// The container's name.
        container: String,
        /// The container's id.
        id: String,
    },
}

/// Reads a log file path a collector holds: the kubelet's
/// `/var/log/pods/<namespace>_<pod>_<uid>/<container>/<attempt>.log`, a rotated file of
/// it (`.log.1`, `.log.20260101-120000`, `.log.20260101-120000.gz`), or the
/// `/var/log/containers/<pod>_<namespace>_<container>-<id>.log` link to it. Anything
/// else is an error saying what was expected.
pub fn log_file(path: &str) -> Result<LogFile, String> {
    if !path.starts_with('/') {
        return Err(format!("{path:?} is not an absolute path"));
    }
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return Err(format!("{path:?} is not a plain path (it has . or .. in it)"));
    }
    let expected = "expected the kubelet's <pods log dir>/<namespace>_<pod>_<uid>/<container>/<attempt>.log \
                    (or a rotated file of it) or /var/log/containers/<pod>_<namespace>_<container>-<id>.log";
    let Some((file, dirs)) = parts.split_last() else { return Err(format!("{path:?}: {expected}")) };
    if dirs.last() == Some(&"containers")
        && let Some(stem) = file.strip_suffix(".log")
        && let Some((names, id)) = stem.rsplit_once('-')
        && id.len() == 64
        && id.bytes().all(|b| b.is_ascii_hexdigit())
    {
        let mut f = names.splitn(3, '_');
        if let (Some(pod), Some(namespace), Some(container)) = (f.next(), f.next(), f.next())
            && !pod.is_empty()
            && !namespace.is_empty()
            && !container.is_empty()
        {
            return Ok(LogFile::Link {
                pod: pod.into(),
                namespace: namespace.into(),
                container: container.into(),
                id: id.into(),
            });
        }
    }
    // `<attempt>.log`, then any rotation suffix.
    let digits = file.bytes().take_while(u8::is_ascii_digit).count();
    let rest = &file[digits..];
    let rotated = rest == ".log" || rest.starts_with(".log.");
    let pod_dir = dirs.len().checked_sub(2).map(|i| dirs[i]);
    let pod_dir_ok = pod_dir.is_some_and(|d| d.split('_').filter(|p| !p.is_empty()).count() >= 3);
    if digits == 0 || !rotated || !pod_dir_ok {
        return Err(format!("{path:?}: {expected}"));
    }
    let mut key = String::from("/");
    for d in dirs {
        key.push_str(d);
        key.push('/');
    }
    key.push_str(&file[..digits + ".log".len()]);
    Ok(LogFile::Attempt(key))
}

/// Reads a cgroup path a host-metrics collector holds: a cgroup v2 line of
/// `/proc/PID/cgroup` (`0::/kubepods.slice/…`), a path under the cgroup root
/// (`/kubepods.slice/…`), or the same under the host's mount (`/sys/fs/cgroup/…`). The
/// answer is relative to the cgroup root, without a trailing `/`. Anything else is an
/// error saying what was expected.
pub fn cgroup_path(path: &str) -> Result<String, String> {
    let expected =
        "expected a cgroup v2 path as /proc/PID/cgroup names it (0::/kubepods.slice/…), or under /sys/fs/cgroup";
    let path = path.trim();
    // A line of /proc/PID/cgroup: `<hierarchy>:<controllers>:<path>`; v2's is `0::<path>`.
    let line = path.split_once(':').filter(|(h, _)| !h.is_empty() && h.bytes().all(|b| b.is_ascii_digit()));
    let path = match line.and_then(|(h, rest)| Some((h, rest.split_once(':')?))) {
        Some(("0", ("", rest))) => rest,
        Some(_) => return Err(format!("{path:?} is not a cgroup v2 line (0::…): {expected}")),
        None => path,
    };
    if !path.starts_with('/') {
        return Err(format!("{path:?} is not an absolute path: {expected}"));
    }
    let path = path.strip_prefix("/sys/fs/cgroup").filter(|p| p.is_empty() || p.starts_with('/')).unwrap_or(path);
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    // Leading `..`s are a reader in a cgroup namespace of its own seeing the path from
    // its own cgroup up, as /proc/PID/cgroup shows it there; anywhere else they are not
    // a cgroup's path.
    let outside = parts.iter().take_while(|p| **p == "..").count();
    if parts[outside..].iter().any(|p| *p == "." || *p == "..") {
        return Err(format!("{path:?} is not a plain path (it has . or .. in it): {expected}"));
    }
    if parts.len() == outside {
        return Err(format!("{path:?} is the cgroup root, which is no container's: {expected}"));
    }
    Ok(format!("/{}", parts.join("/")))
}
