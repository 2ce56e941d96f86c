//! Logging setup: text or JSON lines on stderr, filtered by `--log-level` or `RUST_LOG`.
//!
//! Logging never stops or slows a loop. A log line is handed to a thread of its own
//! ([`LogSink`]) through a bounded queue; that thread alone writes stderr. A line that
//! finds the queue full (stderr read too slowly, or not at all) is dropped, and so is a
//! line whose write fails (nothing reads the pipe any more: `EPIPE`); both are counted
//! in [`dropped_lines`]. Without this, the formatter's own report of a failed write
//! (`eprintln!`) panicked inside whichever task logged, and a full pipe blocked it.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogArgs, LogFormat};

/// Lines the queue to the writer thread holds.
const QUEUED_LINES: usize = 4096;

/// Log lines dropped since the start: the queue was full or the write failed.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Log lines dropped since the process started (`plegd_log_lines_dropped_total`).
pub fn dropped_lines() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Installs the global subscriber. Errors name the bad filter. The returned sink is
/// flushed by `main` before the process exits.
///
/// Filters are `RUST_LOG`-style directives (`warn`, `info,plegd::pleg=debug`); span-field
/// filters are not supported, which keeps a regex engine out of the binary.
pub fn init(args: &LogArgs, default_level: &str) -> Result<LogSink, TelemetryError> {
    let bad = |from| move |source| TelemetryError::Filter { from, source };
    let filter: Targets = match &args.log_level {
        Some(level) => level.parse().map_err(bad("value for --log-level"))?,
        None => match std::env::var("RUST_LOG") {
            Ok(v) if !v.is_empty() => v.parse().map_err(bad("RUST_LOG"))?,
            _ => default_level.parse().map_err(bad("default log level"))?,
        },
    };
    use std::io::IsTerminal;
    let sink = LogSink::to(std::io::stderr());
    // The builder's own level (INFO unless told) would cap the filter below it: found when
    // `plegd=debug` printed no debug line. The filter alone decides.
    let builder = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(sink.clone())
        .log_internal_errors(false)
        .with_ansi(std::io::stderr().is_terminal());
    let res = match args.log_format {
        LogFormat::Text => builder.finish().with(filter).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).finish().with(filter).try_init(),
    };
    res.map_err(TelemetryError::Install)?;
    Ok(sink)
}

/// What the writer thread is handed.
enum Message {
    /// One formatted event.
    Line(Vec<u8>),
    /// Say when every line queued before this one was written.
    Flush(std::sync::mpsc::Sender<()>),
}

/// The queue to the thread that writes log lines; cheap to clone.
#[derive(Clone)]
pub struct LogSink {
    tx: SyncSender<Message>,
}

impl LogSink {
    /// Starts the writer thread on `out`.
    pub fn to(out: impl Write + Send + 'static) -> Self {
        Self::with_capacity(out, QUEUED_LINES)
    }

    /// [`LogSink::to`] with a queue of `lines`.
    pub fn with_capacity(out: impl Write + Send + 'static, lines: usize) -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel(lines.max(1));
        let spawned = std::thread::Builder::new().name("plegd-log".into()).spawn(move || write_lines(out, rx));
        if spawned.is_err() {
            // No thread: every line is dropped (and counted) rather than written inline.
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
        Self { tx }
    }

    fn send(&self, line: Vec<u8>) {
        match self.tx.try_send(Message::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Waits up to `within` for the lines queued so far to be written (or dropped).
    pub fn flush(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let mut msg = Message::Flush(done_tx);
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(m)) => {
                    if Instant::now() >= deadline {
                        return false;
                    }
                    msg = m;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        done_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_ok()
    }
}

/// The writer thread: one `write_all` per line; a failed write drops the line.
fn write_lines(mut out: impl Write, rx: Receiver<Message>) {
    for msg in rx {
        match msg {
            Message::Line(line) => {
                if out.write_all(&line).is_err() {
                    DROPPED.fetch_add(1, Ordering::Relaxed);
                }
            }
            Message::Flush(done) => {
                let _ = out.flush();
                let _ = done.send(());
            }
        }
    }
}

/// One event's bytes, queued whole when the formatter is done with it.
pub struct LineWriter<'a> {
    sink: &'a LogSink,
    buf: Vec<u8>,
}

impl Write for LineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter<'_> {
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            self.sink.send(std::mem::take(&mut self.buf));
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogSink {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter { sink: self, buf: Vec::with_capacity(256) }
    }
}

/// `plegd_log_lines_dropped_total`, read at each scrape.
#[derive(Debug, Default)]
pub struct LogCollector;

impl LogCollector {
    /// Registers the family in `registry` (the caller gives it plegd's prefix).
    pub fn register(registry: &mut crate::metrics::Registry) {
        registry.register_collector(Box::new(Self));
    }
}

impl prometheus_client::collector::Collector for LogCollector {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        let c = prometheus_client::metrics::counter::ConstCounter::new(dropped_lines());
        c.encode(encoder.encode_descriptor(
            "log_lines_dropped",
            "Log lines not written: stderr was read too slowly or not at all.",
            None,
            c.metric_type(),
        )?)
    }
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A filter that does not parse.
    #[error("invalid {from}: {source}")]
    Filter {
        /// Where it came from.
        from: &'static str,
        /// Why.
        source: tracing_subscriber::filter::ParseError,
    },
    /// A logger was installed already.
    #[error("cannot install the logger: {0}")]
    Install(#[source] tracing_subscriber::util::TryInitError),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stderr whose reader is gone: every write fails.
    struct BrokenPipe;
    impl Write for BrokenPipe {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
    }

    /// A stderr nobody reads: every write blocks until the test ends.
    struct Stuck(std::sync::mpsc::Receiver<()>);
    impl Write for Stuck {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let _ = self.0.recv();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn log_through(sink: &LogSink, lines: usize) {
        let subscriber = tracing_subscriber::fmt().with_writer(sink.clone()).log_internal_errors(false).finish();
        tracing::subscriber::with_default(subscriber, || {
            for i in 0..lines {
                tracing::warn!(i, "a line nobody will read");
            }
        });
    }

    #[test]
    fn a_broken_stderr_drops_lines_and_the_logging_thread_never_panics() {
        let before = dropped_lines();
        let sink = LogSink::to(BrokenPipe);
        log_through(&sink, 100);
        assert!(sink.flush(Duration::from_secs(5)), "the writer thread is alive and answers");
        assert!(dropped_lines() >= before + 100, "every failed line is counted");
    }

    #[test]
    fn a_stderr_that_never_drains_never_blocks_the_task_that_logs() {
        let (release, stuck) = std::sync::mpsc::channel();
        let sink = LogSink::with_capacity(Stuck(stuck), 8);
        let before = dropped_lines();
        log_through(&sink, 1000);
        // 1,000 lines into a queue of 8 whose writer is stuck: the caller went on.
        assert!(dropped_lines() >= before + 900, "lines past the queue are dropped and counted");
        assert!(!sink.flush(Duration::from_millis(50)), "a flush waits at most its bound");
        drop(release);
    }
}
