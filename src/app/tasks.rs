//! The sidecar's long-running tasks, and the rule they live under: an essential task
//! that panics, or ends while plegd is not shutting down, is fatal. It is logged, the
//! shutdown token is cancelled, and `plegd run` exits with status 1, so the kubelet
//! restarts a whole plegd. A loop that died must never leave behind a process that
//! answers `/readyz` and serves a frozen view as current.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// How an essential task ended early.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Fatal {
    /// It panicked.
    #[error("task {task} panicked: {message}; plegd stops rather than serve what it no longer keeps current")]
    Panicked {
        /// The task.
        task: &'static str,
        /// The panic's message.
        message: String,
    },
    /// It returned before shutdown.
    #[error("task {task} ended on its own; plegd stops rather than serve what it no longer keeps current")]
    Ended {
        /// The task.
        task: &'static str,
    },
}

/// Spawns tasks into one tracker and keeps the first fatal end.
#[derive(Clone)]
pub struct Tasks {
    tracker: TaskTracker,
    shutdown: CancellationToken,
    fatal: Arc<Mutex<Option<Fatal>>>,
}

impl Tasks {
    /// Tasks in `tracker`, stopped by `shutdown`.
    pub fn new(tracker: &TaskTracker, shutdown: &CancellationToken) -> Self {
        Self { tracker: tracker.clone(), shutdown: shutdown.clone(), fatal: Default::default() }
    }

    /// Spawns a task that must run until shutdown, inside a span named for it.
    pub fn essential<F>(&self, name: &'static str, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.essential_in(name, tracing::info_span!("task", name), fut)
    }

    /// [`Tasks::essential`] in a span of the caller's.
    pub fn essential_in<F>(&self, name: &'static str, span: tracing::Span, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let (shutdown, fatal) = (self.shutdown.clone(), self.fatal.clone());
        // The task runs on its own so that its panic is caught here, as a `JoinError`.
        let task = tokio::spawn(fut.instrument(span));
        self.tracker.spawn(async move {
            let ended = match task.await {
                Ok(()) if shutdown.is_cancelled() => return,
                Ok(()) => Fatal::Ended { task: name },
                Err(e) => Fatal::Panicked { task: name, message: panic_message(e) },
            };
            tracing::error!(error = %ended, "an essential task ended");
            fatal.lock().expect("fatal lock").get_or_insert(ended);
            shutdown.cancel();
        });
    }

    /// Spawns a task that may end on its own (it did its job).
    pub fn once<F>(&self, name: &'static str, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(fut.instrument(tracing::info_span!("task", name)));
    }

    /// The first essential task that ended early, if one did.
    pub fn fatal(&self) -> Option<Fatal> {
        self.fatal.lock().expect("fatal lock").clone()
    }
}

fn panic_message(e: tokio::task::JoinError) -> String {
    if !e.is_panic() {
        return "cancelled".into();
    }
    let payload = e.into_panic();
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn an_essential_task_that_panics_stops_plegd_and_is_named() {
        let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
        let tasks = Tasks::new(&tracker, &shutdown);
        let other = shutdown.clone();
        tasks.essential("relist", async move { other.cancelled().await });
        tasks.essential("publish", async { panic!("failed printing to stderr: Broken pipe") });
        tokio::time::timeout(Duration::from_secs(5), shutdown.cancelled()).await.expect("shutdown follows the panic");
        tracker.close();
        tracker.wait().await;
        let fatal = tasks.fatal().expect("a fatal end is kept");
        assert_eq!(
            fatal,
            Fatal::Panicked { task: "publish", message: "failed printing to stderr: Broken pipe".into() }
        );
    }

    #[tokio::test]
    async fn an_essential_task_that_returns_before_shutdown_stops_plegd() {
        let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
        let tasks = Tasks::new(&tracker, &shutdown);
        tasks.essential("event_stream", async {});
        tokio::time::timeout(Duration::from_secs(5), shutdown.cancelled()).await.expect("shutdown follows");
        assert_eq!(tasks.fatal(), Some(Fatal::Ended { task: "event_stream" }));
    }

    #[tokio::test]
    async fn tasks_that_end_at_shutdown_or_once_their_job_is_done_are_not_fatal() {
        let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
        let tasks = Tasks::new(&tracker, &shutdown);
        tasks.once("announce_runtime", async {});
        let sd = shutdown.clone();
        tasks.essential("relist", async move { sd.cancelled().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!shutdown.is_cancelled(), "a task that did its job stops nothing");
        shutdown.cancel();
        tracker.close();
        tracker.wait().await;
        assert_eq!(tasks.fatal(), None);
    }
}
