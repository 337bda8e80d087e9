//! Sets of NUMA nodes and CPUs, written the way `numactl` writes them.
//!
//! A list is comma-separated indices and inclusive ranges: `0-3,7`. Both
//! [`NodeSet`] and [`CpuSet`] parse that syntax with [`str::parse`] and print
//! it back with [`Display`](fmt::Display), so a set read from a user prints
//! the way they would have typed it. The words `all` and `!list` need to
//! know which nodes exist; [`Topology::parse_nodes`](crate::Topology::parse_nodes)
//! and [`Topology::parse_cpus`](crate::Topology::parse_cpus) handle them and
//! check every member against the machine.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a node or CPU list could not be parsed.
///
/// ```
/// use numalab::{NodeSet, ParseSetError};
/// match "3-1".parse::<NodeSet>().unwrap_err() {
///     ParseSetError::BackwardRange { start, end, .. } => assert_eq!((start, end), (3, 1)),
///     other => panic!("unexpected {other}"),
/// }
/// let err = "0,x".parse::<NodeSet>().unwrap_err();
/// assert!(matches!(err, ParseSetError::Malformed { ref token, .. } if token == "x"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseSetError {
    /// The list was empty.
    #[error("empty {what} list")]
    Empty {
        /// "node" or "CPU".
        what: &'static str,
    },
    /// A piece of the list is neither a number nor a range `a-b`.
    #[error("invalid {what} list {input:?}: {token:?} is not a number or a range like 0-3")]
    Malformed {
        /// "node" or "CPU".
        what: &'static str,
        /// The whole list as given.
        input: String,
        /// The offending comma-separated piece.
        token: String,
    },
    /// A range whose end is below its start.
    #[error("invalid {what} range {token:?}: {end} is below {start}")]
    BackwardRange {
        /// "node" or "CPU".
        what: &'static str,
        /// The offending piece.
        token: String,
        /// First index of the range.
        start: u32,
        /// Last index of the range.
        end: u32,
    },
    /// An index beyond what Linux can address.
    #[error("{what} {index} is out of range: Linux numbers {what}s from 0 to {max}")]
    TooLarge {
        /// "node" or "CPU".
        what: &'static str,
        /// The offending index, as written (it may not fit any integer).
        index: String,
        /// The largest index allowed.
        max: u32,
    },
}

/// A growable bitmap of small non-negative indices, shared by [`NodeSet`] and
/// [`CpuSet`].
#[derive(Clone, Default, PartialEq, Eq, Hash)]
struct Bits {
    words: Vec<u64>,
}

impl Bits {
    fn insert(&mut self, index: u32) {
        let word = index as usize / 64;
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= 1 << (index % 64);
    }

    fn remove(&mut self, index: u32) {
        if let Some(word) = self.words.get_mut(index as usize / 64) {
            *word &= !(1 << (index % 64));
        }
        self.trim();
    }

    fn contains(&self, index: u32) -> bool {
        self.words
            .get(index as usize / 64)
            .is_some_and(|word| word & (1 << (index % 64)) != 0)
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }

    fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            (0..64u32)
                .filter(move |bit| word & (1 << bit) != 0)
                .map(move |bit| i as u32 * 64 + bit)
        })
    }

    fn zip_with(&self, other: &Self, op: impl Fn(u64, u64) -> u64) -> Self {
        let len = self.words.len().max(other.words.len());
        let word = |bits: &Self, i: usize| bits.words.get(i).copied().unwrap_or(0);
        let mut out = Self {
            words: (0..len)
                .map(|i| op(word(self, i), word(other, i)))
                .collect(),
        };
        out.trim();
        out
    }

    /// Writes `0-3,7` style.
    fn fmt_list(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.iter().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end = iter.next().unwrap_or(end);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }

    fn parse(input: &str, what: &'static str, max: u32) -> Result<Self, ParseSetError> {
        let trimmed = input.trim();
        if trimmed.is_empty() {
            return Err(ParseSetError::Empty { what });
        }
        let mut bits = Self::default();
        for token in trimmed.split(',') {
            let token = token.trim();
            let malformed = || ParseSetError::Malformed {
                what,
                input: input.to_owned(),
                token: token.to_owned(),
            };
            let number = |s: &str| -> Result<u32, ParseSetError> {
                let s = s.trim();
                if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(malformed());
                }
                // Digits only: the only way to fail is to be too large.
                let too_large = || ParseSetError::TooLarge {
                    what,
                    index: s.trim_start_matches('0').to_owned(),
                    max,
                };
                let index = s.parse::<u32>().map_err(|_| too_large())?;
                if index > max {
                    return Err(too_large());
                }
                Ok(index)
            };
            let (start, end) = match token.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => {
                    let n = number(token)?;
                    (n, n)
                }
            };
            if end < start {
                return Err(ParseSetError::BackwardRange {
                    what,
                    token: token.to_owned(),
                    start,
                    end,
                });
            }
            for index in start..=end {
                bits.insert(index);
            }
        }
        Ok(bits)
    }
}

macro_rules! index_set {
    ($(#[$doc:meta])* $name:ident, $what:literal, $max:expr) => {
        $(#[$doc])*
        #[derive(Clone, Default, PartialEq, Eq, Hash)]
        pub struct $name(Bits);

        impl $name {
            /// The largest index a set of this kind accepts.
            pub const MAX: u32 = $max;

            /// An empty set.
            pub fn new() -> Self {
                Self::default()
            }

            /// A set holding one index.
            pub fn single(index: u32) -> Self {
                let mut set = Self::new();
                set.insert(index);
                set
            }

            /// A set holding one index, or the error a list naming it
            /// would give when it is above [`Self::MAX`]: for a number
            /// that came from outside.
            pub fn try_single(index: u32) -> Result<Self, ParseSetError> {
                if index > Self::MAX {
                    return Err(ParseSetError::TooLarge {
                        what: $what,
                        index: index.to_string(),
                        max: Self::MAX,
                    });
                }
                Ok(Self::single(index))
            }

            /// Adds `index` to the set.
            ///
            /// # Panics
            /// If `index` is above [`Self::MAX`].
            pub fn insert(&mut self, index: u32) {
                assert!(index <= Self::MAX, concat!($what, " index {} out of range"), index);
                self.0.insert(index);
            }

            /// Removes `index` from the set.
            pub fn remove(&mut self, index: u32) {
                self.0.remove(index);
            }

            /// Whether `index` is in the set.
            pub fn contains(&self, index: u32) -> bool {
                self.0.contains(index)
            }

            /// How many indices the set holds.
            pub fn len(&self) -> usize {
                self.0.len()
            }

            /// Whether the set is empty.
            pub fn is_empty(&self) -> bool {
                self.0.words.is_empty()
            }

            /// The indices in increasing order.
            pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
                self.0.iter()
            }

            /// The smallest index, if any.
            pub fn first(&self) -> Option<u32> {
                self.iter().next()
            }

            /// The largest index, if any.
            pub fn last(&self) -> Option<u32> {
                self.iter().last()
            }

            /// Indices in both sets.
            pub fn intersection(&self, other: &Self) -> Self {
                Self(self.0.zip_with(&other.0, |a, b| a & b))
            }

            /// Indices in either set.
            pub fn union(&self, other: &Self) -> Self {
                Self(self.0.zip_with(&other.0, |a, b| a | b))
            }

            /// Indices in `self` but not in `other`.
            pub fn difference(&self, other: &Self) -> Self {
                Self(self.0.zip_with(&other.0, |a, b| a & !b))
            }

            /// Whether every index of `self` is in `other`.
            pub fn is_subset(&self, other: &Self) -> bool {
                self.difference(other).is_empty()
            }

            /// The bitmap as 64-bit words, bit `i` of word `w` standing for
            /// index `64 * w + i` (the layout of the kernel's masks).
            pub fn as_words(&self) -> &[u64] {
                &self.0.words
            }

            /// Builds a set from 64-bit mask words, as the kernel returns them.
            pub fn from_words(words: &[u64]) -> Self {
                let mut bits = Bits { words: words.to_vec() };
                bits.trim();
                Self(bits)
            }
        }

        impl FromStr for $name {
            type Err = ParseSetError;

            /// Parses an explicit list such as `0-3,7`.
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Bits::parse(s, $what, Self::MAX).map(Self)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt_list(f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self)
            }
        }

        impl FromIterator<u32> for $name {
            fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
                let mut set = Self::new();
                for index in iter {
                    set.insert(index);
                }
                set
            }
        }

        impl Serialize for $name {
            /// Serialised as an array of indices, easy to read with `jq`.
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_seq(self.iter())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let indices = Vec::<u32>::deserialize(deserializer)?;
                if let Some(&bad) = indices.iter().find(|&&i| i > Self::MAX) {
                    return Err(serde::de::Error::custom(format!(
                        concat!($what, " {} is out of range"),
                        bad
                    )));
                }
                Ok(indices.into_iter().collect())
            }
        }
    };
}

index_set!(
    /// A set of NUMA node numbers (the kernel's node ids, as in
    /// `/sys/devices/system/node/nodeN`).
    ///
    /// ```
    /// use numalab::NodeSet;
    /// let nodes: NodeSet = "0-2,5".parse()?;
    /// assert_eq!(nodes.len(), 4);
    /// assert!(nodes.contains(5) && !nodes.contains(3));
    /// assert_eq!(nodes.to_string(), "0-2,5");
    /// let err = NodeSet::try_single(4096).unwrap_err();
    /// assert_eq!(err.to_string(), "node 4096 is out of range: Linux numbers nodes from 0 to 1023");
    /// # Ok::<(), numalab::ParseSetError>(())
    /// ```
    NodeSet,
    "node",
    1023
);

index_set!(
    /// A set of logical CPU numbers (the kernel's CPU ids, as in
    /// `/sys/devices/system/cpu/cpuN` and `taskset`).
    ///
    /// ```
    /// use numalab::CpuSet;
    /// let cpus: CpuSet = "0-3,8-11".parse()?;
    /// assert_eq!(cpus.len(), 8);
    /// assert_eq!(cpus.to_string(), "0-3,8-11");
    /// # Ok::<(), numalab::ParseSetError>(())
    /// ```
    CpuSet,
    "CPU",
    65535
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_numactl_lists() {
        let set: NodeSet = "0-3,7".parse().unwrap();
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 7]);
        let set: NodeSet = " 2 , 0 ".parse().unwrap();
        assert_eq!(set.to_string(), "0,2");
        let set: CpuSet = "0-1,64-65,127".parse().unwrap();
        assert_eq!(set.to_string(), "0-1,64-65,127");
        assert_eq!(set.len(), 5);
    }

    #[test]
    fn display_round_trips() {
        for text in ["0", "0-3", "0,2,4", "1-2,5-9,63-64,200"] {
            let set: CpuSet = text.parse().unwrap();
            assert_eq!(set.to_string(), text);
        }
    }

    #[test]
    fn rejects_malformed_lists() {
        assert!(matches!(
            "".parse::<NodeSet>(),
            Err(ParseSetError::Empty { .. })
        ));
        assert!(matches!(
            "0,,1".parse::<NodeSet>(),
            Err(ParseSetError::Malformed { .. })
        ));
        assert!(matches!(
            "a".parse::<NodeSet>(),
            Err(ParseSetError::Malformed { .. })
        ));
        assert!(matches!(
            "-1".parse::<NodeSet>(),
            Err(ParseSetError::Malformed { .. })
        ));
        assert!(matches!(
            "3-1".parse::<NodeSet>(),
            Err(ParseSetError::BackwardRange {
                start: 3,
                end: 1,
                ..
            })
        ));
        assert!(matches!(
            "1024".parse::<NodeSet>(),
            Err(ParseSetError::TooLarge { ref index, .. }) if index == "1024"
        ));
        assert!(matches!(
            "99999999999".parse::<CpuSet>(),
            Err(ParseSetError::TooLarge { .. })
        ));
        let err = "0,x".parse::<NodeSet>().unwrap_err().to_string();
        assert!(err.contains("\"x\""), "{err}");
    }

    #[test]
    fn numbers_beyond_any_integer_are_out_of_range_not_wrapped() {
        // More digits than u32 (or u64) holds: named as written, with the
        // limit, never as 4294967295.
        let err = "99999999999999999999".parse::<NodeSet>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "node 99999999999999999999 is out of range: Linux numbers nodes from 0 to 1023"
        );
        let err = "0-4294967296".parse::<NodeSet>().unwrap_err().to_string();
        assert!(err.starts_with("node 4294967296 is out of range"), "{err}");
        let err = "00099999999999999999999"
            .parse::<CpuSet>()
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "CPU 99999999999999999999 is out of range: Linux numbers CPUs from 0 to {}",
                CpuSet::MAX
            )
        );
    }

    #[test]
    fn set_algebra() {
        let a: NodeSet = "0-3".parse().unwrap();
        let b: NodeSet = "2-5".parse().unwrap();
        assert_eq!(a.intersection(&b).to_string(), "2-3");
        assert_eq!(a.union(&b).to_string(), "0-5");
        assert_eq!(a.difference(&b).to_string(), "0-1");
        assert!(a.intersection(&b).is_subset(&a));
        assert!(!a.is_subset(&b));
        let mut c = NodeSet::single(100);
        c.remove(100);
        assert!(c.is_empty());
        assert_eq!(c.as_words(), &[] as &[u64]);
    }

    #[test]
    fn words_match_kernel_layout() {
        let set: CpuSet = "0,63,64".parse().unwrap();
        assert_eq!(set.as_words(), &[1 | (1 << 63), 1]);
        assert_eq!(CpuSet::from_words(&[1 | (1 << 63), 1, 0]), set);
    }

    #[test]
    fn serde_as_index_arrays() {
        let set: NodeSet = "0,2-3".parse().unwrap();
        let json = serde_json::to_string(&set).unwrap();
        assert_eq!(json, "[0,2,3]");
        let back: NodeSet = serde_json::from_str(&json).unwrap();
        assert_eq!(back, set);
        assert!(serde_json::from_str::<NodeSet>("[5000]").is_err());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Any set prints as a list that parses back to it.
            #[test]
            fn any_set_prints_as_a_list_that_parses_back(
                nodes in proptest::collection::vec(0..=NodeSet::MAX, 0..40),
                cpus in proptest::collection::vec(0..=CpuSet::MAX, 0..80),
            ) {
                let nodes: NodeSet = nodes.into_iter().collect();
                let cpus: CpuSet = cpus.into_iter().collect();
                if !nodes.is_empty() {
                    prop_assert_eq!(nodes.to_string().parse::<NodeSet>(), Ok(nodes.clone()));
                }
                if !cpus.is_empty() {
                    prop_assert_eq!(cpus.to_string().parse::<CpuSet>(), Ok(cpus.clone()));
                }
            }

            /// Text of list characters never panics, and what parses
            /// holds only indices in range.
            #[test]
            fn any_list_text_parses_or_is_refused(text in "[0-9,\\- !a]{0,24}|[0-9]{1,12}(-[0-9]{1,12})?") {
                if let Ok(set) = text.parse::<NodeSet>() {
                    prop_assert!(set.iter().all(|n| n <= NodeSet::MAX));
                    prop_assert_eq!(set.to_string().parse::<NodeSet>(), Ok(set));
                }
                if let Ok(set) = text.parse::<CpuSet>() {
                    prop_assert!(set.iter().all(|c| c <= CpuSet::MAX));
                }
            }

            /// Any text at all never panics.
            #[test]
            fn any_text_parses_or_is_refused(text in any::<String>()) {
                let _ = text.parse::<NodeSet>();
                let _ = text.parse::<CpuSet>();
            }
        }
    }
}
