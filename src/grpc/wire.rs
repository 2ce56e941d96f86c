//! How the API's messages go on the wire: the served `Watch` stream's message type
//! ([`WatchFrame`]), which carries a published event's shared encoding, the cache that
//! encodes each published event once however many watchers send it ([`EncodedTail`]),
//! and the codec the generated server uses.
//!
//! The journal knows events, not their encoding: encoding is this layer's job.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use prost::Message;
use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{DecodeContext, WireType, encode_key, encode_varint, encoded_len_varint, key_len};
use tonic::codec::{BufferSettings, Codec as TonicCodec};
use tonic_prost::{ProstDecoder, ProstEncoder};

use crate::journal::Entry;
use crate::model::identity::Identities;
use crate::proto::plegd as api;

/// One message of a served Watch stream: a message made for this watcher, or a
/// journal event whose encoding all watchers share. It encodes exactly as the
/// `WatchEvent` it stands for (a `WatchEvent` is its revision, field 1, and the
/// event, field 4, one after the other on the wire), so clients decode `WatchEvent`.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchFrame {
    /// A snapshot, synced, reset, start or bookmark message.
    Message(Box<api::WatchEvent>),
    /// A published event: its revision and its encoded `LifecycleEvent`.
    Event {
        /// The event's revision.
        revision: u64,
        /// `LifecycleEvent`, encoded once.
        event: Bytes,
    },
}

impl Default for WatchFrame {
    fn default() -> Self {
        Self::Message(Box::default())
    }
}

impl WatchFrame {
    /// The `WatchEvent` this stands for, decoded (tests, and the rare caller that needs
    /// the message type on the server side).
    pub fn into_message(self) -> Result<api::WatchEvent, prost::DecodeError> {
        match self {
            Self::Message(m) => Ok(*m),
            Self::Event { revision, event } => Ok(api::WatchEvent {
                revision,
                kind: Some(api::watch_event::Kind::Event(api::LifecycleEvent::decode(event)?)),
            }),
        }
    }
}

impl Message for WatchFrame {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        match self {
            Self::Message(m) => m.encode_raw(buf),
            Self::Event { revision, event } => {
                if *revision != 0 {
                    prost::encoding::uint64::encode(1, revision, buf);
                }
                encode_key(4, WireType::LengthDelimited, buf);
                encode_varint(event.len() as u64, buf);
                buf.put_slice(event);
            }
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        if let Self::Event { .. } = self {
            *self = Self::Message(Box::new(std::mem::take(self).into_message()?));
        }
        let Self::Message(m) = self else { unreachable!("made a message above") };
        m.merge_field(tag, wire_type, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        match self {
            Self::Message(m) => m.encoded_len(),
            Self::Event { revision, event } => {
                let rev = if *revision != 0 { prost::encoding::uint64::encoded_len(1, revision) } else { 0 };
                rev + key_len(4) + encoded_len_varint(event.len() as u64) + event.len()
            }
        }
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// The encodings of the newest published events, so that each is encoded once
/// however many watchers send it. Live watchers send entries close to the head;
/// the ones further behind (replays, slow watchers) encode again rather than hold
/// the encodings of the whole journal in memory (an encoding carries the whole pod,
/// ≈ 2 KiB for a pod of five containers). Bounded by count and by bytes: a pod whose
/// annotations are as large as the API server allows (256 KiB) is encoded for each
/// watcher rather than kept [`ENCODED_TAIL`] times over.
pub struct EncodedTail {
    slots: Vec<Mutex<Option<(u64, Bytes)>>>,
    /// Bytes of the encodings kept.
    held: std::sync::atomic::AtomicUsize,
    budget: usize,
    /// The pods' identities.
    identities: Arc<Identities>,
}

/// How many of the newest events keep their encoding.
pub const ENCODED_TAIL: usize = 256;

/// Bytes of encodings kept at most.
pub const ENCODED_TAIL_BYTES: usize = 2 << 20;

impl EncodedTail {
    /// The tail of the node's events, with the pods' identities as `identities` holds
    /// them, [`ENCODED_TAIL`] slots holding at most [`ENCODED_TAIL_BYTES`].
    pub fn with(identities: Arc<Identities>) -> Self {
        Self::new(ENCODED_TAIL, ENCODED_TAIL_BYTES, identities)
    }

    /// A tail of `n` slots holding at most `budget` bytes.
    pub fn new(n: usize, budget: usize, identities: Arc<Identities>) -> Self {
        Self { slots: (0..n.max(1)).map(|_| Mutex::new(None)).collect(), held: Default::default(), budget, identities }
    }

    /// Bytes of the encodings kept.
    pub fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `entry` as a frame: its shared encoding when a watcher already made it,
    /// otherwise encoded now and kept for the next watchers (within the byte budget).
    /// A slot belongs to the newest revision that lands in it, so an old entry never
    /// evicts a newer one.
    pub fn frame(&self, entry: &Entry) -> WatchFrame {
        use std::sync::atomic::Ordering::Relaxed;
        let rev = entry.revision;
        let slot = &self.slots[(rev % self.slots.len() as u64) as usize];
        let mut slot = slot.lock().expect("encoding slot");
        let event = match &*slot {
            Some((r, bytes)) if *r == rev => bytes.clone(),
            Some((r, _)) if *r > rev => Bytes::from(entry.event.to_api(&self.identities).encode_to_vec()),
            _ => {
                let bytes = Bytes::from(entry.event.to_api(&self.identities).encode_to_vec());
                if let Some((_, old)) = slot.take() {
                    self.held.fetch_sub(old.len(), Relaxed);
                }
                // Reserve first: concurrent framers never take the total past the budget.
                let before = self.held.fetch_add(bytes.len(), Relaxed);
                if before + bytes.len() <= self.budget {
                    *slot = Some((rev, bytes.clone()));
                } else {
                    self.held.fetch_sub(bytes.len(), Relaxed);
                }
                bytes
            }
        };
        WatchFrame::Event { revision: rev, event }
    }

    /// Whether `revision`'s encoding is kept.
    #[cfg(test)]
    fn keeps(&self, revision: u64) -> bool {
        let slot = &self.slots[(revision % self.slots.len() as u64) as usize];
        matches!(&*slot.lock().expect("encoding slot"), Some((r, _)) if *r == revision)
    }
}

/// The codec the generated `PodLifecycle` server uses: prost's, writing in chunks of
/// 8 KiB rather than tonic's 32 KiB, so a backlog reaches the socket in smaller pieces
/// and leaves less memory behind (about 2 MiB less with 10 watchers at startup; at
/// 100 watchers × 10,000 events/s the rate was the same).
#[derive(Debug)]
pub struct Codec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

/// Write chunks of the API's streams.
const CHUNK: usize = 8 * 1024;

impl<T, U> TonicCodec for Codec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::new(CHUNK, CHUNK))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::default()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::SystemTime;

    use super::*;
    use crate::journal::Journal;
    use crate::model::PodStatus;
    use crate::model::event::{EventSource, EventType, PodLifecycleEvent};

    fn node_a() -> Arc<Identities> {
        Arc::new(Identities::new("node-a", std::time::Duration::ZERO))
    }

    fn append(j: &Journal, uid: &str) -> Arc<Entry> {
        let pod = Arc::new(PodStatus::empty(uid, "ns", &format!("pod-{uid}")));
        j.append(PodLifecycleEvent {
            pod_uid: uid.into(),
            pod_namespace: "ns".into(),
            pod_name: format!("pod-{uid}").into(),
            kind: EventType::ContainerStarted,
            container_id: format!("c-{uid}"),
            container_name: "c".into(),
            is_sandbox: false,
            source: EventSource::CriEvent,
            observed_at: SystemTime::now(),
            runtime_timestamp: None,
            pod: Some(pod),
            message: String::new(),
        })
        .expect("appended");
        j.timeline(uid).expect("timeline").last().cloned().expect("an entry")
    }

    #[test]
    fn a_shared_event_frame_is_byte_for_byte_the_watch_event_it_stands_for() {
        let j = Journal::new(100, 10, crate::journal::JournalMetrics::throwaway());
        let e = append(&j, "u1");
        let frame = EncodedTail::new(4, 1 << 20, node_a()).frame(&e);
        let want = api::WatchEvent {
            revision: e.revision,
            kind: Some(api::watch_event::Kind::Event(e.event.to_api(&node_a()))),
        };
        assert_eq!(frame.encode_to_vec(), want.encode_to_vec());
        assert_eq!(frame.encoded_len(), want.encoded_len());
        // A client decodes it as the plain message.
        assert_eq!(api::WatchEvent::decode(frame.encode_to_vec().as_slice()).unwrap(), want);
        assert_eq!(frame.into_message().unwrap(), want);
        // Revision 0 (a message field left out) also matches.
        let zero = WatchFrame::Event { revision: 0, event: e.event.to_api(&node_a()).encode_to_vec().into() };
        let want0 = api::WatchEvent { revision: 0, kind: want.kind.clone() };
        assert_eq!(zero.encode_to_vec(), want0.encode_to_vec());
    }

    #[test]
    fn a_broken_shared_encoding_is_a_decode_error_not_a_panic() {
        let broken = WatchFrame::Event { revision: 1, event: vec![0x0a, 0x05, 0x61].into() };
        assert!(broken.into_message().is_err());
    }

    #[test]
    fn the_tail_keeps_the_newest_encodings_and_an_older_entry_never_evicts_a_newer_one() {
        let j = Journal::new(100, 10, crate::journal::JournalMetrics::throwaway());
        let entries: Vec<_> = (0..6).map(|i| append(&j, &format!("p{i}"))).collect();
        let tail = EncodedTail::new(4, 1 << 20, node_a());
        for e in &entries {
            tail.frame(e);
        }
        let kept: Vec<bool> = entries.iter().map(|e| tail.keeps(e.revision)).collect();
        assert_eq!(kept, [false, false, true, true, true, true]);
        // A replaying watcher sends the oldest entry again: encoded for it, the newer
        // encoding in its slot stays.
        let old = tail.frame(&entries[0]);
        assert!(tail.keeps(entries[4].revision) && !tail.keeps(entries[0].revision));
        assert_eq!(old.into_message().unwrap().revision, entries[0].revision);
    }

    #[test]
    fn the_tail_holds_no_more_bytes_than_its_budget_however_large_the_pods() {
        let j = Journal::new(1000, 100, crate::journal::JournalMetrics::throwaway());
        let big = "x".repeat(256 << 10);
        let tail = EncodedTail::new(256, 2 << 20, node_a());
        let mut kept = 0;
        for i in 0..64 {
            let mut pod = PodStatus::empty("big", "ns", "big");
            pod.annotations = [("note", big.as_str())].into();
            j.append(PodLifecycleEvent {
                pod_uid: "big".into(),
                pod_namespace: "ns".into(),
                pod_name: "big".into(),
                kind: EventType::ContainerDied,
                container_id: format!("c{i}"),
                container_name: "c".into(),
                is_sandbox: false,
                source: EventSource::CriEvent,
                observed_at: SystemTime::now(),
                runtime_timestamp: None,
                pod: Some(Arc::new(pod)),
                message: String::new(),
            })
            .expect("appended");
            let e = j.timeline("big").unwrap().last().cloned().unwrap();
            let frame = tail.frame(&e);
            // Every watcher still gets the whole event.
            assert!(frame.encoded_len() > 256 << 10);
            assert!(tail.held() <= 2 << 20, "{} bytes held after {i} events", tail.held());
            kept += usize::from(tail.keeps(e.revision));
        }
        assert!(kept >= 1, "what fits is still kept");
        // Small events are kept again as the large ones age out of their slots.
        let small: Vec<_> = (0..300).map(|i| append(&j, &format!("s{i}"))).collect();
        for e in &small {
            tail.frame(e);
        }
        assert!(small.iter().rev().take(200).all(|e| tail.keeps(e.revision)));
    }
}
