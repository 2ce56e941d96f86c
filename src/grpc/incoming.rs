//! The API socket's front door: each accepted connection is screened in a task of its
//! own (peer credentials against the allowlists, then the HTTP/2 preface within the
//! handshake timeout) before it reaches the gRPC server, so a stalled or hostile peer
//! never holds up others. A peer the allowlists refuse still speaks gRPC: every call it
//! makes is answered `PERMISSION_DENIED` with the reason ([`Screened`]), and nothing of
//! the API is served to it.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connections::{CallGuard, Connections, Flow};
use super::watch::Holder;
use super::{ApiConfig, ApiMetrics};

/// Whether a peer may connect: its uid, its primary group or one of its supplementary
/// groups is allowed (or no list is set).
pub fn peer_allowed(cfg: &ApiConfig, uid: u32, gid: u32, groups: &[u32]) -> bool {
    (cfg.allow_uids.is_empty() && cfg.allow_gids.is_empty())
        || cfg.allow_uids.contains(&uid)
        || cfg.allow_gids.contains(&gid)
        || groups.iter().any(|g| cfg.allow_gids.contains(g))
}

/// The HTTP/2 client preface every gRPC connection starts with.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Why a peer may not use the API, if it may not.
fn screen_failure(cfg: &ApiConfig, conn: &UnixStream) -> Option<Refused> {
    let cred = match conn.peer_cred() {
        Ok(c) => c,
        Err(e) => return Some(Refused::NoCredentials(e)),
    };
    if cfg.allow_uids.is_empty() && cfg.allow_gids.is_empty() {
        return None;
    }
    let groups = crate::uds::peer_groups(conn).unwrap_or_default();
    if peer_allowed(cfg, cred.uid(), cred.gid(), &groups) {
        return None;
    }
    Some(Refused::Peer { uid: cred.uid(), gid: cred.gid(), groups, pid: cred.pid() })
}

/// Why a connection was turned away before reaching the gRPC server.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The peer is not in the allowlists.
    #[error("peer uid {uid} (gid {gid}, groups {groups:?}) is not in --allow-uid/--allow-gid")]
    Peer {
        /// Its uid.
        uid: u32,
        /// Its primary group.
        gid: u32,
        /// Its supplementary groups.
        groups: Vec<u32>,
        /// Its process, when the kernel names it in plegd's PID namespace.
        pid: Option<i32>,
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
async fn read_preface(
    mut conn: UnixStream,
    timeout: Duration,
    refused: Option<Arc<str>>,
    admitted: Admitted,
) -> Result<Prefaced, Refused> {
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
    let ends = refused.as_ref().map(|_| Box::pin(tokio::time::sleep(REFUSED_FOR)));
    let Admitted { id, cut, flow } = admitted;
    Ok(Prefaced {
        replayed: 0,
        inner: conn,
        refused,
        ends,
        cut: Box::pin(cut.clone().cancelled_owned()),
        token: cut,
        id,
        flow,
    })
}

/// A connection given its place among the node's: its number, how plegd closes it,
/// and its flow.
struct Admitted {
    id: u64,
    cut: CancellationToken,
    flow: Arc<Flow>,
}

/// Connection numbers, for telling connections apart.
static NEXT_CONNECTION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// How long a refused peer's connection stays open: long enough to read the answers
/// that tell it why, not long enough to hold plegd's memory with idle connections.
const REFUSED_FOR: Duration = Duration::from_secs(10);

/// A connection whose HTTP/2 preface was read for screening; reads replay it first.
pub struct Prefaced {
    replayed: usize,
    inner: UnixStream,
    refused: Option<Arc<str>>,
    /// For a refused peer: when its connection ends (reads see the end of the stream).
    ends: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Closes the connection from plegd's side: reads see its end, writes fail, and the
    /// HTTP/2 server drops it with every stream and buffer it holds.
    cut: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    token: CancellationToken,
    id: u64,
    /// Its place among the node's connections and the bytes it has ahead.
    flow: Arc<Flow>,
}

/// What the gRPC services learn of a connection's peer.
#[derive(Clone, Debug)]
pub struct Peer {
    /// Why the allowlists refuse it, if they do.
    pub refused: Option<Arc<str>>,
    /// The socket's own connect info.
    pub uds: <UnixStream as tonic::transport::server::Connected>::ConnectInfo,
    /// Closes this connection (see [`Prefaced`]).
    pub cut: CancellationToken,
    /// This connection's number.
    pub id: u64,
    /// Its place among the node's connections and the bytes it has ahead.
    pub flow: Arc<Flow>,
}

impl tokio::io::AsyncRead for Prefaced {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if let Some(ends) = self.ends.as_mut()
            && ends.as_mut().poll(cx).is_ready()
        {
            return std::task::Poll::Ready(Ok(()));
        }
        if self.cut.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(Ok(()));
        }
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
        if self.token.is_cancelled() {
            return std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        let written = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = written {
            self.flow.written(n);
        }
        written
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
        if self.token.is_cancelled() {
            return std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let std::task::Poll::Ready(Ok(n)) = written {
            self.flow.written(n);
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Prefaced {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Self::ConnectInfo {
        Peer {
            refused: self.refused.clone(),
            uds: self.inner.connect_info(),
            cut: self.token.clone(),
            id: self.id,
            flow: self.flow.clone(),
        }
    }
}

/// Answers every call of a refused peer with `PERMISSION_DENIED` and its reason, and
/// passes the others' on.
#[derive(Clone)]
pub struct Screened<S>(pub S);

impl<S, B, R> tower::Service<axum::http::Request<B>> for Screened<S>
where
    S: tower::Service<axum::http::Request<B>, Response = axum::http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: Default + Send + 'static,
{
    type Response = axum::http::Response<InCall<R>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: axum::http::Request<B>) -> Self::Future {
        let peer = req.extensions().get::<Peer>();
        let refused = peer.and_then(|p| p.refused.clone());
        // The call lasts until its response's body is done (a Watch: until it ends).
        let call = peer.map(|p| p.flow.call());
        match refused {
            Some(why) => {
                let status =
                    tonic::Status::permission_denied(format!("refused by plegd's --allow-uid/--allow-gid: {why}"));
                Box::pin(std::future::ready(Ok(status.into_http::<R>().map(|b| InCall::new(b, None)))))
            }
            None => {
                let fut = self.0.call(req);
                Box::pin(async move { fut.await.map(|r| r.map(|b| InCall::new(b, call))) })
            }
        }
    }
}

/// A response body that keeps its call counted on its connection until it is done.
pub struct InCall<B> {
    inner: Pin<Box<B>>,
    _call: Option<CallGuard>,
}

impl<B> InCall<B> {
    fn new(inner: B, call: Option<CallGuard>) -> Self {
        Self { inner: Box::pin(inner), _call: call }
    }
}

impl<B: Default> Default for InCall<B> {
    fn default() -> Self {
        Self::new(B::default(), None)
    }
}

impl<B: http_body::Body> http_body::Body for InCall<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.inner.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Accepts connections and screens each in its own task (peer credentials, then the
/// HTTP/2 preface within the handshake timeout), so a stalled or hostile peer never
/// holds up others. Screened connections come out of the returned stream.
pub fn incoming(
    listener: UnixListener,
    cfg: Arc<ApiConfig>,
    connections: Connections,
    metrics: ApiMetrics,
    beat: crate::liveness::Beat,
    tasks: TaskTracker,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<Prefaced, std::io::Error>> {
    let (tx, rx) = mpsc::channel::<Result<Prefaced, std::io::Error>>(64);
    tasks.clone().spawn(async move {
        // The API's liveness is its accept loop turning, quiet or busy.
        let mut ticks = crate::liveness::beat_timer();
        // A peer refused in a loop must not flood the log: the counter has them all.
        let mut refusals_to_log = crate::backoff::TokenBucket::new(1.0, 10);
        let mut over_cap_to_log = crate::backoff::TokenBucket::new(1.0, 10);
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
            let refused = match screen_failure(&cfg, &conn) {
                Some(why @ Refused::Peer { .. }) => {
                    metrics.refused.inc();
                    if refusals_to_log.try_take() {
                        tracing::warn!(reason = %why, peer_pid = ?peer_pid(&why), "refused an API peer; its calls get PERMISSION_DENIED");
                    }
                    Some(Arc::from(why.to_string()))
                }
                Some(why) => {
                    metrics.refused.inc();
                    tracing::warn!(reason = %why, "refused an API connection");
                    continue;
                }
                None => None,
            };
            let id = NEXT_CONNECTION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let holder = match conn.peer_cred() {
                Ok(cred) => Holder::of(cred.uid(), cred.pid(), id),
                Err(_) => Holder::RootConnection(id),
            };
            let cut = CancellationToken::new();
            let flow = match connections.admit(holder, cut.clone()) {
                Ok((flow, displaced)) => {
                    if displaced {
                        metrics.over_cap.inc();
                    }
                    flow
                }
                Err(why) => {
                    metrics.over_cap.inc();
                    if over_cap_to_log.try_take() {
                        tracing::warn!(reason = %why, "closed an API connection over its cap");
                    }
                    continue;
                }
            };
            metrics.open.set(connections.open() as i64);
            let admitted = Admitted { id, cut, flow };
            let (tx, timeout, metrics) = (tx.clone(), cfg.handshake_timeout, metrics.clone());
            tasks.spawn(async move {
                match read_preface(conn, timeout, refused, admitted).await {
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

fn peer_pid(r: &Refused) -> Option<i32> {
    match r {
        Refused::Peer { pid, .. } => *pid,
        _ => None,
    }
}
