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
        let s = multiset_hash(&self.sandboxes, seed, true)?;
        let c = multiset_hash(&self.containers, seed ^ 0x9e37_79b9_7f4a_7c15, true)?;
        Some(mix(s ^ seed, c ^ 0xd6e8_feb8_6659_fd93))
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

/// The wrapping sum of the hashes of every field of a message, plus their count: a
/// multiset hash. With `items`, each length-delimited field is a message whose own
/// fields are hashed the same way (one level down).
fn multiset_hash(mut buf: &[u8], seed: u64, items: bool) -> Option<u64> {
    let (mut sum, mut count) = (0u64, 0u64);
    while !buf.is_empty() {
        let start = buf;
        let key = prost::encoding::decode_varint(&mut buf).ok()?;
        let mut value: &[u8] = &[];
        match key & 7 {
            0 => {
                prost::encoding::decode_varint(&mut buf).ok()?;
            }
            1 if buf.len() >= 8 => buf.advance(8),
            2 => {
                let len = usize::try_from(prost::encoding::decode_varint(&mut buf).ok()?).ok()?;
                if len > buf.len() {
                    return None;
                }
                value = &buf[..len];
                buf.advance(len);
            }
            5 if buf.len() >= 4 => buf.advance(4),
            _ => return None,
        }
        let h = if items && key & 7 == 2 {
            mix(multiset_hash(value, seed, false)? ^ key, 0x8ebc_6af0_9c88_c6e3 ^ seed)
        } else {
            item_hash(&start[..start.len() - buf.len()], seed)
        };
        sum = sum.wrapping_add(h);
        count += 1;
    }
    Some(mix(sum ^ seed, count ^ 0x8ebc_6af0_9c88_c6e3))
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
