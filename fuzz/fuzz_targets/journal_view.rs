//! A view record: a pod in the journal's view, and each tombstone row's record
//! (`tombstones.sqlite`). An error or a pod, never a panic; a pod re-encodes the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plegd::journal::record::{decode_view, encode_view};

fuzz_target!(|data: &[u8]| {
    if let Ok((pod, meta)) = decode_view(data) {
        let (back, back_meta) = decode_view(&encode_view(&pod, &meta)).expect("what plegd encodes decodes");
        assert_eq!(back, pod);
        assert_eq!(back_meta, meta);
    }
});
