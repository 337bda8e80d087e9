//! Speed of replicated memory, as ratios against references measured in
//! the same run:
//!
//! 1. the read path: `Replicated<T>::read` against a plain unsynchronised
//!    read of the same data (1 and 2 threads; target ≥ 0.9);
//! 2. a shared hash map under read/write mixes: numalab's log and
//!    broadcast modes against `std::sync::RwLock`, `parking_lot::RwLock`
//!    and `node-replication` 0.1.1 (write ratios 0, 0.1 %, 1 %, 10 %);
//! 3. `ReplicatedPages` reads of local copies against a plain `memcpy` of
//!    the same bytes (target ≥ 0.9).
//!
//! Beside each target, a reference that shows where the time goes: for
//! the read path, the re-read (the plain read with the structure's fields
//! loaded again for each read, as any loop of reads that lets writers in
//! between them must), the looked read (the plain read with one look per
//! read at a word only writers change, as any batch of reads that each
//! see the writes returned before they begin must make) and the floor
//! (the plain read plus the least a reader that registers per read must
//! add); for `ReplicatedPages`, a
//! memcpy whose source is found through a page table first (what a read
//! that waits for its page lookup would cost).
//!
//! ```sh
//! cargo bench -p numalab --bench replicated            # full run, a few minutes
//! cargo bench -p numalab --bench replicated -- --quick # shorter cells
//! cargo bench -p numalab --bench replicated -- read    # one section: read, map or pages
//! ```
//!
//! Variants of one cell run in rounds (A B C, B C A, C A B, …); a rate is
//! the median over the rounds and a ratio the median of the ratios taken
//! within each round, so drift in the machine's load hits every variant
//! alike. Threads are pinned one per CPU.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{compiler_fence, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use crossbeam_utils::CachePadded;
use node_replication::{Dispatch, Log as NrLog, Replica as NrReplica};
use numalab::replicated::{Mode, PagesOptions, ReplicaSet, Replicated, ReplicatedPages};
use numalab::units::count;
use numalab::{affinity, BufferOptions, CpuSet, HugePages, MemPolicy, NodeBuffer, NodeSet};

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    #[inline(always)]
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

struct Bench {
    repeats: usize,
    scale: f64,
    cpus: Vec<u32>,
}

impl Bench {
    /// Runs `body(thread, ops)` on `threads` pinned threads from a common
    /// start; returns million operations per second over all threads.
    fn run(&self, threads: usize, ops: u64, body: &(dyn Fn(usize, u64) + Sync)) -> f64 {
        let barrier = Barrier::new(threads + 1);
        let ops = ((ops as f64 * self.scale) as u64).max(1);
        let elapsed = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let barrier = &barrier;
                    let cpu = self.cpus[t % self.cpus.len()];
                    s.spawn(move || {
                        let _ = affinity::bind_thread_to_cpus(&CpuSet::single(cpu));
                        barrier.wait();
                        let start = Instant::now();
                        body(t, ops);
                        start.elapsed()
                    })
                })
                .collect();
            barrier.wait();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .max()
                .unwrap()
        });
        (threads as u64 * ops) as f64 / elapsed.as_secs_f64() / 1e6
    }

    /// Measures every variant `repeats` times in rounds (each round runs
    /// every variant once, in a rotated order); returns each variant's
    /// median Mops/s and its median ratio to variant 0 over the rounds.
    /// Ratios taken within a round compare runs seconds apart, which keeps
    /// them meaningful on a machine whose load drifts.
    fn compare(
        &self,
        threads: usize,
        ops: u64,
        variants: &[&(dyn Fn(usize, u64) + Sync)],
    ) -> Vec<(f64, f64)> {
        self.compare_rounds(threads, ops, variants).0
    }

    /// [`Bench::compare`], and each variant's ratio to variant 0 in every
    /// round.
    fn compare_rounds(
        &self,
        threads: usize,
        ops: u64,
        variants: &[&(dyn Fn(usize, u64) + Sync)],
    ) -> (Vec<(f64, f64)>, Vec<Vec<f64>>) {
        // One untimed pass warms caches and page tables.
        for v in variants {
            self.run(threads, ops / 10 + 1, *v);
        }
        let n = variants.len();
        let mut samples = vec![Vec::new(); n];
        let mut ratios = vec![Vec::new(); n];
        for round in 0..self.repeats {
            let mut this = vec![0.0; n];
            for k in 0..n {
                let i = (round + k) % n;
                this[i] = self.run(threads, ops, variants[i]);
            }
            for i in 0..n {
                samples[i].push(this[i]);
                ratios[i].push(this[i] / this[0]);
            }
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let medians = samples
            .into_iter()
            .zip(&ratios)
            .map(|(s, r)| (median(s), median(r.clone())))
            .collect();
        (medians, ratios)
    }
}

// --- node-replication 0.1.1 baseline ---------------------------------------

#[derive(Default)]
struct NrMap(HashMap<u64, u64>);

#[derive(Debug, Clone, PartialEq)]
struct Get(u64);

#[derive(Debug, Clone, PartialEq)]
struct Put(u64, u64);

impl Dispatch for NrMap {
    type ReadOperation = Get;
    type WriteOperation = Put;
    type Response = Option<u64>;

    fn dispatch(&self, op: Get) -> Option<u64> {
        self.0.get(&op.0).copied()
    }

    fn dispatch_mut(&mut self, op: Put) -> Option<u64> {
        self.0.insert(op.0, op.1)
    }
}

// ---------------------------------------------------------------------------

/// A pointer the benchmark threads share (read-only).
struct Shared<T>(*const T);
// SAFETY: only used to read data that no thread writes during the reads.
unsafe impl<T: Sync> Sync for Shared<T> {}

impl<T> Shared<T> {
    fn get(&self) -> *const T {
        self.0
    }
}

/// One read workload: plain, log and broadcast reads of the same data.
fn read_row<T: Clone + Send + Sync>(
    bench: &Bench,
    name: &str,
    data: T,
    ops: u64,
    read: impl Fn(&T, u64) -> u64 + Sync,
) {
    let set = ReplicaSet::system().unwrap();
    let log = Replicated::with_set(data.clone(), set.clone(), Mode::Log).unwrap();
    let broadcast = Replicated::with_set(data, set, Mode::Broadcast).unwrap();
    // The plain reads go to the log replica's own memory (same pages, same
    // page size, same node), bypassing the lock: only the read path
    // differs.
    let replica: *const T = log.read(|d| d as *const T);
    let replica = Shared(replica);
    let plain_body = |t: usize, ops: u64| {
        let mut rng = Rng::new(t as u64 + 1);
        let mut sum = 0u64;
        // SAFETY: nothing writes to `log` in this section, and it outlives
        // the threads reading it.
        let data = black_box(unsafe { &*replica.get() });
        for _ in 0..ops {
            sum = sum.wrapping_add(read(data, rng.next()));
        }
        black_box(sum);
    };
    let replicated_body = |v: &Replicated<T>, t: usize, ops: u64| {
        let mut rng = Rng::new(t as u64 + 1);
        let mut sum = 0u64;
        for _ in 0..ops {
            let x = rng.next();
            sum = sum.wrapping_add(v.read(|d| read(d, x)));
        }
        black_box(sum);
    };
    let handle_body = |t: usize, ops: u64| {
        let mut rng = Rng::new(t as u64 + 1);
        let mut sum = 0u64;
        let reader = log.reader();
        for _ in 0..ops {
            let x = rng.next();
            sum = sum.wrapping_add(reader.read(|d| read(d, x)));
        }
        black_box(sum);
    };
    let held_body = |t: usize, ops: u64| {
        let mut rng = Rng::new(t as u64 + 1);
        let mut sum = 0u64;
        let mut reader = log.held_reader();
        for _ in 0..ops {
            let x = rng.next();
            sum = sum.wrapping_add(reader.read(|d| read(d, x)));
        }
        black_box(sum);
    };
    // The same reads as one batch: the value is handed to the loop as a
    // `&T` no write can change between two writers.
    let each_body = |t: usize, ops: u64| {
        let mut rng = Rng::new(t as u64 + 1);
        let mut sum = 0u64;
        let mut reader = log.held_reader();
        reader.read_each(0..ops, |d, _| {
            sum = sum.wrapping_add(read(d, rng.next()));
        });
        black_box(sum);
    };
    let log_body = |t: usize, ops: u64| replicated_body(&log, t, ops);
    let broadcast_body = |t: usize, ops: u64| replicated_body(&broadcast, t, ops);
    // The floor: the plain read plus the least any reader that registers
    // per read must add (the fast path of a correct protocol, without
    // the protocol): a load and a store to enter (nesting-safe), a load
    // of the writers' state, a store to leave, and the compiler barrier
    // that orders them, after which the data structure's own fields (a
    // Vec's pointer and length, a map's table) are read again on every
    // read, as they must be once a writer may have changed them.
    let floor_slots: Vec<FloorSlot> = (0..2).map(|_| FloorSlot::default()).collect();
    let floor_body = |t: usize, ops: u64| {
        let mut rng = Rng::new(t as u64 + 1);
        let mut sum = 0u64;
        let slot = &floor_slots[t];
        let data = replica.get();
        for _ in 0..ops {
            let x = rng.next();
            let word = slot.word.load(Ordering::Relaxed);
            slot.word.store(word + 1, Ordering::Relaxed);
            compiler_fence(Ordering::SeqCst);
            if slot.state.load(Ordering::SeqCst) != 0 {
                floor_wait();
            }
            // SAFETY: as for the plain reads.
            sum = sum.wrapping_add(read(unsafe { &*data }, x));
            slot.word.store(word + (1 << 16), Ordering::Release);
        }
        black_box(sum);
    };
    // The plain read in a loop that also holds a call the compiler cannot
    // see into, on a branch never taken, as every loop of reads that let
    // a writer in between them does: the structure's fields (a map's
    // table pointer, mask and hash keys) are loaded again for each read,
    // as they must be once a writer may have changed them, and nothing
    // else is done. (Loading them through a pointer passed through
    // memory instead, as `black_box(data)` does, measured 0.96-0.99 on
    // the Zen 5 VM where this form measures 0.73: how the loads are fed
    // matters as much as that they are made.)
    let reread_body = |t: usize, ops: u64| {
        let mut rng = Rng::new(t as u64 + 1);
        let mut sum = 0u64;
        let data = replica.get();
        for _ in 0..ops {
            let x = rng.next();
            // xorshift64* never gives 0 from a state that is not 0.
            if x == 0 {
                never_called();
            }
            // SAFETY: as for the plain reads.
            sum = sum.wrapping_add(read(unsafe { &*data }, x));
        }
        black_box(sum);
    };
    // The plain read with one look per read at a word only writers
    // change, and nothing else: the reference for the held reader's batch
    // form (docs/figures.md, "Goals the physics sets").
    let looked_body = |t: usize, ops: u64| {
        // SAFETY: as for the plain reads.
        let data = unsafe { &*replica.get() };
        black_box(looked_reads(
            data,
            &floor_slots[t].state,
            ops,
            t as u64 + 1,
            &read,
        ));
    };
    let mut rounds = vec![];
    for threads in [1, 2] {
        let (r, by_round) = bench.compare_rounds(
            threads,
            ops,
            &[
                &plain_body,
                &floor_body,
                &log_body,
                &broadcast_body,
                &handle_body,
                &reread_body,
                &held_body,
                &each_body,
                &looked_body,
            ],
        );
        // Extra time per read on one thread, in ns.
        let overhead = threads as f64 * 1e3 / r[2].0 - threads as f64 * 1e3 / r[0].0;
        println!(
            "| {name} | {threads} | {:.1} | {:.2} | {:.2} | {:.2} | {:.1} | **{:.2}** | **{:.2}** | **{:.2}** | **{:.2}** | **{:.2}** | {:.1} |",
            r[0].0, r[5].1, r[8].1, r[1].1, r[2].0, r[2].1, r[3].1, r[4].1, r[6].1, r[7].1, overhead
        );
        // The held reader's single reads against the re-read, the plain
        // loop that loads the structure's fields again for every read as
        // any loop of single reads letting writers in must: what the
        // held reader adds is its lock word and branch. Both are ratios
        // to the same round's plain read, so theirs is within the round.
        let held_to_reread = within_rounds(&by_round[6], &by_round[5]);
        // Its batch form against the looked read, the plain loop that
        // looks at a writers' word once per read as every read that must
        // see the writes returned before it begins must.
        let each_to_looked = within_rounds(&by_round[7], &by_round[8]);
        rounds.push((threads, held_to_reread, each_to_looked));
    }
    // For bench/all.sh: the goals and every round's ratios of the held
    // reader (log mode, the default): its batch form to the looked read,
    // its single reads to the re-read (docs/figures.md, "Goals the
    // physics sets").
    if name.starts_with("HashMap") {
        let held = format!("Replicated {name}, held reader's read / plain re-read (log mode)");
        let each = format!(
            "Replicated {name}, held reader's read_each / plain read with a look per read (log mode)"
        );
        println!("GOAL\t{held}\t\t>= 0.95");
        println!("GOAL\t{each}\t\t>= 0.95");
        for (threads, held_ratios, each_ratios) in rounds {
            let cell = count(threads, "thread");
            for ratio in held_ratios {
                println!("ROUND\t{held}\t{cell}\t{ratio:.4}");
            }
            for ratio in each_ratios {
                println!("ROUND\t{each}\t{cell}\t{ratio:.4}");
            }
        }
    }
}

/// Round by round, `a` against `b`: two variants' ratios to the same
/// round's plain read give their ratio to each other within the round.
fn within_rounds(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(a, b)| a / b).collect()
}

/// A reader slot and a writers' state word, for the floor.
#[derive(Default)]
struct FloorSlot {
    word: CachePadded<AtomicU64>,
    state: CachePadded<AtomicU64>,
}

/// The looked read: `ops` plain reads of `data`, each after one look at
/// `state`, a word only writers change (a `SeqCst` load, a plain load on
/// x86-64, and a branch never taken), as a batch of reads that each see
/// every write returned before they begin must make (in log mode a write
/// marks the other replicas stale without waiting for their readers).
/// Nothing else is added: `data` is an argument, so the structure's
/// fields stay in registers across the loop (a shared reference promises
/// nothing changes them while the function runs), and so do the sum and
/// the random state. What it costs beside the plain read is the look.
#[inline(never)]
fn looked_reads<T>(
    data: &T,
    state: &AtomicU64,
    ops: u64,
    seed: u64,
    read: &impl Fn(&T, u64) -> u64,
) -> u64 {
    let mut rng = Rng::new(seed);
    let mut sum = 0u64;
    for _ in 0..ops {
        let x = rng.next();
        if state.load(Ordering::SeqCst) != 0 {
            floor_wait();
        }
        sum = sum.wrapping_add(read(data, x));
    }
    sum
}

/// A call the compiler cannot see into, for the re-read reference.
#[cold]
#[inline(never)]
fn never_called() {
    black_box(());
}

#[cold]
#[inline(never)]
fn floor_wait() {
    unreachable!("no writer in the floor");
}

fn read_path(bench: &Bench) {
    println!("\n## 1. Read path: Replicated<T>::read vs a plain unsynchronised read");
    println!("(ratios to plain: same data, same closure; re-read = the plain read with the structure's fields loaded again for each read, as any loop of reads that lets writers in between them must; looked = the plain read with one look per read at a word only writers change, all else in registers; floor = the plain read plus the least a reader that registers per read adds; read_each = the held reader's batch form, which keeps the fields in registers between writers)\n");
    println!(
        "| read | threads | plain Mops/s | re-read ratio | looked ratio | floor ratio | log Mops/s | log ratio | broadcast ratio | log Reader ratio | log HeldReader ratio | log read_each ratio | extra ns/read (log) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    // A lookup in a hash map larger than the caches: the typical
    // read-mostly shared structure.
    const KEYS: u64 = 1 << 20;
    let map: HashMap<u64, u64> = (0..KEYS).map(|k| (k, k)).collect();
    read_row(bench, "HashMap get, 1 Mi keys", map, 2_000_000, |m, x| {
        m.get(&(x % KEYS)).copied().unwrap_or(0)
    });
    // Independent random loads from 64 MiB: the plain loop keeps several
    // cache misses in flight, so every instruction added per read shows.
    let big: Vec<u64> = (0..8u64 << 20).collect();
    read_row(bench, "random u64 of 64 MiB", big, 4_000_000, |v, x| {
        v[(x & ((8 << 20) - 1)) as usize]
    });
    // In L1: the fixed cost of the read path.
    let small: Vec<u64> = (0..512u64).collect();
    read_row(bench, "random u64 of 4 KiB", small, 40_000_000, |v, x| {
        v[(x & 511) as usize]
    });
}

fn hash_map(bench: &Bench) {
    const KEYS: u64 = 1 << 20;
    println!("\n## 2. Shared HashMap<u64, u64> (1 Mi keys): Mops/s and ratios");
    println!("(each op a get, or with the write ratio a put of an existing key)\n");
    println!(
        "| writes | threads | std RwLock | parking_lot | NR 0.1.1 | numalab log | numalab broadcast | log/std | log/parking_lot | log/NR | broadcast/std |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let initial: HashMap<u64, u64> = (0..KEYS).map(|k| (k, k)).collect();
    let std_lock = std::sync::RwLock::new(initial.clone());
    let pl_lock = parking_lot::RwLock::new(initial.clone());
    let nr_log = Arc::new(NrLog::<Put>::new(32 << 20));
    let nr = NrReplica::with_data(&nr_log, NrMap(initial.clone()));
    let log = Replicated::new(initial.clone(), Mode::Log).unwrap();
    let broadcast = Replicated::new(initial, Mode::Broadcast).unwrap();
    for (label, per_million) in [
        ("0", 0u64),
        ("0.1%", 1_000),
        ("1%", 10_000),
        ("10%", 100_000),
    ] {
        for threads in [1, 2] {
            let op = |rng: &mut Rng| {
                let x = rng.next();
                (x % 1_000_000 < per_million, (x >> 20) % KEYS)
            };
            let std_body = |t: usize, ops: u64| {
                let mut rng = Rng::new(t as u64 + 7);
                let mut sum = 0u64;
                for _ in 0..ops {
                    let (write, key) = op(&mut rng);
                    if write {
                        std_lock.write().unwrap().insert(key, sum);
                    } else {
                        sum = sum
                            .wrapping_add(std_lock.read().unwrap().get(&key).copied().unwrap_or(0));
                    }
                }
                black_box(sum);
            };
            let pl_body = |t: usize, ops: u64| {
                let mut rng = Rng::new(t as u64 + 7);
                let mut sum = 0u64;
                for _ in 0..ops {
                    let (write, key) = op(&mut rng);
                    if write {
                        pl_lock.write().insert(key, sum);
                    } else {
                        sum = sum.wrapping_add(pl_lock.read().get(&key).copied().unwrap_or(0));
                    }
                }
                black_box(sum);
            };
            let nr_body = |t: usize, ops: u64| {
                let token = nr.register().expect("a thread slot in the NR replica");
                let mut rng = Rng::new(t as u64 + 7);
                let mut sum = 0u64;
                for _ in 0..ops {
                    let (write, key) = op(&mut rng);
                    if write {
                        let _ = nr.execute_mut(Put(key, sum), token);
                    } else {
                        sum = sum.wrapping_add(nr.execute(Get(key), token).unwrap_or(0));
                    }
                }
                black_box(sum);
            };
            let ours = |map: &Replicated<HashMap<u64, u64>>, t: usize, ops: u64| {
                let mut rng = Rng::new(t as u64 + 7);
                let mut sum = 0u64;
                for _ in 0..ops {
                    let (write, key) = op(&mut rng);
                    if write {
                        let value = sum;
                        map.write(move |m| m.insert(key, value));
                    } else {
                        sum = sum.wrapping_add(map.read(|m| m.get(&key).copied().unwrap_or(0)));
                    }
                }
                black_box(sum);
            };
            let log_body = |t: usize, ops: u64| ours(&log, t, ops);
            let broadcast_body = |t: usize, ops: u64| ours(&broadcast, t, ops);
            let r = bench.compare(
                threads,
                1_000_000,
                &[&std_body, &pl_body, &nr_body, &log_body, &broadcast_body],
            );
            // Ratios against NR and parking_lot from the same rounds.
            let vs = |i: usize, j: usize| r[i].1 / r[j].1;
            println!(
                "| {label} | {threads} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | **{:.2}** | {:.2} | **{:.2}** | {:.2} |",
                r[0].0,
                r[1].0,
                r[2].0,
                r[3].0,
                r[4].0,
                r[3].1,
                vs(3, 1),
                vs(3, 2),
                r[4].1
            );
        }
    }
}

/// A plain memcpy of `size` bytes from random page-aligned offsets of
/// `source` (one of `slots` pages of `page` bytes), `ops` times.
fn copy_body(
    source: &[u8],
    size: usize,
    slots: usize,
    page: usize,
) -> impl Fn(usize, u64) + Sync + '_ {
    move |t: usize, ops: u64| {
        let mut rng = Rng::new(t as u64 + 3);
        let mut buf = vec![0u8; size];
        let src = black_box(source);
        for _ in 0..ops {
            let at = (rng.next() as usize % slots) * page;
            buf.copy_from_slice(&src[at..at + size]);
            black_box(&mut buf);
        }
    }
}

fn pages(bench: &Bench) {
    const LEN: usize = 64 << 20;
    println!("\n## 3. ReplicatedPages: reads of local copies vs a plain memcpy");
    println!("(random page-aligned reads from a 64 MiB region into a private buffer)\n");
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 4096) as u8).collect();
    let mut plain = NodeBuffer::new(LEN, MemPolicy::Bind(NodeSet::single(0))).unwrap();
    plain.as_mut_slice().copy_from_slice(&data);
    // The same bytes in transparent huge pages, as ReplicatedPages keeps
    // a 2 MiB group of copies once all its pages are copied: what part
    // of its speed is the TLB's.
    let mut huge = NodeBuffer::with_options(
        LEN,
        BufferOptions::new(MemPolicy::Bind(NodeSet::single(0))).huge_pages(HugePages::Transparent),
    )
    .unwrap();
    huge.as_mut_slice().copy_from_slice(&data);
    let set = ReplicaSet::system().unwrap();
    let region =
        ReplicatedPages::new(&data, set.clone(), PagesOptions::default().copy_after(1)).unwrap();
    drop(data);
    // Make every replica's copies: read everything once through each.
    let mut scratch = vec![0u8; LEN];
    for r in 0..set.len() {
        region.read_from(r, 0, &mut scratch).unwrap();
    }
    drop(scratch);
    let huge_pages: u64 = region.stats().iter().map(|s| s.huge_pages).sum();
    println!(
        "(copies made: {} 2 MiB groups of {} gathered into huge pages)\n",
        huge_pages,
        set.len() * LEN / (2 << 20)
    );
    println!(
        "| read size | threads | memcpy GB/s | memcpy via lookup ratio | memcpy from huge pages ratio | ReplicatedPages GB/s | ratio | extra ns/read | local page reads |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let page = region.page_size();
    for (size, ops) in [(4096usize, 400_000u64), (64 << 10, 40_000)] {
        let slots = (LEN - size) / page;
        let before: u64 = region.stats().iter().map(|s| s.remote_reads).sum();
        let local_before: u64 = region.stats().iter().map(|s| s.local_reads).sum();
        let memcpy_body = copy_body(plain.as_slice(), size, slots, page);
        let huge_body = copy_body(huge.as_slice(), size, slots, page);
        let pages_body = |t: usize, ops: u64| {
            let mut rng = Rng::new(t as u64 + 3);
            let mut buf = vec![0u8; size];
            for _ in 0..ops {
                let at = (rng.next() as usize % slots) * page;
                region.read(at, &mut buf).unwrap();
                black_box(&mut buf);
            }
        };
        // The memcpy with its source page found through a table of page
        // pointers first, as a page-granular copy scheme that waits for
        // its lookup would (ReplicatedPages puts each copy where the read
        // expects it, so its copying does not wait for the lookup).
        let table: Vec<AtomicPtr<u8>> = (0..LEN / page)
            .map(|i| AtomicPtr::new(plain.as_ptr().wrapping_add(i * page) as *mut u8))
            .collect();
        let lookup_body = |t: usize, ops: u64| {
            let mut rng = Rng::new(t as u64 + 3);
            let mut buf = vec![0u8; size];
            for _ in 0..ops {
                let at = (rng.next() as usize % slots) * page;
                let mut done = 0;
                while done < size {
                    let source = table[(at + done) / page].load(Ordering::Acquire);
                    // SAFETY: the table points at pages of `plain`, which
                    // outlives the reads.
                    unsafe {
                        std::ptr::copy_nonoverlapping(source, buf.as_mut_ptr().add(done), page)
                    };
                    done += page;
                }
                black_box(&mut buf);
            }
        };
        for threads in [1, 2] {
            let r = bench.compare(
                threads,
                ops,
                &[&memcpy_body, &lookup_body, &huge_body, &pages_body],
            );
            let gbs = |mops: (f64, f64)| mops.0 * 1e6 * size as f64 / 1e9;
            let remote: u64 = region.stats().iter().map(|s| s.remote_reads).sum::<u64>() - before;
            let local: u64 =
                region.stats().iter().map(|s| s.local_reads).sum::<u64>() - local_before;
            // Extra time per read on one thread, in ns.
            let extra = threads as f64 * 1e3 / r[3].0 - threads as f64 * 1e3 / r[0].0;
            println!(
                "| {} KiB | {threads} | {:.2} | {:.2} | {:.2} | {:.2} | **{:.2}** | {:.0} | {:.1}% |",
                size >> 10,
                gbs(r[0]),
                r[1].1,
                r[2].1,
                gbs(r[3]),
                r[3].1,
                extra,
                100.0 * local as f64 / (local + remote).max(1) as f64
            );
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let cpus: Vec<u32> = affinity::thread_cpus().unwrap().iter().collect();
    let bench = Bench {
        repeats: if quick { 3 } else { 11 },
        scale: if quick { 0.25 } else { 0.5 },
        cpus,
    };
    let topology = numalab::NodeInventory::live();
    println!("# numalab replicated-memory benchmark");
    println!(
        "\n{} {:?}, {} with memory, {} per cell (medians), {}",
        count(bench.cpus.len(), "CPU"),
        bench.cpus,
        count(topology.with_memory.len(), "NUMA node"),
        count(bench.repeats, "round"),
        if quick { "--quick" } else { "full" }
    );
    // Optional section names (read, map, pages) run only those.
    let only: Vec<&str> = args[1..]
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| only.is_empty() || only.contains(&name);
    if wanted("read") {
        read_path(&bench);
    }
    if wanted("map") {
        hash_map(&bench);
    }
    if wanted("pages") {
        pages(&bench);
    }
}
