//! The full listing a relist reads, kept as the runtime encoded it: fingerprinted
//! without decoding (an unchanged listing is not decoded at all), and decoded through
//! field-projected messages — the wire format of `ListPodSandboxResponse` and
//! `ListContainersResponse` without the label, annotation and image fields, which
//! protobuf decoders skip — so a relist of thousands of containers allocates no maps
//! it would throw away.

use std::collections::HashSet;

use prost::Message;
use prost::bytes::{Buf, Bytes};

use crate::proto::runtime as v1;

/// `ListPodSandbox` and `ListContainers` answers (no filter), as encoded on the wire.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EncodedListing {
    /// A `ListPodSandboxResponse`.
    pub sandboxes: Bytes,
    /// A `ListContainersResponse`.
    pub containers: Bytes,
}

/// A decoded projected listing: sandboxes and containers.
pub type BriefListing = (Vec<BriefSandbox>, Vec<BriefContainer>);

/// A tonic codec that encodes requests with prost and hands answers over undecoded.
#[derive(Debug)]
pub struct RawCodec<Req>(std::marker::PhantomData<Req>);

/// The decoder of [`RawCodec`]: takes the message's bytes out of the receive buffer
/// (no copy).
#[derive(Debug, Default)]
pub struct RawDecoder;

/// `ListPodSandboxResponse` with only what a relist diffs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BriefSandboxList {
    /// The sandboxes (`items = 1`).
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<BriefSandbox>,
}

/// `PodSandbox` without `labels`, `annotations` and `runtime_handler`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BriefSandbox {
    /// Sandbox id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Name, UID, namespace, attempt.
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<v1::PodSandboxMetadata>,
    /// `PodSandboxState`.
    #[prost(enumeration = "v1::PodSandboxState", tag = "3")]
    pub state: i32,
    /// Creation time, ns.
    #[prost(int64, tag = "4")]
    pub created_at: i64,
}

/// `ListContainersResponse` with only what a relist diffs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BriefContainerList {
    /// The containers (`containers = 1`).
    #[prost(message, repeated, tag = "1")]
    pub containers: Vec<BriefContainer>,
}

/// `Container` without `image`, `image_ref`, `labels` and `annotations`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BriefContainer {
    /// Container id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Its sandbox.
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    /// Name and attempt.
    #[prost(message, optional, tag = "3")]
    pub metadata: Option<v1::ContainerMetadata>,
    /// `ContainerState`.
    #[prost(enumeration = "v1::ContainerState", tag = "6")]
    pub state: i32,
    /// Creation time, ns.
    #[prost(int64, tag = "7")]
    pub created_at: i64,
}

impl EncodedListing {
    /// Encodes a decoded listing (for runtimes served in-process).
    pub fn encode(sandboxes: Vec<v1::PodSandbox>, containers: Vec<v1::Container>) -> Self {
        Self {
            sandboxes: v1::ListPodSandboxResponse { items: sandboxes }.encode_to_vec().into(),
            containers: v1::ListContainersResponse { containers }.encode_to_vec().into(),
        }
    }

    /// A fingerprint that depends neither on the order of the listed items nor on the
    /// order of each item's fields (the runtime may list items in any order, and Go
    /// marshals map entries — labels, annotations — in random order), keyed by `seed` so
    /// that nobody can aim a collision at it; `None` if the bytes are not a listing.
    pub fn fingerprint(&self, seed: u64) -> Option<u64> {
        let s = multiset_hash(&self.sandboxes, Answer::Sandboxes.seed(seed), true)?;
        let c = multiset_hash(&self.containers, Answer::Containers.seed(seed), true)?;
        Some(fingerprint_of(seed, s, c))
    }

    /// Decodes the projection of both answers; an error names the call whose answer
    /// is malformed.
    pub fn decode(&self) -> Result<BriefListing, (&'static str, prost::DecodeError)> {
        let sandboxes = BriefSandboxList::decode(&self.sandboxes[..]).map_err(|e| ("ListPodSandbox", e))?;
        let containers = BriefContainerList::decode(&self.containers[..]).map_err(|e| ("ListContainers", e))?;
        Ok((sandboxes.items, containers.containers))
    }
}

/// Folds 128-bit products (the wyhash construction): fast and well mixed.
fn mix(a: u64, b: u64) -> u64 {
    let r = u128::from(a).wrapping_mul(u128::from(b));
    (r as u64) ^ ((r >> 64) as u64)
}

/// Little-endian `u64` at `at`.
fn r8(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"))
}

/// Little-endian `u32` at `at`, widened.
fn r4(b: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes(b[at..at + 4].try_into().expect("four bytes")))
}

/// A keyed hash of one encoded item: wyhash's construction (16 bytes per 128-bit
/// product, three independent lanes over long inputs, overlapping reads for a short
/// one), so a listing costs a few products per field instead of one per 8 bytes in a
/// single dependent chain — the idle relist's largest own cost (`perf`, 5,000 × 4).
fn item_hash(bytes: &[u8], seed: u64) -> u64 {
    const P0: u64 = 0xa076_1d64_78bd_642f;
    const P1: u64 = 0xe703_7ed1_a0b4_28db;
    const P2: u64 = 0x8ebc_6af0_9c88_c6e3;
    const P3: u64 = 0x5899_65cc_7537_4cc3;
    let len = bytes.len();
    let mut s = seed ^ P0;
    let (a, b) = if len <= 16 {
        if len >= 4 {
            let q = (len >> 3) << 2;
            ((r4(bytes, 0) << 32) | r4(bytes, q), (r4(bytes, len - 4) << 32) | r4(bytes, len - 4 - q))
        } else if len > 0 {
            ((u64::from(bytes[0]) << 16) | (u64::from(bytes[len >> 1]) << 8) | u64::from(bytes[len - 1]), 0)
        } else {
            (0, 0)
        }
    } else {
        let mut p = bytes;
        if p.len() > 48 {
            let (mut s1, mut s2) = (s, s);
            while p.len() > 48 {
                s = mix(r8(p, 0) ^ P1, r8(p, 8) ^ s);
                s1 = mix(r8(p, 16) ^ P2, r8(p, 24) ^ s1);
                s2 = mix(r8(p, 32) ^ P3, r8(p, 40) ^ s2);
                p = &p[48..];
            }
            s ^= s1 ^ s2;
        }
        while p.len() > 16 {
            s = mix(r8(p, 0) ^ P1, r8(p, 8) ^ s);
            p = &p[16..];
        }
        (r8(bytes, len - 16), r8(bytes, len - 8))
    };
    mix(P1 ^ len as u64, mix(a ^ P1, b ^ s) ^ P0)
}

/// The fingerprint of a listing whose two answers hash to `sandboxes` and `containers`
/// (each hashed with its [`Answer::seed`]).
pub fn fingerprint_of(seed: u64, sandboxes: u64, containers: u64) -> u64 {
    mix(sandboxes ^ seed, containers ^ 0xd6e8_feb8_6659_fd93)
}

/// One of the two answers a listing is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `ListPodSandboxResponse`.
    Sandboxes,
    /// `ListContainersResponse`.
    Containers,
}

impl Answer {
    /// The key this answer's hash takes, from the listing's: the two answers swapped
    /// are another listing.
    pub fn seed(self, seed: u64) -> u64 {
        match self {
            Self::Sandboxes => seed,
            Self::Containers => seed ^ 0x9e37_79b9_7f4a_7c15,
        }
    }
}

/// The protobuf wire format is not followed.
#[derive(Debug, PartialEq, Eq)]
struct Malformed;

/// The longest head a field can have: a key and a length, ten bytes each at most.
const FIELD_HEAD_MAX: usize = 20;

/// A varint at the start of `buf` and its length; `Ok(None)` when `buf` ends inside it.
fn varint(buf: &[u8]) -> Result<Option<(u64, usize)>, Malformed> {
    let mut value = 0u64;
    for (i, &b) in buf.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            // The tenth byte holds the 64th bit only.
            return if i == 9 && b > 1 { Err(Malformed) } else { Ok(Some((value, i + 1))) };
        }
    }
    if buf.len() >= 10 { Err(Malformed) } else { Ok(None) }
}

/// The field at the start of a message's bytes, known from its head.
struct Field {
    /// Its key (field number and wire type).
    key: u64,
    /// Its whole length, key included.
    len: usize,
    /// Where a length-delimited field's value starts.
    value_at: usize,
}

impl Field {
    /// The field `buf` starts with, once its head (key, and length or varint value) is
    /// there; its value may not be (`len` past the end of `buf`). `Ok(None)` while the
    /// head is cut.
    fn head(buf: &[u8]) -> Result<Option<Field>, Malformed> {
        let Some((key, k)) = varint(buf)? else { return Ok(None) };
        let fixed = |n: usize| Field { key, len: k + n, value_at: k + n };
        Ok(Some(match key & 7 {
            0 => match varint(&buf[k..])? {
                Some((_, n)) => fixed(n),
                None => return Ok(None),
            },
            1 => fixed(8),
            5 => fixed(4),
            2 => match varint(&buf[k..])? {
                Some((len, n)) => {
                    let len = usize::try_from(len).map_err(|_| Malformed)?;
                    Field { key, len: (k + n).checked_add(len).ok_or(Malformed)?, value_at: k + n }
                }
                None => return Ok(None),
            },
            _ => return Err(Malformed),
        }))
    }

    /// Its hash: a length-delimited field of a listing (`items`) is an item, whose own
    /// fields are summed in any order; any other field is hashed as it is encoded.
    fn hash(&self, buf: &[u8], seed: u64, items: bool) -> Result<u64, Malformed> {
        Ok(if items && self.key & 7 == 2 {
            let inner = multiset_hash(&buf[self.value_at..self.len], seed, false).ok_or(Malformed)?;
            mix(inner ^ self.key, 0x8ebc_6af0_9c88_c6e3 ^ seed)
        } else {
            item_hash(&buf[..self.len], seed)
        })
    }
}

/// The wrapping sum of the hashes of a message's fields, and their count: a multiset
/// hash, the same whatever order the fields come in.
#[derive(Clone, Copy, Debug, Default)]
struct FieldSum {
    sum: u64,
    count: u64,
}

impl FieldSum {
    fn add(&mut self, h: u64) {
        self.sum = self.sum.wrapping_add(h);
        self.count += 1;
    }

    fn finish(self, seed: u64) -> u64 {
        mix(self.sum ^ seed, self.count ^ 0x8ebc_6af0_9c88_c6e3)
    }

    /// Adds each whole field at the start of `buf`; returns the bytes they took.
    fn add_fields(&mut self, buf: &[u8], seed: u64, items: bool) -> Result<usize, Malformed> {
        let mut used = 0;
        while let Some(field) = Field::head(&buf[used..])?
            && field.len <= buf.len() - used
        {
            self.add(field.hash(&buf[used..], seed, items)?);
            used += field.len;
        }
        Ok(used)
    }
}

/// The multiset hash of a whole message. With `items`, each length-delimited field is
/// a message whose own fields are hashed the same way (one level down).
fn multiset_hash(buf: &[u8], seed: u64, items: bool) -> Option<u64> {
    let mut sum = FieldSum::default();
    let used = sum.add_fields(buf, seed, items).ok()?;
    (used == buf.len()).then(|| sum.finish(seed))
}

/// The hash of one listing answer, fed its bytes as they arrive, in pieces cut
/// anywhere: equal to the hash of the whole answer ([`EncodedListing::fingerprint`]'s),
/// without the answer ever being held. Only an item cut by a piece's end is kept until
/// the piece that completes it.
#[derive(Debug)]
pub struct AnswerHash {
    seed: u64,
    sum: FieldSum,
    /// The start of an item the pieces so far have not completed.
    pending: Vec<u8>,
    malformed: bool,
}

impl AnswerHash {
    /// A hash of `answer`, for the listing fingerprint keyed by `seed`.
    pub fn new(answer: Answer, seed: u64) -> Self {
        Self { seed: answer.seed(seed), sum: FieldSum::default(), pending: Vec::new(), malformed: false }
    }

    /// Adds the next piece of the answer.
    pub fn feed(&mut self, mut piece: &[u8]) {
        // First the item the last piece cut: its head a byte at a time (20 at most), then
        // exactly the bytes it lacks, gathered in place and hashed once whole.
        while !self.pending.is_empty() && !piece.is_empty() && !self.malformed {
            match Field::head(&self.pending) {
                Ok(Some(field)) => {
                    let take = field.len.saturating_sub(self.pending.len()).min(piece.len());
                    self.pending.extend_from_slice(&piece[..take]);
                    piece = &piece[take..];
                    if self.pending.len() < field.len {
                        return;
                    }
                    match field.hash(&self.pending, self.seed, true) {
                        Ok(h) => self.sum.add(h),
                        Err(Malformed) => self.malformed = true,
                    }
                    self.pending.clear();
                }
                Ok(None) if self.pending.len() < FIELD_HEAD_MAX => {
                    self.pending.push(piece[0]);
                    piece = &piece[1..];
                }
                Ok(None) | Err(Malformed) => self.malformed = true,
            }
        }
        if self.malformed || !self.pending.is_empty() {
            return;
        }
        match self.sum.add_fields(piece, self.seed, true) {
            Ok(used) => self.pending.extend_from_slice(&piece[used..]),
            Err(Malformed) => self.malformed = true,
        }
    }

    /// The answer's hash; `None` if its bytes were not a listing.
    pub fn finish(self) -> Option<u64> {
        (!self.malformed && self.pending.is_empty()).then(|| self.sum.finish(self.seed))
    }
}

impl<Req> Default for RawCodec<Req> {
    fn default() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<Req: Message + Send + 'static> tonic::codec::Codec for RawCodec<Req> {
    type Encode = Req;
    type Decode = Bytes;
    type Encoder = tonic_prost::ProstEncoder<Req>;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawDecoder
    }
}

impl tonic::codec::Decoder for RawDecoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// The projected listing as full CRI messages (no labels, annotations or image), or
/// `None` when grouping it into pods would need the labels it left out.
pub fn into_full(
    sandboxes: Vec<BriefSandbox>,
    containers: Vec<BriefContainer>,
) -> Option<(Vec<v1::PodSandbox>, Vec<v1::Container>)> {
    // Grouping falls back to the kubelet's labels for a sandbox without a UID, a
    // container without a name, and a container whose sandbox is not listed: such a
    // listing needs the labels, so it is read in full instead.
    let listed: HashSet<&str> = sandboxes.iter().map(|s| s.id.as_str()).collect();
    let complete = sandboxes.iter().all(|s| s.metadata.as_ref().is_some_and(|m| !m.uid.is_empty()))
        && containers.iter().all(|c| {
            c.metadata.as_ref().is_some_and(|m| !m.name.is_empty()) && listed.contains(c.pod_sandbox_id.as_str())
        });
    if !complete {
        return None;
    }
    let sandboxes = sandboxes.into_iter().map(v1::PodSandbox::from).collect();
    let containers = containers.into_iter().map(v1::Container::from).collect();
    Some((sandboxes, containers))
}

impl From<BriefSandbox> for v1::PodSandbox {
    fn from(s: BriefSandbox) -> Self {
        Self { id: s.id, metadata: s.metadata, state: s.state, created_at: s.created_at, ..Default::default() }
    }
}

impl From<v1::PodSandbox> for BriefSandbox {
    fn from(s: v1::PodSandbox) -> Self {
        Self { id: s.id, metadata: s.metadata, state: s.state, created_at: s.created_at }
    }
}

impl From<BriefContainer> for v1::Container {
    fn from(c: BriefContainer) -> Self {
        Self {
            id: c.id,
            pod_sandbox_id: c.pod_sandbox_id,
            metadata: c.metadata,
            state: c.state,
            created_at: c.created_at,
            ..Default::default()
        }
    }
}

impl From<v1::Container> for BriefContainer {
    fn from(c: v1::Container) -> Self {
        Self {
            id: c.id,
            pod_sandbox_id: c.pod_sandbox_id,
            metadata: c.metadata,
            state: c.state,
            created_at: c.created_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(id: &str, uid: &str) -> v1::PodSandbox {
        v1::PodSandbox {
            id: id.into(),
            metadata: Some(v1::PodSandboxMetadata {
                name: "web".into(),
                uid: uid.into(),
                namespace: "default".into(),
                attempt: 2,
            }),
            state: v1::PodSandboxState::SandboxReady as i32,
            created_at: 7,
            labels: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
            annotations: [("a".to_string(), "b".to_string())].into(),
            runtime_handler: "runc".into(),
        }
    }

    fn container(id: &str, sandbox: &str, name: &str) -> v1::Container {
        v1::Container {
            id: id.into(),
            pod_sandbox_id: sandbox.into(),
            metadata: Some(v1::ContainerMetadata { name: name.into(), attempt: 3 }),
            image: Some(v1::ImageSpec { image: "busybox".into(), ..Default::default() }),
            image_ref: "sha256:1".into(),
            state: v1::ContainerState::ContainerExited as i32,
            created_at: 9,
            labels: [("io.kubernetes.container.name".to_string(), name.to_string())].into(),
            annotations: [("x".to_string(), "y".to_string())].into(),
        }
    }

    #[test]
    fn a_full_listing_on_the_wire_decodes_into_the_projection_without_labels() {
        let full = v1::ListContainersResponse { containers: vec![container("c1", "s1", "app")] };
        let brief = BriefContainerList::decode(full.encode_to_vec().as_slice()).unwrap();
        let back = v1::Container::from(brief.containers[0].clone());
        let want = v1::Container {
            image: None,
            image_ref: String::new(),
            labels: Default::default(),
            annotations: Default::default(),
            ..full.containers[0].clone()
        };
        assert_eq!(back, want);
        let full = v1::ListPodSandboxResponse { items: vec![sandbox("s1", "u1")] };
        let brief = BriefSandboxList::decode(full.encode_to_vec().as_slice()).unwrap();
        let want = v1::PodSandbox {
            labels: Default::default(),
            annotations: Default::default(),
            runtime_handler: String::new(),
            ..full.items[0].clone()
        };
        assert_eq!(v1::PodSandbox::from(brief.items[0].clone()), want);
    }

    #[test]
    fn the_fingerprint_ignores_the_order_of_items_and_sees_any_change() {
        let sandboxes = vec![sandbox("s1", "u1"), sandbox("s2", "u2")];
        let containers = vec![container("c1", "s1", "a"), container("c2", "s1", "b"), container("c3", "s2", "a")];
        let listing = EncodedListing::encode(sandboxes.clone(), containers.clone());
        let fp = listing.fingerprint(42).unwrap();
        let mut reordered = containers.clone();
        reordered.reverse();
        let mut sb = sandboxes.clone();
        sb.reverse();
        assert_eq!(EncodedListing::encode(sb, reordered).fingerprint(42), Some(fp));
        assert_ne!(listing.fingerprint(43), Some(fp), "keyed by the seed");
        let mut changed = containers.clone();
        changed[1].state = v1::ContainerState::ContainerRunning as i32;
        assert_ne!(EncodedListing::encode(sandboxes.clone(), changed).fingerprint(42), Some(fp));
        let mut moved = containers.clone();
        moved[2].pod_sandbox_id = "s1".into();
        assert_ne!(EncodedListing::encode(sandboxes.clone(), moved).fingerprint(42), Some(fp));
        // The same item twice is not the item once, and a pair of swapped listings differs.
        let twice = EncodedListing::encode(sandboxes.clone(), vec![containers[0].clone(), containers[0].clone()]);
        let once = EncodedListing::encode(sandboxes.clone(), vec![containers[0].clone()]);
        assert_ne!(twice.fingerprint(42), once.fingerprint(42));
        let swapped = EncodedListing { sandboxes: listing.containers.clone(), containers: listing.sandboxes.clone() };
        assert_ne!(swapped.fingerprint(42), Some(fp));
        assert_eq!(EncodedListing::default().fingerprint(42), EncodedListing::default().fingerprint(42));
    }

    #[test]
    fn the_fingerprint_ignores_the_order_of_map_entries_within_an_item() {
        let mut c = container("c1", "s1", "a");
        c.labels = (0..20).map(|i| (format!("k{i}"), format!("v{i}"))).collect();
        let bytes = v1::ListContainersResponse { containers: vec![c.clone()] }.encode_to_vec();
        // Re-encode with the map entries in another order, as Go may.
        let mut reordered = Vec::new();
        let mut entries = Vec::new();
        let mut rest = Vec::new();
        let mut item = bytes.as_slice();
        prost::encoding::decode_varint(&mut item).unwrap();
        prost::encoding::decode_varint(&mut item).unwrap();
        while !item.is_empty() {
            let start = item;
            let key = prost::encoding::decode_varint(&mut item).unwrap();
            match key & 7 {
                0 => drop(prost::encoding::decode_varint(&mut item).unwrap()),
                _ => {
                    let len = prost::encoding::decode_varint(&mut item).unwrap() as usize;
                    item.advance(len);
                }
            }
            let field = start[..start.len() - item.len()].to_vec();
            if key >> 3 == 8 { entries.push(field) } else { rest.push(field) }
        }
        assert_eq!(entries.len(), 20);
        entries.reverse();
        let body: Vec<u8> = entries.into_iter().chain(rest).flatten().collect();
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut reordered);
        prost::encoding::encode_varint(body.len() as u64, &mut reordered);
        reordered.extend(body);
        assert_ne!(reordered, bytes);
        assert_eq!(v1::ListContainersResponse::decode(reordered.as_slice()).unwrap().containers[0], c);
        let a = EncodedListing { sandboxes: Bytes::new(), containers: bytes.into() };
        let b = EncodedListing { sandboxes: Bytes::new(), containers: reordered.into() };
        assert_eq!(a.fingerprint(5), b.fingerprint(5));
    }

    #[test]
    fn an_item_hash_sees_every_bit_of_items_of_every_length() {
        // The short inputs are read with overlapping words and the long ones in lanes:
        // no byte of any length may fall outside what is hashed.
        let base: Vec<u8> = (0..200u32).map(|i| (i.wrapping_mul(37) ^ 0x5a) as u8).collect();
        for len in 0..=base.len() {
            let item = &base[..len];
            let h = item_hash(item, 9);
            assert_ne!(item_hash(item, 10), h, "keyed, at {len} bytes");
            if len < base.len() {
                assert_ne!(item_hash(&base[..len + 1], 9), h, "a longer item differs, at {len} bytes");
            }
            for at in 0..len {
                for bit in [0, 3, 7] {
                    let mut flipped = item.to_vec();
                    flipped[at] ^= 1 << bit;
                    assert_ne!(item_hash(&flipped, 9), h, "byte {at} bit {bit} of {len}");
                }
            }
        }
    }

    #[test]
    fn a_malformed_listing_has_no_fingerprint_and_fails_to_decode_naming_the_call() {
        let mut listing = EncodedListing::encode(vec![sandbox("s1", "u1")], vec![container("c1", "s1", "a")]);
        listing.containers.truncate(listing.containers.len() - 3);
        assert_eq!(listing.fingerprint(1), None);
        assert_eq!(listing.decode().unwrap_err().0, "ListContainers");
    }

    /// `answer` hashed in the pieces `cuts` makes of it.
    fn hashed_in_pieces(answer: &[u8], which: Answer, seed: u64, cuts: &[usize]) -> Option<u64> {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (answer.len() + 1)).collect();
        at.extend([0, answer.len()]);
        at.sort_unstable();
        let mut h = AnswerHash::new(which, seed);
        for w in at.windows(2) {
            h.feed(&answer[w[0]..w[1]]);
        }
        h.finish()
    }

    fn containers_strategy() -> impl proptest::strategy::Strategy<Value = Vec<v1::Container>> {
        use proptest::prelude::*;
        let one = ("[a-f0-9]{1,70}", "[a-z]{0,12}", 0u32..300, 0i32..4, any::<i64>(), 0usize..6).prop_map(
            |(id, name, attempt, state, created_at, labels)| v1::Container {
                id: id.clone(),
                pod_sandbox_id: format!("s-{id}"),
                metadata: Some(v1::ContainerMetadata { name, attempt }),
                state,
                created_at,
                labels: (0..labels).map(|i| (format!("k{i}"), "v".repeat(i * 40))).collect(),
                ..Default::default()
            },
        );
        proptest::collection::vec(one, 0..40)
    }

    proptest::proptest! {
        #[test]
        fn an_answer_hashed_in_pieces_cut_anywhere_is_the_answer_hashed_whole(
            containers in containers_strategy(),
            cuts in proptest::collection::vec(proptest::prelude::any::<usize>(), 0..12),
            seed in proptest::prelude::any::<u64>(),
        ) {
            let listing = EncodedListing::encode(vec![], containers);
            let whole = listing.fingerprint(seed);
            proptest::prop_assert!(whole.is_some());
            let streamed = (
                hashed_in_pieces(&listing.sandboxes, Answer::Sandboxes, seed, &cuts),
                hashed_in_pieces(&listing.containers, Answer::Containers, seed, &cuts),
            );
            let streamed = match streamed {
                (Some(s), Some(c)) => Some(fingerprint_of(seed, s, c)),
                _ => None,
            };
            proptest::prop_assert_eq!(streamed, whole);
        }

        #[test]
        fn bytes_that_are_not_a_listing_have_no_hash_in_pieces_exactly_when_they_have_none_whole(
            containers in containers_strategy(),
            damage in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 0..4),
            cut_short in proptest::prelude::any::<bool>(),
            cuts in proptest::collection::vec(proptest::prelude::any::<usize>(), 0..12),
        ) {
            let mut bytes = v1::ListContainersResponse { containers }.encode_to_vec();
            for (at, b) in damage {
                if !bytes.is_empty() {
                    let n = bytes.len();
                    bytes[at % n] = b;
                }
            }
            if cut_short && !bytes.is_empty() {
                bytes.truncate(bytes.len() - 1);
            }
            let whole = multiset_hash(&bytes, Answer::Containers.seed(7), true);
            proptest::prop_assert_eq!(hashed_in_pieces(&bytes, Answer::Containers, 7, &cuts), whole);
        }
    }

    #[test]
    fn an_item_spread_over_many_pieces_is_gathered_once_and_hashed_as_whole() {
        // 4 MiB of annotation in HTTP/2's 16 KiB frames: 256 pieces of one item.
        let mut c = container("c1", "s1", "app");
        c.annotations = [("big".to_string(), "x".repeat(4 << 20))].into();
        let bytes = v1::ListContainersResponse { containers: vec![c, container("c2", "s1", "b")] }.encode_to_vec();
        let mut h = AnswerHash::new(Answer::Containers, 3);
        for piece in bytes.chunks(16 << 10) {
            h.feed(piece);
        }
        assert_eq!(h.finish(), multiset_hash(&bytes, Answer::Containers.seed(3), true));
    }

    #[test]
    fn an_answer_fed_one_byte_at_a_time_holds_no_more_than_the_item_it_is_in() {
        let containers: Vec<_> = (0..50).map(|i| container(&format!("c{i:062}"), "s1", "app")).collect();
        let bytes = v1::ListContainersResponse { containers }.encode_to_vec();
        let mut h = AnswerHash::new(Answer::Containers, 3);
        let mut most = 0;
        for b in &bytes {
            h.feed(std::slice::from_ref(b));
            most = most.max(h.pending.len());
        }
        let item = bytes.len() / 50;
        assert!(most <= item, "held {most} bytes; one item is {item}");
        assert_eq!(h.finish(), multiset_hash(&bytes, Answer::Containers.seed(3), true));
    }

    #[test]
    fn a_listing_that_needs_the_labels_to_be_grouped_is_not_used() {
        let brief = |s: Vec<v1::PodSandbox>, c: Vec<v1::Container>| {
            into_full(s.into_iter().map(Into::into).collect(), c.into_iter().map(Into::into).collect())
        };
        assert!(brief(vec![sandbox("s1", "u1")], vec![container("c1", "s1", "app")]).is_some());
        assert!(brief(vec![sandbox("s1", "")], vec![]).is_none(), "a sandbox without a UID");
        assert!(brief(vec![sandbox("s1", "u1")], vec![container("c1", "s2", "app")]).is_none(), "an orphan");
        assert!(brief(vec![sandbox("s1", "u1")], vec![container("c1", "s1", "")]).is_none(), "a nameless container");
    }
}
