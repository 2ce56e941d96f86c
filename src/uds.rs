//! Unix-socket endpoints: parsing `unix://` addresses, binding with safe permissions,
//! and dialing them from tonic.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::{UnixListener, UnixStream};

/// Errors of endpoint parsing and socket binding.
#[derive(Debug, thiserror::Error)]
pub enum UdsError {
    /// The endpoint is not of the form `unix:///absolute/path`.
    #[error("endpoint {0:?} is not a unix socket address (expected unix:///absolute/path)")]
    NotUnix(String),
    /// Another process serves on the socket already.
    #[error("socket {0} is in use by another process")]
    InUse(PathBuf),
    /// A file that is not a socket stands where the socket should go.
    #[error("{0} exists and is not a socket")]
    NotASocket(PathBuf),
    /// Creating, removing or binding failed.
    #[error("cannot bind {path}: {source}")]
    Io {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Parses `unix:///path` (or a bare absolute path) into the socket path.
pub fn parse_unix_endpoint(endpoint: &str) -> Result<PathBuf, UdsError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if !endpoint.starts_with("unix://") && !endpoint.starts_with('/') {
        return Err(UdsError::NotUnix(endpoint.to_owned()));
    }
    if !path.starts_with('/') || path.len() < 2 {
        return Err(UdsError::NotUnix(endpoint.to_owned()));
    }
    Ok(PathBuf::from(path))
}

/// Binds a listening socket at `path`: creates the parent directory with mode 0750 if
/// missing, replaces a stale socket file (one nobody answers on), refuses a live one,
/// and sets the socket's mode.
pub async fn bind(path: &Path, mode: u32) -> Result<UnixListener, UdsError> {
    let io_err = |source| UdsError::Io { path: path.to_owned(), source };
    if let Some(dir) = path.parent()
        && !dir.exists()
    {
        std::fs::DirBuilder::new().recursive(true).mode(0o750).create(dir).map_err(io_err)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(md) if md.file_type().is_socket() => {
            if UnixStream::connect(path).await.is_ok() {
                return Err(UdsError::InUse(path.to_owned()));
            }
            std::fs::remove_file(path).map_err(io_err)?;
        }
        Ok(_) => return Err(UdsError::NotASocket(path.to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(e)),
    }
    let listener = UnixListener::bind(path).map_err(io_err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io_err)?;
    Ok(listener)
}

/// A lazily connecting tonic channel to a unix socket; tonic redials on the next call
/// after the connection breaks.
pub fn lazy_channel(path: PathBuf) -> tonic::transport::Channel {
    lazy_channel_on(tonic::transport::Endpoint::from_static("http://plegd.invalid"), path)
}

/// [`lazy_channel`] with HTTP/2 flow-control windows of `window` bytes per stream and
/// for the connection: at most that much of an answer waits in the connection for a
/// reader that lags (hyper's defaults are 2 and 5 MiB). The runtime's answers: a full
/// listing hashed as it arrives holds no more than this (`cri::hashed`).
pub fn lazy_channel_windowed(path: PathBuf, window: u32) -> tonic::transport::Channel {
    let endpoint = tonic::transport::Endpoint::from_static("http://plegd.invalid")
        .initial_stream_window_size(window)
        .initial_connection_window_size(window);
    lazy_channel_on(endpoint, path)
}

fn lazy_channel_on(endpoint: tonic::transport::Endpoint, path: PathBuf) -> tonic::transport::Channel {
    // The URI is required by tonic but never dialed: the connector below is.
    endpoint.connect_with_connector_lazy(tower::service_fn(move |_: tonic::transport::Uri| {
        let path = path.clone();
        async move {
            let stream = UnixStream::connect(path).await?;
            Ok::<_, io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    }))
}

/// The supplementary groups of the process at the other end of a unix socket, as the
/// kernel recorded them when it connected (`SO_PEERGROUPS`, Linux 4.13).
#[allow(unsafe_code)]
pub fn peer_groups(sock: &impl std::os::fd::AsRawFd) -> io::Result<Vec<u32>> {
    unsafe extern "C" {
        fn getsockopt(fd: i32, level: i32, name: i32, value: *mut std::ffi::c_void, len: *mut u32) -> i32;
    }
    const SOL_SOCKET: i32 = 1;
    const SO_PEERGROUPS: i32 = 59;
    const ERANGE: i32 = 34;
    let mut groups = vec![0u32; 32];
    loop {
        let mut len = (groups.len() * 4) as u32;
        // SAFETY: the buffer holds `len` bytes and outlives the call; the kernel writes at
        // most `len` bytes and sets `len` to what it wrote (or needs, with ERANGE).
        let rc =
            unsafe { getsockopt(sock.as_raw_fd(), SOL_SOCKET, SO_PEERGROUPS, groups.as_mut_ptr().cast(), &mut len) };
        if rc == 0 {
            groups.truncate(len as usize / 4);
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(ERANGE) && len as usize > groups.len() * 4 {
            groups.resize(len as usize / 4, 0);
            continue;
        }
        return Err(e);
    }
}

/// Whether the process at the other end of `sock` runs as root or as this process's
/// effective user: a socket's peer trusted to speak for the runtime.
#[allow(unsafe_code)]
pub fn peer_is_root_or_self(sock: &tokio::net::UnixStream) -> io::Result<(bool, u32)> {
    unsafe extern "C" {
        fn geteuid() -> u32;
    }
    let peer = sock.peer_cred()?.uid();
    // SAFETY: geteuid takes nothing, cannot fail and touches no memory.
    let me = unsafe { geteuid() };
    Ok((peer == 0 || peer == me, peer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_unix_urls_and_rejects_others() {
        assert_eq!(parse_unix_endpoint("unix:///run/x.sock").unwrap(), PathBuf::from("/run/x.sock"));
        assert_eq!(parse_unix_endpoint("/run/x.sock").unwrap(), PathBuf::from("/run/x.sock"));
        assert!(parse_unix_endpoint("tcp://127.0.0.1:1").is_err());
        assert!(parse_unix_endpoint("unix://relative").is_err());
        assert!(parse_unix_endpoint("unix://").is_err());
    }

    #[tokio::test]
    async fn bind_replaces_a_stale_socket_and_refuses_a_live_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/api.sock");
        let live = bind(&path, 0o660).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        let dir_mode = std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o750);
        assert!(matches!(bind(&path, 0o660).await, Err(UdsError::InUse(_))));
        drop(live);
        bind(&path, 0o660).await.expect("stale socket is replaced");
    }

    #[tokio::test]
    async fn bind_refuses_to_clobber_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        std::fs::write(&path, b"x").unwrap();
        assert!(matches!(bind(&path, 0o660).await, Err(UdsError::NotASocket(_))));
    }
}

#[cfg(test)]
mod peer_tests {
    #[tokio::test]
    async fn a_peers_supplementary_groups_are_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let _client = tokio::net::UnixStream::connect(&path).await.unwrap();
        let (server_side, _) = listener.accept().await.unwrap();
        let mut got = super::peer_groups(&server_side).unwrap();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find_map(|l| l.strip_prefix("Groups:")).unwrap();
        let mut want: Vec<u32> = line.split_whitespace().map(|g| g.parse().unwrap()).collect();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }
}
