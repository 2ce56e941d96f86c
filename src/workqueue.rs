//! A work queue with client-go's guarantees: fair (FIFO by first add), stingy (a key
//! is never held by two workers; a key added while in flight runs once more after
//! `done`), delayed adds (earliest deadline wins), rate-limited retries (per-key
//! exponential backoff combined with a global token bucket), `forget`, shutdown with
//! drain, and client-go's `workqueue_*` metrics.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Rate-limiter settings (client-go's `DefaultControllerRateLimiter` by default).
#[derive(Clone, Debug)]
pub struct RateLimit {
    /// First per-key retry delay.
    pub base: Duration,
    /// Longest per-key retry delay.
    pub max: Duration,
    /// Global retries per second.
    pub qps: f64,
    /// Global burst.
    pub burst: u32,
}

impl Default for RateLimit {
    fn default() -> Self {
        Self { base: Duration::from_millis(5), max: Duration::from_secs(1000), qps: 10.0, burst: 100 }
    }
}

/// Label set `{name}` of the workqueue metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabel {
    /// The queue's name.
    pub name: String,
}

type Hist = Family<NameLabel, Histogram, fn() -> Histogram>;

/// client-go's seven workqueue metric families, shared by all queues (label `name`).
#[derive(Clone)]
pub struct QueueMetrics {
    /// `workqueue_depth`: keys waiting to be processed (client-go counts dirty keys).
    pub depth: Family<NameLabel, Gauge>,
    /// `workqueue_adds_total`: adds that were not coalesced.
    pub adds: Family<NameLabel, Counter>,
    /// `workqueue_queue_duration_seconds`: first add → get.
    pub queue_duration: Hist,
    /// `workqueue_work_duration_seconds`: get → done.
    pub work_duration: Hist,
    /// `workqueue_unfinished_work_seconds`: total age of in-flight keys.
    pub unfinished: Family<NameLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// `workqueue_longest_running_processor_seconds`: age of the oldest in-flight key.
    pub longest: Family<NameLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// `workqueue_retries_total`: delayed adds.
    pub retries: Family<NameLabel, Counter>,
}

fn buckets() -> Histogram {
    // component-base's buckets: 1 µs … 1000 s.
    Histogram::new(exponential_buckets(1e-6, 10.0, 10))
}

impl QueueMetrics {
    /// Creates the families and registers them in `r` (the caller gives it client-go's
    /// `workqueue` prefix).
    pub fn register(r: &mut prometheus_client::registry::Registry) -> Self {
        let m = Self {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(buckets as fn() -> Histogram),
            work_duration: Family::new_with_constructor(buckets as fn() -> Histogram),
            unfinished: Family::default(),
            longest: Family::default(),
            retries: Family::default(),
        };
        r.register("depth", "Current depth of workqueue", m.depth.clone());
        r.register("adds", "Total number of adds handled by workqueue", m.adds.clone());
        r.register(
            "queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            m.queue_duration.clone(),
        );
        r.register(
            "work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            m.work_duration.clone(),
        );
        r.register(
            "unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
            m.unfinished.clone(),
        );
        r.register(
            "longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            m.longest.clone(),
        );
        r.register("retries", "Total number of retries handled by workqueue", m.retries.clone());
        m
    }
}

struct State<K> {
    queue: VecDeque<K>,
    dirty: HashSet<K>,
    processing: HashMap<K, Instant>,
    added_at: HashMap<K, Instant>,
    waiting: BinaryHeap<Reverse<(Instant, u64, K)>>,
    waiting_at: HashMap<K, Instant>,
    waiting_seq: u64,
    failures: HashMap<K, u32>,
    tokens: f64,
    refilled: Instant,
    shutting_down: bool,
    draining: bool,
}

struct Inner<K> {
    name: String,
    state: Mutex<State<K>>,
    notify: Notify,
    drained: Notify,
    /// Woken when a delayed key is scheduled, for [`WorkQueue::move_due_keys`].
    delays: Notify,
    limit: RateLimit,
    metrics: QueueMetrics,
}

/// The queue. Cheap to clone.
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone() }
    }
}

/// A point-in-time view for `/debug/queue`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct QueueView {
    /// Queue name.
    pub name: String,
    /// Keys waiting to be processed (client-go's depth).
    pub depth: usize,
    /// Keys ready, in order.
    pub queued: Vec<String>,
    /// Keys being processed, with seconds in flight.
    pub in_flight: Vec<(String, f64)>,
    /// Keys waiting for a delayed add, with seconds until ready and failures so far.
    pub waiting: Vec<WaitingKey>,
    /// Whether the queue is shutting down.
    pub shutting_down: bool,
}

/// A key waiting for its delay.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WaitingKey {
    /// The key.
    pub key: String,
    /// Seconds until it is added.
    pub ready_in: f64,
    /// Failures recorded by the rate limiter.
    pub retries: u32,
}

impl<K: Clone + Eq + Hash + Ord + std::fmt::Display + Send + 'static> WorkQueue<K> {
    /// A queue named `name` (the metrics' `name` label).
    pub fn new(name: &str, limit: RateLimit, metrics: QueueMetrics) -> Self {
        let tokens = f64::from(limit.burst);
        Self {
            inner: Arc::new(Inner {
                name: name.to_owned(),
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    dirty: HashSet::new(),
                    processing: HashMap::new(),
                    added_at: HashMap::new(),
                    waiting: BinaryHeap::new(),
                    waiting_at: HashMap::new(),
                    waiting_seq: 0,
                    failures: HashMap::new(),
                    tokens,
                    refilled: Instant::now(),
                    shutting_down: false,
                    draining: false,
                }),
                notify: Notify::new(),
                drained: Notify::new(),
                delays: Notify::new(),
                limit,
                metrics,
            }),
        }
    }

    fn label(&self) -> NameLabel {
        NameLabel { name: self.inner.name.clone() }
    }

    /// Adds `key`. Coalesces with a pending add; a key in flight is re-queued when it
    /// is done. Ignored after shutdown.
    pub fn add(&self, key: K) {
        let mut s = self.inner.state.lock().expect("queue lock");
        self.promote_due(&mut s);
        self.add_locked(&mut s, key, Instant::now());
    }

    /// Adds `key`, queued since `since` (now, or a delayed key's deadline).
    fn add_locked(&self, s: &mut State<K>, key: K, since: Instant) {
        if s.shutting_down || s.dirty.contains(&key) {
            return;
        }
        let m = &self.inner.metrics;
        m.adds.get_or_create(&self.label()).inc();
        m.depth.get_or_create(&self.label()).inc();
        s.dirty.insert(key.clone());
        s.added_at.entry(key.clone()).or_insert(since);
        if s.processing.contains_key(&key) {
            return;
        }
        s.queue.push_back(key);
        self.inner.notify.notify_one();
    }

    /// Moves delayed keys whose time has come into the queue, earliest first.
    fn promote_due(&self, s: &mut State<K>) {
        let now = Instant::now();
        while let Some(Reverse((at, _, _))) = s.waiting.peek() {
            if *at > now {
                break;
            }
            let Reverse((at, _, key)) = s.waiting.pop().expect("peeked");
            // A stale heap entry: the key was re-scheduled earlier (and already added).
            if s.waiting_at.get(&key) != Some(&at) {
                continue;
            }
            s.waiting_at.remove(&key);
            // Queued since its deadline, as client-go's delaying queue moves it then.
            self.add_locked(s, key, at);
        }
    }

    /// Adds `key` after `delay`; if it is already waiting, the earlier time wins.
    pub fn add_after(&self, key: K, delay: Duration) {
        let mut s = self.inner.state.lock().expect("queue lock");
        if s.shutting_down {
            return;
        }
        self.inner.metrics.retries.get_or_create(&self.label()).inc();
        if delay.is_zero() {
            self.promote_due(&mut s);
            self.add_locked(&mut s, key, Instant::now());
            return;
        }
        let at = Instant::now() + delay;
        if s.waiting_at.get(&key).is_some_and(|t| *t <= at) {
            return;
        }
        s.waiting_at.insert(key.clone(), at);
        s.waiting_seq += 1;
        let seq = s.waiting_seq;
        s.waiting.push(Reverse((at, seq, key)));
        // Waiting getters must wake for the new, possibly earlier, deadline.
        self.inner.notify.notify_waiters();
        self.inner.delays.notify_one();
    }

    /// The rate limiter's delay for `key`: the larger of its exponential backoff and
    /// the global token bucket's (both advance, as client-go's `MaxOf` does).
    pub fn when(&self, key: &K) -> Duration {
        let mut s = self.inner.state.lock().expect("queue lock");
        let n = s.failures.entry(key.clone()).or_insert(0);
        let exp = self.inner.limit.base.as_secs_f64() * 2f64.powi((*n).min(62) as i32);
        let exp = Duration::from_secs_f64(exp.min(self.inner.limit.max.as_secs_f64()));
        *n += 1;
        let now = Instant::now();
        let burst = f64::from(self.inner.limit.burst);
        let elapsed = now.saturating_duration_since(s.refilled).as_secs_f64();
        s.tokens = (s.tokens + elapsed * self.inner.limit.qps).min(burst);
        s.refilled = now;
        s.tokens -= 1.0;
        let bucket = if s.tokens >= 0.0 || self.inner.limit.qps <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-s.tokens / self.inner.limit.qps)
        };
        exp.max(bucket)
    }

    /// Adds `key` after its rate-limited delay (a failed attempt).
    pub fn add_rate_limited(&self, key: K) {
        let d = self.when(&key);
        self.add_after(key, d);
    }

    /// Forgets `key`'s failures (after a success).
    pub fn forget(&self, key: &K) {
        self.inner.state.lock().expect("queue lock").failures.remove(key);
    }

    /// Failures recorded for `key`.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.inner.state.lock().expect("queue lock").failures.get(key).copied().unwrap_or(0)
    }

    /// Takes the next key if one is ready now.
    pub fn try_get(&self) -> Option<K> {
        let mut s = self.inner.state.lock().expect("queue lock");
        self.promote_due(&mut s);
        self.pop_locked(&mut s)
    }

    fn pop_locked(&self, s: &mut State<K>) -> Option<K> {
        let key = s.queue.pop_front()?;
        s.dirty.remove(&key);
        let now = Instant::now();
        s.processing.insert(key.clone(), now);
        let m = &self.inner.metrics;
        m.depth.get_or_create(&self.label()).dec();
        if let Some(at) = s.added_at.remove(&key) {
            m.queue_duration.get_or_create(&self.label()).observe((now - at).as_secs_f64());
        }
        Some(key)
    }

    /// Waits for the next key. `None` once the queue is shut down and empty (keys
    /// queued before shutdown are still handed out).
    pub async fn get(&self) -> Option<K> {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next_due = {
                let mut s = self.inner.state.lock().expect("queue lock");
                self.promote_due(&mut s);
                if let Some(k) = self.pop_locked(&mut s) {
                    return Some(k);
                }
                if s.shutting_down {
                    return None;
                }
                s.waiting.peek().map(|Reverse((at, _, _))| *at)
            };
            match next_due {
                Some(at) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `key` processed; if it was added meanwhile it goes to the back of the
    /// queue.
    pub fn done(&self, key: &K) {
        let mut s = self.inner.state.lock().expect("queue lock");
        if let Some(started) = s.processing.remove(key) {
            self.inner.metrics.work_duration.get_or_create(&self.label()).observe(started.elapsed().as_secs_f64());
        }
        // Delayed keys that came due were ready before this one was re-added: they go
        // first, as in client-go, where they are moved at their deadline.
        self.promote_due(&mut s);
        if s.dirty.contains(key) {
            s.queue.push_back(key.clone());
            self.inner.notify.notify_one();
        } else if s.processing.is_empty() {
            self.inner.drained.notify_waiters();
        }
        self.promote_due(&mut s);
    }

    /// Moves each delayed key into the queue at its deadline, as client-go's delaying
    /// queue does, so `workqueue_depth` and `workqueue_queue_duration_seconds` count it
    /// from then even while every worker is busy. Runs until `shutdown`.
    pub async fn move_due_keys(&self, shutdown: &tokio_util::sync::CancellationToken) {
        loop {
            let next = {
                let mut s = self.inner.state.lock().expect("queue lock");
                self.promote_due(&mut s);
                s.waiting.peek().map(|Reverse((at, _, _))| *at)
            };
            let sleep = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.inner.delays.notified() => {}
                _ = sleep => {}
            }
        }
    }

    /// Keys ready to be handed out.
    pub fn len(&self) -> usize {
        let mut s = self.inner.state.lock().expect("queue lock");
        self.promote_due(&mut s);
        s.queue.len()
    }

    /// Whether no key is ready.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops accepting keys; getters drain what is queued, then get `None`. Delayed
    /// keys are discarded. A pending `shutdown_with_drain` stops waiting.
    pub fn shutdown(&self) {
        let mut s = self.inner.state.lock().expect("queue lock");
        s.shutting_down = true;
        s.draining = false;
        s.waiting.clear();
        s.waiting_at.clear();
        drop(s);
        self.inner.notify.notify_waiters();
        self.inner.drained.notify_waiters();
    }

    /// Like `shutdown`, then waits until every key in flight is done (or a later
    /// `shutdown` cuts the wait short).
    pub async fn shutdown_with_drain(&self) {
        {
            let mut s = self.inner.state.lock().expect("queue lock");
            s.shutting_down = true;
            s.draining = true;
            s.waiting.clear();
            s.waiting_at.clear();
        }
        self.inner.notify.notify_waiters();
        loop {
            let drained = self.inner.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            {
                let s = self.inner.state.lock().expect("queue lock");
                if s.processing.is_empty() || !s.draining {
                    return;
                }
            }
            drained.await;
        }
    }

    /// Whether shutdown began.
    pub fn shutting_down(&self) -> bool {
        self.inner.state.lock().expect("queue lock").shutting_down
    }

    /// How long the oldest key in flight has been processed (zero when none is).
    pub fn longest_in_flight(&self) -> Duration {
        let s = self.inner.state.lock().expect("queue lock");
        s.processing.values().map(|t| t.elapsed()).max().unwrap_or_default()
    }

    /// Updates the two in-flight gauges (client-go does this every 500 ms).
    pub fn update_in_flight_metrics(&self) {
        let m = &self.inner.metrics;
        let s = self.inner.state.lock().expect("queue lock");
        let ages: Vec<f64> = s.processing.values().map(|t| t.elapsed().as_secs_f64()).collect();
        m.unfinished.get_or_create(&self.label()).set(ages.iter().sum());
        m.longest.get_or_create(&self.label()).set(ages.iter().copied().fold(0.0, f64::max));
    }

    /// A view for the debug API.
    pub fn view(&self) -> QueueView {
        let mut s = self.inner.state.lock().expect("queue lock");
        self.promote_due(&mut s);
        let now = Instant::now();
        let mut in_flight: Vec<_> =
            s.processing.iter().map(|(k, t)| (k.to_string(), (now - *t).as_secs_f64())).collect();
        in_flight.sort_by(|a, b| a.0.cmp(&b.0));
        let mut waiting: Vec<_> = s
            .waiting_at
            .iter()
            .map(|(k, at)| WaitingKey {
                key: k.to_string(),
                ready_in: at.saturating_duration_since(now).as_secs_f64(),
                retries: s.failures.get(k).copied().unwrap_or(0),
            })
            .collect();
        waiting.sort_by(|a, b| a.ready_in.total_cmp(&b.ready_in));
        QueueView {
            name: self.inner.name.clone(),
            depth: s.dirty.len(),
            queued: s.queue.iter().map(ToString::to_string).collect(),
            in_flight,
            waiting,
            shutting_down: s.shutting_down,
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q() -> WorkQueue<u32> {
        WorkQueue::new("t", RateLimit::default(), crate::workqueue::QueueMetrics::register(&mut Default::default()))
    }

    #[tokio::test(start_paused = true)]
    async fn keys_come_out_in_the_order_they_were_first_added() {
        let q = q();
        for k in [3, 1, 2, 1, 3] {
            q.add(k);
        }
        assert_eq!([q.try_get(), q.try_get(), q.try_get(), q.try_get()], [Some(3), Some(1), Some(2), None]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_while_in_flight_runs_once_more_after_done_at_the_back() {
        let q = q();
        q.add(1);
        q.add(2);
        assert_eq!(q.try_get(), Some(1));
        q.add(1);
        q.add(1);
        assert_eq!(q.try_get(), Some(2), "1 is in flight: not handed out twice");
        assert_eq!(q.try_get(), None);
        q.add(3);
        q.done(&1);
        assert_eq!(q.try_get(), Some(3), "the re-run goes to the back");
        assert_eq!(q.try_get(), Some(1));
        q.done(&1);
        assert_eq!(q.try_get(), None, "exactly one more run");
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_adds_keep_the_earliest_deadline() {
        let q = q();
        q.add_after(1, Duration::from_secs(10));
        q.add_after(1, Duration::from_secs(30));
        q.add_after(2, Duration::from_secs(5));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(q.try_get(), Some(2));
        assert_eq!(q.try_get(), None);
        q.add_after(1, Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(q.try_get(), Some(1), "an earlier time replaces a later one");
        q.done(&1);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(q.try_get(), None, "the later deadline was dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_getter_wakes_at_the_deadline() {
        let q = q();
        let g = tokio::spawn({
            let q = q.clone();
            async move { (q.get().await, Instant::now()) }
        });
        tokio::task::yield_now().await;
        let t0 = Instant::now();
        q.add_after(7, Duration::from_millis(250));
        let (k, at) = g.await.unwrap();
        assert_eq!(k, Some(7));
        assert_eq!(at - t0, Duration::from_millis(250));
    }

    #[tokio::test(start_paused = true)]
    async fn per_key_backoff_doubles_from_5ms_and_forget_resets_it() {
        let q = WorkQueue::new(
            "t",
            RateLimit { qps: 1e9, ..Default::default() },
            crate::workqueue::QueueMetrics::register(&mut Default::default()),
        );
        let d: Vec<_> = (0..5).map(|_| q.when(&1).as_millis()).collect();
        assert_eq!(d, [5, 10, 20, 40, 80]);
        assert_eq!(q.num_requeues(&1), 5);
        q.forget(&1);
        assert_eq!(q.when(&1), Duration::from_millis(5));
        let capped = WorkQueue::new(
            "t",
            RateLimit { qps: 1e9, ..Default::default() },
            crate::workqueue::QueueMetrics::register(&mut Default::default()),
        );
        for _ in 0..30 {
            capped.when(&2);
        }
        assert_eq!(capped.when(&2), Duration::from_secs(1000));
    }

    #[tokio::test(start_paused = true)]
    async fn the_token_bucket_spaces_retries_after_the_burst() {
        let q = WorkQueue::new(
            "t",
            RateLimit { base: Duration::ZERO, ..Default::default() },
            crate::workqueue::QueueMetrics::register(&mut Default::default()),
        );
        for k in 0..100u32 {
            assert_eq!(q.when(&k), Duration::ZERO, "the burst of 100 passes at once");
        }
        assert_eq!(q.when(&100), Duration::from_millis(100));
        assert_eq!(q.when(&101), Duration::from_millis(200));
        tokio::time::advance(Duration::from_secs(1)).await;
        // Ten tokens came back; two were owed by the reservations above.
        for k in 102..110u32 {
            assert_eq!(q.when(&k), Duration::ZERO);
        }
        assert_eq!(q.when(&110), Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_key_that_came_due_is_served_before_a_dirty_key_that_done_re_adds() {
        let q = q();
        q.add(1);
        let k = q.get().await.unwrap();
        q.add(1); // dirty while in flight
        q.add_after(2, Duration::from_millis(10));
        tokio::time::advance(Duration::from_millis(20)).await;
        q.done(&k);
        assert_eq!(q.try_get(), Some(2), "ready at its deadline, before 1 was re-added");
        assert_eq!(q.try_get(), Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_key_counts_in_depth_and_queue_duration_from_its_deadline() {
        let mut r = prometheus_client::registry::Registry::default();
        let m = QueueMetrics::register(r.sub_registry_with_prefix("workqueue"));
        let q: WorkQueue<u32> = WorkQueue::new("delays", RateLimit::default(), m.clone());
        let shutdown = tokio_util::sync::CancellationToken::new();
        let mover = tokio::spawn({
            let (q, shutdown) = (q.clone(), shutdown.clone());
            async move { q.move_due_keys(&shutdown).await }
        });
        q.add_after(7, Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(1001)).await;
        let l = NameLabel { name: "delays".into() };
        assert_eq!(m.depth.get_or_create(&l).get(), 1, "in the queue's depth from its deadline, nobody asking");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(q.try_get(), Some(7));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        let sum: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("workqueue_queue_duration_seconds_sum{name=\"delays\"} "))
            .unwrap()
            .parse()
            .unwrap();
        assert!((1.9..2.1).contains(&sum), "queued for 2 s after its deadline, not from the late move: {sum}");
        shutdown.cancel();
        mover.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_drains_queued_keys_then_returns_none_and_drops_new_adds() {
        let q = q();
        q.add(1);
        q.add(2);
        q.add_after(3, Duration::from_secs(1));
        q.shutdown();
        q.add(4);
        assert_eq!(q.get().await, Some(1));
        assert_eq!(q.get().await, Some(2));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(q.get().await, None, "delayed keys are discarded, new adds ignored");
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_with_drain_waits_for_keys_in_flight() {
        let q = q();
        q.add(1);
        let k = q.get().await.unwrap();
        let drain = tokio::spawn({
            let q = q.clone();
            async move { q.shutdown_with_drain().await }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!drain.is_finished(), "1 is still in flight");
        q.done(&k);
        tokio::time::timeout(Duration::from_secs(1), drain).await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_shutdown_cuts_a_drain_short() {
        let q = q();
        q.add(1);
        let _k = q.get().await.unwrap();
        let drain = tokio::spawn({
            let q = q.clone();
            async move { q.shutdown_with_drain().await }
        });
        tokio::task::yield_now().await;
        q.shutdown();
        tokio::time::timeout(Duration::from_secs(1), drain).await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn metrics_follow_client_go() {
        let mut r = prometheus_client::registry::Registry::default();
        let m = QueueMetrics::register(r.sub_registry_with_prefix("workqueue"));
        let q = WorkQueue::new("pods", RateLimit::default(), m.clone());
        let l = NameLabel { name: "pods".into() };
        q.add(1);
        let k = q.get().await.unwrap();
        for _ in 0..5 {
            q.add(1);
        }
        assert_eq!(m.adds.get_or_create(&l).get(), 2, "five re-adds while processing count once");
        assert_eq!(m.depth.get_or_create(&l).get(), 1, "depth counts the dirty key in flight");
        tokio::time::advance(Duration::from_secs(2)).await;
        q.update_in_flight_metrics();
        assert_eq!(m.longest.get_or_create(&l).get(), 2.0);
        q.done(&k);
        q.add_rate_limited(9);
        assert_eq!(m.retries.get_or_create(&l).get(), 1);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u8),
        Get,
        Done(u8),
        AddAfter(u8, u8),
        Advance(u8),
        Shutdown,
    }

    /// A plain model of client-go's semantics.
    #[derive(Default)]
    struct Model {
        queue: VecDeque<u8>,
        dirty: HashSet<u8>,
        processing: HashSet<u8>,
        /// Key → (ready at, insertion order): equal deadlines are served FIFO.
        waiting: HashMap<u8, (u64, u64)>,
        inserted: u64,
        now: u64,
        shut: bool,
    }

    impl Model {
        fn add(&mut self, k: u8) {
            if self.shut || self.dirty.contains(&k) {
                return;
            }
            self.dirty.insert(k);
            if !self.processing.contains(&k) {
                self.queue.push_back(k);
            }
        }
        fn promote(&mut self) {
            let mut due: Vec<(u64, u64, u8)> =
                self.waiting.iter().filter(|(_, (t, _))| *t <= self.now).map(|(k, (t, i))| (*t, *i, *k)).collect();
            due.sort();
            for (_, _, k) in due {
                self.waiting.remove(&k);
                self.add(k);
            }
        }
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0u8..6).prop_map(Op::Add),
            4 => Just(Op::Get),
            3 => (0u8..6).prop_map(Op::Done),
            2 => (0u8..6, 1u8..20).prop_map(|(k, d)| Op::AddAfter(k, d)),
            2 => (1u8..10).prop_map(Op::Advance),
            1 => Just(Op::Shutdown),
        ]
    }

    proptest::proptest! {
        #[test]
        fn the_queue_matches_client_gos_model(ops in proptest::collection::vec(op(), 1..120)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
            rt.block_on(async {
                let q: WorkQueue<u8> = WorkQueue::new("p", RateLimit::default(), crate::workqueue::QueueMetrics::register(&mut Default::default()));
                let mut m = Model::default();
                for op in ops {
                    match op {
                        Op::Add(k) => { q.add(k); m.promote(); m.add(k); }
                        Op::Get => {
                            m.promote();
                            let want = m.queue.pop_front();
                            if let Some(k) = want {
                                m.dirty.remove(&k);
                                proptest::prop_assert!(m.processing.insert(k), "stingy: {} handed out twice", k);
                            }
                            proptest::prop_assert_eq!(q.try_get(), want);
                        }
                        Op::Done(k) => {
                            // Keys that came due are in the queue before a dirty key
                            // finishing now is re-added (client-go moves them at their
                            // deadline).
                            m.promote();
                            if m.processing.remove(&k) {
                                q.done(&k);
                                if m.dirty.contains(&k) {
                                    m.queue.push_back(k);
                                }
                            }
                        }
                        Op::AddAfter(k, d) => {
                            q.add_after(k, Duration::from_millis(u64::from(d)));
                            if !m.shut {
                                let at = m.now + u64::from(d);
                                if m.waiting.get(&k).is_none_or(|(t, _)| at < *t) {
                                    m.inserted += 1;
                                    m.waiting.insert(k, (at, m.inserted));
                                }
                            }
                        }
                        Op::Advance(d) => {
                            tokio::time::advance(Duration::from_millis(u64::from(d))).await;
                            m.now += u64::from(d);
                        }
                        Op::Shutdown => { q.shutdown(); m.shut = true; m.waiting.clear(); }
                    }
                    m.promote();
                    proptest::prop_assert_eq!(q.len(), m.queue.len());
                }
                Ok(())
            })?;
        }
    }
}
