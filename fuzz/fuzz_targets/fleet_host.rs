//! `numalab fleet`: one host's saved report read as the fleet reads it
//! (only the parts it needs), then merged with two copies of itself under
//! other names and their figures changed, so the grouping, the medians
//! and the flagging run on whatever the file held. Never a panic; every
//! figure kept is one a measurement can give.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_bench::fleet::{merge, HostResult};

fuzz_target!(|data: &[u8]| {
    let host = match HostResult::parse(data, "fuzz.json".as_ref()) {
        Ok(host) => host,
        Err(why) => {
            drop(why);
            return;
        }
    };
    for (cell, value) in &host.figures {
        assert!(
            cell.metric.plausible().contains(value),
            "{cell} = {value} kept"
        );
    }
    let mut hosts = vec![host.clone()];
    for (i, factor) in [(1, 0.5), (2, 2.0)] {
        let mut other = host.clone();
        other.host = format!("{}-{i}", host.host);
        for (_, value) in &mut other.figures {
            *value *= factor;
        }
        hosts.push(other);
    }
    // The same host twice: one is left out, by its date.
    hosts.push(host);
    for threshold in [0.9, 1.0] {
        match merge(hosts.clone(), Vec::new(), threshold) {
            Ok(report) => {
                assert_eq!(report.hosts.len(), 3);
                assert_eq!(report.left_out.len(), 1);
                let doc = numalab_bench::document::Document::new(&report).to_json();
                drop(doc);
            }
            Err(err) => panic!("three hosts did not merge: {err}"),
        }
    }
});
