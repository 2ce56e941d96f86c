//! Pages for people on the debug listener: `/` lists the node's pods from the cache,
//! `/pods/{uid}` draws one pod's containers over time from the journal. Server-rendered
//! HTML and inline SVG: readable without JavaScript, with a small inline script that
//! keeps them current (a page asks for itself with `?since=<its token>` and gets 204
//! while nothing changed). Everything the runtime names is escaped, and a
//! Content-Security-Policy lets only the page's own style and script run.

pub mod html;
pub mod list;
pub mod timeline;

use std::sync::Arc;
use std::time::SystemTime;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::cache::PodCache;
use crate::journal::Journal;
use crate::runlog::RunLog;

/// What the pages read.
#[derive(Clone)]
pub struct PagesState {
    /// The pod-status cache (the list).
    pub cache: PodCache,
    /// The journal (timelines, and the revision that tells a page it is stale).
    pub journal: Journal,
    /// plegd's starts and outages.
    pub runlog: RunLog,
}

/// The pages' routes, for the debug listener only.
pub fn router(state: PagesState) -> Router {
    Router::new().route("/", get(index)).route("/pods/{uid}", get(pod)).with_state(Arc::new(state))
}

/// What changes a page: the journal's epoch and revision, and the run log.
fn token(s: &PagesState) -> String {
    format!("{}.{}.{}", s.journal.epoch(), s.journal.revision(), s.runlog.version())
}

/// Takes `since` out of the query; `Some(response)` when the page has not changed.
fn unchanged(s: &PagesState, params: &mut Vec<(String, String)>) -> Option<Response> {
    let since = params.iter().position(|(k, _)| k == "since").map(|i| params.remove(i).1)?;
    (since == token(s)).then(|| (StatusCode::NO_CONTENT, [(header::CACHE_CONTROL, "no-store")]).into_response())
}

fn respond(status: StatusCode, title: &str, live: bool, body: &str) -> Response {
    let nonce = html::nonce();
    let page = html::page(&html::Frame { title, nonce: &nonce, live }, body);
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8".to_string()),
            (header::CONTENT_SECURITY_POLICY, html::csp(&nonce)),
            (header::CACHE_CONTROL, "no-store".to_string()),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
            (header::REFERRER_POLICY, "no-referrer".to_string()),
        ],
        page,
    )
        .into_response()
}

async fn index(State(s): State<Arc<PagesState>>, Query(mut params): Query<Vec<(String, String)>>) -> Response {
    if let Some(r) = unchanged(&s, &mut params) {
        return r;
    }
    let since = token(&s);
    let now = SystemTime::now();
    let pods: Vec<_> = s
        .cache
        .snapshot()
        .iter()
        .filter_map(|e| e.status.as_ref().map(|p| (p.clone(), e.error.as_deref().map(str::to_string))))
        .collect();
    let mut namespaces: Vec<String> = pods.iter().map(|(p, _)| p.namespace.clone()).collect();
    namespaces.sort();
    namespaces.dedup();
    match list::ListQuery::parse(&params) {
        Ok(q) => {
            let rows = list::select(&pods, &q, now);
            let body = list::render(&rows, &q, &namespaces, pods.len(), &since, None, now);
            respond(StatusCode::OK, "plegd · pods", true, &body)
        }
        Err(problem) => {
            let q = list::ListQuery::default();
            let body = list::render(&[], &q, &namespaces, pods.len(), &since, Some(&problem), now);
            respond(StatusCode::BAD_REQUEST, "plegd · bad filter", false, &body)
        }
    }
}

async fn pod(
    State(s): State<Arc<PagesState>>,
    Path(uid): Path<String>,
    Query(mut params): Query<Vec<(String, String)>>,
) -> Response {
    if let Some(r) = unchanged(&s, &mut params) {
        return r;
    }
    if let Some((k, _)) = params.first() {
        let body = format!(
            "<main><h1>Bad request</h1><p class=\"error\" role=\"alert\">unknown parameter {}: this page takes none</p></main>",
            html::esc(&format!("{k:?}"))
        );
        return respond(StatusCode::BAD_REQUEST, "plegd · bad request", false, &body);
    }
    let since = token(&s);
    // Drawn within the read's turn: at most `TIMELINE_READS` pages are drawn at once.
    let marks = s.runlog.clone();
    let (page_uid, page_since) = (uid.clone(), since.clone());
    let drawn = s
        .journal
        .with_timeline(&uid, move |epoch, read| {
            let entries = read?;
            let now = SystemTime::now();
            let tl = timeline::build(&entries, &marks.marks(), now);
            let body = timeline::render(&page_uid, epoch, &tl, &page_since, now);
            let title = entries
                .last()
                .map(|e| format!("{}/{} · plegd", e.event.pod_namespace, e.event.pod_name))
                .unwrap_or_else(|| "plegd · pod".into());
            Some((title, body))
        })
        .await;
    let Some(drawn) = drawn else {
        let body = "<main><h1>Unavailable</h1><p class=\"error\" role=\"alert\">Reading the pod's timeline failed; try again.</p></main>";
        return respond(StatusCode::SERVICE_UNAVAILABLE, "plegd · unavailable", false, body);
    };
    let Some((title, body)) = drawn else {
        let body = format!(
            "<main data-since=\"{}\"><h1>No such pod</h1><p class=\"error\" role=\"alert\">plegd has seen no change of a pod with uid <code>{}</code>: it never ran on this node, or it went away longer ago than the journal keeps.</p><p><a href=\"/\">All pods on this node</a></p></main>",
            html::esc(&since),
            html::esc(&uid)
        );
        return respond(StatusCode::NOT_FOUND, "plegd · no such pod", false, &body);
    };
    respond(StatusCode::OK, &title, true, &body)
}
