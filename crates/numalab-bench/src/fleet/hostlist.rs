//! Host lists as Slurm writes them: `node[01-04,07],gpu[1-2]`, the form
//! of `$SLURM_JOB_NODELIST`, `sinfo` and `scontrol show hostnames`. A
//! merge given the hosts it expects names the ones that sent no report.
//!
//! The grammar is Slurm's (and pdsh's, ClusterShell's): names separated
//! by commas or white space; in a name, each `[…]` holds numbers and
//! ranges `lo-hi` separated by commas, and stands for each of them in
//! turn, as wide as `lo` is written (`[08-10]` is `08 09 10`); several
//! brackets in one name multiply (`r[1-2]n[1-3]` is six names). A name
//! given twice counts once.

use std::fmt;

/// The most names a host list may stand for: as many as a merge reads
/// report files ([`super::MAX_FILES`]).
pub const MAX_HOSTS: usize = super::MAX_FILES;

/// The longest host list read, in bytes (a million short names and
/// more, written out).
pub const MAX_LEN: usize = 16 << 20;

/// Why a host list does not read.
///
/// ```
/// use numalab_bench::fleet::hostlist::{expand, HostlistError};
/// let err = expand("node[4-1]").unwrap_err();
/// assert!(matches!(err, HostlistError::Backwards { .. }));
/// assert_eq!(err.to_string(), "host list \"node[4-1]\": the range 4-1 runs backwards");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostlistError {
    /// No name at all.
    Empty,
    /// Longer than [`MAX_LEN`].
    TooLong { bytes: usize },
    /// A `[` without its `]`, a `]` without its `[`, or a `[` inside
    /// another.
    Brackets { list: String },
    /// Something in brackets that is no number or range (`[a-b]`, `[]`,
    /// `[1-]`).
    NotARange { list: String, range: String },
    /// A range whose end is below its start.
    Backwards { list: String, range: String },
    /// More names than [`MAX_HOSTS`].
    TooMany { list: String },
}

impl fmt::Display for HostlistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostlistError::Empty => write!(f, "the host list names no host"),
            HostlistError::TooLong { bytes } => write!(
                f,
                "the host list is {bytes} bytes long; at most {MAX_LEN} are read"
            ),
            HostlistError::Brackets { list } => {
                write!(f, "host list {list:?}: its brackets do not pair up")
            }
            HostlistError::NotARange { list, range } => write!(
                f,
                "host list {list:?}: {range:?} in brackets is not a number or a range lo-hi"
            ),
            HostlistError::Backwards { list, range } => {
                write!(f, "host list {list:?}: the range {range} runs backwards")
            }
            HostlistError::TooMany { list } => {
                write!(f, "host list {list:?} names more than {MAX_HOSTS} hosts")
            }
        }
    }
}

impl std::error::Error for HostlistError {}

/// The names `list` stands for, in the order written, each once.
///
/// ```
/// use numalab_bench::fleet::hostlist::expand;
/// assert_eq!(expand("n[1-3],gpu07")?, ["n1", "n2", "n3", "gpu07"]);
/// assert_eq!(expand("node[08-10]")?, ["node08", "node09", "node10"]);
/// assert_eq!(expand("r[1-2]n[1,3]")?, ["r1n1", "r1n3", "r2n1", "r2n3"]);
/// assert_eq!(expand("a b\na")?, ["a", "b"]); // as `scontrol show hostnames` prints them
/// # Ok::<(), numalab_bench::fleet::hostlist::HostlistError>(())
/// ```
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    if list.len() > MAX_LEN {
        return Err(HostlistError::TooLong { bytes: list.len() });
    }
    let mut names = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for word in words(list)? {
        let parts = parse_word(list, word, MAX_HOSTS - names.len())?;
        for name in product(&parts) {
            if seen.insert(name.clone()) {
                names.push(name);
            }
        }
    }
    if names.is_empty() {
        return Err(HostlistError::Empty);
    }
    Ok(names)
}

/// A piece of one name: text as written, or the numbers of one bracket,
/// each as wide as written.
enum Part<'a> {
    Text(&'a str),
    Numbers(Vec<String>),
}

/// The list as an error shows it: whole when short, else its start.
fn shown(list: &str) -> String {
    const MOST: usize = 80;
    if list.len() <= MOST {
        return list.to_owned();
    }
    let mut end = MOST;
    while !list.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &list[..end])
}

/// The names of `list`: split at commas and white space outside brackets.
fn words(list: &str) -> Result<Vec<&str>, HostlistError> {
    let mut words = Vec::new();
    let (mut depth, mut start) = (0u8, 0);
    for (at, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            ']' if depth == 1 => depth = 0,
            '[' | ']' => return Err(HostlistError::Brackets { list: shown(list) }),
            ',' if depth == 0 => {
                words.push(&list[start..at]);
                start = at + 1;
            }
            c if c.is_whitespace() => {
                if depth == 1 {
                    return Err(HostlistError::Brackets { list: shown(list) });
                }
                words.push(&list[start..at]);
                start = at + c.len_utf8();
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(HostlistError::Brackets { list: shown(list) });
    }
    words.push(&list[start..]);
    Ok(words.into_iter().filter(|w| !w.is_empty()).collect())
}

/// One name's text and brackets, each bracket's numbers written out.
/// The names they multiply to are counted, bracket by bracket, before
/// its numbers are written: more than `room` is refused.
fn parse_word<'a>(list: &str, word: &'a str, room: usize) -> Result<Vec<Part<'a>>, HostlistError> {
    let too_many = || HostlistError::TooMany { list: shown(list) };
    let mut parts = Vec::new();
    let mut names = 1usize;
    let mut rest = word;
    while let Some(open) = rest.find('[') {
        if open > 0 {
            parts.push(Part::Text(&rest[..open]));
        }
        // `words` has checked that every `[` has its `]`.
        let close = open + rest[open..].find(']').unwrap_or(rest.len() - open);
        let inside = &rest[open + 1..close];
        let mut ranges = Vec::new();
        for range in inside.split(',') {
            let not_a_range = || HostlistError::NotARange {
                list: shown(list),
                range: range.to_owned(),
            };
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            let digits =
                |s: &str| !s.is_empty() && s.len() <= 18 && s.bytes().all(|b| b.is_ascii_digit());
            if !digits(lo) || !digits(hi) {
                return Err(not_a_range());
            }
            let (first, last): (u64, u64) = (
                lo.parse().map_err(|_| not_a_range())?,
                hi.parse().map_err(|_| not_a_range())?,
            );
            if last < first {
                return Err(HostlistError::Backwards {
                    list: shown(list),
                    range: range.to_owned(),
                });
            }
            ranges.push((first, last, lo.len()));
        }
        let size = ranges
            .iter()
            .try_fold(0u64, |n, (first, last, _)| n.checked_add(last - first + 1));
        names = size
            .and_then(|size| usize::try_from(size).ok())
            .and_then(|size| names.checked_mul(size))
            .filter(|names| *names <= room)
            .ok_or_else(too_many)?;
        let numbers = ranges
            .into_iter()
            .flat_map(|(first, last, width)| (first..=last).map(move |n| format!("{n:0width$}")))
            .collect();
        parts.push(Part::Numbers(numbers));
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest));
    }
    Ok(parts)
}

/// Every name `parts` stand for, the last bracket varying fastest.
fn product(parts: &[Part<'_>]) -> Vec<String> {
    let mut names = vec![String::new()];
    for part in parts {
        names = match part {
            Part::Text(text) => names.into_iter().map(|n| n + text).collect(),
            Part::Numbers(numbers) => names
                .iter()
                .flat_map(|n| numbers.iter().map(move |x| format!("{n}{x}")))
                .collect(),
        };
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_slurm_writes() {
        assert_eq!(expand("n1").unwrap(), ["n1"]);
        assert_eq!(expand("n[1-4]").unwrap(), ["n1", "n2", "n3", "n4"]);
        assert_eq!(
            expand("node[001-002,010],login1").unwrap(),
            ["node001", "node002", "node010", "login1"]
        );
        assert_eq!(expand("n[9-11]").unwrap(), ["n9", "n10", "n11"]);
        assert_eq!(expand("n[1-2]-ib").unwrap(), ["n1-ib", "n2-ib"]);
        assert_eq!(expand(" n1 ,, n2 ").unwrap(), ["n1", "n2"]);
        assert_eq!(expand("n[1-2],n[2-3]").unwrap(), ["n1", "n2", "n3"]);
    }

    #[test]
    fn names_what_is_wrong() {
        for (list, wrong) in [
            ("", "names no host"),
            (" , ", "names no host"),
            ("n[1-2", "do not pair up"),
            ("n1-2]", "do not pair up"),
            ("n[[1]]", "do not pair up"),
            ("n[1 2]", "do not pair up"),
            ("n[]", "\"\" in brackets is not a number"),
            ("n[a-b]", "\"a-b\" in brackets"),
            ("n[1-]", "\"1-\" in brackets"),
            ("n[-1]", "\"-1\" in brackets"),
            ("n[1-2-3]", "\"1-2-3\" in brackets"),
            ("n[3-1]", "the range 3-1 runs backwards"),
            ("n[0-1000000]", "more than 1000000 hosts"),
            ("n[0-999]m[0-9999]", "more than 1000000 hosts"),
            ("n[0-99999999999999999999]", "in brackets is not a number"),
        ] {
            let err = expand(list).unwrap_err().to_string();
            assert!(err.contains(wrong), "{list:?}: {err}");
        }
    }

    #[test]
    fn counts_before_it_writes_names_out() {
        // 10^6 × 10^6 names would not fit in memory: refused from the count.
        let err = expand("a[1-999999]b[1-999999]").unwrap_err();
        assert!(matches!(err, HostlistError::TooMany { .. }), "{err}");
        // Exactly the most is allowed.
        assert_eq!(expand("n[1-1000000]").unwrap().len(), MAX_HOSTS);
        let long = "n,".repeat(MAX_LEN / 2 + 1);
        assert!(matches!(
            expand(&long).unwrap_err(),
            HostlistError::TooLong { .. }
        ));
    }
}
