//! The Downward API annotations parser and the facts drawn from it, the
//! Istio status JSON included: never a panic or a stack overflow, only an
//! error for what is not in the format.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meshwrap::sidecar::pod;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(map) = pod::parse(&text) {
        let _ = pod::facts(&map, None);
    }
    // The same bytes as Istio's status annotation, to reach its JSON reader.
    let mut map = std::collections::BTreeMap::new();
    map.insert("sidecar.istio.io/status".to_string(), text.into_owned());
    let _ = pod::facts(&map, None);
});
