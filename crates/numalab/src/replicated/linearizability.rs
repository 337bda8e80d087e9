//! A linearizability stress test: threads on different (emulated)
//! replicas run puts and gets on a small map, every operation's interval
//! is recorded on a shared logical clock, and the history is checked.
//!
//! The checker: a map of independent keys is linearizable iff each key's
//! sub-history is (linearizability is local, Herlihy & Wing 1990). Every
//! put writes a value never written before and returns the previous one,
//! so each key's writes form a chain that fixes their order; the history
//! is then linearizable iff the precedence graph of real-time order,
//! write order, reads-from and anti-dependency (a read of a value before
//! the write that replaced it) has no cycle (Misra, "Axioms for memory
//! access in asynchronous hardware systems", 1986).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::*;

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Put of a fresh value; returned the previous one.
    Put { value: u64, previous: Option<u64> },
    /// Get; returned this.
    Get { seen: Option<u64> },
}

#[derive(Debug, Clone, Copy)]
struct Event {
    key: u64,
    kind: Kind,
    start: u64,
    end: u64,
}

/// Checks one key's events; returns a description of the violation.
fn check_key(events: &[Event]) -> Result<(), String> {
    let n = events.len();
    // The write chain: value -> index of the put that wrote it, and
    // previous value -> the put that replaced it.
    let mut writer: HashMap<u64, usize> = HashMap::new();
    let mut replaced_by: HashMap<Option<u64>, usize> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        if let Kind::Put { value, previous } = e.kind {
            writer.insert(value, i);
            if let Some(other) = replaced_by.insert(previous, i) {
                return Err(format!(
                    "two puts replaced the same value {previous:?}: {:?} and {:?}",
                    events[other], e
                ));
            }
        }
    }
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, a) in events.iter().enumerate() {
        // Real time.
        for (j, b) in events.iter().enumerate() {
            if a.end < b.start {
                edges[i].push(j);
            }
        }
        let observed = match a.kind {
            Kind::Put { previous, .. } => previous,
            Kind::Get { seen } => seen,
        };
        // Reads-from (and write order, for puts): the write of the value
        // observed comes first.
        if let Some(v) = observed {
            match writer.get(&v) {
                Some(&w) => edges[w].push(i),
                None => return Err(format!("{a:?} observed {v}, which no put wrote")),
            }
        }
        // Anti-dependency: a get comes before the put that replaced the
        // value it saw.
        if let Kind::Get { seen } = a.kind {
            if let Some(&w) = replaced_by.get(&seen) {
                edges[i].push(w);
            }
        }
    }
    // Kahn's algorithm: a cycle leaves nodes unsorted.
    let mut indegree = vec![0usize; n];
    for targets in &edges {
        for &t in targets {
            indegree[t] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut sorted = 0;
    while let Some(i) = ready.pop() {
        sorted += 1;
        for &t in &edges[i] {
            indegree[t] -= 1;
            if indegree[t] == 0 {
                ready.push(t);
            }
        }
    }
    if sorted == n {
        Ok(())
    } else {
        let stuck: Vec<&Event> = (0..n)
            .filter(|&i| indegree[i] > 0)
            .take(6)
            .map(|i| &events[i])
            .collect();
        Err(format!(
            "no linearization; operations on a cycle include {stuck:#?}"
        ))
    }
}

fn check(history: &[Event]) -> Result<(), String> {
    let mut by_key: HashMap<u64, Vec<Event>> = HashMap::new();
    for e in history {
        by_key.entry(e.key).or_default().push(*e);
    }
    for (key, events) in by_key {
        check_key(&events).map_err(|e| format!("key {key}: {e}"))?;
    }
    Ok(())
}

fn run(options: ReplicatedOptions, replicas: usize, threads: usize, ops: usize) -> Vec<Event> {
    const KEYS: u64 = 4;
    let map = Replicated::with_set(
        HashMap::<u64, u64>::new(),
        ReplicaSet::emulated(vec![0; replicas]).unwrap(),
        options,
    )
    .unwrap();
    let clock = AtomicU64::new(0);
    let mut history = Vec::new();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (map, clock) = (&map, &clock);
                s.spawn(move || {
                    set_thread_replica(Some(t % replicas));
                    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
                    let mut events = Vec::with_capacity(ops);
                    for i in 0..ops {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let key = rng % KEYS;
                        let start = clock.fetch_add(1, Ordering::SeqCst);
                        let kind = if rng.is_multiple_of(3) {
                            let value = ((t as u64) << 32) | i as u64;
                            let previous = map.write(move |m| m.insert(key, value));
                            Kind::Put { value, previous }
                        } else {
                            Kind::Get {
                                seen: map.read(|m| m.get(&key).copied()),
                            }
                        };
                        let end = clock.fetch_add(1, Ordering::SeqCst);
                        events.push(Event {
                            key,
                            kind,
                            start,
                            end,
                        });
                    }
                    events
                })
            })
            .collect();
        for h in handles {
            history.extend(h.join().unwrap());
        }
    });
    history
}

#[test]
fn log_mode_histories_are_linearizable() {
    let ops = if cfg!(miri) { 20 } else { 1_500 };
    for entries in [4, 4096] {
        let options = ReplicatedOptions::new(Mode::Log)
            .log_entries(entries)
            .request_slots(2);
        let history = run(options, 3, 4, ops);
        assert_eq!(history.len(), 4 * ops);
        check(&history).unwrap();
    }
}

#[test]
fn broadcast_mode_histories_are_linearizable() {
    let ops = if cfg!(miri) { 20 } else { 1_500 };
    let history = run(ReplicatedOptions::new(Mode::Broadcast), 3, 4, ops);
    check(&history).unwrap();
}

#[test]
fn the_checker_finds_stale_reads() {
    // put 1 completes, then a get sees nothing: not linearizable.
    let put = |value, previous, start, end| Event {
        key: 0,
        kind: Kind::Put { value, previous },
        start,
        end,
    };
    let get = |seen, start, end| Event {
        key: 0,
        kind: Kind::Get { seen },
        start,
        end,
    };
    assert!(check(&[put(1, None, 0, 1), get(Some(1), 2, 3)]).is_ok());
    assert!(check(&[put(1, None, 0, 1), get(None, 2, 3)]).is_err());
    // Overlapping: either answer is fine.
    assert!(check(&[put(1, None, 0, 3), get(None, 1, 2)]).is_ok());
    // Two reads in order must not go back: saw 2, then later saw 1.
    let history = [
        put(1, None, 0, 1),
        put(2, Some(1), 2, 9),
        get(Some(2), 3, 4),
        get(Some(1), 5, 6),
    ];
    assert!(check(&history).is_err());
    // A lost update: both puts replaced nothing.
    assert!(check(&[put(1, None, 0, 1), put(2, None, 2, 3)]).is_err());
    // A value no one wrote.
    assert!(check(&[get(Some(7), 0, 1)]).is_err());
}
