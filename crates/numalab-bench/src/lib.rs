//! numalab measurement engine.
