//! Memory for one replica on one node: [`NodeBox`], a value in its own
//! pages bound to a node, and [`on_node`], which runs a constructor with
//! the calling thread's allocations bound to a node (so memory the value
//! owns, such as a `Vec`'s buffer, is placed there too).

use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::buffer::{BufferError, NodeBuffer};
use crate::locate::{LocateError, PageHistogram, Sample};
use crate::policy::MemPolicy;
use crate::sets::NodeSet;

/// A `T` stored in pages bound to one node (`MemPolicy::Bind`), like a
/// `Box<T>` whose memory is placed, followed in the same pages by a tail
/// of `U` values (none by default) at [`tail_offset::<T, U>()`], a
/// constant, so code that holds the `T` finds the tail without a load.
pub(crate) struct NodeBox<T, U = ()> {
    buffer: NodeBuffer,
    value: NonNull<T>,
    tail: NonNull<U>,
    tail_len: usize,
    _owns: PhantomData<(T, U)>,
}

// SAFETY: NodeBox owns its T and its U values as a Box does.
unsafe impl<T: Send, U: Send> Send for NodeBox<T, U> {}
// SAFETY: &NodeBox gives out only shared references (the raw pointers are
// used by the replication protocols under their locks).
unsafe impl<T: Sync, U: Sync> Sync for NodeBox<T, U> {}

/// Where a [`NodeBox<T, U>`]'s tail starts, from the start of its `T`.
pub(crate) const fn tail_offset<T, U>() -> usize {
    std::mem::size_of::<T>().next_multiple_of(std::mem::align_of::<U>())
}

#[cfg(test)]
impl<T> NodeBox<T> {
    /// Moves `value` into fresh pages bound to `node`.
    pub(crate) fn new(node: u32, value: T) -> Result<NodeBox<T>, BufferError> {
        NodeBox::with_tail(node, 0, |_| (), |_| value)
    }
}

impl<T, U> NodeBox<T, U> {
    /// Fresh pages bound to `node` holding `make_tail(i)` for `i` in
    /// `0..tail_len`, then the value `make(tail)` builds knowing where its
    /// tail is (the pointer stays valid as long as the box).
    pub(crate) fn with_tail(
        node: u32,
        tail_len: usize,
        mut make_tail: impl FnMut(usize) -> U,
        make: impl FnOnce(NonNull<U>) -> T,
    ) -> Result<NodeBox<T, U>, BufferError> {
        let page = crate::sys::linux::page_size();
        assert!(
            std::mem::align_of::<T>() <= page && std::mem::align_of::<U>() <= page,
            "types aligned to more than a page cannot be replicated"
        );
        let offset = tail_offset::<T, U>();
        let len = (offset + tail_len * std::mem::size_of::<U>()).max(1);
        let buffer = NodeBuffer::new(len, MemPolicy::Bind(NodeSet::single(node)))?;
        let value_ptr = buffer.as_ptr() as *mut T;
        // SAFETY: the buffer is page-aligned (so aligned for T and U,
        // checked above, and `offset` is a multiple of U's alignment),
        // `offset + tail_len * size_of::<U>()` bytes long and ours.
        let tail_ptr = unsafe { buffer.as_ptr().add(offset) as *mut U };
        for i in 0..tail_len {
            // SAFETY: inside the tail, aligned, not yet initialised.
            unsafe { tail_ptr.add(i).write(make_tail(i)) };
        }
        // SAFETY: mappings are never at address 0, nor is anything in one.
        let tail = unsafe { NonNull::new_unchecked(tail_ptr) };
        let value = make(tail);
        // SAFETY: the buffer holds at least size_of::<T>() bytes at its
        // start, aligned for T.
        unsafe { value_ptr.write(value) };
        Ok(NodeBox {
            // SAFETY: as for the tail.
            value: unsafe { NonNull::new_unchecked(value_ptr) },
            tail,
            tail_len,
            buffer,
            _owns: PhantomData,
        })
    }

    /// The value's address.
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.value.as_ptr()
    }

    /// Bytes of memory this box maps (whole pages).
    pub(crate) fn mapped_bytes(&self) -> usize {
        self.buffer
            .len()
            .next_multiple_of(crate::sys::linux::page_size())
    }

    /// Where the box's pages are.
    pub(crate) fn locate(&self, sample: Sample) -> Result<PageHistogram, LocateError> {
        self.buffer.locate(sample)
    }
}

impl<T, U> Drop for NodeBox<T, U> {
    fn drop(&mut self) {
        // SAFETY: the value and the tail were written in `with_tail` and
        // are dropped once, here (the value first: it may point into the
        // tail); the buffer is unmapped after this.
        unsafe {
            self.value.as_ptr().drop_in_place();
            std::ptr::slice_from_raw_parts_mut(self.tail.as_ptr(), self.tail_len).drop_in_place();
        }
    }
}

/// Runs `f` with the calling thread's memory policy bound to `node`, then
/// restores the thread's policy. Heap memory `f` allocates fresh from the
/// kernel lands on `node`; memory the allocator reuses stays where it was
/// (small allocations from a warm heap), so this places large buffers, not
/// every byte. If the policy cannot be changed, `f` runs anyway: placement
/// is a hint here, never a reason to fail.
pub(crate) fn on_node<R>(node: u32, f: impl FnOnce() -> R) -> R {
    let before = MemPolicy::of_thread().ok();
    let bound = before.is_some()
        && MemPolicy::Bind(NodeSet::single(node))
            .apply_to_thread()
            .is_ok();
    struct Restore(Option<MemPolicy>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(policy) = self.0.take() {
                let _ = policy.apply_to_thread();
            }
        }
    }
    let _restore = Restore(if bound { before } else { None });
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_box_holds_and_drops_its_value() {
        let marker = std::sync::Arc::new(());
        let boxed = NodeBox::new(0, (vec![1u64, 2, 3], marker.clone())).unwrap();
        // SAFETY: the box is alive and not shared.
        assert_eq!(unsafe { &(*boxed.as_ptr()).0 }, &[1, 2, 3]);
        assert_eq!(boxed.locate(Sample::All).unwrap().on_node(0), 1);
        assert_eq!(boxed.mapped_bytes(), crate::sys::linux::page_size());
        assert_eq!(std::sync::Arc::strong_count(&marker), 2);
        drop(boxed);
        assert_eq!(std::sync::Arc::strong_count(&marker), 1);
        let zst = NodeBox::new(0, ()).unwrap();
        drop(zst);
    }

    #[test]
    fn on_node_restores_the_thread_policy() {
        let before = MemPolicy::of_thread().unwrap();
        let inside = on_node(0, || MemPolicy::of_thread().unwrap());
        assert_eq!(inside, MemPolicy::Bind(NodeSet::single(0)));
        assert_eq!(MemPolicy::of_thread().unwrap(), before);
    }
}
