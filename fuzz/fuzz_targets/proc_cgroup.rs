//! `/proc/PID/cgroup` and `/proc/PID/stat` text under `--host-root` (a hostile process
//! names its own cgroups; a broken root holds anything), and a runtime's cgroups path.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plegd::host;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (cgroup_file, cgroups_path) = text.split_once('\u{0}').unwrap_or((text, ""));
    let _ = host::start_ticks(cgroup_file);
    if let Some(path) = host::unified_cgroup(cgroup_file) {
        if let Some(id) = host::container_id_in(&path) {
            assert_eq!(id.len(), 64, "an id is 64 hex digits");
            assert!(path.contains(id));
        }
        let placed = host::placed_in(&path, cgroups_path);
        let _ = host::under_kubepods(&path);
        if let Some(id) = host::container_id_in(&path) {
            // The container its cgroup names claims it exactly when it is placed there.
            assert_eq!(host::belongs_to(&path, id, cgroups_path), cgroups_path.is_empty() || placed);
        }
    }
    let _ = host::cgroup_path_of(cgroups_path);
});
