//! The shared-memory ring's speed, as ratios against references measured
//! in the same run (`cargo bench -p numalab --bench ring`):
//!
//! * copy-in/copy-out throughput against a single-core `memcpy` of the
//!   same volume along the ring's copy-in path (a block-sized source into
//!   a ring-sized area), pages faulted in before timing;
//! * in place (writer fills blocks in the ring, reader reads them there)
//!   against copy-in/copy-out;
//! * against PSRDada when `PSRDADA_BIN` names a directory holding
//!   `dada_db`, `dada_junkdb` and `dada_dbnull` (built from its public
//!   sources; not part of numalab): its writer copies in (`-z`), its reader
//!   copies out (`-z -l`) or only maps (`-z`);
//! * the CPU time an idle reader uses while waiting for data.
//!
//! Block sizes 256 KiB to 64 MiB, 8 blocks per ring, writer on the first
//! allowed CPU and reader on the second. `NUMALAB_BENCH_VOLUME` (bytes,
//! default 2 GiB) sets the volume per measurement; each figure is the
//! median of `NUMALAB_BENCH_REPEATS` (default 3) runs, interleaved so that
//! a noisy moment hits every kind alike.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use numalab::affinity;
use numalab::ring::{Ring, RingOptions};
use numalab::CpuSet;

const BLOCK_SIZES: [usize; 5] = [256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];
const BLOCKS: usize = 8;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pin(cpu: u32) {
    affinity::bind_thread_to_cpus(&CpuSet::single(cpu)).expect("pin to a CPU");
}

/// One thread copying `volume` bytes with `memcpy`, block by block, from a
/// block-sized source into an area the size of the ring (8 blocks, cycled):
/// the ring's copy-in path done by a single core, the ring's reference.
/// Both buffers are written before the clock starts, so no page fault is
/// timed.
fn memcpy_reference(cpu: u32, block: usize, volume: u64) -> f64 {
    std::thread::scope(|s| {
        s.spawn(|| {
            pin(cpu);
            let span = block * BLOCKS;
            let source = vec![1u8; block];
            let mut destination = vec![0u8; span];
            destination.fill(2);
            std::hint::black_box(&mut destination);
            let start = Instant::now();
            let mut done = 0u64;
            let mut offset = 0;
            while done < volume {
                destination[offset..offset + block].copy_from_slice(&source);
                std::hint::black_box(&mut destination);
                offset = (offset + block) % span;
                done += block as u64;
            }
            done as f64 / start.elapsed().as_secs_f64() / 1e6
        })
        .join()
        .unwrap()
    })
}

fn ring_run(cpus: (u32, u32), block: usize, volume: u64, in_place: bool) -> f64 {
    let name = format!("bench-{}", std::process::id());
    let ring =
        Arc::new(Ring::create(&RingOptions::new(&name, block * BLOCKS, block)).expect("ring"));
    let mut reader = ring.reader().expect("reader");
    let started = Arc::new(std::sync::OnceLock::new());
    let writer_thread = {
        let ring = ring.clone();
        let started = started.clone();
        std::thread::spawn(move || {
            pin(cpus.0);
            let mut writer = ring.writer().expect("writer");
            let source = vec![1u8; block];
            let mut done = 0u64;
            started.set(Instant::now()).unwrap();
            while done < volume {
                if in_place {
                    let mut slot = writer.claim().unwrap();
                    slot.fill(done as u8);
                    slot.commit(block).unwrap();
                } else {
                    writer.write(&source).unwrap();
                }
                done += block as u64;
            }
            writer.finish().unwrap();
        })
    };
    let reader_thread = std::thread::spawn(move || {
        pin(cpus.1);
        let mut buf = vec![0u8; block];
        let mut done = 0u64;
        let mut sum = 0u64;
        if in_place {
            while let Some(slot) = reader.borrow().unwrap() {
                sum = sum.wrapping_add(
                    slot.chunks_exact(8)
                        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
                        .fold(0u64, u64::wrapping_add),
                );
                done += slot.len() as u64;
            }
        } else {
            loop {
                let n = reader.read(&mut buf).unwrap();
                if n == 0 && reader.read(&mut buf).unwrap() == 0 {
                    break;
                }
                done += n as u64;
            }
        }
        std::hint::black_box(sum);
        (done, Instant::now())
    });
    writer_thread.join().unwrap();
    let (done, end) = reader_thread.join().unwrap();
    assert_eq!(done, volume);
    let start = *started.get().unwrap();
    done as f64 / (end - start).as_secs_f64() / 1e6
}

/// PSRDada's `dada_junkdb -z` → `dada_dbnull -z [-l]` on the same CPUs;
/// the reader's MB/s (it prints MiB/s: converted).
fn psrdada_run(
    bin: &Path,
    cpus: (u32, u32),
    block: usize,
    volume: u64,
    copy_out: bool,
) -> Option<f64> {
    let key = "b0b0";
    let run = |program: &str, args: &[&str]| {
        Command::new(bin.join(program))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()
    };
    let _ = run("dada_db", &["-k", key, "-d"]);
    run(
        "dada_db",
        &[
            "-k",
            key,
            "-b",
            &block.to_string(),
            "-n",
            &BLOCKS.to_string(),
            "-p",
        ],
    )?
    .success()
    .then_some(())?;
    let header = std::env::temp_dir().join(format!("numalab-bench-header-{}", std::process::id()));
    std::fs::write(
        &header,
        "HDR_VERSION 1.0\nHDR_SIZE 4096\nNBIT 8\nNDIM 1\nNPOL 1\nNCHAN 1\nOBS_OFFSET 0\nRESOLUTION 1\n",
    )
    .ok()?;
    let mut reader_args = vec!["-k", key, "-z", "-s"];
    if copy_out {
        reader_args.push("-l");
    }
    let reader = Command::new("taskset")
        .args(["-c", &cpus.1.to_string()])
        .arg(bin.join("dada_dbnull"))
        .args(&reader_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    std::thread::sleep(Duration::from_millis(300));
    let writer = Command::new("taskset")
        .args(["-c", &cpus.0.to_string()])
        .arg(bin.join("dada_junkdb"))
        .args(["-k", key, "-z", "-R", "1000000", "-b", &volume.to_string()])
        .arg(&header)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let out = reader.wait_with_output().ok()?;
    let _ = run("dada_db", &["-k", key, "-d"]);
    let _ = std::fs::remove_file(&header);
    writer.ok()?.success().then_some(())?;
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("bytes transferred"))?;
    let mib_s: f64 = line
        .split('(')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(mib_s * 1024.0 * 1024.0 / 1e6)
}

/// CPU time a reader uses over `wait` while no data comes.
fn idle_reader_cpu(wait: Duration) -> Duration {
    let name = format!("bench-idle-{}", std::process::id());
    let ring = Ring::create(&RingOptions::new(&name, 2 << 20, 1 << 20)).expect("ring");
    let _writer = ring.writer().expect("writer");
    let mut reader = ring.reader().expect("reader");
    reader.set_timeout(Some(wait));
    std::thread::scope(|s| {
        s.spawn(|| {
            let before = numalab::system::thread_cpu_time();
            let result = reader.read(&mut [0u8; 64]);
            assert!(result.is_err(), "no data was expected");
            numalab::system::thread_cpu_time() - before
        })
        .join()
        .unwrap()
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not run
    // this harness-less target's body.
    if !std::env::args().any(|a| a == "--bench") {
        println!("ring benchmark: run with `cargo bench -p numalab --bench ring`");
        return;
    }
    let volume = env_u64("NUMALAB_BENCH_VOLUME", 2 << 30);
    let repeats = env_u64("NUMALAB_BENCH_REPEATS", 3).max(1) as usize;
    let allowed: Vec<u32> = affinity::thread_cpus().unwrap().iter().collect();
    let cpus = (allowed[0], *allowed.get(1).unwrap_or(&allowed[0]));
    let dada = std::env::var_os("PSRDADA_BIN").map(PathBuf::from);
    println!(
        "numalab ring benchmark: {} GiB per run, median of {repeats}, {BLOCKS} blocks per ring, \
         writer on CPU {}, reader on CPU {}; MB/s = 10^6 bytes/s",
        volume as f64 / (1u64 << 30) as f64,
        cpus.0,
        cpus.1
    );
    print!(
        "{:>9} {:>10} {:>10} {:>8} {:>10} {:>9}",
        "block", "memcpy", "ring copy", "/memcpy", "in place", "/copy"
    );
    if dada.is_some() {
        print!(
            " {:>10} {:>8} {:>10} {:>8}",
            "dada -l", "copy/", "dada -z", "copy/"
        );
    }
    println!();
    for block in BLOCK_SIZES {
        let volume = volume / block as u64 * block as u64;
        let (mut memcpy, mut copy, mut in_place, mut dada_l, mut dada_z) =
            (vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..repeats {
            memcpy.push(memcpy_reference(cpus.0, block, volume));
            copy.push(ring_run(cpus, block, volume, false));
            in_place.push(ring_run(cpus, block, volume, true));
            if let Some(bin) = &dada {
                dada_l.extend(psrdada_run(bin, cpus, block, volume, true));
                dada_z.extend(psrdada_run(bin, cpus, block, volume, false));
            }
        }
        let (memcpy, copy, in_place) = (median(memcpy), median(copy), median(in_place));
        print!(
            "{:>6} KiB {memcpy:>10.0} {copy:>10.0} {:>8.2} {in_place:>10.0} {:>9.2}",
            block >> 10,
            copy / memcpy,
            in_place / copy
        );
        if dada.is_some() {
            for runs in [dada_l, dada_z] {
                if runs.is_empty() {
                    print!(" {:>10} {:>8}", "failed", "-");
                } else {
                    let m = median(runs);
                    print!(" {m:>10.0} {:>8.2}", copy / m);
                }
            }
        }
        println!();
    }
    let wait = Duration::from_secs(3);
    let cpu = idle_reader_cpu(wait);
    println!(
        "idle reader: {:.3} ms of CPU in {} s waiting for data ({:.4}% of a CPU)",
        cpu.as_secs_f64() * 1e3,
        wait.as_secs(),
        100.0 * cpu.as_secs_f64() / wait.as_secs_f64()
    );
    if dada.is_none() {
        println!("(set PSRDADA_BIN to a directory with PSRDada's dada_db, dada_junkdb and dada_dbnull to compare)");
    }
}
