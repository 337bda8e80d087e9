//! Sizes as users write them (`--size 1.5G`, `memory.size = "512MiB"`):
//! never a panic, and a size that parses reads the same from its digits.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab::units::{format_size, parse_size};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_size(text) {
        Ok(bytes) => {
            assert_eq!(parse_size(&bytes.to_string()), Ok(bytes));
            let _ = format_size(bytes);
        }
        Err(err) => drop(err.to_string()),
    }
});
