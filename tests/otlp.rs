//! OTLP export against a collector that misbehaves on purpose: an in-process OTLP logs
//! service that accepts, rejects part of a batch, throttles with `RetryInfo`, refuses,
//! or is not there at all. Every revision reaches it at least once with the exact
//! attributes, a partial success is counted and not retried, a collector that is away
//! costs nothing but lag, a restart resumes from the cursor, and revisions the journal
//! dropped before export are named in one record. (A real OpenTelemetry Collector and
//! `kill -9`: `tests/otlp/run.sh`.)

mod support;

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use plegd::cri::spec::{ContainerSpec, PodSpec};
use plegd::export::otlp::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse, LogRecord, any_value::Value,
};
use support::{Plegd, start_plegd, start_plegd_on};
use tonic::codegen::{Body, BoxFuture, Service, StdError, http};

/// What the collector answers to the next exports (then: accept).
#[derive(Clone, Debug)]
enum Reply {
    Accept,
    Partial(i64),
    Fail(tonic::Code),
    Throttle(Duration),
}

#[derive(Default)]
struct Seen {
    records: Vec<LogRecord>,
    requests: Vec<Instant>,
    script: VecDeque<Reply>,
}

#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Seen>>);

struct Export(Collector);

impl tonic::server::UnaryService<ExportLogsServiceRequest> for Export {
    type Response = ExportLogsServiceResponse;
    type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;

    fn call(&mut self, req: tonic::Request<ExportLogsServiceRequest>) -> Self::Future {
        let seen = self.0.0.clone();
        Box::pin(async move {
            let mut s = seen.lock().unwrap();
            s.requests.push(Instant::now());
            let reply = s.script.pop_front().unwrap_or(Reply::Accept);
            let records: Vec<LogRecord> = req
                .into_inner()
                .resource_logs
                .into_iter()
                .flat_map(|r| r.scope_logs)
                .flat_map(|s| s.log_records)
                .collect();
            match reply {
                Reply::Accept => {
                    s.records.extend(records);
                    Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
                }
                Reply::Partial(n) => {
                    s.records.extend(records.into_iter().skip(n as usize));
                    Ok(tonic::Response::new(ExportLogsServiceResponse {
                        partial_success: Some(ExportLogsPartialSuccess {
                            rejected_log_records: n,
                            error_message: "too old".into(),
                        }),
                    }))
                }
                Reply::Fail(code) => Err(tonic::Status::new(code, "scripted failure")),
                Reply::Throttle(d) => Err(throttle(d)),
            }
        })
    }
}

/// RESOURCE_EXHAUSTED with a `google.rpc.RetryInfo` of `d`.
fn throttle(d: Duration) -> tonic::Status {
    plegd::export::otlp::with_retry_info(tonic::Code::ResourceExhausted, "throttled", d)
}

impl<B> Service<http::Request<B>> for Collector
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let me = self.clone();
        Box::pin(async move {
            let codec = tonic_prost::ProstCodec::<ExportLogsServiceResponse, ExportLogsServiceRequest>::default();
            Ok(tonic::server::Grpc::new(codec).unary(Export(me), req).await)
        })
    }
}

impl tonic::server::NamedService for Collector {
    const NAME: &'static str = "opentelemetry.proto.collector.logs.v1.LogsService";
}

impl Collector {
    /// Serves on a free port until `stop`; returns its `http://` endpoint.
    async fn serve(&self, stop: tokio_util::sync::CancellationToken) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        self.serve_on(listener, stop);
        format!("http://{addr}")
    }

    fn serve_on(&self, listener: tokio::net::TcpListener, stop: tokio_util::sync::CancellationToken) {
        let svc = self.clone();
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    stop.cancelled(),
                )
                .await
                .unwrap();
        });
    }

    fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.0.lock().unwrap().script.extend(replies);
    }

    /// Records received per `log.record.uid`.
    fn uids(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for r in &self.0.lock().unwrap().records {
            *out.entry(string_attr(r, "log.record.uid").unwrap_or_default()).or_insert(0) += 1;
        }
        out
    }

    fn records(&self) -> Vec<LogRecord> {
        self.0.lock().unwrap().records.clone()
    }
}

fn string_attr(r: &LogRecord, key: &str) -> Option<String> {
    r.attributes.iter().find(|a| a.key == key).and_then(|a| match a.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        Value::IntValue(i) => Some(i.to_string()),
        _ => None,
    })
}

fn export_to(
    endpoint: String,
    state: Option<std::path::PathBuf>,
) -> impl FnOnce(&mut plegd::config::RunConfig) + Clone {
    move |c| {
        let mut e = plegd::export::ExportConfig::new(&endpoint, "node-t");
        e.linger = Duration::from_millis(50);
        e.batch = 16;
        e.backoff_initial = Duration::from_millis(100);
        e.backoff_max = Duration::from_millis(400);
        c.export = Some(e);
        c.state_dir = state;
    }
}

/// Waits until the collector holds every revision 1..=journal's of this node and epoch.
async fn all_in(p: &Plegd, c: &Collector, within: Duration) -> u64 {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let (rev, epoch) = (p.app.journal().revision(), p.app.journal().epoch());
        let uids = c.uids();
        let missing: Vec<u64> = (1..=rev).filter(|r| !uids.contains_key(&format!("node-t/{epoch}/{r}"))).collect();
        if rev > 0 && missing.is_empty() {
            return rev;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "revisions never exported: {:?} (of {rev})",
            &missing[..missing.len().min(20)]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn metric(p: &Plegd, name: &str) -> f64 {
    let (_, body) = support::http(p.app.admin_addr(), "GET", "/metrics").await;
    body.lines().find_map(|l| l.strip_prefix(&format!("{name} "))).map_or(0.0, |v| v.trim().parse().unwrap())
}

async fn churn(p: &Plegd, n: usize, tag: &str) {
    for i in 0..n {
        let pod = PodSpec::new("otlp", &format!("{tag}-{i}")).label("app", "web");
        let (sid, _) =
            p.h.run_pod(&pod, &[ContainerSpec::new("main").exits_after(Duration::from_millis(100), 3)]).await;
        if i % 2 == 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            p.h.stop_pod(&sid).await;
            p.h.remove_pod(&sid).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_revision_reaches_the_collector_with_the_attributes_of_its_event() {
    let c = Collector::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let endpoint = c.serve(stop.clone()).await;
    let p = start_plegd(export_to(endpoint, None)).await;
    churn(&p, 6, "a").await;
    let rev = all_in(&p, &c, Duration::from_secs(20)).await;
    assert!(rev >= 20, "churn made {rev} revisions");
    // Each record says what its journal entry says.
    let records = c.records();
    let died: Vec<_> = records.iter().filter(|r| r.event_name == "k8s.container.died").collect();
    assert!(!died.is_empty());
    for r in &died {
        assert_eq!(string_attr(r, "k8s.namespace.name").as_deref(), Some("otlp"));
        assert_eq!(string_attr(r, "k8s.pod.label.app").as_deref(), Some("web"));
        assert_eq!(string_attr(r, "k8s.container.name").as_deref(), Some("main"));
        assert!(string_attr(r, "container.id").is_some_and(|id| id.len() == 64));
        assert!(r.time_unix_nano > 0 && r.time_unix_nano <= r.observed_time_unix_nano);
        let exit = string_attr(r, "process.exit.code").unwrap();
        assert!(exit == "3" || exit == "137", "{exit}");
    }
    // Containers of the churn still die after it returns: the lag comes back to 0.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while metric(&p, "plegd_otlp_lag_revisions").await > 0.0 {
        assert!(tokio::time::Instant::now() < deadline, "the lag never came back to 0");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(metric(&p, "plegd_otlp_exported_records_total").await >= rev as f64);
    p.stop().await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_success_is_counted_and_not_retried_and_throttling_waits_as_told() {
    let c = Collector::default();
    c.script([Reply::Partial(2), Reply::Throttle(Duration::from_secs(1)), Reply::Fail(tonic::Code::Unavailable)]);
    let stop = tokio_util::sync::CancellationToken::new();
    let endpoint = c.serve(stop.clone()).await;
    let p = start_plegd(export_to(endpoint, None)).await;
    churn(&p, 4, "b").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while metric(&p, "plegd_otlp_lag_revisions").await > 0.0 || p.app.journal().revision() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the export never caught up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(metric(&p, "plegd_otlp_rejected_records_total").await, 2.0);
    // The two rejected records were not sent again; everything else arrived.
    let uids = c.uids();
    let epoch = p.app.journal().epoch();
    let missing: Vec<u64> =
        (1..=p.app.journal().revision()).filter(|r| !uids.contains_key(&format!("node-t/{epoch}/{r}"))).collect();
    assert_eq!(missing, vec![1, 2], "exactly the rejected ones are missing");
    // The throttled request was retried after the delay the collector asked for.
    let at = c.0.lock().unwrap().requests.clone();
    assert!(at[2] - at[1] >= Duration::from_millis(950), "retried after {:?}", at[2] - at[1]);
    assert_eq!(metric(&p, "plegd_otlp_failed_requests_total").await, 2.0);
    p.stop().await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_away_costs_lag_only_and_a_restart_resumes_from_the_cursor() {
    let state = tempfile::tempdir().unwrap();
    // A port nobody listens on yet.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let endpoint = format!("http://{addr}");
    let p = start_plegd(export_to(endpoint.clone(), Some(state.path().into()))).await;
    churn(&p, 6, "c").await;
    // The journal and the watchers go on; the exporter only falls behind.
    let mut watch = p.client().watch(plegd::proto::plegd::WatchRequest::default()).await.unwrap().into_inner();
    assert!(watch.message().await.unwrap().is_some());
    tokio::time::sleep(Duration::from_millis(600)).await;
    let lag = metric(&p, "plegd_otlp_lag_revisions").await;
    assert!(lag >= 20.0, "lag {lag}");
    assert!(metric(&p, "plegd_otlp_failed_requests_total").await >= 1.0);

    // The collector comes; everything arrives.
    let c = Collector::default();
    let stop = tokio_util::sync::CancellationToken::new();
    c.serve_on(tokio::net::TcpListener::bind(addr).await.unwrap(), stop.clone());
    let first = all_in(&p, &c, Duration::from_secs(20)).await;

    // plegd restarts (its state dir kept): it goes on from its cursor.
    let h = p.stop_plegd().await;
    let before = c.records().len();
    let p = start_plegd_on(h, export_to(endpoint, Some(state.path().into()))).await;
    churn(&p, 2, "d").await;
    let last = all_in(&p, &c, Duration::from_secs(20)).await;
    assert!(last > first);
    let again: Vec<_> = c.records()[before..]
        .iter()
        .filter_map(|r| string_attr(r, "plegd.revision")?.parse::<u64>().ok())
        .filter(|r| *r <= first)
        .collect();
    assert!(again.is_empty(), "a clean restart sends nothing twice: {again:?}");
    p.stop().await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_the_journal_dropped_before_export_are_named_in_one_record_and_counted() {
    let state = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let endpoint = format!("http://{addr}");
    let small = {
        let base = export_to(endpoint, Some(state.path().into()));
        move |c: &mut plegd::config::RunConfig| {
            base(c);
            // The journal keeps 10 events; the exporter's live buffer, 4.
            c.journal.capacity = 10;
            c.journal.client_buffer = 4;
        }
    };
    let p = start_plegd(small).await;
    churn(&p, 6, "e").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rev = p.app.journal().revision();
    let oldest = p.app.journal().oldest_revision();
    assert!(oldest > 1, "the journal kept everything ({oldest}); make more churn");
    let c = Collector::default();
    let stop = tokio_util::sync::CancellationToken::new();
    c.serve_on(tokio::net::TcpListener::bind(addr).await.unwrap(), stop.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while metric(&p, "plegd_otlp_lag_revisions").await > 0.0 {
        assert!(tokio::time::Instant::now() < deadline, "the export never caught up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lost: Vec<_> = c.records().into_iter().filter(|r| r.event_name == "plegd.export.lost").collect();
    assert_eq!(lost.len(), 1, "one record names the gap");
    let (from, to) =
        (string_attr(&lost[0], "plegd.lost.from").unwrap(), string_attr(&lost[0], "plegd.lost.to").unwrap());
    let (from, to): (u64, u64) = (from.parse().unwrap(), to.parse().unwrap());
    assert!(from <= to && to + 1 >= oldest && to < rev, "lost {from}..={to}, journal kept {oldest}..={rev}");
    assert_eq!(metric(&p, "plegd_otlp_lost_revisions_total").await, (to - from + 1) as f64);
    // Everything before and after the gap arrived: the gap is exactly what it names.
    let uids = c.uids();
    let epoch = p.app.journal().epoch();
    let has = |r: u64| uids.contains_key(&format!("node-t/{epoch}/{r}"));
    assert!((1..from).all(has), "before the gap");
    assert!((from..=to).all(|r| !has(r)), "the gap");
    assert!((to + 1..=p.app.journal().revision()).all(has), "after the gap");
    p.stop().await;
    stop.cancel();
}

/// A CA and a certificate for `localhost` / 127.0.0.1 signed by it, made with openssl.
fn certificates(dir: &std::path::Path) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).current_dir(dir).output().unwrap_or_else(|e| {
            panic!("\n\n*** this test needs the openssl command line (Debian: openssl): {e} ***\n")
        });
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &["-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=plegd test CA"],
    ]
    .concat());
    run(&[&["req"][..], &ec, &["-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=localhost"]].concat());
    std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "srv.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "srv.pem",
        "-days",
        "1",
        "-extfile",
        "san.ext",
    ]);
    let read = |f: &str| std::fs::read(dir.join(f)).unwrap();
    (read("ca.pem"), read("srv.pem"), read("srv.key"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_collector_gets_every_revision_when_its_ca_is_given_and_none_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path());
    let c = Collector::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let svc = c.clone();
    let tls = tonic::transport::ServerTlsConfig::new().identity(tonic::transport::Identity::from_pem(cert, key));
    let sd = stop.clone();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .tls_config(tls)
            .unwrap()
            .add_service(svc)
            .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), sd.cancelled())
            .await
            .unwrap();
    });
    let endpoint = format!("https://localhost:{port}");

    // Without the CA (the public roots only) the collector is not trusted: nothing is sent.
    let untrusted = start_plegd(export_to(endpoint.clone(), None)).await;
    churn(&untrusted, 2, "u").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(metric(&untrusted, "plegd_otlp_failed_requests_total").await >= 1.0);
    assert!(c.records().is_empty(), "nothing reaches a collector whose certificate is not trusted");
    untrusted.stop().await;

    let trusted = start_plegd(move |cfg: &mut plegd::config::RunConfig| {
        export_to(endpoint, None)(cfg);
        cfg.export.as_mut().unwrap().ca_pem = Some(ca);
    })
    .await;
    churn(&trusted, 3, "t").await;
    all_in(&trusted, &c, Duration::from_secs(20)).await;
    trusted.stop().await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_ahead_of_the_journal_is_a_lost_position_and_everything_held_is_sent_again() {
    let state = tempfile::tempdir().unwrap();
    let c = Collector::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let endpoint = c.serve(stop.clone()).await;
    let p = start_plegd(export_to(endpoint.clone(), Some(state.path().into()))).await;
    churn(&p, 4, "f").await;
    let first = all_in(&p, &c, Duration::from_secs(20)).await;
    let h = p.stop_plegd().await;

    // The state dir comes back with a cursor from elsewhere: same epoch, 600 ahead.
    let path = state.path().join(plegd::export::cursor::FILE);
    let mut cursor = plegd::export::cursor::load(state.path()).expect("a cursor was kept");
    cursor.revision += 600;
    plegd::export::cursor::store(state.path(), cursor).unwrap();
    assert!(path.exists());

    let fresh = Collector::default();
    let stop2 = tokio_util::sync::CancellationToken::new();
    let endpoint2 = fresh.serve(stop2.clone()).await;
    let p = start_plegd_on(h, export_to(endpoint2, Some(state.path().into()))).await;
    churn(&p, 2, "g").await;
    // Every revision the journal holds reaches the new collector: the old ones again
    // and the new ones, which a cursor taken at its word would have skipped.
    let last = all_in(&p, &fresh, Duration::from_secs(20)).await;
    assert!(last > first);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while metric(&p, "plegd_otlp_lag_revisions").await > 0.0 {
        assert!(tokio::time::Instant::now() < deadline, "the lag never came down to 0");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A late event of the churn may still be on its way: the saved cursor follows it.
    loop {
        let (saved, head) = (plegd::export::cursor::load(state.path()).unwrap(), p.app.journal().revision());
        if saved.revision == head {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cursor is this journal's again: {} of {head}",
            saved.revision
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    p.stop().await;
    stop.cancel();
    stop2.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_connection_that_never_answers_is_given_up_for_a_new_one() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // A listener that accepts connections and never says a word on them.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held: Arc<Mutex<Vec<tokio::net::TcpStream>>> = Arc::default();
    let accepted = Arc::new(AtomicUsize::new(0));
    let deaf = {
        let (held, accepted) = (held.clone(), accepted.clone());
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                held.lock().unwrap().push(s);
            }
        })
    };
    let short = {
        let base = export_to(format!("http://{addr}"), None);
        move |c: &mut plegd::config::RunConfig| {
            base(c);
            c.export.as_mut().unwrap().timeout = Duration::from_millis(500);
        }
    };
    let p = start_plegd(short).await;
    churn(&p, 2, "h").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while accepted.load(Ordering::SeqCst) == 0 || metric(&p, "plegd_otlp_failed_requests_total").await < 1.0 {
        assert!(tokio::time::Instant::now() < deadline, "the exporter never reached the deaf listener");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The deaf process stops listening but keeps its connections open; a working
    // collector takes the address.
    deaf.abort();
    let _ = deaf.await;
    let c = Collector::default();
    let stop = tokio_util::sync::CancellationToken::new();
    c.serve_on(tokio::net::TcpListener::bind(addr).await.unwrap(), stop.clone());
    all_in(&p, &c, Duration::from_secs(15)).await;
    assert!(!held.lock().unwrap().is_empty(), "the deaf connections were still open all along");
    p.stop().await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_cannot_stop_the_export_longer_than_the_retry_ceiling() {
    let c = Collector::default();
    // RetryInfo: come back in a day.
    c.script([Reply::Throttle(Duration::from_secs(86_400))]);
    let stop = tokio_util::sync::CancellationToken::new();
    let endpoint = c.serve(stop.clone()).await;
    let capped = {
        let base = export_to(endpoint, None);
        move |cfg: &mut plegd::config::RunConfig| {
            base(cfg);
            cfg.export.as_mut().unwrap().retry_after_max = Duration::from_secs(1);
        }
    };
    let p = start_plegd(capped).await;
    churn(&p, 2, "i").await;
    all_in(&p, &c, Duration::from_secs(15)).await;
    let at = c.0.lock().unwrap().requests.clone();
    let waited = at[1] - at[0];
    assert!(waited >= Duration::from_millis(950) && waited < Duration::from_secs(5), "retried after {waited:?}");
    p.stop().await;
    stop.cancel();
}
