//! A `GetContainerRequest` off the socket: decoded, then its key checked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plegd::proto::plegd as api;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(req) = api::GetContainerRequest::decode(data) else { return };
    let _ = plegd::grpc::lookup_key(req);
});
