//! One module per subcommand: its flags, and the wiring from flags to a
//! measurement and to its rendering.
//!
//! # The house rule
//!
//! **A measurement is config → plan → run → result in
//! `numalab-bench/src/<name>/`; its rendering in
//! `numalab-cli/src/render/<name>.rs`; its flags in
//! `numalab-cli/src/cmd/<name>.rs`; anything a program links against
//! (placing memory, replicas, the ring, page-cache queries) is in the
//! `numalab` library, and raw syscalls only in its `sys/`.**
//!
//! So for `numalab ring`: `numalab_bench::ring` plans the streams from a
//! `RingConfig`, runs the writer and reader processes and returns a typed
//! `RingReport`; `render/ring.rs` implements [`Render`](crate::render::Render)
//! for it (tables, Markdown, CSV; JSON in the common envelope);
//! `cmd/ring.rs` turns flags into the config, calls the engine and
//! `render::emit`. The ring itself (`numalab::ring`) is library code any
//! program can link. A result is a serde type with a doc comment per field,
//! and it names its JSON schema by implementing
//! `numalab_bench::document::Schema`, so the emulated-NUMA suite and
//! `numalab plot` read it back as that type. A command module holds no
//! measurement logic and no formatting; an engine module prints nothing.
//!
//! A command module imports no other: what two commands share lives
//! beside `cmd/` (`crate::exit`, `crate::saved`, `crate::args`,
//! `crate::render`); tests/modules.rs keeps it so.

pub mod advise;
pub mod check;
pub mod exec;
pub mod fill;
pub mod fincore;
pub mod fleet;
pub mod manual;
pub mod matrix;
pub mod pagecache;
pub mod plot;
pub mod profile;
pub mod report;
pub mod ring;
pub mod run;
pub mod sweep;
pub mod topo;
