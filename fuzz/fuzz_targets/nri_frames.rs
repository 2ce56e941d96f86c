//! What a peer on the NRI socket sends: multiplexer frames holding ttrpc messages, cut
//! at any point. Any bytes give messages or an error, never a panic; what the decoder
//! holds stays bounded; every request it yields is answered (or refused as not a
//! request) without a panic, and every answer fits a frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plegd::nri::{session, wire};

fuzz_target!(|data: &[u8]| {
    // The first byte picks where reads are cut.
    let Some((&cut, bytes)) = data.split_first() else { return };
    let step = usize::from(cut).max(1);
    let mut demux = wire::Demux::default();
    for chunk in bytes.chunks(step) {
        match demux.push(chunk) {
            Ok(messages) => {
                for m in messages {
                    assert!(m.payload.len() <= wire::MAX_MESSAGE);
                    assert!(matches!(m.conn, wire::PLUGIN_CONN | wire::RUNTIME_CONN));
                    if m.kind == wire::REQUEST
                        && let Ok(a) = session::answer(&m.payload)
                    {
                        // Every answer goes out as a frame: never longer than ttrpc allows.
                        let out = wire::Message { payload: a.response, kind: wire::RESPONSE, ..m };
                        wire::encode(&out).expect("an answer fits a frame");
                    }
                }
            }
            Err(_) => return,
        }
    }
});
