//! scuttle's nine variables, from fuzzed values: never a panic, and every
//! error names the variable it is about.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meshwrap::scuttle;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let values: Vec<&str> = text.split('\0').collect();
    let get = |name: &str| {
        let i = scuttle::VARS.iter().position(|v| *v == name)?;
        values.get(i).filter(|v| !v.is_empty()).map(|v| v.to_string())
    };
    if let Err(line) = scuttle::from_vars(get) {
        assert!(scuttle::VARS.iter().any(|v| line.contains(v)), "{line}");
    }
});
