//! Host lists as Slurm writes them (`numalab fleet --expect node[01-16]`):
//! never a panic, never more names than the bound, each name once, and
//! the names a list stands for, written out, stand for themselves.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_bench::fleet::hostlist::{expand, MAX_HOSTS};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match expand(text) {
        Ok(names) => {
            assert!(!names.is_empty() && names.len() <= MAX_HOSTS);
            let unique: std::collections::HashSet<&String> = names.iter().collect();
            assert_eq!(unique.len(), names.len(), "a name given twice counts once");
            assert!(names.iter().all(|n| !n.is_empty()));
            assert_eq!(expand(&names.join(",")).as_ref(), Ok(&names));
        }
        Err(err) => drop(err.to_string()),
    }
});
