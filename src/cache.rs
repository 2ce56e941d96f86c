//! The pod-status cache: one writer ([`CacheWriter`], held by the relister), many
//! cheap readers ([`PodCache`]), and the kubelet cache's subscribable `get_newer_than`
//! on a monotonic clock.
//!
//! Where a pod's state lives: here, as the runtime last showed it, with when it was
//! read and the error of a failed read — what `GetPodStatus` and the reconcilers
//! read, and what waiters for "newer than t" wait on. The journal's view
//! (`journal`) is the other copy, on purpose: the pods as of the journal's latest
//! revision, moved only by published events, so that `ListPods` and a Watch snapshot
//! agree with the revision they carry. The two differ only while an event is between
//! the relister and the journal.
//!
//! A waiter that is not answered at once is also a *demand*: the cache tells the writer
//! (the relister, through [`CacheWriter::on_demand`]), which, while full relists are far
//! apart, reads the pod at once, so `get_newer_than` answers in one runtime round trip on a quiet node
//! in every mode. A pod the runtime no longer has is answered as absent, with the time
//! it was seen absent.
//!
//! Freshness uses [`tokio::time::Instant`], never wall time, so clock steps cannot wedge
//! waiters (kubernetes#134153). "Newer than `t`" is strict everywhere: an entry
//! modified at `t`, or a global timestamp equal to `t`, does not satisfy a waiter
//! for `t` (the kubelet's cache is strict in one place and not the other).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::SystemTime;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::model::PodStatus;

/// One pod's cache entry. Immutable once stored; replaced as a whole.
#[derive(Clone, Debug)]
pub struct CacheEntry {
    /// The pod UID.
    pub uid: Arc<str>,
    /// The last status read, if any succeeded.
    pub status: Option<Arc<PodStatus>>,
    /// The error of the latest inspection, if it failed (the status is then the last
    /// good one).
    pub error: Option<Arc<str>>,
    /// When the status was read (monotonic): the time taken before inspecting.
    pub modified: Instant,
    /// `modified` on plegd's wall clock ([`crate::clock`]), for display and the API.
    pub modified_wall: SystemTime,
}

/// The answer of [`PodCache::get_newer_than`].
#[derive(Clone, Debug)]
pub struct Fresh {
    /// The entry, or `None` when the runtime has no such pod.
    pub entry: Option<Arc<CacheEntry>>,
    /// The global timestamp at the time of the answer.
    pub global: Option<Instant>,
    /// When the runtime was read and had no such pod, if that is what released the
    /// waiter (the pod was removed, or never existed).
    pub absent_at: Option<Instant>,
}

struct Waiter {
    min: Instant,
    tx: oneshot::Sender<Fresh>,
    /// The writer took this waiter's demand ([`CacheWriter::cover`]): its next write for
    /// the pod comes from a
    /// read that started after the waiter registered, which answers it even on a clock
    /// too coarse (or paused) to tell the read's time from `min`.
    covered: bool,
}

#[derive(Default)]
struct State {
    pods: HashMap<Arc<str>, Arc<CacheEntry>>,
    global: Option<Instant>,
    global_wall: Option<SystemTime>,
    waiters: HashMap<Arc<str>, Vec<Waiter>>,
    /// Pods the writer was told of and has not covered yet: a pod is told of once
    /// however many readers wait on it.
    told: HashSet<Arc<str>>,
}

/// What the cache calls with a pod's UID when a reader starts waiting on it.
type OnDemand = Box<dyn Fn(&str) + Send + Sync>;

struct Shared {
    state: RwLock<State>,
    on_demand: OnceLock<OnDemand>,
}

/// A reader of the cache. Cheap to clone.
#[derive(Clone)]
pub struct PodCache {
    shared: Arc<Shared>,
}

/// The cache's only writer. Not `Clone`: whoever holds it is the single writer.
pub struct CacheWriter {
    shared: Arc<Shared>,
}

impl State {
    fn is_fresh(&self, uid: &str, min: Instant) -> bool {
        self.pods.get(uid).is_some_and(|e| e.modified > min) || self.global.is_some_and(|g| g > min)
    }

    /// Whether a waiter is answered by what the cache holds now.
    fn answers(&self, uid: &str, w: &Waiter) -> bool {
        self.is_fresh(uid, w.min)
            || (w.covered
                && (self.pods.get(uid).is_some_and(|e| e.modified >= w.min) || self.global.is_some_and(|g| g >= w.min)))
    }

    fn answer(&self, uid: &str) -> Fresh {
        Fresh { entry: self.pods.get(uid).cloned(), global: self.global, absent_at: None }
    }

    /// Wakes the waiters on `uid` whose condition now holds; drops abandoned ones.
    fn notify(&mut self, uid: &str) {
        let Some(list) = self.waiters.remove(uid) else { return };
        let mut keep = Vec::new();
        for w in list {
            if w.tx.is_closed() {
                continue;
            }
            if self.answers(uid, &w) {
                let _ = w.tx.send(self.answer(uid));
            } else {
                keep.push(w);
            }
        }
        if !keep.is_empty() {
            self.waiters.insert(Arc::from(uid), keep);
        }
    }
}

/// Creates an empty cache: the writer and a reader.
pub fn new() -> (CacheWriter, PodCache) {
    let shared = Arc::new(Shared { state: RwLock::new(State::default()), on_demand: OnceLock::new() });
    (CacheWriter { shared: shared.clone() }, PodCache { shared })
}

impl PodCache {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.shared.state.read().expect("cache lock")
    }

    /// The entry of `uid`, if the cache has one.
    pub fn get(&self, uid: &str) -> Option<Arc<CacheEntry>> {
        self.read().pods.get(uid).cloned()
    }

    /// Waits until the cache holds something newer than `min` for `uid`: an entry
    /// modified after `min`, or a completed relist that started after `min` (then a
    /// missing entry means the pod does not exist). Cancel-safe: drop the future to
    /// stop waiting.
    pub async fn get_newer_than(&self, uid: &str, min: Instant) -> Fresh {
        let (rx, first) = {
            let mut s = self.shared.state.write().expect("cache lock");
            if s.is_fresh(uid, min) {
                return s.answer(uid);
            }
            let (tx, rx) = oneshot::channel();
            let key: Arc<str> = Arc::from(uid);
            let list = s.waiters.entry(key.clone()).or_default();
            list.retain(|w| !w.tx.is_closed());
            list.push(Waiter { min, tx, covered: false });
            let first = s.told.insert(key);
            (rx, first)
        };
        if first && let Some(tell) = self.shared.on_demand.get() {
            tell(uid);
        }
        match rx.await {
            Ok(fresh) => fresh,
            // The writer is gone (shutdown): answer with what there is.
            Err(_) => self.read().answer(uid),
        }
    }

    /// The global timestamp: the start of the last completed full relist.
    pub fn global_timestamp(&self) -> Option<Instant> {
        self.read().global
    }

    /// The global timestamp in wall time.
    pub fn global_timestamp_wall(&self) -> Option<SystemTime> {
        self.read().global_wall
    }

    /// Every entry, sorted by UID.
    pub fn snapshot(&self) -> Vec<Arc<CacheEntry>> {
        let mut v: Vec<_> = self.read().pods.values().cloned().collect();
        v.sort_by(|a, b| a.uid.cmp(&b.uid));
        v
    }

    /// Number of pods cached.
    pub fn len(&self) -> usize {
        self.read().pods.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of callers blocked in `get_newer_than` (abandoned ones may be counted
    /// until the next write for their pod).
    pub fn waiters(&self) -> usize {
        self.read().waiters.values().map(Vec::len).sum()
    }
}

impl CacheWriter {
    /// A reader of this cache.
    pub fn reader(&self) -> PodCache {
        PodCache { shared: self.shared.clone() }
    }

    /// Stores a pod's status read at `modified` (the time taken before inspecting),
    /// with the inspection error if it failed. On error with no new status, the last
    /// good status is kept beside the error.
    pub fn set(&mut self, uid: &str, status: Option<Arc<PodStatus>>, error: Option<String>, modified: Instant) {
        let mut s = self.shared.state.write().expect("cache lock");
        let key: Arc<str> = s.pods.get_key_value(uid).map(|(k, _)| k.clone()).unwrap_or_else(|| Arc::from(uid));
        let status = status.or_else(|| s.pods.get(uid).and_then(|e| e.status.clone()));
        let wall = crate::clock::wall_of(modified);
        let entry = CacheEntry { uid: key.clone(), status, error: error.map(Arc::from), modified, modified_wall: wall };
        s.pods.insert(key.clone(), Arc::new(entry));
        s.notify(uid);
    }

    /// Records that the runtime, read at `at`, has no such pod: its entry goes, and
    /// waiters for anything older than `at` are released with an absent answer (the
    /// kubelet leaves them to the next full relist, which in evented mode may be
    /// minutes away).
    pub fn delete(&mut self, uid: &str, at: Instant) {
        let mut s = self.shared.state.write().expect("cache lock");
        s.pods.remove(uid);
        let Some(list) = s.waiters.remove(uid) else { return };
        let mut keep = Vec::new();
        for w in list {
            if w.tx.is_closed() {
                continue;
            }
            if at > w.min || (w.covered && at >= w.min) || s.global.is_some_and(|g| g > w.min) {
                let _ = w.tx.send(Fresh { entry: None, global: s.global, absent_at: Some(at) });
            } else {
                keep.push(w);
            }
        }
        if !keep.is_empty() {
            s.waiters.insert(Arc::from(uid), keep);
        }
    }

    /// Calls `tell` with the pod's UID when a reader starts waiting on a pod the cache
    /// cannot answer yet, once until the writer [covers](CacheWriter::cover) it (set
    /// once; later calls are ignored).
    pub fn on_demand(&self, tell: impl Fn(&str) + Send + Sync + 'static) {
        let _ = self.shared.on_demand.set(Box::new(tell));
    }

    /// The writer took the demand for pod `uid`: every read of it from now on started
    /// after its current waiters came. Returns whether any of them still waits.
    pub fn cover(&mut self, uid: &str) -> bool {
        let mut s = self.shared.state.write().expect("cache lock");
        s.told.remove(uid);
        let Some(list) = s.waiters.get_mut(uid) else { return false };
        list.retain(|w| !w.tx.is_closed());
        if list.is_empty() {
            s.waiters.remove(uid);
            return false;
        }
        for w in list.iter_mut() {
            w.covered = true;
        }
        true
    }

    /// Advances the global timestamp to `ts` (the start of a completed full relist)
    /// and wakes every waiter it satisfies. A timestamp older than the current one is
    /// ignored.
    pub fn update_time(&mut self, ts: Instant) {
        let mut s = self.shared.state.write().expect("cache lock");
        if s.global.is_some_and(|g| g >= ts) {
            return;
        }
        s.global = Some(ts);
        s.global_wall = Some(crate::clock::wall_of(ts));
        let uids: Vec<_> = s.waiters.keys().cloned().collect();
        for uid in uids {
            s.notify(&uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn status(uid: &str) -> Arc<PodStatus> {
        Arc::new(PodStatus::empty(uid, "ns", "p"))
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn get_newer_than_answers_at_once_when_the_entry_is_newer() {
        let (mut w, r) = new();
        let t0 = Instant::now();
        tokio::time::advance(Duration::from_millis(5)).await;
        w.set("a", Some(status("a")), None, Instant::now());
        let got = r.get_newer_than("a", t0).await;
        assert_eq!(got.entry.unwrap().status.as_ref().unwrap().uid, "a");
    }

    #[tokio::test(start_paused = true)]
    async fn get_newer_than_wakes_on_a_newer_set_but_not_an_older_one() {
        let (mut w, r) = new();
        let old = Instant::now();
        tokio::time::advance(Duration::from_millis(10)).await;
        let min = Instant::now();
        let waiter = tokio::spawn({
            let r = r.clone();
            async move { r.get_newer_than("a", min).await }
        });
        settle().await;
        w.set("a", Some(status("a")), None, old);
        settle().await;
        assert!(!waiter.is_finished(), "a status read before min must not wake the waiter");
        w.set("a", Some(status("a")), None, min);
        settle().await;
        assert!(!waiter.is_finished(), "a status read exactly at min is not newer");
        tokio::time::advance(Duration::from_millis(1)).await;
        w.set("a", Some(status("a")), None, Instant::now());
        let got = tokio::time::timeout(Duration::from_secs(1), waiter).await.unwrap().unwrap();
        assert!(got.entry.unwrap().modified > min);
    }

    #[tokio::test(start_paused = true)]
    async fn get_newer_than_wakes_on_a_global_timestamp_advance() {
        let (mut w, r) = new();
        let min = Instant::now();
        let waiter = tokio::spawn({
            let r = r.clone();
            async move { r.get_newer_than("missing", min).await }
        });
        settle().await;
        w.update_time(min);
        settle().await;
        assert!(!waiter.is_finished(), "a relist that started at min is not newer");
        tokio::time::advance(Duration::from_millis(1)).await;
        w.update_time(Instant::now());
        let got = tokio::time::timeout(Duration::from_secs(1), waiter).await.unwrap().unwrap();
        assert!(got.entry.is_none(), "an unknown pod after a newer relist does not exist");
        assert!(got.global.unwrap() > min);
    }

    #[tokio::test(start_paused = true)]
    async fn waits_forever_before_the_first_relist() {
        let (_w, r) = new();
        let res = tokio::time::timeout(Duration::from_secs(60), r.get_newer_than("a", Instant::now())).await;
        assert!(res.is_err(), "nothing is newer before the cache was ever filled");
    }

    #[tokio::test(start_paused = true)]
    async fn the_writer_is_told_of_a_pod_once_however_many_readers_wait_until_it_covers_it() {
        let (mut w, r) = new();
        let told = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let log = told.clone();
        w.on_demand(move |uid| log.lock().unwrap().push(uid.to_owned()));
        let min = Instant::now();
        let waiters: Vec<_> = (0..100)
            .map(|_| {
                let r = r.clone();
                tokio::spawn(async move { r.get_newer_than("a", min).await })
            })
            .collect();
        let other = tokio::spawn({
            let r = r.clone();
            async move { r.get_newer_than("b", min).await }
        });
        while r.waiters() < 101 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*told.lock().unwrap(), ["a", "b"], "one word per pod");
        assert!(w.cover("a"), "readers wait on it");
        let late = tokio::spawn({
            let r = r.clone();
            async move { r.get_newer_than("a", min).await }
        });
        while r.waiters() < 102 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*told.lock().unwrap(), ["a", "b", "a"], "told again once covered");
        tokio::time::advance(Duration::from_millis(1)).await;
        w.set("a", Some(status("a")), None, Instant::now());
        for h in waiters {
            assert!(h.await.unwrap().entry.is_some());
        }
        assert!(late.await.unwrap().entry.is_some());
        other.abort();
        assert!(other.await.unwrap_err().is_cancelled());
        assert!(!w.cover("b"), "nobody waits on it any more: nothing to read");
    }

    #[tokio::test(start_paused = true)]
    async fn many_waiters_on_many_pods_all_wake_once_with_their_own_pod() {
        let (mut w, r) = new();
        let min = Instant::now();
        let mut handles = Vec::new();
        for i in 0..200 {
            let r = r.clone();
            let uid = format!("pod-{}", i % 20);
            handles.push(tokio::spawn(async move { (uid.clone(), r.get_newer_than(&uid, min).await) }));
        }
        settle().await;
        assert_eq!(r.waiters(), 200);
        tokio::time::advance(Duration::from_millis(1)).await;
        for i in 0..10 {
            w.set(&format!("pod-{i}"), Some(status(&format!("pod-{i}"))), None, Instant::now());
        }
        settle().await;
        assert_eq!(r.waiters(), 100, "only waiters of the written pods wake");
        w.update_time(Instant::now());
        for h in handles {
            let (uid, fresh) = tokio::time::timeout(Duration::from_secs(1), h).await.unwrap().unwrap();
            if let Some(e) = fresh.entry {
                assert_eq!(&*e.uid, uid);
            }
        }
        assert_eq!(r.waiters(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_waiter_is_dropped_on_the_next_write() {
        let (mut w, r) = new();
        let min = Instant::now();
        let res = tokio::time::timeout(Duration::from_millis(10), r.get_newer_than("a", min)).await;
        assert!(res.is_err());
        assert_eq!(r.waiters(), 1);
        w.set("a", Some(status("a")), None, min);
        assert_eq!(r.waiters(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_keeps_the_last_good_status() {
        let (mut w, r) = new();
        w.set("a", Some(status("a")), None, Instant::now());
        w.set("a", None, Some("boom".into()), Instant::now());
        let e = r.get("a").unwrap();
        assert_eq!(e.error.as_deref(), Some("boom"));
        assert!(e.status.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn the_global_timestamp_never_goes_back() {
        let (mut w, r) = new();
        let t0 = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        w.update_time(Instant::now());
        w.update_time(t0);
        assert!(r.global_timestamp().unwrap() > t0);
    }
}
