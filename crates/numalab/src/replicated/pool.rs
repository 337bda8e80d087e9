//! The memory a [`ReplicatedPages`](super::ReplicatedPages) replica
//! copies pages into: page-sized slots bound to one node, from an area
//! with a slot per page of the region (page `i`'s copy in slot `i`
//! whenever it is free) or from chunks, with a free list of resident
//! slots and one of slots whose memory was given back under pressure.

use std::ptr::NonNull;
use std::time::{Duration, Instant};

use super::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::buffer::{BufferError, NodeBuffer, HUGE_2M};
use crate::policy::MemPolicy;
use crate::sys::{linux, procfs};

/// How often a replica looks at its node's free memory, at most.
const WATERMARK_CHECK: Duration = Duration::from_millis(10);

/// Page-sized slots of memory bound to one node: chunks, a free list of
/// resident slots, and one of slots whose memory was given back; for a
/// replica, also an area with one slot per page of the region.
pub(super) struct Pool {
    pub(super) node: u32,
    policy: MemPolicy,
    pub(super) page: usize,
    inner: Mutex<PoolInner>,
    /// Slots whose memory is resident (in use or free), in pages.
    pub(super) resident: AtomicUsize,
    pub(super) reclaimed: AtomicU64,
    /// Replica pools: page `i`'s copy goes to slot `i` of this area when
    /// it can (the chunks are the fallback), so a reader knows where a
    /// copy is before it has loaded the copy's address, and its copy of
    /// the bytes need not wait for that load.
    pub(super) area: Option<Area>,
    /// Per area slot: it holds a copy, live or retired and not yet
    /// reclaimed (set by the copier under the page lock, cleared by the
    /// reclaim).
    pub(super) area_used: Box<[AtomicBool]>,
}

/// A range of address space with one page-sized slot per page of a
/// region, bound to a node and populated one slot at a time.
///
/// Slots are base pages (a sparse set of copies takes no more memory than
/// it holds), but random reads over many base pages miss the TLB: a 4 KiB
/// read of a copy cost 0.83 of a `memcpy` from memory the kernel had laid
/// out contiguously. So a 2 MiB group whose slots all hold copies is
/// gathered into one transparent huge page (`MADV_COLLAPSE`, Linux 6.1; by
/// the thread whose copy completed it), which brought those reads to 0.96.
/// The area refuses huge pages otherwise, so a huge page never holds
/// empty slots.
pub(super) struct Area {
    base: NonNull<u8>,
    pub(super) len: usize,
    /// Slots holding copies, per whole 2 MiB group of the area (none when
    /// a slot is 2 MiB or more).
    filled: Box<[AtomicU32]>,
    /// Slots per group.
    group_slots: usize,
    /// Groups gathered into a huge page.
    pub(super) huge: AtomicU64,
}

// SAFETY: the area is plain anonymous memory owned by its pool; its slots
// are handed out under the pool's and the pages' locks.
unsafe impl Send for Area {}
// SAFETY: as above.
unsafe impl Sync for Area {}

impl Area {
    /// `pages` slots of `page` bytes bound to `policy`'s nodes, no memory
    /// taken yet, aligned to 2 MiB; `None` if the address space cannot be
    /// had (the pool's chunks then hold every copy).
    pub(super) fn new(pages: usize, page: usize, policy: &MemPolicy) -> Option<Area> {
        let len = pages.checked_mul(page)?;
        let base = linux::map_anonymous_aligned(len, HUGE_2M).ok()?;
        let group_slots = HUGE_2M / page;
        let groups = if group_slots > 1 { len / HUGE_2M } else { 0 };
        let area = Area {
            base: NonNull::new(base)?,
            len,
            filled: (0..groups).map(|_| AtomicU32::new(0)).collect(),
            group_slots,
            huge: AtomicU64::new(0),
        };
        // Advice only: slots are single pages until a group is full.
        let _ = linux::madvise(base, len, linux::Advice::NoHugePage);
        policy
            .apply_to_range(base, len, crate::policy::RangeMode::FutureOnly)
            .ok()?;
        Some(area)
    }

    fn slot(&self, index: usize, page: usize) -> usize {
        self.base.as_ptr() as usize + index * page
    }

    /// The slot index of `slot`, if it is one of the area's.
    fn index_of(&self, slot: usize, page: usize) -> Option<usize> {
        let base = self.base.as_ptr() as usize;
        (slot >= base && slot < base + self.len).then(|| (slot - base) / page)
    }

    /// Slot `index` now holds a copy: the last of its group gathers the
    /// group into a huge page. Best effort: without `MADV_COLLAPSE`, or
    /// without a free huge page on the node, the slots stay base pages.
    fn filled(&self, index: usize, page: usize) {
        let group = index * page / HUGE_2M;
        let Some(filled) = self.filled.get(group) else {
            return;
        };
        if filled.fetch_add(1, Ordering::Relaxed) as usize + 1 != self.group_slots {
            return;
        }
        let start = self.base.as_ptr().wrapping_add(group * HUGE_2M);
        // Huge pages allowed for the collapse alone, refused again after
        // (the area stays one mapping; the huge page, once made, stays).
        if linux::madvise(start, HUGE_2M, linux::Advice::HugePage).is_ok() {
            if linux::madvise(start, HUGE_2M, linux::Advice::Collapse).is_ok() {
                self.huge.fetch_add(1, Ordering::Relaxed);
            }
            let _ = linux::madvise(start, HUGE_2M, linux::Advice::NoHugePage);
        }
    }

    /// Slot `index` was given back.
    fn emptied(&self, index: usize, page: usize) {
        if let Some(filled) = self.filled.get(index * page / HUGE_2M) {
            filled.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: the pool owns the mapping and is being dropped, after
        // every reader of its slots (the region is gone).
        let _ = unsafe { linux::unmap(self.base.as_ptr(), self.len) };
    }
}

#[derive(Default)]
pub(super) struct PoolInner {
    chunks: Vec<NodeBuffer>,
    pub(super) free: Vec<usize>,
    discarded: Vec<usize>,
    /// The node's free memory was below the watermark at the last look.
    pub(super) pressure: bool,
    checked: Option<Instant>,
    /// The eviction clock's hand (a page index).
    pub(super) hand: usize,
}

impl Pool {
    pub(super) fn new(node: u32, policy: MemPolicy, page: usize) -> Pool {
        Pool {
            node,
            policy,
            page,
            inner: Mutex::new(PoolInner::default()),
            resident: AtomicUsize::new(0),
            reclaimed: AtomicU64::new(0),
            area: None,
            area_used: Box::new([]),
        }
    }

    /// A replica's pool, with an area of one slot per page of a region of
    /// `pages` pages.
    pub(super) fn with_area(node: u32, policy: MemPolicy, page: usize, pages: usize) -> Pool {
        Pool {
            area: Area::new(pages, page, &policy),
            area_used: (0..pages).map(|_| AtomicBool::new(false)).collect(),
            ..Pool::new(node, policy, page)
        }
    }

    /// Where the area starts, or 0 without one.
    pub(super) fn area_base(&self) -> usize {
        self.area
            .as_ref()
            .map_or(0, |area| area.base.as_ptr() as usize)
    }

    /// Page `page`'s area slot, made resident, if the area has it free.
    /// The caller holds the page's lock and keeps within the budgets.
    pub(super) fn take_area_slot(&self, page: usize) -> Option<usize> {
        let area = self.area.as_ref()?;
        if self.area_used[page].load(Ordering::Acquire) {
            // Its last copy is not reclaimed yet.
            return None;
        }
        let slot = area.slot(page, self.page);
        // Populated now, so a node without memory is an error here, never
        // a fault in the copy.
        linux::madvise(slot as *mut u8, self.page, linux::Advice::PopulateWrite).ok()?;
        self.area_used[page].store(true, Ordering::Relaxed);
        self.resident.fetch_add(1, Ordering::Relaxed);
        area.filled(page, self.page);
        Some(slot)
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in a chunk of `pages` slots made elsewhere.
    pub(super) fn adopt(&self, inner: &mut PoolInner, chunk: NodeBuffer, pages: usize) {
        let base = chunk.as_ptr() as usize;
        inner
            .free
            .extend((0..pages).rev().map(|i| base + i * self.page));
        inner.chunks.push(chunk);
        self.resident.fetch_add(pages, Ordering::Relaxed);
    }

    /// A fresh chunk of up to `pages` slots, prefaulted on the pool's node.
    pub(super) fn grow(&self, inner: &mut PoolInner, pages: usize) -> Result<(), BufferError> {
        let chunk = NodeBuffer::new(pages * self.page, self.policy.clone())?;
        self.adopt(inner, chunk, pages);
        Ok(())
    }

    /// A discarded slot made resident again; `None` if the kernel has no
    /// page for it (reported as an error, never as a fault in a read).
    pub(super) fn revive(&self, inner: &mut PoolInner) -> Option<usize> {
        let slot = inner.discarded.pop()?;
        match linux::madvise(slot as *mut u8, self.page, linux::Advice::PopulateWrite) {
            Ok(()) => {
                self.resident.fetch_add(1, Ordering::Relaxed);
                Some(slot)
            }
            Err(_) => {
                inner.discarded.push(slot);
                None
            }
        }
    }

    /// Returns a slot no reader can still see.
    pub(super) fn reclaim(&self, slot: usize) {
        if let Some(index) = self.area.as_ref().and_then(|a| a.index_of(slot, self.page)) {
            // An area slot serves only its page: its memory goes back to
            // the kernel at once, and the page may have the slot again.
            // SAFETY: the slot is a page of the area's private anonymous
            // mapping, unpublished, and the epoch has passed every reader
            // that could have loaded its address.
            if unsafe { linux::discard(slot as *mut u8, self.page) }.is_ok() {
                self.resident.fetch_sub(1, Ordering::Relaxed);
            }
            if let Some(area) = &self.area {
                area.emptied(index, self.page);
            }
            self.reclaimed.fetch_add(1, Ordering::Relaxed);
            // Release pairs with `take_area_slot`'s Acquire.
            self.area_used[index].store(false, Ordering::Release);
            return;
        }
        let mut inner = self.lock();
        self.reclaimed.fetch_add(1, Ordering::Relaxed);
        if inner.pressure {
            // SAFETY: the slot is a page of one of this pool's private
            // anonymous chunks, unpublished, and the epoch has passed every
            // reader that could have loaded its address.
            if unsafe { linux::discard(slot as *mut u8, self.page) }.is_ok() {
                self.resident.fetch_sub(1, Ordering::Relaxed);
                inner.discarded.push(slot);
                return;
            }
        }
        inner.free.push(slot);
    }

    /// Refreshes the memory-pressure flag from the node's free memory, at
    /// most every [`WATERMARK_CHECK`].
    pub(super) fn check_watermark(&self, inner: &mut PoolInner, min_free: u64) {
        let now = Instant::now();
        if inner
            .checked
            .is_some_and(|t| now.duration_since(t) < WATERMARK_CHECK)
        {
            return;
        }
        inner.checked = Some(now);
        inner.pressure = match procfs::node_meminfo(self.node) {
            Ok(info) => info.free < min_free,
            Err(_) => false,
        };
    }
}
