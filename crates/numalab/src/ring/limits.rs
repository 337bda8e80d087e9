//! How big a ring can be: the bounds a segment's header may describe,
//! which options are checked against and error messages quote.

/// Most readers a ring can have.
pub const MAX_READERS: u32 = 64;
/// Most blocks a ring can have.
pub const MAX_BLOCKS: u64 = 1 << 20;
/// Largest transfer header, in bytes.
pub const MAX_META_SIZE: u32 = 1 << 20;
