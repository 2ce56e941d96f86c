//! NRI's wire, both layers, as pure code: the runtime's one socket carries frames of a
//! multiplexer (an 8-byte header: connection id, then payload length, both u32 big
//! endian) that splits it into two byte streams — connection 1 where the plugin serves
//! `nri.pkg.api.v1alpha1.Plugin`, connection 2 where the runtime serves `Runtime` — and
//! each stream carries ttrpc messages (a 10-byte header: length u32, stream id u32,
//! type u8, flags u8, all big endian; at most 4 MiB of payload).
//!
//! [`Demux`] takes the socket's bytes as they come and gives whole ttrpc messages.
//! Promises: a message may be split across multiplexer frames and frames across
//! reads; what it holds is bounded (a header announcing more than the limits is an
//! error at once, before anything is buffered for it); any input gives messages or a
//! [`WireError`], never a panic (`fuzz/fuzz_targets/nri_frames.rs`). Frames for a
//! connection other than 1 and 2 are dropped, as NRI's own multiplexer drops them.

/// The multiplexer's header length.
pub const MUX_HEADER: usize = 8;
/// ttrpc's header length.
pub const TTRPC_HEADER: usize = 10;
/// ttrpc's largest payload.
pub const MAX_MESSAGE: usize = 4 << 20;
/// The connection on which the plugin serves and the runtime calls.
pub const PLUGIN_CONN: u32 = 1;
/// The connection on which the runtime serves and the plugin calls.
pub const RUNTIME_CONN: u32 = 2;
/// ttrpc's request type.
pub const REQUEST: u8 = 1;
/// ttrpc's response type.
pub const RESPONSE: u8 = 2;

/// What cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// A multiplexer frame longer than a whole ttrpc message can be.
    #[error("a multiplexer frame of {0} bytes is longer than any ttrpc message")]
    FrameTooLong(u32),
    /// A ttrpc message longer than ttrpc allows.
    #[error("a ttrpc message of {0} bytes is longer than 4 MiB")]
    MessageTooLong(u32),
}

/// One ttrpc message, on one of the two connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// [`PLUGIN_CONN`] or [`RUNTIME_CONN`].
    pub conn: u32,
    /// ttrpc's stream id (a request's, answered under the same id).
    pub stream: u32,
    /// [`REQUEST`], [`RESPONSE`], or another type (ttrpc's streaming data).
    pub kind: u8,
    /// ttrpc's flags.
    pub flags: u8,
    /// The protobuf payload.
    pub payload: Vec<u8>,
}

/// The socket's bytes, split into messages.
#[derive(Debug, Default)]
pub struct Demux {
    trunk: Vec<u8>,
    streams: [Vec<u8>; 2],
}

impl Demux {
    /// Takes `bytes` read from the socket; returns the messages they complete, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Message>, WireError> {
        self.trunk.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut at = 0;
        while let Some(header) = self.trunk.get(at..at + MUX_HEADER) {
            let conn = be32(&header[0..4]);
            let len = be32(&header[4..8]);
            if len as usize > TTRPC_HEADER + MAX_MESSAGE {
                return Err(WireError::FrameTooLong(len));
            }
            let Some(chunk) = self.trunk.get(at + MUX_HEADER..at + MUX_HEADER + len as usize) else { break };
            if matches!(conn, PLUGIN_CONN | RUNTIME_CONN) {
                let stream = &mut self.streams[conn as usize - 1];
                stream.extend_from_slice(chunk);
                take_messages(conn, stream, &mut out)?;
            }
            at += MUX_HEADER + len as usize;
        }
        self.trunk.drain(..at);
        Ok(out)
    }
}

fn take_messages(conn: u32, stream: &mut Vec<u8>, out: &mut Vec<Message>) -> Result<(), WireError> {
    let mut at = 0;
    while let Some(header) = stream.get(at..at + TTRPC_HEADER) {
        let len = be32(&header[0..4]);
        if len as usize > MAX_MESSAGE {
            return Err(WireError::MessageTooLong(len));
        }
        let (id, kind, flags) = (be32(&header[4..8]), header[8], header[9]);
        let Some(payload) = stream.get(at + TTRPC_HEADER..at + TTRPC_HEADER + len as usize) else { break };
        out.push(Message { conn, stream: id, kind, flags, payload: payload.to_vec() });
        at += TTRPC_HEADER + len as usize;
    }
    stream.drain(..at);
    Ok(())
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// `message` as the socket carries it: one multiplexer frame holding one ttrpc message.
/// A payload longer than ttrpc allows is an error (plegd's own messages are small).
pub fn encode(message: &Message) -> Result<Vec<u8>, WireError> {
    let len = u32::try_from(message.payload.len())
        .ok()
        .filter(|&l| l as usize <= MAX_MESSAGE)
        .ok_or(WireError::MessageTooLong(message.payload.len().min(u32::MAX as usize) as u32))?;
    let mut out = Vec::with_capacity(MUX_HEADER + TTRPC_HEADER + message.payload.len());
    out.extend_from_slice(&message.conn.to_be_bytes());
    out.extend_from_slice(&(len + TTRPC_HEADER as u32).to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&message.stream.to_be_bytes());
    out.extend_from_slice(&[message.kind, message.flags]);
    out.extend_from_slice(&message.payload);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn message() -> impl Strategy<Value = Message> {
        (1u32..=2, any::<u32>(), 1u8..=3, any::<u8>(), proptest::collection::vec(any::<u8>(), 0..300))
            .prop_map(|(conn, stream, kind, flags, payload)| Message { conn, stream, kind, flags, payload })
    }

    /// One ttrpc message cut into multiplexer frames at `cuts`, as NRI's multiplexer
    /// splits a write longer than a frame.
    fn split_frames(m: &Message, cuts: &[usize]) -> Vec<u8> {
        let whole = encode(m).unwrap();
        let ttrpc = &whole[MUX_HEADER..];
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (ttrpc.len() + 1)).collect();
        points.extend([0, ttrpc.len()]);
        points.sort_unstable();
        points.dedup();
        let mut out = Vec::new();
        for w in points.windows(2) {
            out.extend_from_slice(&m.conn.to_be_bytes());
            out.extend_from_slice(&((w[1] - w[0]) as u32).to_be_bytes());
            out.extend_from_slice(&ttrpc[w[0]..w[1]]);
        }
        out
    }

    proptest! {
        #[test]
        fn messages_split_across_frames_and_reads_come_out_whole_and_in_order(
            messages in proptest::collection::vec((message(), proptest::collection::vec(any::<usize>(), 0..4)), 0..8),
            reads in proptest::collection::vec(1usize..64, 1..16),
            stray in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let mut bytes = Vec::new();
            for (m, cuts) in &messages {
                bytes.extend(split_frames(m, cuts));
                // A frame for a connection NRI does not use, between messages: dropped.
                bytes.extend_from_slice(&7u32.to_be_bytes());
                bytes.extend_from_slice(&(stray.len() as u32).to_be_bytes());
                bytes.extend_from_slice(&stray);
            }
            let mut demux = Demux::default();
            let mut got = Vec::new();
            let mut rest = &bytes[..];
            for n in reads.iter().cycle() {
                if rest.is_empty() { break }
                let (now, later) = rest.split_at((*n).min(rest.len()));
                got.extend(demux.push(now).unwrap());
                rest = later;
            }
            let want: Vec<Message> = messages.into_iter().map(|(m, _)| m).collect();
            prop_assert_eq!(got, want);
            prop_assert!(demux.trunk.is_empty() && demux.streams.iter().all(Vec::is_empty), "nothing left over");
        }
    }

    #[test]
    fn a_header_announcing_more_than_the_limits_is_an_error_before_anything_is_buffered() {
        let mut frame = 1u32.to_be_bytes().to_vec();
        frame.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(Demux::default().push(&frame), Err(WireError::FrameTooLong(u32::MAX)));
        let mut frame = 1u32.to_be_bytes().to_vec();
        frame.extend_from_slice(&10u32.to_be_bytes());
        frame.extend_from_slice(&((MAX_MESSAGE + 1) as u32).to_be_bytes());
        frame.extend_from_slice(&[0; 6]);
        assert_eq!(Demux::default().push(&frame), Err(WireError::MessageTooLong(MAX_MESSAGE as u32 + 1)));
    }
}
