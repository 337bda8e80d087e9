//! Sizes as people write them: `1.5G`, `512M`, `64KiB`, `4096`; and
//! counts as a sentence says them: `1 thread`, `2 threads` ([`count`]).
//!
//! Every unit is binary (`K` = 1024), as `numactl`, `numastat` and the
//! kernel's own files count memory; `B`, `iB` and lower case are accepted,
//! so `1g`, `1G`, `1GB` and `1GiB` are all 2³⁰ bytes.

use std::fmt;

/// Why a size could not be read.
///
/// ```
/// use numalab::units::parse_size;
/// let err = parse_size("12X").unwrap_err();
/// assert_eq!(err.input, "12X");
/// assert_eq!(err.reason, "unknown unit \"X\"");
/// // The message shows how to write a size.
/// assert!(err.to_string().ends_with("write it as 4096, 64K, 512M, 1.5G or 2T"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: {reason}; write it as 4096, 64K, 512M, 1.5G or 2T")]
pub struct ParseSizeError {
    /// The text as given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Parses a size in bytes.
///
/// A fraction is read exactly, and allowed when the size it gives is a
/// whole number of bytes: `1.5G` and `0.5K` are, `4096.5` and `1.3K`
/// (1331.2 bytes) are refused rather than rounded.
///
/// ```
/// use numalab::units::parse_size;
/// assert_eq!(parse_size("1.5G")?, 3 << 29);
/// assert_eq!(parse_size("512MiB")?, 512 << 20);
/// assert_eq!(parse_size("4096")?, 4096);
/// assert!(parse_size("1.5 parsecs").is_err());
/// let err = parse_size("4096.5").unwrap_err();
/// assert_eq!(err.reason, "4096.5 is not a whole number of bytes");
/// # Ok::<(), numalab::units::ParseSizeError>(())
/// ```
pub fn parse_size(text: &str) -> Result<u64, ParseSizeError> {
    let bad = |reason: &str| ParseSizeError {
        input: text.to_owned(),
        reason: reason.to_owned(),
    };
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    if number.is_empty() {
        return Err(bad("it does not start with a number"));
    }
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad(&format!("unknown unit {:?}", unit.trim()))),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if fraction.contains('.') || (whole.is_empty() && fraction.is_empty()) {
        return Err(bad("the number is malformed"));
    }
    let too_large = || bad("it is too large");
    let whole: u64 = match whole {
        "" => 0,
        digits => digits.parse().map_err(|_| too_large())?,
    };
    let whole = whole.checked_mul(1 << shift).ok_or_else(too_large)?;
    // The fraction f / 10^d (trailing zeros dropped, so its last digit is
    // not 0) times 2^shift is a whole number of bytes exactly when 5^d
    // divides f, which makes f odd, so also 2^d must divide 2^shift:
    // d <= shift. The bytes are then f / 5^d * 2^(shift - d).
    let fraction = fraction.trim_end_matches('0');
    let places = fraction.len() as u32;
    let part = if fraction.is_empty() {
        Some(0)
    } else if places > shift {
        None
    } else {
        let five = 5u128.pow(places);
        fraction
            .parse::<u128>()
            .ok()
            .filter(|f| f % five == 0)
            .and_then(|f| u64::try_from((f / five) << (shift - places)).ok())
    };
    let Some(part) = part else {
        let unit = unit.trim();
        return Err(bad(&if unit.is_empty() {
            format!("{number} is not a whole number of bytes")
        } else {
            let approx = number.parse::<f64>().unwrap_or(0.0) * (1u64 << shift) as f64;
            format!("{number}{unit} ({approx} bytes) is not a whole number of bytes")
        }));
    };
    whole.checked_add(part).ok_or_else(too_large)
}

/// Bytes in the largest binary unit that keeps them readable: `1.5 GiB`,
/// `480 MiB`, `512 B`.
///
/// ```
/// assert_eq!(numalab::units::format_size(3 << 29), "1.5 GiB");
/// assert_eq!(numalab::units::format_size(480 << 20), "480 MiB");
/// ```
pub fn format_size(bytes: u64) -> String {
    Size(bytes).to_string()
}

/// Bytes in MiB with one decimal (`4096.0 MiB`, `0.5 MiB`): for
/// messages that set two sizes side by side, which then read in one unit.
///
/// ```
/// assert_eq!(numalab::units::mib(1 << 32), "4096.0 MiB");
/// assert_eq!(numalab::units::mib(512 << 10), "0.5 MiB");
/// ```
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// A size in bytes that prints in binary units (see [`format_size`]).
///
/// ```
/// use numalab::units::Size;
/// assert_eq!(Size(4096).to_string(), "4 KiB");
/// assert_eq!(Size(3 << 29).to_string(), "1.5 GiB");
/// assert_eq!(Size(100).to_string(), "100 B");
/// assert!(Size(1 << 20) < Size(1 << 30)); // ordered by bytes
/// assert_eq!(Size(1 << 62).to_string(), "4 EiB");
/// // A sum that reached the largest count (sums of sizes saturate).
/// assert_eq!(Size(u64::MAX).to_string(), "16 EiB or more");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Size(pub u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == u64::MAX {
            return f.write_str("16 EiB or more");
        }
        const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        let mut value = self.0 as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit < UNITS.len() - 1 {
            value /= 1024.0;
            unit += 1;
        }
        if value.fract() == 0.0 || unit == 0 {
            write!(f, "{value:.0} {}", UNITS[unit])
        } else {
            write!(f, "{value:.1} {}", UNITS[unit])
        }
    }
}

/// `n` and `noun`, the noun in the plural unless `n` is 1: `1 thread`,
/// `3 threads`, `0 cells`, `2 directories`, `4 processes`. English's
/// regular plurals: `-y` after a consonant becomes `-ies`, `-s`, `-x`,
/// `-ch` and `-sh` take `-es`, anything else `-s`; the last word of a
/// compound is the one made plural (`1 CPU migration`, `2 CPU
/// migrations`). Irregular nouns: [`count_as`].
///
/// ```
/// use numalab::units::count;
/// assert_eq!(count(1, "thread"), "1 thread");
/// assert_eq!(count(2usize, "thread"), "2 threads");
/// assert_eq!(count(0u64, "cell"), "0 cells");
/// assert_eq!(count(2, "directory"), "2 directories");
/// assert_eq!(count(2, "day"), "2 days");
/// assert_eq!(count(3, "process"), "3 processes");
/// assert_eq!(count(1, "CPU migration"), "1 CPU migration");
/// assert_eq!(count(-1i64, "page"), "-1 pages");
/// ```
pub fn count<N>(n: N, noun: &str) -> String
where
    N: TryInto<u64> + fmt::Display + Copy,
{
    count_as(n, noun, &plural(noun))
}

/// `n` and `one` when `n` is 1, else `n` and `many`: for the nouns
/// [`count`]'s rule gets wrong (`count_as(2, "child", "children")`).
///
/// ```
/// use numalab::units::count_as;
/// assert_eq!(count_as(1, "copy", "copies"), "1 copy");
/// assert_eq!(count_as(5, "child", "children"), "5 children");
/// ```
pub fn count_as<N>(n: N, one: &str, many: &str) -> String
where
    N: TryInto<u64> + fmt::Display + Copy,
{
    let is_one = n.try_into().is_ok_and(|n: u64| n == 1);
    format!("{n} {}", if is_one { one } else { many })
}

/// A figure as an axis label writes it: whole numbers and anything from
/// 100 up without decimals, one decimal from 1, two below.
///
/// ```
/// use numalab::units::plain;
/// assert_eq!(plain(12.0), "12");
/// assert_eq!(plain(123.4), "123");
/// assert_eq!(plain(3.14159), "3.1");
/// assert_eq!(plain(0.25), "0.25");
/// ```
pub fn plain(value: f64) -> String {
    if value.abs() >= 100.0 || value == value.round() {
        format!("{value:.0}")
    } else if value.abs() >= 1.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// The regular English plural of `noun` (see [`count`]).
fn plural(noun: &str) -> String {
    let vowel = |c: char| "aeiouAEIOU".contains(c);
    let mut chars = noun.chars().rev();
    let last = chars.next();
    let before = chars.next();
    match (before, last) {
        (Some(b), Some('y')) if !vowel(b) => format!("{}ies", &noun[..noun.len() - 1]),
        (_, Some('s' | 'x')) => format!("{noun}es"),
        (Some('c' | 's'), Some('h')) => format!("{noun}es"),
        _ => format!("{noun}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_spelling() {
        for (text, bytes) in [
            ("0", 0),
            ("4096", 4096),
            ("4096B", 4096),
            ("64k", 64 << 10),
            ("64KiB", 64 << 10),
            ("512M", 512 << 20),
            ("512 MB", 512 << 20),
            ("1.5G", 3 << 29),
            ("1.5gib", 3 << 29),
            (".5G", 1 << 29),
            ("2T", 2 << 40),
            ("4096.0", 4096),
            ("0.5K", 512),
            ("1.25k", 1280),
            ("0.001953125M", 2048),
            ("1.50G", 3 << 29),
            ("16777215T", 16_777_215 << 40),
            // 2^-20 MiB, written out: one byte.
            ("0.00000095367431640625M", 1),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_size() {
        for (text, reason) in [
            ("", "does not start with a number"),
            ("G", "does not start with a number"),
            ("1.2.3G", "malformed"),
            ("12X", "unknown unit \"X\""),
            ("99999999999T", "too large"),
            ("16777216T", "too large"),
            ("99999999999999999999999999999999999999999", "too large"),
            (".", "malformed"),
            ("4096.5", "4096.5 is not a whole number of bytes"),
            ("1.3K", "1.3K (1331.2 bytes) is not a whole number of bytes"),
            ("0.0000000000000000001G", "not a whole number of bytes"),
            ("0.1", "0.1 is not a whole number of bytes"),
        ] {
            let err = parse_size(text).unwrap_err();
            assert!(err.to_string().contains(reason), "{text}: {err}");
            assert!(err.to_string().contains("1.5G"), "{err}");
        }
    }

    #[test]
    fn prints_in_binary_units() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(3 << 29), "1.5 GiB");
        assert_eq!(format_size(2 << 40), "2 TiB");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Any byte count written in digits, or in a unit it is a
            /// whole multiple of, reads back exactly.
            #[test]
            fn any_size_written_out_reads_back(bytes in any::<u64>(), shift in 0u32..5) {
                prop_assert_eq!(parse_size(&bytes.to_string()), Ok(bytes));
                let unit = ["", "K", "MiB", "g", "TB"][shift as usize];
                let whole = bytes >> (10 * shift);
                prop_assert_eq!(parse_size(&format!("{whole}{unit}")), Ok(whole << (10 * shift)));
            }

            /// Size-like text never panics.
            #[test]
            fn any_size_text_parses_or_is_refused(text in "[0-9.]{0,30} ?[kKmMgGtTiIbBxX]{0,4}") {
                if let Err(err) = parse_size(&text) {
                    prop_assert!(err.to_string().contains("write it as"));
                }
            }

            /// Any text at all never panics.
            #[test]
            fn any_text_is_a_size_or_refused(text in any::<String>()) {
                let _ = parse_size(&text);
            }
        }
    }
}
