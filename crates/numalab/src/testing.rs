//! How numalab's own tests treat a prerequisite that is missing (a
//! program, root, a second CPU, perf events): one rule for every crate,
//! stated in docs/testing.md. Not part of the library's API.

/// Whether every prerequisite is required: the environment variable `CI`
/// is set to anything but empty, `0` or `false` (any case). CI sets
/// `CI=true`; a developer who wants the same strictness sets `CI=1`.
///
/// ```
/// // Whatever the environment, the rule is a function of `CI` alone.
/// let expected = std::env::var("CI")
///     .is_ok_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false"));
/// assert_eq!(numalab::testing::ci(), expected);
/// ```
pub fn ci() -> bool {
    std::env::var("CI")
        .is_ok_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false"))
}

/// A test that cannot check what it exists to check, because `why`:
/// under [`ci`] a failure (panics with `why`); elsewhere it prints
/// `skipped: why` on standard error and the caller returns.
#[track_caller]
pub fn cannot_check(why: impl std::fmt::Display) {
    assert!(!ci(), "needed under CI: {why}");
    eprintln!("skipped: {why}");
}
