//! A journal record from a corrupt or hostile state dir: decoding it is an error or an
//! event, never a panic, and an event that decodes encodes back to the same event.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plegd::journal::record::{decode_event, encode_event};

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = decode_event(data) {
        let again = encode_event(&d.event, &d.meta, d.left.as_ref());
        let back = decode_event(&again).expect("what plegd encodes decodes");
        assert_eq!(back.event.pod, d.event.pod);
        assert_eq!(back.meta, d.meta);
        assert_eq!(back.left, d.left);
        assert_eq!((back.event.kind, back.event.source), (d.event.kind, d.event.source));
        assert_eq!(back.event.container_id, d.event.container_id);
    }
});
