//! A `ReplicatedPages` read longer than the copy budget keeps copies.
//!
//! Each page past the budget evicts a cold copy; that copy's memory comes
//! back through epoch-based reclamation, which waits for every thread
//! pinned in the process's epoch collector. The test is alone in its
//! binary so that no other test's pinned threads hold the epoch back: it
//! checks that the read itself lets the epoch move on.

use numalab::replicated::{PagesOptions, ReplicaSet, ReplicatedPages};

const PAGE: usize = 4096;

#[test]
fn one_read_longer_than_the_budget_keeps_copies() {
    let data: Vec<u8> = (0..64 * PAGE)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(7))
        .collect();
    let options = PagesOptions::default()
        .copy_after(1)
        .chunk_pages(4)
        .budget_per_replica(Some(16 * PAGE as u64));
    let set = ReplicaSet::emulated(vec![0]).unwrap();
    let region = ReplicatedPages::new(&data, set, options).unwrap();
    let mut buf = vec![0u8; data.len()];
    for _ in 0..3 {
        region.read_from(0, 0, &mut buf).unwrap();
        assert!(buf == data);
    }
    let s = &region.stats()[0];
    assert!(s.resident_bytes <= 16 * PAGE as u64, "{s:?}");
    assert!(s.evicted > 0 && s.reclaimed > 0, "{s:?}");
    assert!(s.copies >= 4, "a long read left {} copies: {s:?}", s.copies);
}
