//! Request targets of the admin and debug listeners: the URI as the HTTP server parses
//! it, the query as axum extracts it, then the pages' list filter and `/debug/events`'
//! parameters as plegd checks them.
#![no_main]

use std::collections::HashMap;

use axum::extract::Query;
use axum::http::Uri;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(uri) = Uri::try_from(data) else { return };
    if let Ok(Query(params)) = Query::<Vec<(String, String)>>::try_from_uri(&uri) {
        let _ = plegd::pages::list::ListQuery::parse(&params);
    }
    if let Ok(Query(params)) = Query::<HashMap<String, String>>::try_from_uri(&uri) {
        let _ = plegd::admin::events_query(&params);
    }
});
