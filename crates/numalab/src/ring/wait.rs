//! Waiting: spin briefly, then sleep on a futex in slices, checking after
//! each slice that the other side is still alive. No CPU is used while a
//! ring is idle beyond one wake-up per slice.

use std::hint::spin_loop;
use std::time::{Duration, Instant};

use super::atomic::{AtomicU32, AtomicU64, Ordering};
use super::error::RingError;
use super::protocol::{end_sleep, prepare_sleep};
use crate::sys::linux;

/// How long to spin before sleeping: about the time to copy a 1 MiB block,
/// so a block that is nearly ready is not paid for with a sleep, a futex
/// wake-up by the other side and the scheduler's latency. An idle ring
/// spins once, then sleeps.
pub(crate) const SPIN: Duration = Duration::from_micros(100);
/// Longest single sleep: how soon a dead peer is noticed.
pub(crate) const SLICE: Duration = Duration::from_millis(100);

/// Waits until `ready` returns `Some`, an error, or the deadline passes.
/// `ready` must be safe to call again and again; `on_slice` runs after
/// every sleep that timed out (liveness checks); `sleeps` counts the
/// sleeps.
pub(crate) fn wait_until<T>(
    sleepers: &AtomicU32,
    event: &AtomicU32,
    sleeps: &AtomicU64,
    timeout: Option<Duration>,
    what: impl Fn() -> String,
    mut ready: impl FnMut() -> Result<Option<T>, RingError>,
    mut on_slice: impl FnMut() -> Result<(), RingError>,
) -> Result<T, RingError> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if let Some(value) = ready()? {
            return Ok(value);
        }
        spin_loop();
        spins += 1;
        if spins.is_multiple_of(64) && start.elapsed() >= SPIN {
            break;
        }
    }
    loop {
        let expected = prepare_sleep(sleepers, event);
        match ready() {
            Ok(None) => {}
            other => {
                end_sleep(sleepers);
                return other.map(|v| v.expect("ready value"));
            }
        }
        let slice = match timeout {
            Some(limit) => {
                let left = limit.saturating_sub(start.elapsed());
                if left.is_zero() {
                    end_sleep(sleepers);
                    return Err(RingError::Timeout {
                        what: what(),
                        waited: start.elapsed(),
                    });
                }
                left.min(SLICE)
            }
            None => SLICE,
        };
        sleeps.fetch_add(1, Ordering::Relaxed);
        let woke = linux::futex_wait(event, expected, slice);
        end_sleep(sleepers);
        match woke {
            Ok(linux::FutexWake::TimedOut) => on_slice()?,
            Ok(linux::FutexWake::Woken) => {}
            Err(source) => return Err(RingError::os("wait on the ring's futex")(source)),
        }
        if let Some(value) = ready()? {
            return Ok(value);
        }
    }
}

/// Wakes everyone asleep on `event` after changing it.
pub(crate) fn wake_all(event: &AtomicU32) {
    super::protocol::bump(event);
    let _ = linux::futex_wake(event, u32::MAX);
}
