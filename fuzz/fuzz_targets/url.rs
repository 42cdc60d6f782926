//! The URL parser: never panics, and what it accepts it accepts again from
//! its own rendering of host and port.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meshwrap::sidecar::Endpoint;

fuzz_target!(|text: &str| {
    if let Ok(endpoint) = Endpoint::parse(text) {
        let host = endpoint.host_text();
        let port = endpoint.explicit_port().unwrap_or(80);
        let again = Endpoint::parse(&format!("http://{host}:{port}/"));
        assert!(again.is_ok(), "{text:?} -> {host}:{port}: {again:?}");
    }
});
