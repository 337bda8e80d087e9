//! Transfer headers: the key-value metadata a writer sends at the start of
//! each transfer, beside the data (PSRDada's ASCII header, one `KEY value`
//! per line).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::RingError;

/// The header of a transfer: ordered `KEY value` pairs, as PSRDada's ASCII
/// headers (`SOURCE J0437-4715`, `FREQ 1400`, …).
///
/// ```
/// use numalab::ring::TransferHeader;
/// let mut header = TransferHeader::new();
/// header.set("SOURCE", "J0437-4715")?;
/// header.set("NCHAN", "1024")?;
/// assert_eq!(header.get("NCHAN"), Some("1024"));
/// assert_eq!(header.to_string(), "SOURCE J0437-4715\nNCHAN 1024\n");
/// # Ok::<(), numalab::ring::RingError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferHeader {
    entries: Vec<(String, String)>,
}

impl TransferHeader {
    /// An empty header.
    pub fn new() -> TransferHeader {
        TransferHeader::default()
    }

    /// Sets `key` to `value` (replacing an earlier value). Keys are
    /// non-empty and without white space; values are one line.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), RingError> {
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(RingError::InvalidSize(format!(
                "header key {key:?} must be non-empty, without spaces"
            )));
        }
        if value.contains(['\n', '\r', '\0']) {
            return Err(RingError::InvalidSize(format!(
                "header value for {key} must be one line"
            )));
        }
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value.to_owned(),
            None => self.entries.push((key.to_owned(), value.to_owned())),
        }
        Ok(())
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no pair.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Parses the text form; malformed text (from a corrupt segment) is an
    /// error.
    pub(crate) fn parse(bytes: &[u8]) -> Result<TransferHeader, RingError> {
        let corrupt = |reason: &str| RingError::Corrupt {
            reason: format!("transfer header: {reason}"),
        };
        let text = std::str::from_utf8(bytes).map_err(|_| corrupt("not UTF-8"))?;
        let mut header = TransferHeader::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (key, value) = line.split_once(' ').unwrap_or((line, ""));
            header
                .set(key, value)
                .map_err(|_| corrupt("malformed line"))?;
        }
        Ok(header)
    }
}

impl fmt::Display for TransferHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (key, value) in &self.entries {
            writeln!(f, "{key} {value}")?;
        }
        Ok(())
    }
}

/// A transfer as a reader sees it begin.
///
/// ```
/// use numalab::ring::{Ring, RingOptions, TransferHeader};
/// # let name = format!("doc-transfer-{}", std::process::id());
/// let ring = Ring::create(&RingOptions::new(&name, 4 * 4096, 4096))?;
/// let mut reader = ring.reader()?;
/// let mut writer = ring.writer()?;
/// for file in ["a.dat", "b.dat"] {
///     let mut header = TransferHeader::new();
///     header.set("FILE", file)?;
///     writer.begin_transfer(&header)?;
///     writer.write(file.as_bytes())?;
/// }
/// writer.finish()?;
///
/// let first = reader.next_transfer()?.expect("a first transfer");
/// assert_eq!((first.id, first.header.get("FILE")), (1, Some("a.dat")));
/// // Skips what is left of the first.
/// let second = reader.next_transfer()?.expect("a second transfer");
/// assert_eq!((second.id, second.header.get("FILE")), (2, Some("b.dat")));
/// assert!(reader.next_transfer()?.is_none()); // the end of the stream
/// # Ok::<(), numalab::ring::RingError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    /// Transfers are numbered from 1 in the order the writer began them.
    pub id: u64,
    /// Its header.
    pub header: TransferHeader,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_text() {
        let mut header = TransferHeader::new();
        header.set("OBS_ID", "42").unwrap();
        header.set("EMPTY", "").unwrap();
        header.set("OBS_ID", "43").unwrap();
        let parsed = TransferHeader::parse(header.to_string().as_bytes()).unwrap();
        assert_eq!(parsed, header);
        assert_eq!(parsed.get("OBS_ID"), Some("43"));
        assert!(header.set("A B", "x").is_err());
        assert!(header.set("A", "x\ny").is_err());
        assert!(TransferHeader::parse(&[0xff, 0xfe]).is_err());
    }
}
