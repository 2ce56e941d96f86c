//! `otlp-cursor.json` from a restored, copied or damaged state dir.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = plegd::export::cursor::parse(data);
});
