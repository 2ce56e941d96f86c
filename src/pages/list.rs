//! The node's pods as a table: each pod's containers with their state, restarts, how
//! the last attempt ended and how long ago; crash-looping and OOM-killed containers
//! marked with a word and a class. Filters (namespace, label selector) and the sort
//! order come from the query string, through a plain form.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::html::{ago, dur, enc, esc};
use crate::model::{ContainerState, PodStatus, nanos_to_system};
use crate::selector::Selector;

/// Restarts after which a container whose last attempt failed recently is crash-looping.
pub const CRASH_LOOP_RESTARTS: u32 = 3;
/// How recent that failure must be (the crash-loop reconciler's window).
pub const CRASH_LOOP_WINDOW: Duration = Duration::from_secs(600);

/// The list's sort keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// Namespace, then name.
    Namespace,
    /// Name, then namespace.
    Name,
    /// Age (sandbox creation).
    Age,
    /// Restarts, over all containers.
    Restarts,
}

impl SortKey {
    const ALL: [(SortKey, &'static str); 4] =
        [(Self::Namespace, "namespace"), (Self::Name, "name"), (Self::Age, "age"), (Self::Restarts, "restarts")];

    fn word(self) -> &'static str {
        Self::ALL.iter().find(|(k, _)| *k == self).map_or("namespace", |(_, w)| w)
    }
}

/// What the list shows: filters and order.
#[derive(Clone, Debug)]
pub struct ListQuery {
    /// Only this namespace (empty: all).
    pub namespace: String,
    /// The selector as typed.
    pub selector_text: String,
    /// The selector, parsed.
    pub selector: Selector,
    /// Sort key.
    pub sort: SortKey,
    /// Descending.
    pub desc: bool,
}

impl Default for ListQuery {
    fn default() -> Self {
        Self {
            namespace: String::new(),
            selector_text: String::new(),
            selector: Selector::default(),
            sort: SortKey::Namespace,
            desc: false,
        }
    }
}

impl ListQuery {
    /// Parses `namespace`, `selector` and `sort` (`name`, `-restarts`, …); anything
    /// else, or a value that does not parse, is an error a person can read.
    pub fn parse(params: &[(String, String)]) -> Result<Self, String> {
        let mut q = Self::default();
        for (k, v) in params {
            match k.as_str() {
                "namespace" => q.namespace = v.trim().to_string(),
                "selector" => {
                    q.selector = Selector::parse(v).map_err(|e| e.to_string())?;
                    q.selector_text = v.trim().to_string();
                }
                "sort" => {
                    let (desc, word) = match v.trim().strip_prefix('-') {
                        Some(w) => (true, w),
                        None => (false, v.trim()),
                    };
                    if word.is_empty() {
                        continue;
                    }
                    let Some((key, _)) = SortKey::ALL.iter().find(|(_, w)| *w == word) else {
                        let words: Vec<_> = SortKey::ALL.iter().map(|(_, w)| *w).collect();
                        return Err(format!(
                            "invalid sort={v:?}: expected one of {}, with a leading - for descending order",
                            words.join(", ")
                        ));
                    };
                    (q.sort, q.desc) = (*key, desc);
                }
                other => {
                    return Err(format!("unknown parameter {other:?}: this page takes namespace, selector and sort"));
                }
            }
        }
        Ok(q)
    }

    /// The query string for these filters with another sort.
    fn href(&self, sort: SortKey, desc: bool) -> String {
        let mut s = format!("/?sort={}{}", if desc { "-" } else { "" }, sort.word());
        if !self.namespace.is_empty() {
            let _ = write!(s, "&namespace={}", enc(&self.namespace));
        }
        if !self.selector_text.is_empty() {
            let _ = write!(s, "&selector={}", enc(&self.selector_text));
        }
        s
    }
}

/// How a container's last attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Termination {
    /// The runtime's reason (`Error`, `OOMKilled`, `Completed`).
    pub reason: String,
    /// Exit code.
    pub exit_code: i32,
    /// When.
    pub at: Option<SystemTime>,
}

/// One container name of a pod: its newest attempt and what came before.
#[derive(Clone, Debug)]
pub struct ContainerRow {
    /// Name.
    pub name: String,
    /// The newest attempt's id.
    pub id: String,
    /// The newest attempt's state.
    pub state: ContainerState,
    /// Restarts: the newest attempt's number.
    pub restarts: u32,
    /// When the newest attempt started.
    pub started: Option<SystemTime>,
    /// The last termination (of the newest attempt, or the one before it).
    pub last: Option<Termination>,
    /// Keeps dying.
    pub crash_loop: bool,
    /// An attempt the runtime still holds was OOM-killed.
    pub oom: bool,
}

/// One pod.
#[derive(Clone, Debug)]
pub struct PodRow {
    /// UID.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Sandbox labels, `k=v`.
    pub labels: Vec<(String, String)>,
    /// When its oldest kept sandbox was created.
    pub created: Option<SystemTime>,
    /// Containers by name.
    pub containers: Vec<ContainerRow>,
    /// Whether its newest sandbox is ready.
    pub ready: bool,
    /// The last inspection's error, if it failed.
    pub error: Option<String>,
}

impl PodRow {
    fn restarts(&self) -> u32 {
        self.containers.iter().map(|c| c.restarts).sum()
    }
}

/// A pod's row, as of `now`.
pub fn row(p: &PodStatus, error: Option<&str>, now: SystemTime) -> PodRow {
    let mut names: Vec<&str> = Vec::new();
    for c in &p.containers {
        if !names.contains(&c.name.as_str()) {
            names.push(&c.name);
        }
    }
    names.sort();
    let containers = names
        .into_iter()
        .filter_map(|name| {
            // Newest first: by attempt, then creation.
            let mut all: Vec<_> = p.containers.iter().filter(|c| c.name == name).collect();
            all.sort_by_key(|c| std::cmp::Reverse((c.attempt, c.created_at)));
            let newest = *all.first()?;
            let last = all.iter().find(|c| c.state == ContainerState::Exited).map(|c| Termination {
                reason: c.reason.clone(),
                exit_code: c.exit_code,
                at: nanos_to_system(c.finished_at),
            });
            let recent_failure = last.as_ref().is_some_and(|t| {
                t.exit_code != 0
                    && t.at.is_none_or(|at| now.duration_since(at).map_or(true, |d| d <= CRASH_LOOP_WINDOW))
            });
            Some(ContainerRow {
                name: name.to_string(),
                id: newest.id.clone(),
                state: newest.state,
                restarts: newest.attempt,
                started: nanos_to_system(newest.started_at),
                crash_loop: newest.attempt >= CRASH_LOOP_RESTARTS && recent_failure,
                oom: all.iter().any(|c| c.reason == "OOMKilled"),
                last,
            })
        })
        .collect();
    PodRow {
        uid: p.uid.clone(),
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        // The kubelet's own labels repeat the pod's name, namespace and uid.
        labels: p
            .labels
            .iter()
            .filter(|(k, _)| !k.starts_with("io.kubernetes.pod."))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        created: p.sandboxes.last().and_then(|s| nanos_to_system(s.created_at)),
        containers,
        ready: p.sandboxes.first().is_some_and(|s| s.state == crate::model::SandboxState::Ready),
        error: error.map(str::to_string),
    }
}

/// The pods that pass the filters, in the query's order.
pub fn select(pods: &[(Arc<PodStatus>, Option<String>)], q: &ListQuery, now: SystemTime) -> Vec<PodRow> {
    let mut rows: Vec<PodRow> = pods
        .iter()
        .filter(|(p, _)| (q.namespace.is_empty() || p.namespace == q.namespace) && q.selector.matches(&p.labels))
        .map(|(p, e)| row(p, e.as_deref(), now))
        .collect();
    rows.sort_by(|a, b| {
        let by_name = (&a.namespace, &a.name, &a.uid).cmp(&(&b.namespace, &b.name, &b.uid));
        let o = match q.sort {
            SortKey::Namespace => by_name,
            SortKey::Name => (&a.name, &a.namespace).cmp(&(&b.name, &b.namespace)).then(by_name),
            // Oldest first, ascending, as a creation time sorts.
            SortKey::Age => a.created.cmp(&b.created).then(by_name),
            SortKey::Restarts => a.restarts().cmp(&b.restarts()).then(by_name),
        };
        if q.desc { o.reverse() } else { o }
    });
    rows
}

fn state_word(s: ContainerState) -> (&'static str, &'static str) {
    match s {
        ContainerState::Created => ("created", "created"),
        ContainerState::Running => ("running", "running"),
        ContainerState::Exited => ("exited", "exited"),
        ContainerState::Unknown => ("unknown", "unknown"),
    }
}

/// The filter form, with what the query holds.
fn form(q: &ListQuery, namespaces: &[String]) -> String {
    let mut s = String::from("<form class=\"filters\" method=\"get\" action=\"/\">");
    let _ = write!(
        s,
        "<label>Namespace<input name=\"namespace\" list=\"namespaces\" value=\"{}\" placeholder=\"all\"></label>",
        esc(&q.namespace)
    );
    s.push_str("<datalist id=\"namespaces\">");
    for ns in namespaces {
        let _ = write!(s, "<option value=\"{}\">", esc(ns));
    }
    s.push_str("</datalist>");
    let _ = write!(
        s,
        "<label>Label selector<input name=\"selector\" value=\"{}\" placeholder=\"app=web,tier!=db\"></label>",
        esc(&q.selector_text)
    );
    s.push_str("<label>Sort<select name=\"sort\">");
    for (key, word) in SortKey::ALL {
        for desc in [false, true] {
            let v = format!("{}{word}", if desc { "-" } else { "" });
            let sel = if q.sort == key && q.desc == desc { " selected" } else { "" };
            let shown = format!("{word} {}", if desc { "↓" } else { "↑" });
            let _ = write!(s, "<option value=\"{v}\"{sel}>{shown}</option>");
        }
    }
    s.push_str("</select></label><button type=\"submit\">Show</button> <a href=\"/\">clear</a></form>");
    s
}

/// A column header that sorts by `key` (again: the other way round).
fn th(q: &ListQuery, key: SortKey, label: &str) -> String {
    let (desc, arrow) = match (q.sort == key, q.desc) {
        (true, false) => (true, " ↑"),
        (true, true) => (false, " ↓"),
        _ => (false, ""),
    };
    format!("<th><a href=\"{}\">{label}</a>{arrow}</th>", esc(&q.href(key, desc)))
}

fn termination(t: &Termination, now: SystemTime) -> String {
    let when = t.at.map(|at| format!(" <span class=\"muted\">{}</span>", esc(&ago(now, at)))).unwrap_or_default();
    let reason = if t.reason.is_empty() { "—" } else { &t.reason };
    format!("{} (exit {}){when}", esc(reason), t.exit_code)
}

/// The list page's `<main>`: the form, a summary, and the table (or why it is empty).
/// `problem` is a message about the query, shown above an empty table.
pub fn render(
    rows: &[PodRow],
    q: &ListQuery,
    namespaces: &[String],
    total: usize,
    since: &str,
    problem: Option<&str>,
    now: SystemTime,
) -> String {
    let mut s = format!("<main data-since=\"{}\">", esc(since));
    s.push_str("<h1>Pods on this node</h1>");
    s.push_str(&form(q, namespaces));
    if let Some(p) = problem {
        let _ = write!(s, "<p class=\"error\" role=\"alert\">{}</p>", esc(p));
        s.push_str("</main>");
        return s;
    }
    let looping = rows.iter().flat_map(|r| &r.containers).filter(|c| c.crash_loop).count();
    let oom = rows.iter().flat_map(|r| &r.containers).filter(|c| c.oom).count();
    let _ = write!(
        s,
        "<p class=\"summary muted\">{} of {total} pods · crash-looping containers: {looping} · OOM-killed: {oom} · as of {}</p>",
        rows.len(),
        esc(&super::html::time(now))
    );
    if rows.is_empty() {
        s.push_str("<p class=\"empty\">No pod matches these filters.</p></main>");
        return s;
    }
    s.push_str("<div class=\"scroll\"><table class=\"pods\"><thead><tr>");
    s.push_str(&th(q, SortKey::Namespace, "Namespace"));
    s.push_str(&th(q, SortKey::Name, "Pod"));
    s.push_str("<th>Container</th><th>State</th>");
    s.push_str(&th(q, SortKey::Restarts, "Restarts"));
    s.push_str("<th>Last termination</th>");
    s.push_str(&th(q, SortKey::Age, "Age"));
    s.push_str("</tr></thead>");
    for r in rows {
        let n = r.containers.len().max(1);
        let _ = write!(s, "<tbody class=\"pod\" data-uid=\"{}\">", esc(&r.uid));
        let labels: Vec<String> = r.labels.iter().map(|(k, v)| format!("{}={}", esc(k), esc(v))).collect();
        let err = r.error.as_ref().map(|e| format!("<div class=\"error\">{}</div>", esc(e))).unwrap_or_default();
        let pod_cells = format!(
            "<td rowspan=\"{n}\" class=\"ns\">{}</td><td rowspan=\"{n}\" class=\"podname\"><a href=\"/pods/{}\">{}</a>{}<div class=\"labels\">{}</div>{err}</td>",
            esc(&r.namespace),
            enc(&r.uid),
            esc(&r.name),
            if r.ready { "" } else { " <span class=\"state exited\">sandbox not ready</span>" },
            labels.join(" "),
        );
        let age = r.created.map(|c| dur(now.duration_since(c).unwrap_or_default())).unwrap_or_else(|| "—".into());
        let age_cell = format!("<td rowspan=\"{n}\" class=\"num age\">{}</td>", esc(&age));
        if r.containers.is_empty() {
            let _ = write!(s, "<tr>{pod_cells}<td colspan=\"4\" class=\"muted\">no containers</td>{age_cell}</tr>");
        }
        for (i, c) in r.containers.iter().enumerate() {
            let mut class = vec!["container"];
            let mut marks = String::new();
            if c.crash_loop {
                class.push("crashloop");
                marks.push_str(" <span class=\"mark crashloop\">crash-looping</span>");
            }
            if c.oom {
                class.push("oom");
                marks.push_str(" <span class=\"mark oom\">OOM-killed</span>");
            }
            let (word, cls) = state_word(c.state);
            let up = match (c.state, c.started) {
                (ContainerState::Running, Some(t)) => {
                    format!(" <span class=\"muted\">for {}</span>", dur(now.duration_since(t).unwrap_or_default()))
                }
                _ => String::new(),
            };
            let last = c.last.as_ref().map(|t| termination(t, now)).unwrap_or_else(|| "—".into());
            let _ = write!(
                s,
                "<tr class=\"{}\" data-container=\"{}\">{}<td class=\"cname\">{}{marks}</td><td><span class=\"state {cls}\">{word}</span>{up}</td><td class=\"num restarts\">{}</td><td class=\"last\">{last}</td>{}</tr>",
                class.join(" "),
                esc(&c.name),
                if i == 0 { pod_cells.as_str() } else { "" },
                esc(&c.name),
                c.restarts,
                if i == 0 { age_cell.as_str() } else { "" },
            );
        }
        s.push_str("</tbody>");
    }
    s.push_str("</table></div></main>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ContainerStatus, SandboxState, SandboxStatus};

    const NOW_NS: i64 = 1_800_000_000_000_000_000;

    fn now() -> SystemTime {
        nanos_to_system(NOW_NS).unwrap()
    }

    fn container(
        id: &str,
        name: &str,
        attempt: u32,
        state: ContainerState,
        exit: i32,
        reason: &str,
    ) -> Arc<ContainerStatus> {
        Arc::new(ContainerStatus {
            id: id.into(),
            name: name.into(),
            attempt,
            state,
            created_at: NOW_NS - 60_000_000_000 + attempt as i64,
            started_at: NOW_NS - 50_000_000_000,
            finished_at: if state == ContainerState::Exited { NOW_NS - 10_000_000_000 } else { 0 },
            exit_code: exit,
            reason: reason.into(),
            message: String::new(),
            image: "busybox".into(),
            labels: Default::default(),
            annotations: Default::default(),
            ..Default::default()
        })
    }

    fn pod(
        ns: &str,
        name: &str,
        labels: &[(&str, &str)],
        containers: Vec<Arc<ContainerStatus>>,
    ) -> (Arc<PodStatus>, Option<String>) {
        let mut p = PodStatus::empty(&format!("uid-{name}"), ns, name);
        p.labels = labels.iter().copied().collect();
        p.sandboxes = vec![SandboxStatus {
            id: format!("sb-{name}"),
            attempt: 0,
            state: SandboxState::Ready,
            created_at: NOW_NS - 3_600_000_000_000,
            ip: String::new(),
            additional_ips: vec![],
            ..Default::default()
        }];
        p.containers = containers;
        (Arc::new(p), None)
    }

    fn query(params: &[(&str, &str)]) -> Result<ListQuery, String> {
        let v: Vec<(String, String)> = params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ListQuery::parse(&v)
    }

    #[test]
    fn a_container_that_keeps_failing_is_marked_crash_looping_with_a_word_and_a_class() {
        let p = pod(
            "shop",
            "checkout",
            &[],
            vec![
                container("c4", "app", 4, ContainerState::Exited, 1, "Error"),
                container("c3", "app", 3, ContainerState::Exited, 1, "Error"),
                container("s0", "sidecar", 0, ContainerState::Running, 0, ""),
            ],
        );
        let rows = select(&[p], &ListQuery::default(), now());
        let html = render(&rows, &ListQuery::default(), &[], 1, "1", None, now());
        assert!(html.contains("<tr class=\"container crashloop\" data-container=\"app\">"), "{html}");
        assert!(html.contains("<span class=\"mark crashloop\">crash-looping</span>"));
        assert_eq!(html.matches("crash-looping</span>").count(), 1, "the healthy sidecar is not marked");
        assert!(html.contains("Error (exit 1)"));
    }

    #[test]
    fn an_oom_killed_attempt_marks_its_container_even_once_restarted() {
        let p = pod(
            "batch",
            "indexer",
            &[],
            vec![
                container("w1", "worker", 1, ContainerState::Running, 0, ""),
                container("w0", "worker", 0, ContainerState::Exited, 137, "OOMKilled"),
            ],
        );
        let rows = select(&[p], &ListQuery::default(), now());
        assert!(rows[0].containers[0].oom && !rows[0].containers[0].crash_loop);
        let html = render(&rows, &ListQuery::default(), &[], 1, "1", None, now());
        assert!(html.contains("<span class=\"mark oom\">OOM-killed</span>"), "{html}");
        assert!(html.contains("OOMKilled (exit 137)"));
    }

    #[test]
    fn names_and_labels_from_the_runtime_are_escaped() {
        let p = pod("default", "<img src=x onerror=alert(1)>", &[("note", "\"><script>x()</script>")], vec![]);
        let rows = select(&[p], &ListQuery::default(), now());
        let html = render(&rows, &ListQuery::default(), &[], 1, "1", None, now());
        assert!(!html.contains("<img") && !html.contains("<script"), "{html}");
        assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
        assert!(html.contains("href=\"/pods/uid-%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E\""));
    }

    #[test]
    fn the_namespace_and_the_selector_filter_the_rows() {
        let pods = [
            pod("shop", "a", &[("app", "web")], vec![]),
            pod("shop", "b", &[("app", "db")], vec![]),
            pod("batch", "c", &[("app", "web")], vec![]),
        ];
        let names = |q: &ListQuery| select(&pods, q, now()).into_iter().map(|r| r.name).collect::<Vec<_>>();
        assert_eq!(names(&query(&[("namespace", "shop")]).unwrap()), ["a", "b"]);
        assert_eq!(names(&query(&[("selector", "app=web")]).unwrap()), ["c", "a"]);
        assert_eq!(names(&query(&[("selector", "app in (web)"), ("namespace", "batch")]).unwrap()), ["c"]);
    }

    #[test]
    fn the_sort_key_and_direction_come_from_the_query() {
        let pods = [
            pod("x", "few", &[], vec![container("1", "c", 1, ContainerState::Running, 0, "")]),
            pod("x", "many", &[], vec![container("2", "c", 9, ContainerState::Running, 0, "")]),
        ];
        let first = |q: &ListQuery| select(&pods, q, now())[0].name.clone();
        assert_eq!(first(&query(&[("sort", "-restarts")]).unwrap()), "many");
        assert_eq!(first(&query(&[("sort", "restarts")]).unwrap()), "few");
        assert_eq!(first(&query(&[("sort", "-name")]).unwrap()), "many");
    }

    #[test]
    fn bad_input_is_a_message_not_a_panic() {
        let e = query(&[("selector", "app in (web")]).unwrap_err();
        assert!(e.contains("invalid label selector"), "{e}");
        assert!(query(&[("sort", "colour")]).unwrap_err().contains("expected one of namespace, name, age, restarts"));
        assert!(query(&[("bogus", "1")]).unwrap_err().contains("unknown parameter"));
        let html = render(&[], &ListQuery::default(), &[], 0, "1", Some("invalid <x>"), now());
        assert!(html.contains("<p class=\"error\" role=\"alert\">invalid &lt;x&gt;</p>"));
    }
}
