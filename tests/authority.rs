//! Pins plegd's patch of h2 (`third_party/h2/PLEGD-PATCH.md`): a request whose
//! `:authority` is a unix socket's path — what grpc-core and grpc-java send on
//! `unix://` channels — is answered, not reset. The request is written by hand, frame by
//! frame, so the test needs no client library; `tests/clients/` runs the real clients.

mod support;

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/2 frame's header and payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK "literal header field without indexing, new name" (no Huffman coding).
fn header(name: &str, value: &str) -> Vec<u8> {
    assert!(name.len() < 127 && value.len() < 127);
    let mut h = vec![0x00, name.len() as u8];
    h.extend_from_slice(name.as_bytes());
    h.push(value.len() as u8);
    h.extend_from_slice(value.as_bytes());
    h
}

/// Sends a gRPC health check with `authority` and returns the type of the first frame
/// plegd sends on the request's stream (1: HEADERS, an answer; 3: RST_STREAM).
async fn first_frame_on_the_stream(socket: &str, authority: &str) -> u8 {
    let mut conn = tokio::net::UnixStream::connect(socket).await.unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(4, 0, 0, &[]));
    let block: Vec<u8> = [
        header(":method", "POST"),
        header(":scheme", "http"),
        header(":path", "/grpc.health.v1.Health/Check"),
        header(":authority", authority),
        header("content-type", "application/grpc"),
        header("te", "trailers"),
    ]
    .concat();
    out.extend(frame(1, 0x4, 1, &block));
    out.extend(frame(0, 0x1, 1, &[0, 0, 0, 0, 0]));
    conn.write_all(&out).await.unwrap();
    let mut buf = Vec::new();
    let read = async {
        loop {
            while buf.len() >= 9 {
                let len = (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
                if buf.len() < 9 + len {
                    break;
                }
                let (kind, flags) = (buf[3], buf[4]);
                let stream = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
                if kind == 4 && flags & 1 == 0 {
                    conn.write_all(&frame(4, 1, 0, &[])).await.unwrap();
                }
                buf.drain(..9 + len);
                if stream == 1 {
                    return kind;
                }
            }
            let mut chunk = [0u8; 4096];
            let n = conn.read(&mut chunk).await.unwrap();
            assert!(n > 0, "plegd closed the connection without answering the stream");
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read).await.expect("an answer within 5 s")
}

#[tokio::test]
async fn a_request_whose_authority_is_the_sockets_path_is_answered_not_reset() {
    let p = support::start_plegd(|_| {}).await;
    let path = p.socket.trim_start_matches("unix://").to_owned();
    assert_eq!(first_frame_on_the_stream(&path, "localhost").await, 1, "a plain authority is answered");
    assert_eq!(first_frame_on_the_stream(&path, &path).await, 1, "the socket's path as grpc-core sends it");
    assert_eq!(first_frame_on_the_stream(&path, "unix:/x y").await, 1, "any malformed authority is left out");
    p.stop().await;
}
