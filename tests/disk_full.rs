//! The state dir on a real filesystem that fills up or is read-only: a tmpfs mounted
//! for the test (it needs root; the CI runs as root). plegd keeps serving events from
//! memory, says so in `/healthz` and `plegd_journal_durable`, recovers when space
//! returns, and a restart continues the journal it recovered into. A client that
//! watches throughout is checked by `watchcheck`: a reset where the epoch changes,
//! never a gap.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::proto::plegd as api;
use plegd::watchcheck::WatchChecker;
use support::{http, start_plegd, start_plegd_on};

/// A tmpfs mounted at a temporary directory, unmounted on drop.
struct Tmpfs {
    _dir: tempfile::TempDir,
    at: PathBuf,
}

impl Tmpfs {
    /// `None` (said loudly) where this process may not mount.
    fn mount(size: &str, read_only: bool) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("mnt");
        std::fs::create_dir(&at).unwrap();
        let opts = format!("size={size}{}", if read_only { ",ro" } else { "" });
        let out = Command::new("mount").args(["-t", "tmpfs", "-o", &opts, "tmpfs"]).arg(&at).output().unwrap();
        if !out.status.success() {
            let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
            // As root (CI) a failed mount is a failure; elsewhere the test cannot run.
            assert!(!root, "mount a tmpfs: {}", String::from_utf8_lossy(&out.stderr));
            eprintln!(
                "\n!!! SKIPPED: this test mounts a tmpfs and needs root (mount said: {}) !!!\n",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Self { _dir: dir, at })
    }

    fn remount(&self, opts: &str) {
        let out = Command::new("mount").args(["-o", &format!("remount,{opts}")]).arg(&self.at).output().unwrap();
        assert!(out.status.success(), "remount {opts}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

/// Fills the filesystem at `dir` with a file until it is full.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![0u8; 64 << 10];
    while f.write_all(&block).is_ok() {}
    while f.write_all(&block[..512]).is_ok() {}
    let _ = f.sync_all();
    path
}

/// What a watcher that stays connected throughout saw.
#[derive(Default)]
struct Seen {
    violations: Vec<String>,
    epochs: Vec<u64>,
    resets: u64,
    last: Option<(u64, u64)>,
}

fn watch(p: &support::Plegd) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut client = p.client();
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let mut checker = WatchChecker::new(false);
        let mut s = client.watch(api::WatchRequest::default()).await.expect("watch").into_inner();
        while let Ok(Some(m)) = s.message().await {
            let mut g = out.lock().unwrap();
            if let Err(v) = checker.observe(&m) {
                g.violations.push(v.to_string());
            }
            if checker.epoch().is_some_and(|e| g.epochs.last() != Some(&e)) {
                g.epochs.push(checker.epoch().unwrap());
            }
            if matches!(m.kind, Some(api::watch_event::Kind::Reset(_))) {
                g.resets += 1;
            }
            g.last = checker.resume_point();
        }
    });
    (seen, task)
}

/// Starts and ends pods until `done` holds (checked between pods), for at most `within`.
async fn churn_until(p: &support::Plegd, n: &mut u32, within: Duration, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !done().await {
        if tokio::time::Instant::now() >= deadline {
            let m = http(p.app.admin_addr(), "GET", "/metrics").await.1;
            let m: Vec<_> = m.lines().filter(|l| l.starts_with("plegd_journal")).collect();
            let h = http(p.app.admin_addr(), "GET", "/healthz").await.1;
            panic!("not within {within:?}: revision {}, {m:?}, {h}", p.app.journal().revision());
        }
        *n += 1;
        let pod = PodSpec::new("disk", &format!("pod-{n}")).label("app", "web");
        let (sid, ids) = p.h.run_pod(&pod, &[ContainerSpec::new("main"), ContainerSpec::new("side")]).await;
        for id in &ids {
            p.h.stop_container(id).await;
            p.h.remove_container(id).await;
        }
        p.h.stop_pod(&sid).await;
        p.h.remove_pod(&sid).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn durable(p: &support::Plegd) -> (bool, String) {
    let metrics = http(p.app.admin_addr(), "GET", "/metrics").await.1;
    let health = http(p.app.admin_addr(), "GET", "/healthz").await.1;
    (metrics.lines().any(|l| l == "plegd_journal_durable 1"), health)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_full_disk_keeps_events_flowing_from_memory_and_the_journal_recovers_when_space_returns() {
    let Some(fs) = Tmpfs::mount("16m", false) else { return };
    let state = fs.at.join("state");
    let tune = {
        let state = state.clone();
        move |c: &mut plegd::config::RunConfig| c.state_dir = Some(state.clone())
    };
    let p = start_plegd(tune.clone()).await;
    let (seen, watcher) = watch(&p);
    let mut n = 0;
    churn_until(&p, &mut n, Duration::from_secs(20), async || p.app.journal().revision() >= 40).await;
    assert!(durable(&p).await.0, "durable on an empty tmpfs");
    let durable_epoch = p.app.journal().epoch();

    // The disk fills (another writer on the same filesystem).
    let filler = fill(&fs.at);
    churn_until(&p, &mut n, Duration::from_secs(30), async || !durable(&p).await.0).await;
    let (_, health) = durable(&p).await;
    assert!(health.starts_with("ok\n") && health.contains("journal not durable"), "said in /healthz: {health}");
    assert!(health.contains("full"), "and why: {health}");
    // Events still flow, under a new epoch (what the disk lacks is never delivered
    // under the durable one).
    let at_full = p.app.journal().revision();
    churn_until(&p, &mut n, Duration::from_secs(20), async || p.app.journal().revision() >= at_full + 30).await;
    assert_ne!(p.app.journal().epoch(), durable_epoch);

    // Space returns: the journal takes the disk again, in the epoch it served from memory.
    std::fs::remove_file(&filler).unwrap();
    let memory_epoch = p.app.journal().epoch();
    churn_until(&p, &mut n, Duration::from_secs(30), async || durable(&p).await.0).await;
    let (_, health) = durable(&p).await;
    assert!(!health.contains("journal not durable"), "{health}");
    churn_until(&p, &mut n, Duration::from_secs(20), async || p.app.journal().revision() >= at_full + 50).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let last = seen.lock().unwrap().last.expect("the watcher has a resume point");

    // A restart continues that journal: the watcher's resume point is still good.
    let h = p.stop_plegd().await;
    let _ = watcher.await;
    let p = start_plegd_on(h, tune).await;
    assert_eq!(p.app.journal().epoch(), memory_epoch);
    assert!(p.app.journal().revision() >= last.0);
    let req = api::WatchRequest { since_revision: last.0, epoch: last.1, ..Default::default() };
    let mut s = p.client().watch(req).await.expect("watch").into_inner();
    let start = s.message().await.unwrap().unwrap();
    assert!(
        matches!(start.kind, Some(api::watch_event::Kind::Start(api::StreamStart { resumed: true, .. }))),
        "resumed without a reset: {start:?}"
    );
    // Every revision after the resume point arrives, in order, none twice, none missing
    // — what plegd had before the restart and what it makes after.
    let mut checker = WatchChecker::new(false).resuming_from(last.0, last.1);
    checker.observe(&start).unwrap();
    let before = p.app.journal().revision();
    churn_until(&p, &mut n, Duration::from_secs(20), async || p.app.journal().revision() >= before + 20).await;
    let target = p.app.journal().revision();
    let mut events = 0;
    while checker.resume_point().is_none_or(|(r, _)| r < target) {
        let m = tokio::time::timeout(Duration::from_secs(10), s.message()).await.expect("in time").unwrap().unwrap();
        checker.observe(&m).expect("the resumed stream keeps every invariant");
        events += matches!(m.kind, Some(api::watch_event::Kind::Event(_))) as u64;
    }
    assert!(events >= target - last.0 - 1, "{events} events for revisions {}..={target}", last.0 + 1);
    assert_eq!(checker.resets, 0);
    {
        let g = seen.lock().unwrap();
        assert!(g.violations.is_empty(), "{:?}", g.violations);
        assert_eq!(g.epochs, vec![durable_epoch, memory_epoch], "one change of journal, told by a reset");
        assert_eq!(g.resets, 1);
    }
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_state_dir_serves_from_memory_and_is_taken_once_writable() {
    // The hostPath mounted read-only by mistake, fixed while plegd runs.
    let Some(fs) = Tmpfs::mount("4m", true) else { return };
    let state = fs.at.clone();
    let p = start_plegd(move |c| c.state_dir = Some(state.clone())).await;
    let epoch = p.app.journal().epoch();
    let (seen, watcher) = watch(&p);
    let mut n = 0;
    churn_until(&p, &mut n, Duration::from_secs(20), async || p.app.journal().revision() >= 20).await;
    let (is_durable, health) = durable(&p).await;
    assert!(
        !is_durable,
        "a read-only dir holds no journal: {health} {:?}",
        std::fs::read_dir(&fs.at).unwrap().collect::<Vec<_>>()
    );
    assert!(
        health.contains("journal not durable") && health.to_lowercase().contains("read-only"),
        "and says why: {health}"
    );
    fs.remount("rw");
    churn_until(&p, &mut n, Duration::from_secs(30), async || durable(&p).await.0).await;
    let at = p.app.journal().revision();
    churn_until(&p, &mut n, Duration::from_secs(20), async || p.app.journal().revision() >= at + 20).await;
    assert!(fs.at.join("journal.db").exists(), "the journal is on the disk now");
    {
        let g = seen.lock().unwrap();
        assert!(g.violations.is_empty(), "{:?}", g.violations);
        assert!(g.last.is_some_and(|(r, _)| r >= at), "the watcher kept up: {:?}", g.last);
        // Taking the disk keeps the epoch the watcher was given: nobody is reset.
        assert_eq!((g.resets, g.epochs.clone()), (0, vec![epoch]));
    }
    assert_eq!(p.app.journal().epoch(), epoch);
    watcher.abort();
    p.stop().await;
}
