//! A Kubernetes label selector as a Watch filter or `plegd watch --selector` gives it:
//! an error or a selector, and a selector that matches or not, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plegd::labels::Labels;
use plegd::selector::Selector;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(s) = Selector::parse(text) {
        let labels: Labels = [("app", "web"), ("tier", "front"), ("", ""), ("a.b/c", "x-y_z")].into();
        let _ = s.matches(&labels);
        let _ = s.matches(&Labels::default());
    }
});
