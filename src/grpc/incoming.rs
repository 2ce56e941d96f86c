//! The API socket's front door: each accepted connection is screened in a task of its
//! own (peer credentials against the allowlists, then the HTTP/2 preface within the
//! handshake timeout) before it reaches the gRPC server, so a stalled or hostile peer
//! never holds up others.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{ApiConfig, ApiMetrics};

/// Whether a peer may connect.
pub fn peer_allowed(cfg: &ApiConfig, uid: u32, gid: u32) -> bool {
    (cfg.allow_uids.is_empty() && cfg.allow_gids.is_empty())
        || cfg.allow_uids.contains(&uid)
        || cfg.allow_gids.contains(&gid)
}

/// The HTTP/2 client preface every gRPC connection starts with.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Why a connection was turned away before reaching the gRPC server.
fn screen_failure(cfg: &ApiConfig, conn: &UnixStream) -> Option<Refused> {
    match conn.peer_cred() {
        Ok(cred) if peer_allowed(cfg, cred.uid(), cred.gid()) => None,
        Ok(cred) => Some(Refused::Peer { uid: cred.uid(), gid: cred.gid() }),
        Err(e) => Some(Refused::NoCredentials(e)),
    }
}

/// Why a connection was turned away before reaching the gRPC server.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The peer is not in the allowlists.
    #[error("peer uid {uid} gid {gid} not in --allow-uid/--allow-gid")]
    Peer {
        /// Its uid.
        uid: u32,
        /// Its gid.
        gid: u32,
    },
    /// The kernel gave no credentials.
    #[error("no peer credentials: {0}")]
    NoCredentials(#[source] std::io::Error),
    /// Reading failed.
    #[error("reading the HTTP/2 preface: {0}")]
    Read(#[source] std::io::Error),
    /// The peer closed first.
    #[error("closed before the HTTP/2 preface")]
    Closed,
    /// Not gRPC.
    #[error("not an HTTP/2 connection")]
    NotHttp2,
    /// Too slow.
    #[error("no HTTP/2 preface within {0:?}")]
    Slow(Duration),
}

/// Reads the HTTP/2 preface (bounded in time, failing fast on anything else) and
/// returns the connection with the preface put back in front.
async fn read_preface(mut conn: UnixStream, timeout: Duration) -> Result<Prefaced, Refused> {
    use tokio::io::AsyncReadExt;
    let check = async {
        let mut buf = [0u8; 24];
        let mut n = 0;
        while n < buf.len() {
            let got = conn.read(&mut buf[n..]).await.map_err(Refused::Read)?;
            if got == 0 {
                return Err(Refused::Closed);
            }
            n += got;
            if buf[..n] != PREFACE[..n] {
                return Err(Refused::NotHttp2);
            }
        }
        Ok(())
    };
    tokio::time::timeout(timeout, check).await.map_err(|_| Refused::Slow(timeout))??;
    Ok(Prefaced { replayed: 0, inner: conn })
}

/// A connection whose HTTP/2 preface was read for screening; reads replay it first.
pub struct Prefaced {
    replayed: usize,
    inner: UnixStream,
}

impl tokio::io::AsyncRead for Prefaced {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.replayed < PREFACE.len() {
            let rest = &PREFACE[self.replayed..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            self.replayed += n;
            return std::task::Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Prefaced {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Prefaced {
    type ConnectInfo = <UnixStream as tonic::transport::server::Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// Accepts connections and screens each in its own task (peer credentials, then the
/// HTTP/2 preface within the handshake timeout), so a stalled or hostile peer never
/// holds up others. Screened connections come out of the returned stream.
pub fn incoming(
    listener: UnixListener,
    cfg: Arc<ApiConfig>,
    metrics: ApiMetrics,
    beat: crate::liveness::Beat,
    tasks: TaskTracker,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<Prefaced, std::io::Error>> {
    let (tx, rx) = mpsc::channel::<Result<Prefaced, std::io::Error>>(64);
    tasks.clone().spawn(async move {
        // The API's liveness is its accept loop turning, quiet or busy.
        let mut ticks = crate::liveness::beat_timer();
        loop {
            let conn = tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tx.closed() => return,
                _ = ticks.tick() => {
                    beat.beat();
                    continue;
                }
                c = listener.accept() => c,
            };
            beat.beat();
            let conn = match conn {
                Ok((c, _)) => c,
                Err(e) => {
                    // EMFILE and friends: wait a little rather than spin.
                    tracing::warn!(error = %e, "accepting an API connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if let Some(why) = screen_failure(&cfg, &conn) {
                metrics.refused.inc();
                tracing::warn!(reason = %why, "refused an API connection");
                continue;
            }
            let (tx, timeout, metrics) = (tx.clone(), cfg.handshake_timeout, metrics.clone());
            tasks.spawn(async move {
                match read_preface(conn, timeout).await {
                    Ok(conn) => {
                        metrics.accepted.inc();
                        let _ = tx.send(Ok(conn)).await;
                    }
                    Err(why) => tracing::info!(reason = %why, "dropped an API connection"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
