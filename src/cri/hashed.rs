//! A listing answer hashed as it arrives, never held: the idle relist's call.
//!
//! A relist on an idle node lists the same bytes every period, and a full listing is
//! large (about 10 MiB at 20,000 containers): buffered whole, as gRPC's decoder does,
//! it stays resident between relists. [`Hashing`] sits between tonic's client and the
//! connection. It feeds each HTTP/2 data frame of the answer to an [`AnswerHash`] as it
//! comes and lets the frame go, then hands tonic one small message in the answer's
//! place: the hash. Everything else — status codes in headers or trailers, deadlines,
//! errors — is tonic's, untouched.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use prost::bytes::Bytes;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::Channel;

use super::brief::{Answer, AnswerHash};

/// The message [`HashedBody`] hands on: a flag (1: the answer was a listing), then the
/// hash, big-endian.
pub const HASH_MESSAGE_LEN: usize = 9;

/// The hash carried by a message of [`HashedBody`]; `None` when the answer was not a
/// listing (malformed, compressed, more than one message, or over `max_len`).
pub fn hash_of(message: &[u8]) -> Option<u64> {
    match message {
        [1, hash @ ..] => Some(u64::from_be_bytes(hash.try_into().ok()?)),
        _ => None,
    }
}

/// A connection whose answers come back as their hash (as one [`AnswerHash`] of
/// `answer`, keyed by `seed`).
#[derive(Clone, Debug)]
pub struct Hashing {
    /// The connection.
    pub channel: Channel,
    /// Which answer the call's is.
    pub answer: Answer,
    /// The listing fingerprint's key.
    pub seed: u64,
    /// The largest answer taken; a longer one has no hash.
    pub max_len: usize,
}

type ResponseFuture = Pin<Box<dyn Future<Output = Result<http::Response<HashedBody>, tonic::transport::Error>> + Send>>;

impl tower::Service<http::Request<Body>> for Hashing {
    type Response = http::Response<HashedBody>;
    type Error = tonic::transport::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.channel.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let (answer, seed, max_len) = (self.answer, self.seed, self.max_len);
        let response = self.channel.call(request);
        Box::pin(async move { Ok(response.await?.map(|body| HashedBody::new(body, answer, seed, max_len))) })
    }
}

/// Where the body is in gRPC's framing: each message is a flag byte, a 4-byte length,
/// then the message.
#[derive(Debug)]
enum Framing {
    /// In a message's 5-byte prefix, `got` bytes of it read.
    Prefix { prefix: [u8; 5], got: usize },
    /// In a message, `left` bytes of it to come.
    Message { left: usize },
}

/// An answer's body that hashes its message as it passes and yields the hash instead.
pub struct HashedBody {
    inner: Body,
    framing: Framing,
    hash: Option<AnswerHash>,
    messages: usize,
    /// Whether the answer can still have a hash.
    usable: bool,
    max_len: usize,
    /// Trailers held back while the hash goes first.
    trailers: Option<http_body::Frame<Bytes>>,
    done: bool,
}

impl std::fmt::Debug for HashedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashedBody").field("framing", &self.framing).field("messages", &self.messages).finish()
    }
}

impl HashedBody {
    /// `inner`'s answer, hashed as one `answer` keyed by `seed`.
    pub fn new(inner: Body, answer: Answer, seed: u64, max_len: usize) -> Self {
        Self {
            inner,
            framing: Framing::Prefix { prefix: [0; 5], got: 0 },
            hash: Some(AnswerHash::new(answer, seed)),
            messages: 0,
            usable: true,
            max_len,
            trailers: None,
            done: false,
        }
    }

    /// Takes one data frame of the answer.
    fn take(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            match &mut self.framing {
                Framing::Prefix { prefix, got } => {
                    let n = (5 - *got).min(data.len());
                    prefix[*got..*got + n].copy_from_slice(&data[..n]);
                    *got += n;
                    data = &data[n..];
                    if *got == 5 {
                        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
                        // A compressed message is not the bytes the fingerprint hashes.
                        self.usable &= prefix[0] == 0 && len <= self.max_len && self.messages == 0;
                        self.messages += 1;
                        self.framing = Framing::Message { left: len };
                    }
                }
                Framing::Message { left } => {
                    let n = (*left).min(data.len());
                    if self.usable
                        && let Some(hash) = &mut self.hash
                    {
                        hash.feed(&data[..n]);
                    }
                    *left -= n;
                    data = &data[n..];
                }
            }
            if let Framing::Message { left: 0 } = self.framing {
                self.framing = Framing::Prefix { prefix: [0; 5], got: 0 };
            }
        }
    }

    /// The message that stands for the answer, once: none if no whole message came
    /// (tonic then reports the answer missing or cut, as it would have).
    fn hash_message(&mut self) -> Option<Bytes> {
        let whole = matches!(self.framing, Framing::Prefix { got: 0, .. });
        let hash = self.hash.take()?;
        if self.messages == 0 || !whole {
            return None;
        }
        let mut m = Vec::with_capacity(5 + HASH_MESSAGE_LEN);
        m.push(0);
        m.extend_from_slice(&(HASH_MESSAGE_LEN as u32).to_be_bytes());
        match hash.finish().filter(|_| self.usable) {
            Some(h) => {
                m.push(1);
                m.extend_from_slice(&h.to_be_bytes());
            }
            None => m.extend_from_slice(&[0; HASH_MESSAGE_LEN]),
        }
        Some(m.into())
    }
}

impl http_body::Body for HashedBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        let this = self.get_mut();
        if let Some(trailers) = this.trailers.take() {
            return Poll::Ready(Some(Ok(trailers)));
        }
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => this.take(&data),
                    Err(trailers) => {
                        let Some(message) = this.hash_message() else { return Poll::Ready(Some(Ok(trailers))) };
                        this.trailers = Some(trailers);
                        return Poll::Ready(Some(Ok(http_body::Frame::data(message))));
                    }
                },
                Some(Err(status)) => return Poll::Ready(Some(Err(status))),
                None => {
                    this.done = true;
                    return Poll::Ready(this.hash_message().map(|m| Ok(http_body::Frame::data(m))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.trailers.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::brief::EncodedListing;
    use crate::proto::runtime as v1;
    use http_body::Body as _;

    /// A body of `frames`, then `trailers`.
    fn body(frames: Vec<Vec<u8>>, trailers: Option<http::HeaderMap>) -> Body {
        let items: Vec<Result<http_body::Frame<Bytes>, tonic::Status>> = frames
            .into_iter()
            .map(|f| Ok(http_body::Frame::data(Bytes::from(f))))
            .chain(trailers.map(|t| Ok(http_body::Frame::trailers(t))))
            .collect();
        Body::new(Frames(items.into()))
    }

    struct Frames(std::collections::VecDeque<Result<http_body::Frame<Bytes>, tonic::Status>>);

    impl http_body::Body for Frames {
        type Data = Bytes;
        type Error = tonic::Status;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
            Poll::Ready(self.0.pop_front())
        }
    }

    /// Every frame `b` yields.
    async fn frames(mut b: HashedBody) -> Vec<http_body::Frame<Bytes>> {
        let mut out = Vec::new();
        while let Some(f) = std::future::poll_fn(|cx| Pin::new(&mut b).poll_frame(cx)).await {
            out.push(f.unwrap());
        }
        out
    }

    fn grpc_message(flag: u8, m: &[u8]) -> Vec<u8> {
        let mut v = vec![flag];
        v.extend_from_slice(&(m.len() as u32).to_be_bytes());
        v.extend_from_slice(m);
        v
    }

    fn containers() -> Bytes {
        let c = (0..30)
            .map(|i| v1::Container {
                id: format!("{i:064}"),
                pod_sandbox_id: "s".into(),
                metadata: Some(v1::ContainerMetadata { name: format!("c{i}"), attempt: 1 }),
                labels: [("a".to_string(), "b".repeat(i))].into(),
                ..Default::default()
            })
            .collect();
        EncodedListing::encode(vec![], c).containers
    }

    fn split(bytes: &[u8], size: usize) -> Vec<Vec<u8>> {
        bytes.chunks(size).map(<[u8]>::to_vec).collect()
    }

    #[tokio::test]
    async fn an_answer_in_frames_of_any_size_comes_out_as_its_hash_then_its_trailers() {
        let answer = containers();
        let whole = {
            let mut h = AnswerHash::new(Answer::Containers, 11);
            h.feed(&answer);
            h.finish().unwrap()
        };
        let wire = grpc_message(0, &answer);
        for size in [1, 3, 5, 7, 64, 1000, wire.len()] {
            let trailers: http::HeaderMap =
                [(http::HeaderName::from_static("grpc-status"), "0".parse().unwrap())].into_iter().collect();
            let b = HashedBody::new(body(split(&wire, size), Some(trailers)), Answer::Containers, 11, 1 << 20);
            let out = frames(b).await;
            assert_eq!(out.len(), 2, "frames of {size}");
            let data = out[0].data_ref().expect("the hash first");
            assert_eq!(&data[..5], &[0, 0, 0, 0, 9]);
            assert_eq!(hash_of(&data[5..]), Some(whole), "frames of {size}");
            assert!(out[1].trailers_ref().is_some(), "then the trailers, kept");
        }
    }

    #[tokio::test]
    async fn an_answer_that_cannot_be_fingerprinted_says_so_and_a_missing_one_stays_missing() {
        let answer = containers();
        let cases = [
            ("compressed", vec![grpc_message(1, &answer)]),
            ("two messages", vec![grpc_message(0, &answer), grpc_message(0, &answer)]),
            ("not a listing", vec![grpc_message(0, &answer[..answer.len() - 2])]),
        ];
        for (what, wire) in cases {
            let b = HashedBody::new(body(wire, None), Answer::Containers, 11, 1 << 20);
            let out = frames(b).await;
            assert_eq!(out.len(), 1, "{what}");
            assert_eq!(hash_of(&out[0].data_ref().unwrap()[5..]), None, "{what}");
        }
        let over = HashedBody::new(body(vec![grpc_message(0, &answer)], None), Answer::Containers, 11, 100);
        assert_eq!(hash_of(&frames(over).await[0].data_ref().unwrap()[5..]), None, "over the size taken");
        // No message, or one cut short: nothing stands in for it.
        let trailers_only =
            HashedBody::new(body(vec![], Some(http::HeaderMap::new())), Answer::Containers, 11, 1 << 20);
        let out = frames(trailers_only).await;
        assert!(out.len() == 1 && out[0].is_trailers());
        let cut = grpc_message(0, &answer);
        let cut = HashedBody::new(body(vec![cut[..cut.len() - 1].to_vec()], None), Answer::Containers, 11, 1 << 20);
        assert!(frames(cut).await.is_empty());
    }
}
