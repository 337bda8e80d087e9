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
/// `Box<T>` whose memory is placed.
pub(crate) struct NodeBox<T> {
    buffer: NodeBuffer,
    value: NonNull<T>,
    _owns: PhantomData<T>,
}

// SAFETY: NodeBox owns its T as a Box does.
unsafe impl<T: Send> Send for NodeBox<T> {}
// SAFETY: &NodeBox<T> gives out only &T (the raw pointer is used by the
// replication protocols under their locks).
unsafe impl<T: Sync> Sync for NodeBox<T> {}

impl<T> NodeBox<T> {
    /// Moves `value` into fresh pages bound to `node`.
    pub(crate) fn new(node: u32, value: T) -> Result<NodeBox<T>, BufferError> {
        assert!(
            std::mem::align_of::<T>() <= crate::sys::linux::page_size(),
            "types aligned to more than a page cannot be replicated"
        );
        let len = std::mem::size_of::<T>().max(1);
        let buffer = NodeBuffer::new(len, MemPolicy::Bind(NodeSet::single(node)))?;
        let value_ptr = buffer.as_ptr() as *mut T;
        // SAFETY: the buffer is at least size_of::<T>() bytes, page-aligned
        // (so aligned for T, checked above) and owned by us.
        unsafe { value_ptr.write(value) };
        Ok(NodeBox {
            // SAFETY: mappings are never at address 0.
            value: unsafe { NonNull::new_unchecked(value_ptr) },
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

impl<T> Drop for NodeBox<T> {
    fn drop(&mut self) {
        // SAFETY: the value was written in `new` and is dropped once, here;
        // the buffer is unmapped after this.
        unsafe { self.value.as_ptr().drop_in_place() };
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
