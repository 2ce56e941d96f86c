//! The exporter's loop against a scripted collector, in paused time: batches go when
//! full or when their linger is over, a collector that is down is retried per policy,
//! and the cursor never passes what the collector has not taken.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::cursor::{self, Cursor};
use super::driver::{Collector, Driver};
use super::otlp::{self, ExportLogsServiceRequest, Outcome, any_value::Value};
use super::retry::RetryPolicy;
use super::{ExportConfig, ExportMetrics};
use crate::journal::Journal;
use crate::model::PodStatus;
use crate::model::event::{EventSource, EventType, PodLifecycleEvent};

/// A request as the collector saw it.
#[derive(Debug)]
struct Call {
    at: Instant,
    revisions: Vec<i64>,
    /// The cursor saved in the state dir when the request came.
    saved: Option<Cursor>,
}

/// A collector that answers from a script (then accepts everything) and records each
/// request.
#[derive(Clone, Default)]
struct Scripted {
    replies: Arc<Mutex<VecDeque<Outcome>>>,
    calls: Arc<Mutex<Vec<Call>>>,
    state_dir: Option<std::path::PathBuf>,
}

impl Collector for Scripted {
    async fn export(&self, req: ExportLogsServiceRequest) -> Outcome {
        let revisions = req.resource_logs[0].scope_logs[0]
            .log_records
            .iter()
            .flat_map(|r| &r.attributes)
            .filter(|kv| kv.key == "plegd.revision")
            .filter_map(|kv| match kv.value.as_ref()?.value {
                Some(Value::IntValue(v)) => Some(v),
                _ => None,
            })
            .collect();
        let saved = self.state_dir.as_deref().and_then(cursor::load);
        self.calls.lock().unwrap().push(Call { at: Instant::now(), revisions, saved });
        self.replies.lock().unwrap().pop_front().unwrap_or(Outcome::Accepted)
    }
}

impl Scripted {
    fn calls(&self) -> Vec<(Duration, Vec<i64>, Option<u64>)> {
        let calls = self.calls.lock().unwrap();
        let t0 = calls.first().map_or_else(Instant::now, |c| c.at);
        calls.iter().map(|c| (c.at - t0, c.revisions.clone(), c.saved.map(|s| s.revision))).collect()
    }

    async fn wait_for_calls(&self, n: usize) {
        while self.calls.lock().unwrap().len() < n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

fn event(i: usize) -> PodLifecycleEvent {
    let uid = format!("p{i}");
    let pod = Arc::new(PodStatus::empty(&uid, "ns", &format!("pod-{uid}")));
    PodLifecycleEvent {
        pod_uid: uid.as_str().into(),
        pod_namespace: "ns".into(),
        pod_name: format!("pod-{uid}").into(),
        kind: EventType::ContainerStarted,
        container_id: format!("c-{uid}"),
        container_name: "c".into(),
        is_sandbox: false,
        source: EventSource::Relist,
        observed_at: std::time::SystemTime::now(),
        runtime_timestamp: None,
        pod: Some(pod),
        message: String::new(),
    }
}

/// A primed journal with `n` events (buffering 1,000 per subscriber), and a driver of
/// it to `collector` sending batches of `batch` (lingering 200 ms).
fn rig(n: usize, batch: usize, collector: Scripted) -> (Journal, Driver<Scripted>, CancellationToken) {
    let journal = Journal::new(10_000, 1000, crate::journal::JournalMetrics::throwaway());
    journal.mark_primed();
    for i in 0..n {
        journal.append(event(i));
    }
    let mut cfg = ExportConfig::new("http://127.0.0.1:4317", "node-a");
    cfg.batch = batch;
    let resource = otlp::Resource { attributes: Vec::new() };
    let shutdown = CancellationToken::new();
    let metrics = ExportMetrics::default();
    let state_dir = collector.state_dir.clone();
    let driver = Driver {
        cfg,
        journal: journal.clone(),
        metrics,
        collector,
        resource,
        cursor: None,
        state_dir,
        shutdown: shutdown.clone(),
        identities: std::sync::Arc::new(crate::model::identity::Identities::new("node-a", Duration::ZERO)),
    };
    (journal, driver, shutdown)
}

fn unavailable() -> Outcome {
    Outcome::Retry { after: None, error: "Unavailable: connection refused".into() }
}

#[tokio::test(start_paused = true)]
async fn a_batch_that_never_fills_is_sent_when_its_linger_is_over_and_full_ones_at_once() {
    let collector = Scripted::default();
    let (_journal, driver, shutdown) = rig(9, 4, collector.clone());
    let run = tokio::spawn(driver.run());
    collector.wait_for_calls(3).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let calls = collector.calls();
    let ms = Duration::from_millis;
    assert_eq!(
        calls.iter().map(|(at, revs, _)| (*at, revs.clone())).collect::<Vec<_>>(),
        [(ms(0), vec![1, 2, 3, 4]), (ms(0), vec![5, 6, 7, 8]), (ms(200), vec![9])],
        "two full batches at once, the rest after 200 ms of linger, and nothing else"
    );
    shutdown.cancel();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_collector_that_is_down_is_retried_per_policy_and_the_cursor_stays_before_what_it_has_not_taken() {
    let dir = tempfile::tempdir().unwrap();
    let collector = Scripted { state_dir: Some(dir.path().to_owned()), ..Default::default() };
    collector.replies.lock().unwrap().extend([Outcome::Accepted, unavailable(), unavailable(), unavailable()]);
    let (journal, driver, shutdown) = rig(4, 2, collector.clone());
    let metrics = driver.metrics.clone();
    let run = tokio::spawn(driver.run());
    collector.wait_for_calls(5).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let calls = collector.calls();
    assert_eq!(
        calls.iter().map(|(_, revs, cursor)| (revs.clone(), *cursor)).collect::<Vec<_>>(),
        [
            (vec![1, 2], None),
            (vec![3, 4], Some(2)),
            (vec![3, 4], Some(2)),
            (vec![3, 4], Some(2)),
            (vec![3, 4], Some(2))
        ],
        "the same batch again, the cursor at the last batch taken meanwhile"
    );
    // After 0.5, 1 and 2 s, each ± 25 % (jittered, so exporters do not retry in step).
    for (i, want) in [(2, 500.0), (3, 1000.0), (4, 2000.0)] {
        let gap = (calls[i].0 - calls[i - 1].0).as_secs_f64() * 1000.0;
        assert!(
            gap >= want * 0.75 && gap <= want * 1.25,
            "retry {}: {gap} ms after the one before, want {want} ± 25 %",
            i - 1
        );
    }
    let saved = cursor::load(dir.path());
    assert_eq!(saved, Some(Cursor { epoch: journal.epoch(), revision: 4 }), "and past it once it is taken");
    let counted = (metrics.exported.get(), metrics.failed.get(), metrics.retried.get(), metrics.lag_revisions.get());
    assert_eq!(counted, (4, 3, 3, 0));
    shutdown.cancel();
    run.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_while_the_collector_is_down_leaves_the_cursor_where_the_last_batch_taken_put_it() {
    let dir = tempfile::tempdir().unwrap();
    let collector = Scripted { state_dir: Some(dir.path().to_owned()), ..Default::default() };
    collector.replies.lock().unwrap().extend([Outcome::Accepted].into_iter().chain((0..100).map(|_| unavailable())));
    let (journal, driver, shutdown) = rig(5, 2, collector.clone());
    let run = tokio::spawn(driver.run());
    collector.wait_for_calls(4).await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(1), run).await.expect("it stops at once").unwrap();
    assert_eq!(cursor::load(dir.path()), Some(Cursor { epoch: journal.epoch(), revision: 2 }));
    assert!(collector.calls().iter().skip(1).all(|(_, revs, _)| *revs == [3, 4]), "never past the batch refused");
}

#[tokio::test(start_paused = true)]
async fn an_exporter_that_fell_behind_while_the_collector_was_away_reads_again_from_its_cursor() {
    let collector = Scripted::default();
    collector.replies.lock().unwrap().extend((0..6).map(|_| unavailable()));
    let (journal, driver, shutdown) = rig(2, 2, collector.clone());
    let run = tokio::spawn(driver.run());
    collector.wait_for_calls(1).await;
    // Far more than its buffer while it retries: it is dropped, and reads again.
    for i in 0..1500 {
        journal.append(event(i));
    }
    collector.wait_for_calls(6 + 1 + 1500 / 2).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut revisions: Vec<i64> = collector.calls().into_iter().skip(6).flat_map(|(_, revs, _)| revs).collect();
    let sent = revisions.len();
    revisions.dedup();
    assert_eq!(sent, revisions.len(), "each revision once after the retries");
    assert_eq!(revisions, (1..=1502).collect::<Vec<_>>(), "in order, with no gap");
    shutdown.cancel();
    run.await.unwrap();
}

#[test]
fn the_policy_doubles_its_jittered_delay_up_to_the_ceiling_and_honours_a_collectors_within_bounds() {
    let policy = RetryPolicy {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(5),
        after_max: Duration::from_secs(60),
    };
    let mut retries = policy.start();
    assert!(!retries.retrying());
    for base in [1.0, 2.0, 4.0, 5.0, 5.0] {
        retries.attempted();
        let d = retries.delay(None).as_secs_f64();
        assert!(d >= base * 0.75 && d <= (base * 1.25f64).min(5.0), "{d} s for a base of {base} s");
    }
    assert_eq!(retries.attempts(), 5);
    assert_eq!(retries.delay(Some(Duration::from_secs(30))), Duration::from_secs(30), "the collector's word");
    assert_eq!(retries.delay(Some(Duration::from_secs(3600))), Duration::from_secs(60), "the ceiling");
    assert_eq!(retries.delay(Some(Duration::ZERO)), Duration::from_secs(1), "never shorter than the first");
}

#[test]
fn a_daemonsets_exporters_do_not_come_back_to_a_restarted_collector_in_step() {
    let policy = ExportConfig::new("http://c:4317", "n").retry_policy();
    // A hundred nodes' exporters, all failing at once: their third retries spread out.
    let thirds: std::collections::BTreeSet<u128> = (0..100)
        .map(|_| {
            let mut r = policy.start();
            (0..3).map(|_| r.delay(None)).last().unwrap().as_millis()
        })
        .collect();
    assert!(thirds.len() > 50, "{} distinct delays of 100: {thirds:?}", thirds.len());
}
