//! The duration parser: never panics; whatever it accepts formats to text
//! it accepts again, and only a value written as zero is zero.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meshwrap::duration;

fuzz_target!(|text: &str| {
    if let Some(d) = duration::parse(text) {
        assert!(duration::parse(&duration::format(d)).is_some(), "{d:?} formats to an unparsable text");
        if d.is_zero() {
            assert!(!text.contains(|c: char| ('1'..='9').contains(&c)), "{text:?} became zero");
        }
    }
});
