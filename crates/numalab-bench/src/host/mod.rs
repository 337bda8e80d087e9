//! The machine and the task behind a saved report: what must be the same
//! on two hosts before their figures compare ([`Fingerprint`]), and which
//! task of which job wrote it ([`TaskIdentity`]). `numalab report` records
//! both; `numalab fleet` groups and names hosts by them.

pub mod fingerprint;
pub mod identity;

pub use fingerprint::Fingerprint;
pub use identity::TaskIdentity;
