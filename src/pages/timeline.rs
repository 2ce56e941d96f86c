//! A pod's containers over time, from its journal entries: one lane per container name
//! (and one for the sandbox), one bar per attempt (a container id) from its start to
//! its death, the death marked with its exit code and reason (OOM kills distinctly),
//! and plegd's own starts and the outages it recorded on the same axis. Every bar and
//! marker carries a `<title>` with the events behind it; tables below the drawing say
//! the same in words.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::html::{clock, dur, esc, time};
use crate::journal::Entry;
use crate::model::event::EventType;
use crate::model::{ContainerState, SandboxState, nanos_to_system, short_id};
use crate::runlog::{Mark, MarkKind};

/// The sandbox's lane.
pub const SANDBOX_LANE: &str = "(sandbox)";

/// One attempt: a container id (or a sandbox id) from start to death.
#[derive(Clone, Debug, Default)]
pub struct Attempt {
    /// Its lane: the container name, or [`SANDBOX_LANE`].
    pub lane: String,
    /// Container or sandbox id.
    pub id: String,
    /// The runtime's attempt number.
    pub attempt: u32,
    /// Whether this is a sandbox.
    pub sandbox: bool,
    /// Start (the runtime's, else when plegd saw it start, else its creation).
    pub start: Option<SystemTime>,
    /// Death (the runtime's finish time, else when plegd saw it die or go).
    pub end: Option<SystemTime>,
    /// How it ended.
    pub exit: Option<Exit>,
    /// Whether it still runs as of the newest entry.
    pub running: bool,
    /// The entries about it (indexes into the timeline's entries).
    pub events: Vec<usize>,
    /// When plegd first heard of it.
    pub first_seen: Option<SystemTime>,
}

/// How an attempt ended, as the runtime said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    /// Exit code.
    pub code: i32,
    /// The runtime's reason (`Error`, `OOMKilled`, `Completed`).
    pub reason: String,
    /// The runtime's message.
    pub message: String,
}

impl Attempt {
    /// Whether it was OOM-killed.
    pub fn oom(&self) -> bool {
        self.exit.as_ref().is_some_and(|e| e.reason == "OOMKilled")
    }

    /// Whether it died of anything but a clean exit.
    pub fn failed(&self) -> bool {
        self.exit.as_ref().is_some_and(|e| e.code != 0 || (e.reason != "Completed" && !e.reason.is_empty()))
    }
}

/// A window on the axis: plegd not running, the stream down, relists failing.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// CSS class: `plegd-down`, `stream-down`, `relist-only`, `runtime-down`.
    pub class: &'static str,
    /// Words.
    pub label: String,
    /// From.
    pub from: SystemTime,
    /// To (`None`: still).
    pub to: Option<SystemTime>,
}

/// A pod's timeline.
pub struct Timeline<'a> {
    /// The journal entries, oldest first.
    pub entries: &'a [Arc<Entry>],
    /// Attempts, in order of appearance.
    pub attempts: Vec<Attempt>,
    /// Lanes, sandbox first, then by first appearance.
    pub lanes: Vec<String>,
    /// plegd's starts (and whether the run before it ended with a stop).
    pub starts: Vec<(SystemTime, String, bool)>,
    /// Outage windows.
    pub windows: Vec<Window>,
    /// Whether the pod is gone (its last entry carries no status).
    pub gone: bool,
}

fn event_time(e: &Entry) -> SystemTime {
    e.event.runtime_timestamp.unwrap_or(e.event.observed_at)
}

/// Builds the timeline from entries and the run log's marks.
pub fn build<'a>(entries: &'a [Arc<Entry>], marks: &[Mark], now: SystemTime) -> Timeline<'a> {
    let mut attempts: Vec<Attempt> = Vec::new();
    let mut by_id: BTreeMap<String, usize> = BTreeMap::new();
    let mut slot = |attempts: &mut Vec<Attempt>, id: &str, lane: &str, sandbox: bool, seen: SystemTime| -> usize {
        *by_id.entry(id.to_string()).or_insert_with(|| {
            attempts.push(Attempt {
                lane: lane.to_string(),
                id: id.to_string(),
                sandbox,
                first_seen: Some(seen),
                ..Default::default()
            });
            attempts.len() - 1
        })
    };
    for (i, e) in entries.iter().enumerate() {
        let ev = &e.event;
        // What the pod's status says of every container and sandbox it holds.
        if let Some(p) = &ev.pod {
            for c in &p.containers {
                let k = slot(&mut attempts, &c.id, &c.name, false, ev.observed_at);
                let a = &mut attempts[k];
                a.attempt = c.attempt;
                if let Some(t) = nanos_to_system(c.started_at).or_else(|| nanos_to_system(c.created_at)) {
                    a.start = Some(a.start.map_or(t, |s| s.min(t)));
                }
                a.running = c.state == ContainerState::Running;
                if c.state == ContainerState::Exited {
                    a.end = nanos_to_system(c.finished_at).or(a.end).or(Some(ev.observed_at));
                    a.exit = Some(Exit { code: c.exit_code, reason: c.reason.clone(), message: c.message.clone() });
                }
            }
            for s in &p.sandboxes {
                let k = slot(&mut attempts, &s.id, SANDBOX_LANE, true, ev.observed_at);
                let a = &mut attempts[k];
                a.attempt = s.attempt;
                a.start = a.start.or(nanos_to_system(s.created_at));
                a.running = s.state == SandboxState::Ready;
                if s.state != SandboxState::Ready && a.end.is_none() {
                    a.end = Some(event_time(e));
                }
            }
        }
        if ev.container_id.is_empty() {
            continue;
        }
        let lane = if ev.is_sandbox { SANDBOX_LANE } else { &ev.container_name };
        let k = slot(&mut attempts, &ev.container_id, lane, ev.is_sandbox, ev.observed_at);
        let a = &mut attempts[k];
        a.events.push(i);
        match ev.kind {
            EventType::ContainerStarted => {
                a.start = a.start.or(Some(event_time(e)));
                a.running = true;
            }
            EventType::ContainerDied => {
                a.end = a.end.or(Some(event_time(e)));
                a.running = false;
            }
            EventType::ContainerRemoved => {
                a.end = a.end.or(Some(event_time(e)));
                a.running = false;
            }
            _ => {}
        }
    }
    let gone = entries.last().is_some_and(|e| e.event.pod.is_none());
    if gone {
        for a in &mut attempts {
            if a.running {
                a.running = false;
                a.end = a.end.or(entries.last().map(|e| event_time(e)));
            }
        }
    }
    let mut lanes: Vec<String> = Vec::new();
    if attempts.iter().any(|a| a.sandbox) {
        lanes.push(SANDBOX_LANE.to_string());
    }
    for a in &attempts {
        if !lanes.contains(&a.lane) {
            lanes.push(a.lane.clone());
        }
    }
    let (starts, windows) = from_marks(marks, now);
    Timeline { entries, attempts, lanes, starts, windows, gone }
}

/// plegd's starts and the outage windows the run log tells of.
fn from_marks(marks: &[Mark], now: SystemTime) -> (Vec<(SystemTime, String, bool)>, Vec<Window>) {
    let mut starts = Vec::new();
    let mut windows = Vec::new();
    let mut open: BTreeMap<&'static str, (SystemTime, String)> = BTreeMap::new();
    let mut stopped = true;
    let mut close = |open: &mut BTreeMap<&'static str, (SystemTime, String)>, class: &'static str, at: SystemTime| {
        if let Some((from, label)) = open.remove(class) {
            windows.push(Window { class, label, from, to: Some(at) });
        }
    };
    for m in marks {
        let at = m.at();
        match m.kind {
            MarkKind::Start => {
                for class in ["stream-down", "relist-only", "runtime-down"] {
                    close(&mut open, class, at);
                }
                close(&mut open, "plegd-down", at);
                starts.push((at, m.detail.clone(), stopped));
                stopped = false;
            }
            MarkKind::Stop => {
                for class in ["stream-down", "relist-only", "runtime-down"] {
                    close(&mut open, class, at);
                }
                open.insert("plegd-down", (at, "plegd not running".into()));
                stopped = true;
            }
            MarkKind::Stream => {
                close(&mut open, "stream-down", at);
                close(&mut open, "relist-only", at);
                match m.detail.as_str() {
                    "down" => {
                        open.insert("stream-down", (at, "event stream down: relist only".into()));
                    }
                    "up" | "disabled" | "starting" | "connecting" => {}
                    other => {
                        open.insert("relist-only", (at, format!("event stream {other}: relist only")));
                    }
                }
            }
            MarkKind::RuntimeDown => {
                if !open.contains_key("runtime-down") {
                    open.insert("runtime-down", (at, format!("relists failing: {}", m.detail)));
                }
            }
            MarkKind::RuntimeUp => close(&mut open, "runtime-down", at),
        }
    }
    for (class, (from, label)) in open {
        windows.push(Window { class, label, from, to: None });
    }
    let _ = now;
    (starts, windows)
}

/// The drawing's geometry, in viewBox units.
const WIDTH: f64 = 1000.0;
const LABEL_W: f64 = 130.0;
const RIGHT_PAD: f64 = 70.0;
const AXIS_H: f64 = 26.0;
const LANE_H: f64 = 34.0;
const BAR_H: f64 = 14.0;

struct Axis {
    t0: SystemTime,
    span: f64,
}

impl Axis {
    fn x(&self, t: SystemTime) -> f64 {
        let dt = match t.duration_since(self.t0) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        };
        LABEL_W + (dt / self.span).clamp(0.0, 1.0) * (WIDTH - LABEL_W - RIGHT_PAD)
    }
}

fn latency(e: &Entry) -> String {
    e.event.latency().map(dur).unwrap_or_else(|| "—".into())
}

/// One entry's details as lines of a `<title>` (unescaped).
fn describe(e: &Entry) -> String {
    let ev = &e.event;
    let mut s = format!("{} · revision {} · source {}", ev.kind.as_str(), e.revision, ev.source.as_str());
    let rt = ev.runtime_timestamp.map(time).unwrap_or_else(|| "—".into());
    let _ = write!(s, "\nruntime time {rt} · observed {} · latency {}", time(ev.observed_at), latency(e));
    if !ev.message.is_empty() {
        let _ = write!(s, "\n{}", ev.message);
    }
    s
}

fn ending(a: &Attempt) -> String {
    match &a.exit {
        Some(Exit { code, reason, message }) => {
            let reason = if reason.is_empty() { "no reason given" } else { reason };
            let msg = if message.is_empty() { String::new() } else { format!(": {message}") };
            format!("exit {code} · {reason}{msg}")
        }
        None if a.running => "running".into(),
        None => "ended (no exit status)".into(),
    }
}

fn attempt_title(t: &Timeline<'_>, a: &Attempt, now: SystemTime) -> String {
    let what = if a.sandbox { "sandbox".to_string() } else { format!("{} attempt {}", a.lane, a.attempt) };
    let mut s = format!("{what} · id {}", short_id(&a.id));
    let start = a.start.map(time).unwrap_or_else(|| "—".into());
    let end = a.end.map(time).unwrap_or_else(|| if a.running { "still running".into() } else { "—".into() });
    let _ = write!(s, "\nstarted {start} · ended {end}");
    if let Some(st) = a.start {
        let _ = write!(s, " · ran {}", dur(a.end.unwrap_or(now).duration_since(st).unwrap_or_default()));
    }
    let _ = write!(s, "\n{}", ending(a));
    for &i in &a.events {
        let _ = write!(s, "\n\n{}", describe(&t.entries[i]));
    }
    s
}

/// The `<svg>` drawing: the time axis, outage windows, one lane per container with a
/// bar per attempt and its death, the reconcilers' notes, plegd's starts and now.
pub fn svg(t: &Timeline<'_>, now: SystemTime) -> String {
    let c = Canvas::of(t, now);
    let height = c.height;
    let mut s = format!(
        "<svg class=\"timeline\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-labelledby=\"tl-title\" xmlns=\"http://www.w3.org/2000/svg\"><title id=\"tl-title\">The pod's containers over time: one lane per container, one bar per attempt</title>"
    );
    draw_ticks(&mut s, &c);
    draw_windows(&mut s, t, &c);
    draw_lanes(&mut s, t, &c);
    for a in &t.attempts {
        draw_attempt(&mut s, t, a, &c);
    }
    draw_notes(&mut s, t, &c);
    draw_starts(&mut s, t, &c);
    if !t.gone {
        let x = c.axis.x(now);
        let _ = write!(
            s,
            "<g class=\"now\"><title>now: {}</title><line x1=\"{x:.1}\" y1=\"{AXIS_H}\" x2=\"{x:.1}\" y2=\"{height}\"/></g>",
            time(now)
        );
    }
    s.push_str("</svg>");
    s
}

/// Where the drawing's parts go: the time axis (the pod's attempts and events, a little
/// room at both ends), the drawing's height, plegd's own lane (below the containers').
struct Canvas {
    axis: Axis,
    height: f64,
    plegd_lane: usize,
    /// Where a bar still open ends: the last event for a pod that is gone, else now.
    open_end: SystemTime,
    now: SystemTime,
}

impl Canvas {
    fn of(t: &Timeline<'_>, now: SystemTime) -> Self {
        let last_event = t.entries.iter().map(|e| e.event.observed_at).max().unwrap_or(now);
        let end_of_axis = if t.gone { last_event } else { now.max(last_event) };
        let mut t0 = t.attempts.iter().filter_map(|a| a.start.or(a.first_seen)).min().unwrap_or(end_of_axis);
        if let Some(first) = t.entries.first() {
            t0 = t0.min(event_time(first));
        }
        let mut t1 = t.attempts.iter().filter_map(|a| a.end).max().unwrap_or(end_of_axis).max(end_of_axis);
        if t1 <= t0 {
            t1 = t0 + Duration::from_secs(1);
        }
        let span = t1.duration_since(t0).unwrap_or_default().as_secs_f64();
        // A little room at both ends.
        let pad = Duration::from_secs_f64((span * 0.02).max(0.5));
        let axis = Axis { t0: t0 - pad, span: span + 2.0 * pad.as_secs_f64() };
        let plegd_lane = t.lanes.len();
        let height = AXIS_H + LANE_H * (plegd_lane as f64 + 1.0) + 8.0;
        Self { axis, height, plegd_lane, open_end: if t.gone { last_event } else { now }, now }
    }

    /// Whether `at` is on the axis.
    fn shows(&self, at: SystemTime) -> bool {
        at >= self.axis.t0 && at <= self.axis.t0 + Duration::from_secs_f64(self.axis.span)
    }
}

/// The axis: ticks at round steps.
fn draw_ticks(s: &mut String, c: &Canvas) {
    let (axis, height) = (&c.axis, c.height);
    s.push_str("<g class=\"axis\">");
    let step = [1u64, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21_600, 43_200, 86_400]
        .into_iter()
        .find(|st| axis.span / *st as f64 <= 7.0)
        .unwrap_or(86_400 * 7);
    let t0s = axis.t0.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    let mut tick = (t0s / step + 1) * step;
    while (tick as f64) < t0s as f64 + axis.span {
        let at = std::time::UNIX_EPOCH + Duration::from_secs(tick);
        let x = axis.x(at);
        let _ = write!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{height}\"/><text x=\"{x:.1}\" y=\"14\" text-anchor=\"middle\">{}</text>",
            AXIS_H - 6.0,
            clock(at)
        );
        tick += step;
    }
    s.push_str("</g>");
}

/// Outage windows across every lane, named in plegd's lane.
fn draw_windows(s: &mut String, t: &Timeline<'_>, c: &Canvas) {
    let (axis, now, plegd_lane) = (&c.axis, c.now, c.plegd_lane);
    for w in &t.windows {
        let to = w.to.unwrap_or(now);
        if to < axis.t0 || !c.shows(w.from) && w.from > axis.t0 {
            continue;
        }
        let (x1, x2) = (axis.x(w.from), axis.x(to));
        let until = w.to.map(time).unwrap_or_else(|| "now".into());
        let _ = write!(
            s,
            "<g class=\"window {}\"><title>{}\nfrom {} to {until}</title><rect x=\"{x1:.1}\" y=\"{AXIS_H}\" width=\"{:.1}\" height=\"{:.1}\"/>",
            w.class,
            esc(&w.label),
            time(w.from),
            (x2 - x1).max(2.0),
            LANE_H * (plegd_lane as f64 + 1.0)
        );
        if x2 - x1 > 60.0 {
            let y = AXIS_H + LANE_H * plegd_lane as f64 + 28.0;
            let _ = write!(s, "<text x=\"{:.1}\" y=\"{y}\">{}</text>", x1 + 3.0, esc(&w.label));
        }
        s.push_str("</g>");
    }
}

/// The lanes' labels, one per container and plegd's.
fn draw_lanes(s: &mut String, t: &Timeline<'_>, c: &Canvas) {
    let plegd_lane = c.plegd_lane;
    for (i, lane) in t.lanes.iter().enumerate() {
        let y = AXIS_H + LANE_H * i as f64;
        let label = if lane.chars().count() > 18 {
            format!("{}…", lane.chars().take(17).collect::<String>())
        } else {
            lane.clone()
        };
        let _ = write!(
            s,
            "<g class=\"lane\" data-lane=\"{}\"><title>{}</title><text class=\"lane-label\" x=\"4\" y=\"{:.1}\">{}</text></g>",
            esc(lane),
            esc(lane),
            y + LANE_H / 2.0 + 4.0,
            esc(&label)
        );
    }
    let _ = write!(
        s,
        "<text class=\"lane-label\" x=\"4\" y=\"{:.1}\">plegd</text>",
        AXIS_H + LANE_H * plegd_lane as f64 + LANE_H / 2.0 + 4.0
    );
}

/// An attempt's bar, and its death: a cross, or for an OOM kill a filled diamond; with
/// the code and reason.
fn draw_attempt(s: &mut String, t: &Timeline<'_>, a: &Attempt, c: &Canvas) {
    let (axis, now) = (&c.axis, c.now);
    let Some(lane) = t.lanes.iter().position(|l| *l == a.lane) else { return };
    let start = a.start.or(a.first_seen).unwrap_or(axis.t0);
    let end = a.end.unwrap_or(c.open_end);
    let (x1, x2) = (axis.x(start), axis.x(end.max(start)));
    let y = AXIS_H + LANE_H * lane as f64 + (LANE_H - BAR_H) / 2.0;
    let mut class = vec![if a.sandbox { "sandbox" } else { "attempt" }];
    class.push(if a.running { "running" } else { "exited" });
    if a.oom() {
        class.push("oom");
    } else if a.failed() {
        class.push("failed");
    }
    let _ = write!(
        s,
        "<g class=\"{}\" data-lane=\"{}\" data-id=\"{}\" data-attempt=\"{}\"><title>{}</title><rect x=\"{x1:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{BAR_H}\" rx=\"2\"/>",
        class.join(" "),
        esc(&a.lane),
        esc(&a.id),
        a.attempt,
        esc(&attempt_title(t, a, now)),
        (x2 - x1).max(2.0)
    );
    if !a.sandbox && x2 - x1 > 22.0 {
        let _ = write!(s, "<text x=\"{:.1}\" y=\"{:.1}\">#{}</text>", x1 + 3.0, y + BAR_H - 3.0, a.attempt);
    }
    s.push_str("</g>");
    // The death: a cross, or for an OOM kill a filled diamond; with the code and reason.
    if let (Some(end), Some(Exit { code, reason, .. }), false) = (a.end, &a.exit, a.sandbox) {
        let x = axis.x(end);
        let cy = y + BAR_H / 2.0;
        let oom = a.oom();
        let shape = if oom {
            format!("M{x:.1} {:.1} L{:.1} {cy:.1} L{x:.1} {:.1} L{:.1} {cy:.1} Z", cy - 7.0, x + 7.0, cy + 7.0, x - 7.0)
        } else {
            format!(
                "M{:.1} {:.1} L{:.1} {:.1} M{:.1} {:.1} L{:.1} {:.1}",
                x - 5.0,
                cy - 5.0,
                x + 5.0,
                cy + 5.0,
                x - 5.0,
                cy + 5.0,
                x + 5.0,
                cy - 5.0
            )
        };
        let words = if oom { format!("OOM {code}") } else { format!("{code} {reason}") };
        let died = a.events.iter().rev().find(|&&i| t.entries[i].event.kind == EventType::ContainerDied);
        let detail = died.map(|&i| describe(&t.entries[i])).unwrap_or_else(|| {
            "plegd saw no death event (it was not running, or the container was removed at once)".into()
        });
        let _ = write!(
            s,
            "<g class=\"death{}\" data-lane=\"{}\" data-attempt=\"{}\"><title>{} attempt {} died: {}\nat {}\n\n{}</title><path d=\"{shape}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text></g>",
            if oom { " oom" } else { "" },
            esc(&a.lane),
            a.attempt,
            esc(&a.lane),
            a.attempt,
            esc(&ending(a)),
            time(end),
            esc(&detail),
            x + 8.0,
            y - 1.0,
            esc(&words)
        );
    }
}

/// Notes from the reconcilers (crash loops) on their container's lane.
fn draw_notes(s: &mut String, t: &Timeline<'_>, c: &Canvas) {
    let axis = &c.axis;
    for e in t.entries.iter().filter(|e| matches!(e.event.kind, EventType::CrashLoop | EventType::CrashLoopCleared)) {
        let Some(lane) = t.lanes.iter().position(|l| **l == *e.event.container_name) else { continue };
        let x = axis.x(e.event.observed_at);
        let y = AXIS_H + LANE_H * lane as f64 + 3.0;
        let _ = write!(
            s,
            "<g class=\"note\"><title>{}</title><path d=\"M{:.1} {y:.1} L{:.1} {y:.1} L{x:.1} {:.1} Z\"/></g>",
            esc(&describe(e)),
            x - 4.0,
            x + 4.0,
            y + 6.0
        );
    }
}

/// plegd's starts, in its lane.
fn draw_starts(s: &mut String, t: &Timeline<'_>, c: &Canvas) {
    let (axis, plegd_lane) = (&c.axis, c.plegd_lane);
    for (at, detail, clean) in &t.starts {
        if !c.shows(*at) {
            continue;
        }
        let x = axis.x(*at);
        let y = AXIS_H + LANE_H * plegd_lane as f64;
        let before =
            if *clean { "" } else { " (the run before ended without stopping: killed, crashed or the node went down)" };
        let _ = write!(
            s,
            "<g class=\"plegd-start\"><title>plegd started {}{before}\n{}</title><path d=\"M{x:.1} {AXIS_H} L{x:.1} {:.1}\"/><text x=\"{:.1}\" y=\"{:.1}\">plegd started</text></g>",
            time(*at),
            esc(detail),
            y + LANE_H,
            x + 3.0,
            y + 14.0
        );
    }
}

/// The tables below the drawing: the attempts, plegd's marks, every event.
pub fn tables(t: &Timeline<'_>, now: SystemTime) -> String {
    let mut s = String::from(
        "<h2>Attempts</h2><div class=\"scroll\"><table class=\"attempts\"><thead><tr><th>Lane</th><th>Attempt</th><th>Id</th><th>Started</th><th>Ended</th><th>Ran</th><th>How it ended</th></tr></thead><tbody>",
    );
    for lane in &t.lanes {
        for a in t.attempts.iter().filter(|a| a.lane == *lane) {
            let ran = a
                .start
                .map(|st| dur(a.end.unwrap_or(now).duration_since(st).unwrap_or_default()))
                .unwrap_or_else(|| "—".into());
            let mut class = String::new();
            let mut mark = String::new();
            if a.oom() {
                class.push_str(" class=\"oom\"");
                mark.push_str(" <span class=\"mark oom\">OOM-killed</span>");
            } else if a.failed() {
                class.push_str(" class=\"failed\"");
            }
            let _ = write!(
                s,
                "<tr{class}><td>{}</td><td class=\"num\">{}</td><td class=\"id\">{}</td><td>{}</td><td>{}</td><td class=\"num\">{ran}</td><td>{}{mark}</td></tr>",
                esc(lane),
                a.attempt,
                esc(short_id(&a.id)),
                a.start.map(time).unwrap_or_else(|| "—".into()),
                a.end.map(time).unwrap_or_else(|| if a.running { "running".into() } else { "—".into() }),
                esc(&ending(a)),
            );
        }
    }
    s.push_str("</tbody></table></div>");
    if !t.starts.is_empty() || !t.windows.is_empty() {
        s.push_str("<h2>plegd and the runtime</h2><ul class=\"marks\">");
        let mut items: Vec<(SystemTime, String)> = t
            .starts
            .iter()
            .map(|(at, d, clean)| {
                let before = if *clean { "" } else { " — the run before ended without stopping" };
                (*at, format!("{}: plegd started ({}){before}", time(*at), esc(d)))
            })
            .collect();
        for w in &t.windows {
            let to = w.to.map(time).unwrap_or_else(|| "now".into());
            items.push((w.from, format!("{} – {to}: {}", time(w.from), esc(&w.label))));
        }
        items.sort_by_key(|(at, _)| *at);
        for (_, line) in items.iter().rev().take(50).rev() {
            let _ = write!(s, "<li>{line}</li>");
        }
        s.push_str("</ul>");
    }
    s.push_str("<h2>Events</h2><div class=\"scroll\"><table class=\"events\"><thead><tr><th>Revision</th><th>Type</th><th>Container</th><th>Source</th><th>Runtime time</th><th>Observed</th><th>Latency</th><th>Exit</th><th>Message</th></tr></thead><tbody>");
    for e in t.entries.iter().rev() {
        let ev = &e.event;
        let who = if ev.is_sandbox {
            format!("sandbox <span class=\"id\">{}</span>", esc(short_id(&ev.container_id)))
        } else if ev.container_id.is_empty() {
            esc(&ev.container_name)
        } else {
            let attempt = ev
                .pod
                .as_ref()
                .and_then(|p| p.containers.iter().find(|c| c.id == ev.container_id))
                .map(|c| format!(" #{}", c.attempt))
                .unwrap_or_default();
            format!(
                "{}{attempt} <span class=\"id\">{}</span>",
                esc(&ev.container_name),
                esc(short_id(&ev.container_id))
            )
        };
        let exit = ev
            .pod
            .as_ref()
            .and_then(|p| p.containers.iter().find(|c| c.id == ev.container_id))
            .filter(|c| c.state == ContainerState::Exited && ev.kind == EventType::ContainerDied)
            .map(|c| format!("{} {}", c.exit_code, esc(&c.reason)))
            .unwrap_or_default();
        let _ = write!(
            s,
            "<tr data-revision=\"{}\"><td class=\"num\">{}</td><td>{}</td><td>{who}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{exit}</td><td>{}</td></tr>",
            e.revision,
            e.revision,
            ev.kind.as_str(),
            ev.source.as_str(),
            ev.runtime_timestamp.map(time).unwrap_or_else(|| "—".into()),
            time(ev.observed_at),
            latency(e),
            esc(&ev.message)
        );
    }
    s.push_str("</tbody></table></div>");
    s
}

/// The pod page's `<main>`.
pub fn render(uid: &str, epoch: u64, t: &Timeline<'_>, since: &str, now: SystemTime) -> String {
    let last = t.entries.last();
    let pod = t.entries.iter().rev().find_map(|e| e.event.pod.as_ref());
    let (ns, name) =
        last.map(|e| (e.event.pod_namespace.to_string(), e.event.pod_name.to_string())).unwrap_or_default();
    let mut s = format!("<main data-since=\"{}\" data-revision=\"{}\">", esc(since), last.map_or(0, |e| e.revision));
    let _ = write!(s, "<h1>{}/{}</h1>", esc(&ns), esc(&name));
    let labels: Vec<String> = pod
        .map(|p| {
            p.labels
                .iter()
                .filter(|(k, _)| !k.starts_with("io.kubernetes.pod."))
                .map(|(k, v)| format!("{}={}", esc(k), esc(v)))
                .collect()
        })
        .unwrap_or_default();
    let _ = write!(
        s,
        "<p class=\"muted\">uid <code>{}</code> · {} events · journal epoch {epoch} · last revision {}{}</p>",
        esc(uid),
        t.entries.len(),
        last.map_or(0, |e| e.revision),
        if t.gone { " · <strong>the pod is gone</strong>" } else { "" }
    );
    if !labels.is_empty() {
        let _ = write!(s, "<p class=\"labels\">{}</p>", labels.join(" "));
    }
    s.push_str("<p class=\"legend muted\">Bars: one per attempt, from start to death (green: running; red outline: failed; purple: OOM-killed). ✕ a death with its exit code and reason; ◆ an OOM kill; ▼ a crash-loop note; dashed line: plegd started; shaded: plegd not running, event stream down, or relists failing. Hover for details; the tables below say the same.</p>");
    s.push_str("<div class=\"scroll\">");
    s.push_str(&svg(t, now));
    s.push_str("</div>");
    s.push_str(&tables(t, now));
    s.push_str("</main>");
    s
}

#[cfg(test)]
mod tests;
