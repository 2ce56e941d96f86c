//! The `info` JSON of a runtime's verbose `ContainerStatus` and `PodSandboxStatus`
//! (containerd's and CRI-O's shapes, or anything a broken runtime sends).
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use plegd::cri::verbose::{ContainerVerbose, SandboxVerbose};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let map: HashMap<String, String> = [("info".to_string(), text.to_string())].into();
    let c = ContainerVerbose::parse(&map);
    let _ = SandboxVerbose::parse(&map);
    // What a container's cgroups path becomes is checked where a lookup uses it.
    let _ = plegd::host::cgroup_path_of(&c.cgroups_path);
});
