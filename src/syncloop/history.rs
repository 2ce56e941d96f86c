//! The sync loop's history: one record per processed event, packed so that each costs
//! one allocation, and kept within a memory budget that counts what the allocator hands
//! out; what `/debug/events` and the pages show.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Serialize;

/// One handler's part in a record.
#[derive(Clone, Debug, Serialize)]
pub struct HandlerRecord {
    /// Handler name.
    pub handler: &'static str,
    /// What it changed.
    pub change: Box<str>,
    /// Its error, if it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Box<str>>,
}

/// The history record of one processed event.
#[derive(Clone, Debug, Serialize)]
pub struct EventRecord {
    /// Sequence number.
    pub seq: u64,
    /// Event name (`CONTAINER_DIED`, `resync:startup`, `follow-up:CRASH_LOOP`).
    pub name: Cow<'static, str>,
    /// What it was about.
    pub description: Box<str>,
    /// The journal revision, for lifecycle events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// The event it follows up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follow_up_of: Option<u64>,
    /// Whether handlers ran in reverse order.
    pub reverse: bool,
    /// When processing started.
    #[serde(serialize_with = "ser_time")]
    pub started_at: SystemTime,
    /// Processing time, microseconds.
    pub duration_us: u64,
    /// Each selected handler's outcome, in the order they ran.
    pub handlers: Vec<HandlerRecord>,
}

fn ser_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::model::rfc3339(*t))
}

/// The event history: records older than the retention are trimmed, except those of
/// the first hour after start, which are kept for good.
///
/// A record is kept packed ([`Packed`]): its fixed fields in the queue's slot and all
/// its text in one allocation, so each record is one heap block besides its slot. What
/// the history counts against its budget is what the allocator hands out for it: each
/// text block as glibc's `malloc` sizes it ([`block`]: rounded up, with its header) and
/// the two queues' whole buffers, spare capacity included.
pub struct History {
    started: SystemTime,
    boot_window: Duration,
    retention: Duration,
    max: usize,
    pub(super) boot: VecDeque<Packed>,
    pub(super) recent: VecDeque<Packed>,
    /// Bytes the records may take, all told; the oldest go first beyond it (the boot
    /// window's too, once nothing else is left).
    budget: usize,
    /// The text blocks' cost; the queues' buffers are added in [`History::bytes`].
    text_bytes: usize,
}

/// What one allocation of `len` bytes costs glibc's `malloc`: the bytes and its 8-byte
/// header rounded up to its 16-byte chunks, at least its 32-byte smallest chunk (the
/// lookup's `tomb_cost` counts the same way; a zero-length box allocates nothing).
pub(crate) fn block(len: usize) -> usize {
    if len == 0 { 0 } else { ((len + 8).div_ceil(16) * 16).max(32) }
}

/// What a text block takes in the allocator. On glibc what `malloc` handed out: its
/// usable size and its header, [`block`] or 16 bytes more when it did not split a free
/// chunk whose remainder was under its smallest; elsewhere [`block`].
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(super) fn text_cost(text: &[u8]) -> usize {
    unsafe extern "C" {
        fn malloc_usable_size(p: *const std::ffi::c_void) -> usize;
    }
    if text.is_empty() {
        return 0;
    }
    // SAFETY: a non-empty boxed slice is a live block of the global allocator, which is
    // glibc's malloc in plegd (no `#[global_allocator]`); the call only reads its header.
    unsafe { malloc_usable_size(text.as_ptr().cast()) + 8 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(super) fn text_cost(text: &[u8]) -> usize {
    block(text.len())
}

/// Sentinel of [`Packed`]'s optional numbers: no sequence number or revision gets there.
const NONE: u64 = u64::MAX;

/// One record as the history keeps it: 64 bytes of fixed fields and one allocation
/// holding its texts (see [`Packed::pack`]).
pub(super) struct Packed {
    pub(super) seq: u64,
    started_at: SystemTime,
    revision: u64,
    follow_up_of: u64,
    /// The record's owned name (if `name` is 0), description and handler outcomes:
    /// each text as a varint length and its bytes; a handler as its name's
    /// [`static_name`] index, an error flag, its change, and its error if it has one.
    pub(super) text: Box<[u8]>,
    duration_us: u32,
    /// [`static_name`] index + 1 of a static event name; 0: the name is in `text`.
    name: u8,
    handlers: u8,
    reverse: bool,
}

/// Names that are `&'static str` (event kinds, handler names) stored as one byte: a
/// few dozen at most, all literals in plegd's code.
fn static_name(s: &'static str) -> u8 {
    let mut names = STATIC_NAMES.lock().expect("static names lock");
    if let Some(i) = names.iter().position(|n| *n == s) {
        return i as u8;
    }
    assert!(names.len() < 255, "more than 255 static names in the history");
    names.push(s);
    (names.len() - 1) as u8
}

fn static_name_at(i: u8) -> &'static str {
    STATIC_NAMES.lock().expect("static names lock")[usize::from(i)]
}

static STATIC_NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

fn put_text(buf: &mut Vec<u8>, s: &str) {
    let mut n = s.len();
    while n >= 0x80 {
        buf.push((n as u8) | 0x80);
        n >>= 7;
    }
    buf.push(n as u8);
    buf.extend_from_slice(s.as_bytes());
}

fn take_text<'a>(buf: &mut &'a [u8]) -> &'a str {
    let (mut n, mut shift) = (0usize, 0);
    loop {
        let b = buf[0];
        *buf = &buf[1..];
        n |= usize::from(b & 0x7f) << shift;
        shift += 7;
        if b < 0x80 {
            break;
        }
    }
    let (s, rest) = buf.split_at(n);
    *buf = rest;
    std::str::from_utf8(s).expect("packed from a str")
}

impl Packed {
    fn pack(r: EventRecord) -> Self {
        let texts = r.description.len()
            + r.handlers
                .iter()
                .map(|h| 2 + 2 * 5 + h.change.len() + h.error.as_ref().map_or(0, |e| e.len()))
                .sum::<usize>();
        let mut buf = Vec::with_capacity(texts + r.name.len() + 10);
        let name = match r.name {
            Cow::Borrowed(s) => static_name(s) + 1,
            Cow::Owned(s) => {
                put_text(&mut buf, &s);
                0
            }
        };
        put_text(&mut buf, &r.description);
        for h in &r.handlers {
            buf.push(static_name(h.handler));
            buf.push(u8::from(h.error.is_some()));
            put_text(&mut buf, &h.change);
            if let Some(e) = &h.error {
                put_text(&mut buf, e);
            }
        }
        Self {
            seq: r.seq,
            started_at: r.started_at,
            revision: r.revision.unwrap_or(NONE),
            follow_up_of: r.follow_up_of.unwrap_or(NONE),
            // A fresh block of exactly the text: shrinking `buf` in place
            // (`into_boxed_slice`) would leave glibc's chunk as large as reserved when
            // what it gives back is under its 32-byte smallest chunk.
            text: buf.as_slice().into(),
            duration_us: u32::try_from(r.duration_us).unwrap_or(u32::MAX),
            name,
            handlers: u8::try_from(r.handlers.len()).expect("at most 255 handlers"),
            reverse: r.reverse,
        }
    }

    fn unpack(&self) -> EventRecord {
        let mut buf = &self.text[..];
        let name = match self.name {
            0 => Cow::Owned(take_text(&mut buf).to_owned()),
            i => Cow::Borrowed(static_name_at(i - 1)),
        };
        let description = take_text(&mut buf).into();
        let handlers = (0..self.handlers)
            .map(|_| {
                let (handler, failed) = (static_name_at(buf[0]), buf[1] == 1);
                buf = &buf[2..];
                let change = take_text(&mut buf).into();
                let error = failed.then(|| take_text(&mut buf).into());
                HandlerRecord { handler, change, error }
            })
            .collect();
        EventRecord {
            seq: self.seq,
            name,
            description,
            revision: (self.revision != NONE).then_some(self.revision),
            follow_up_of: (self.follow_up_of != NONE).then_some(self.follow_up_of),
            reverse: self.reverse,
            started_at: self.started_at,
            duration_us: u64::from(self.duration_us),
            handlers,
        }
    }

    /// What its text block costs.
    fn cost(&self) -> usize {
        text_cost(&self.text)
    }
}

impl EventRecord {
    /// What the record costs the history that keeps it: its slot and its one text
    /// block, as the allocator counts them (the slot's share of a queue's spare
    /// capacity is counted by the history).
    pub fn footprint(&self) -> usize {
        size_of::<Packed>() + Packed::pack(self.clone()).cost()
    }
}

/// A history query (`/debug/events`).
#[derive(Clone, Debug, Default)]
pub struct Query {
    /// Records started at or after this time.
    pub since: Option<SystemTime>,
    /// Records started at or before this time.
    pub until: Option<SystemTime>,
    /// Only this sequence number.
    pub seq: Option<u64>,
    /// Only the last N (after the other filters).
    pub last: Option<usize>,
}

impl History {
    /// A history keeping records for `retention` (and the first `boot_window` for
    /// good), at most `max` records outside the boot window.
    pub fn new(retention: Duration, boot_window: Duration, max: usize) -> Self {
        Self::started_at(crate::clock::now(), retention, boot_window, max)
    }

    /// A history whose process started at `started`.
    pub fn started_at(started: SystemTime, retention: Duration, boot_window: Duration, max: usize) -> Self {
        Self {
            started,
            boot_window,
            retention,
            max,
            boot: VecDeque::new(),
            recent: VecDeque::new(),
            budget: usize::MAX,
            text_bytes: 0,
        }
    }

    /// Keeps the records within `bytes` of memory.
    pub fn with_budget(mut self, bytes: usize) -> Self {
        self.budget = bytes;
        self
    }

    /// Adds a record and trims.
    pub fn push(&mut self, r: EventRecord) {
        let in_boot = r.started_at.duration_since(self.started).map(|d| d < self.boot_window).unwrap_or(true);
        let p = Packed::pack(r);
        let to_boot = in_boot && self.boot.len() < self.max;
        // A full queue grows only into what the budget leaves (doubling while it can);
        // otherwise its oldest record makes room, so its buffer never outgrows the budget.
        // (Less a page and a header: a large buffer is mapped in whole pages.)
        let spare = self.budget.saturating_sub(self.bytes() + p.cost() + 4112) / size_of::<Packed>();
        let q = if to_boot { &mut self.boot } else { &mut self.recent };
        if q.len() == q.capacity() {
            let cap = q.capacity();
            let grow = cap.max(16).min(spare);
            if grow >= (cap / 8).max(1) {
                q.reserve_exact(grow);
            } else if let Some(gone) = q.pop_front() {
                self.text_bytes -= gone.cost();
            } else {
                q.reserve_exact(1);
            }
        }
        self.text_bytes += p.cost();
        q.push_back(p);
        self.trim(crate::clock::now());
    }

    /// Drops records older than the retention (outside the boot window).
    pub fn trim(&mut self, now: SystemTime) {
        while let Some(front) = self.recent.front() {
            let old = now.duration_since(front.started_at).is_ok_and(|age| age > self.retention);
            let over = self.bytes() > self.budget && !self.shrink_spare();
            if old || self.recent.len() > self.max || over {
                let gone = self.recent.pop_front().expect("non-empty");
                self.text_bytes -= gone.cost();
            } else {
                break;
            }
        }
        while self.bytes() > self.budget && !self.shrink_spare() {
            let Some(gone) = self.boot.pop_front() else { break };
            self.text_bytes -= gone.cost();
        }
        // A queue emptied by age (or by a budget its buffer alone exceeds) gives its
        // spare slots back.
        for q in [&mut self.boot, &mut self.recent] {
            if q.capacity() > 4 * q.len() + 64 {
                q.shrink_to(2 * q.len());
            }
        }
        if self.bytes() > self.budget {
            self.boot.shrink_to_fit();
            self.recent.shrink_to_fit();
        }
    }

    /// Gives back a queue's spare slots if they are many (a quarter of its records,
    /// at least 64), so that budget goes to records again; whether that made the
    /// history fit its budget.
    fn shrink_spare(&mut self) -> bool {
        for q in [&mut self.boot, &mut self.recent] {
            if q.capacity() - q.len() > (q.len() / 4).max(64) {
                q.shrink_to(q.len() + q.len() / 8);
            }
        }
        self.bytes() <= self.budget
    }

    /// Bytes the records take in the allocator: their text blocks ([`block`]) and the
    /// queues' buffers, spare slots included.
    pub fn bytes(&self) -> usize {
        self.text_bytes + buffer_cost(&self.boot) + buffer_cost(&self.recent)
    }

    /// Records matching the query, oldest first.
    pub fn query(&self, q: &Query) -> Vec<Arc<EventRecord>> {
        let hits: Vec<&Packed> = self
            .boot
            .iter()
            .chain(self.recent.iter())
            .filter(|r| q.seq.is_none_or(|s| r.seq == s))
            .filter(|r| q.since.is_none_or(|t| r.started_at >= t))
            .filter(|r| q.until.is_none_or(|t| r.started_at <= t))
            .collect();
        let from = match q.last {
            Some(n) if n < hits.len() => hits.len() - n,
            _ => 0,
        };
        hits[from..].iter().map(|p| Arc::new(p.unpack())).collect()
    }

    /// Number of records kept.
    pub fn len(&self) -> usize {
        self.boot.len() + self.recent.len()
    }

    /// Whether no record is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a queue's buffer costs: a heap block, or beyond glibc's smallest mmap
/// threshold (128 KiB) whole pages with the mapping's header.
pub(super) fn buffer_cost(q: &VecDeque<Packed>) -> usize {
    let len = q.capacity() * size_of::<Packed>();
    if len >= 128 * 1024 { (len + 16).next_multiple_of(4096) } else { block(len) }
}
