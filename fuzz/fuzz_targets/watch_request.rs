//! A `WatchRequest` off the socket: decoded, then its filter and types checked, as the
//! server does before anything is served.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plegd::journal::PodMeta;
use plegd::proto::plegd as api;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(req) = api::WatchRequest::decode(data) else { return };
    if let Ok(filter) = plegd::grpc::to_filter(req.filter, &req.types) {
        let meta = PodMeta {
            uid: "u".into(),
            namespace: "default".into(),
            name: "web-1".into(),
            labels: [("app", "web")].into(),
            ips: Default::default(),
        };
        let _ = filter.matches_pod(&meta);
    }
});
