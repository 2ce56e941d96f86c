//! A log file path as a collector holds it (`GetContainer`'s `log_path`): an error naming
//! the forms, or a key that is a clean absolute path of the kubelet's form.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plegd::lookup::{LogFile, log_file};

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else { return };
    match log_file(path) {
        Ok(LogFile::Attempt(key)) => {
            assert!(key.starts_with('/') && key.ends_with(".log"), "{key}");
            assert!(!key.split('/').any(|p| p == ".." || p == "."), "{key}");
            // A key reads as itself.
            assert_eq!(log_file(&key), Ok(LogFile::Attempt(key.clone())));
        }
        Ok(LogFile::Link { id, .. }) => assert_eq!(id.len(), 64),
        Err(why) => assert!(!why.is_empty()),
    }
});
