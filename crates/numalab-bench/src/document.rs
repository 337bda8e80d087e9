//! The envelope of every JSON document numalab writes, and reading one
//! back as its typed result.
//!
//! A result type names its schema by implementing [`Schema`]; written, it
//! becomes `{"schema": "numalab.topo", "schema_version": 1,
//! "numalab_version": "0.1.0", "created": "…", …the result's fields…}`.
//! [`Document::parse`] reads such a text back into the result type, after
//! checking that it is the schema and version expected — the emulated-NUMA
//! suite, `numalab plot` and `numalab fleet` read results this way, never
//! by looking up string keys.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use numalab::files::InputError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A result that is written as a JSON document of its own.
///
/// ```
/// use numalab_bench::document::{Document, Schema};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Pages { per_node: Vec<u64> }
/// impl Schema for Pages {
///     const NAME: &'static str = "example.pages";
///     const VERSION: u32 = 1;
/// }
///
/// let text = Document::new(&Pages { per_node: vec![3, 4] }).to_json().unwrap();
/// let back: Pages = Document::parse(&text).unwrap();
/// assert_eq!(back.per_node, [3, 4]);
/// ```
pub trait Schema {
    /// The schema's name, e.g. `numalab.topo`.
    const NAME: &'static str;
    /// Its version, bumped on incompatible changes.
    const VERSION: u32;
}

impl<T: Schema + ?Sized> Schema for &T {
    const NAME: &'static str = T::NAME;
    const VERSION: u32 = T::VERSION;
}

/// A result in numalab's JSON envelope.
///
/// ```
/// use numalab_bench::document::{Document, Schema};
///
/// #[derive(serde::Serialize)]
/// struct Pages { per_node: Vec<u64> }
/// impl Schema for Pages {
///     const NAME: &'static str = "example.pages";
///     const VERSION: u32 = 1;
/// }
///
/// let document = Document::new(Pages { per_node: vec![3, 4] });
/// assert_eq!((document.schema.as_str(), document.schema_version), ("example.pages", 1));
/// let json: serde_json::Value = serde_json::from_str(&document.to_json()?)?;
/// // The envelope's fields and the result's sit side by side.
/// assert_eq!(json["schema"], "example.pages");
/// assert_eq!(json["per_node"], serde_json::json!([3, 4]));
/// assert!(json["created"].as_str().is_some_and(|t| t.ends_with('Z')));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Document<T> {
    /// What the document holds, e.g. `numalab.topo`.
    pub schema: String,
    /// Version of that schema.
    pub schema_version: u32,
    /// The numalab version that wrote it.
    pub numalab_version: String,
    /// When it was written (UTC, RFC 3339).
    pub created: String,
    /// The result.
    #[serde(flatten)]
    pub body: T,
}

/// Why a JSON text is not the document expected.
///
/// ```
/// use numalab_bench::document::{Document, DocumentError, Schema};
///
/// #[derive(Debug, serde::Deserialize)]
/// struct Pages { per_node: Vec<u64> }
/// impl Schema for Pages {
///     const NAME: &'static str = "example.pages";
///     const VERSION: u32 = 2;
/// }
///
/// let saved = r#"{"schema": "example.pages", "schema_version": 1, "numalab_version": "0.1.0",
///     "created": "2026-01-01T00:00:00Z", "per_node": [3, 4]}"#;
/// match Document::<Pages>::parse(saved) {
///     Err(DocumentError::OtherVersion { found, expected, .. }) => {
///         assert_eq!((found, expected), (1, 2));
///     }
///     other => panic!("expected an old version, got {other:?}"),
/// }
/// let topo = saved.replace("example.pages", "numalab.topo");
/// let err = Document::<Pages>::parse(&topo).unwrap_err();
/// assert_eq!(err.to_string(), "a numalab.topo document, not example.pages");
/// let err = Document::<Pages>::parse("{\"schema\": ").unwrap_err();
/// assert!(matches!(err, DocumentError::Json { .. }), "{err}");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DocumentError {
    /// Not JSON, or not the fields the schema has.
    #[error("not a valid {schema} document: {source}")]
    Json {
        /// The schema expected.
        schema: &'static str,
        /// serde_json's error (with line and column when the text is not
        /// JSON at all).
        source: serde_json::Error,
    },
    /// A document of another schema.
    #[error("a {found} document, not {expected}")]
    OtherSchema {
        /// The schema expected.
        expected: &'static str,
        /// The schema the document names.
        found: String,
    },
    /// A version this numalab cannot read.
    #[error("{schema} version {found}; this numalab reads version {expected}")]
    OtherVersion {
        /// The schema.
        schema: &'static str,
        /// The version expected.
        expected: u32,
        /// The version found.
        found: u32,
    },
}

/// Why a saved document could not be read back from its file
/// ([`Document::read`]); each names the file.
///
/// ```
/// use numalab_bench::document::{Document, ReadError};
/// use numalab_bench::topo::TopoReport;
///
/// let path = std::env::temp_dir().join(format!("numalab-doc-read-{}.html", std::process::id()));
/// std::fs::write(&path, "<!DOCTYPE html><html></html>")?;
/// let err = Document::<TopoReport>::read(&path, 1 << 20, "saved results").unwrap_err();
/// std::fs::remove_file(&path)?;
/// assert!(matches!(err, ReadError::Html { .. }), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file cannot be read, is not a regular file, or is larger than
    /// the limit.
    #[error(transparent)]
    Input(#[from] InputError),
    /// Not UTF-8 text.
    #[error("{} is not UTF-8 text (invalid byte at offset {offset})", path.display())]
    NotText {
        /// The file.
        path: PathBuf,
        /// The first byte that is not.
        offset: usize,
    },
    /// An HTML page (a report's page, say), not a saved document.
    #[error("{} is an HTML page, not a saved {schema} document", path.display())]
    Html {
        /// The file.
        path: PathBuf,
        /// The schema expected.
        schema: &'static str,
    },
    /// Not a document of the schema and version expected.
    #[error("reading {} as {schema}", path.display())]
    Document {
        /// The file.
        path: PathBuf,
        /// The schema expected.
        schema: &'static str,
        /// Why not.
        #[source]
        source: DocumentError,
    },
}

impl<T: Schema> Document<T> {
    /// Wraps `body`, stamped with this numalab's version and the time now.
    pub fn new(body: T) -> Document<T> {
        Document {
            schema: T::NAME.to_owned(),
            schema_version: T::VERSION,
            numalab_version: numalab::VERSION.to_owned(),
            created: now_rfc3339(),
            body,
        }
    }
}

impl<T: Schema + Serialize> Document<T> {
    /// The document as pretty-printed JSON ending in a newline.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        Ok(text)
    }
}

/// The envelope's two fields that say what a document is; every other
/// field is skipped as it is read, without being kept.
#[derive(Deserialize)]
struct Header {
    schema: String,
    schema_version: u32,
}

impl Header {
    /// Refuses a document of another schema or version than `T`'s.
    fn check<T: Schema>(self) -> Result<(), DocumentError> {
        if self.schema != T::NAME {
            return Err(DocumentError::OtherSchema {
                expected: T::NAME,
                found: self.schema,
            });
        }
        if self.schema_version != T::VERSION {
            return Err(DocumentError::OtherVersion {
                schema: T::NAME,
                expected: T::VERSION,
                found: self.schema_version,
            });
        }
        Ok(())
    }
}

impl<T: Schema + DeserializeOwned> Document<T> {
    /// Reads a document of `T`'s schema and version back into `T`.
    ///
    /// The text is read twice and never held whole as a
    /// `serde_json::Value`: first only the envelope, then — when it is
    /// `T`'s — straight into `T`, whose fields are the document's less
    /// the envelope's (skipped as fields `T` does not have). A saved file
    /// is thus never larger in memory than the result it holds.
    pub fn parse(text: &str) -> Result<T, DocumentError> {
        let json = |source| DocumentError::Json {
            schema: T::NAME,
            source,
        };
        serde_json::from_str::<Header>(text)
            .map_err(json)?
            .check::<T>()?;
        serde_json::from_str(text).map_err(json)
    }

    /// Reads the saved document at `path` back into `T`: at most `limit`
    /// bytes (`what` names the kind of file in the error), refusing what
    /// is not a regular file as every input numalab reads, then
    /// [`parse`](Self::parse). The one way a saved result is read back
    /// from a file.
    pub fn read(path: &Path, limit: u64, what: &'static str) -> Result<T, ReadError> {
        let bytes = numalab::files::read_input_limited(path, limit, what)?;
        Self::from_bytes(bytes, path)
    }

    /// [`read`](Self::read) of bytes already read, boundedly, from `path`.
    pub fn from_bytes(bytes: Vec<u8>, path: &Path) -> Result<T, ReadError> {
        let text = String::from_utf8(bytes).map_err(|e| ReadError::NotText {
            path: path.to_owned(),
            offset: e.utf8_error().valid_up_to(),
        })?;
        let start = text
            .trim_start()
            .get(..15)
            .unwrap_or_default()
            .to_ascii_lowercase();
        if start.starts_with("<!doctype html") || start.starts_with("<html") {
            return Err(ReadError::Html {
                path: path.to_owned(),
                schema: T::NAME,
            });
        }
        Self::parse(&text).map_err(|source| ReadError::Document {
            path: path.to_owned(),
            schema: T::NAME,
            source,
        })
    }

    /// As [`parse`](Self::parse), for a document already read as JSON.
    pub fn from_value(mut value: serde_json::Value) -> Result<T, DocumentError> {
        let json = |source| DocumentError::Json {
            schema: T::NAME,
            source,
        };
        Header::deserialize(&value).map_err(json)?.check::<T>()?;
        // The body is read from the object without the envelope, not
        // through `Document<T>`: serde's `flatten` cannot read map keys
        // that are numbers (a node's id, `{"0": 4096}`) back into `u32`.
        if let Some(object) = value.as_object_mut() {
            for key in ["schema", "schema_version", "numalab_version", "created"] {
                object.remove(key);
            }
        }
        T::deserialize(value).map_err(json)
    }
}

/// The current UTC time as `2026-11-22T02:07:54Z`.
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Seconds since 1970-01-01 UTC of an RFC 3339 time as documents carry
/// it (`2026-11-27T01:29:11Z`, fractions of a second and `+HH:MM` offsets
/// too); `None` for anything else, and for a date before year 1 or after
/// 9999. Saved files are compared by this, never by their text.
///
/// ```
/// use numalab_bench::document::{now_rfc3339, seconds_since_epoch};
/// assert_eq!(seconds_since_epoch("1970-01-02T00:00:01Z"), Some(86_401));
/// assert_eq!(seconds_since_epoch("2026-11-27T02:29:11.5+01:00"), seconds_since_epoch("2026-11-27T01:29:11Z"));
/// assert_eq!(seconds_since_epoch("zzz"), None);
/// assert_eq!(seconds_since_epoch("2026-02-30T00:00:00Z"), None);
/// assert!(seconds_since_epoch(&now_rfc3339()).is_some());
/// ```
pub fn seconds_since_epoch(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(range)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let sep = |at: usize, allowed: &[u8]| b.get(at).is_some_and(|c| allowed.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if year < 1
        || !(1..=12).contains(&month)
        || day < 1
        || day > month_days[(month - 1) as usize]
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    // The fraction of a second, then the zone.
    let mut at = 19;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        if at == start {
            return None;
        }
    }
    let offset = match b.get(at..)? {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (digits(at + 1..at + 3)?, digits(at + 4..at + 6)?);
            if h > 23 || m > 59 {
                return None;
            }
            let minutes = h * 60 + m;
            if *sign == b'+' {
                minutes
            } else {
                -minutes
            }
        }
        _ => return None,
    };
    // Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm,
    // the inverse of the one in `now_rfc3339`).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second - offset * 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Thing {
        n: u32,
    }
    impl Schema for Thing {
        const NAME: &'static str = "numalab.thing";
        const VERSION: u32 = 2;
    }

    #[test]
    fn maps_keyed_by_numbers_read_back() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct PerNode {
            pages: std::collections::BTreeMap<u32, u64>,
        }
        impl Schema for PerNode {
            const NAME: &'static str = "numalab.per-node";
            const VERSION: u32 = 1;
        }
        let per_node = PerNode {
            pages: [(0, 5), (3, 7)].into(),
        };
        let text = Document::new(&per_node).to_json().unwrap();
        assert_eq!(Document::<PerNode>::parse(&text).unwrap(), per_node);
    }

    #[test]
    fn round_trip_and_refusals() {
        let text = Document::new(Thing { n: 7 }).to_json().unwrap();
        assert!(text.contains("\"schema\": \"numalab.thing\""), "{text}");
        assert_eq!(Document::<Thing>::parse(&text).unwrap(), Thing { n: 7 });
        let other = text.replace("numalab.thing", "numalab.other");
        assert!(matches!(
            Document::<Thing>::parse(&other),
            Err(DocumentError::OtherSchema { .. })
        ));
        let old = text.replace("\"schema_version\": 2", "\"schema_version\": 1");
        assert!(Document::<Thing>::parse(&old)
            .unwrap_err()
            .to_string()
            .contains("reads version 2"));
        assert!(matches!(
            Document::<Thing>::parse("{"),
            Err(DocumentError::Json { .. })
        ));
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let now = now_rfc3339();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.ends_with('Z') && now.as_bytes()[10] == b'T', "{now}");
    }
}
