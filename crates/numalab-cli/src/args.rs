//! Values every command's flags share, parsed in one place: sizes, and
//! the machine `--xml`/`--synthetic` name.
//! (Node and CPU lists are the library's `NodeSet`/`CpuSet` syntax, resolved
//! against the machine by `Topology`.)

use std::path::PathBuf;

use anyhow::Context;
use numalab::Topology;

/// A size flag (`--size 64M`, `--volume 20G`, `--block-size 4MiB`): numalab's
/// units (binary; `1.5G`, `512MiB`, `4096`), at least one byte.
///
/// ```text
/// --size 1.5G      -> 1610612736
/// --size 0         -> error: the size must be at least one byte
/// ```
pub fn size(text: &str) -> Result<u64, String> {
    match numalab::units::parse_size(text) {
        Ok(0) => Err("the size must be at least one byte".into()),
        Ok(bytes) => {
            if let Some(note) = decimal_looking(text, bytes) {
                eprintln!("numalab: {note}");
            }
            Ok(bytes)
        }
        Err(err) => Err(err.to_string()),
    }
}

/// What a size written with a decimal-looking unit (`1.5GB`, dd's 10⁹)
/// was read as: numalab's units are binary, as numactl's and fio's, and
/// it says so rather than take 7% more than dd would in silence.
fn decimal_looking(text: &str, bytes: u64) -> Option<String> {
    let unit = text
        .trim()
        .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
    let decimal = ["KB", "MB", "GB", "TB", "PB", "EB"]
        .iter()
        .any(|u| unit.trim().eq_ignore_ascii_case(u));
    decimal.then(|| {
        format!(
            "{} is read as {} ({bytes} bytes): sizes are binary in numalab, as in numactl and fio (GB and GiB alike)",
            text.trim(),
            numalab::units::Size(bytes)
        )
    })
}

/// A size flag where 0 means none (`--ramp 0`): as [`size`] otherwise.
pub fn size_or_zero(text: &str) -> Result<u64, String> {
    match numalab::units::parse_size(text) {
        Ok(0) => Ok(0),
        _ => size(text),
    }
}

/// A size flag held as `usize` (a buffer's length on this machine).
pub fn size_usize(text: &str) -> Result<usize, String> {
    let bytes = size(text)?;
    usize::try_from(bytes).map_err(|_| format!("invalid size {text:?}: it is too large"))
}

/// The machine `--xml FILE` or `--synthetic DESCRIPTION` names (hwloc's
/// forms, as `lstopo --input` takes them), else this one.
pub fn topology(xml: Option<&PathBuf>, synthetic: Option<&str>) -> anyhow::Result<Topology> {
    Ok(match (xml, synthetic) {
        (Some(path), _) => Topology::from_xml_file(path)
            .with_context(|| format!("reading topology from {}", path.display()))?,
        (None, Some(desc)) => Topology::from_synthetic(desc)?,
        (None, None) => Topology::system()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_binary_and_positive() {
        assert_eq!(size("20GB").unwrap(), 20 << 30);
        assert_eq!(size("512MiB").unwrap(), 512 << 20);
        assert_eq!(size("1.5G"), Ok(3 << 29));
        assert_eq!(size_usize("64M"), Ok(64 << 20));
        assert!(size("0").unwrap_err().contains("at least one byte"));
        assert!(size("12 parsecs").unwrap_err().contains("unknown unit"));
        assert!(size("x").is_err());
        assert!(size("lots")
            .unwrap_err()
            .contains("does not start with a number"));
    }

    #[test]
    fn a_decimal_looking_unit_is_said_to_be_read_as_binary() {
        assert_eq!(
            decimal_looking("1.5GB", 3 << 29).unwrap(),
            "1.5GB is read as 1.5 GiB (1610612736 bytes): sizes are binary in numalab, as in numactl and fio (GB and GiB alike)"
        );
        assert!(decimal_looking("64mb", 64 << 20).is_some());
        for binary in ["1.5G", "512MiB", "4096", "64K"] {
            assert_eq!(decimal_looking(binary, 1), None, "{binary}");
        }
    }

    #[test]
    fn a_fraction_of_a_byte_is_refused_not_rounded() {
        // Was silently 4096 bytes.
        let err = size("4096.5").unwrap_err();
        assert!(
            err.contains("4096.5 is not a whole number of bytes"),
            "{err}"
        );
        assert_eq!(size("0.5K"), Ok(512));
    }
}
