//! Errors in an experiment file or a `--set`, with where they are (file,
//! line, column) and the nearest valid key.

use std::fmt;

use super::*;

/// Where a configuration error is.
///
/// ```
/// use numalab_bench::experiment::Experiment;
/// let err = Experiment::from_toml_str("name = \"x\"\n[memory]\nsise = \"1GiB\"\n", "exp.toml")
///     .unwrap_err();
/// let at = err.location.as_deref().unwrap();
/// assert_eq!((at.file.as_str(), at.line, at.column), ("exp.toml", 3, 1));
/// assert_eq!((at.text.as_str(), at.width), ("sise = \"1GiB\"", 4));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub file: String,
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1 (in characters).
    pub column: usize,
    /// The line's text.
    pub text: String,
    /// Characters to underline from `column`.
    pub width: usize,
}

/// A configuration error: what is wrong and where.
///
/// ```
/// use numalab_bench::experiment::Experiment;
/// let exp = Experiment::from_toml_str("[threads]\ncount = 2\n", "exp.toml")?;
/// let err = exp.with_overrides(&["threads.cont=8".into()]).unwrap_err();
/// assert_eq!(err.set_option.as_deref(), Some("threads.cont=8"));
/// assert_eq!(err.hint.as_deref(), Some("did you mean `threads.count`?"));
/// assert_eq!(
///     err.to_string(),
///     "--set threads.cont=8: unknown key `threads.cont`; did you mean `threads.count`?"
/// );
/// # Ok::<(), numalab_bench::experiment::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// In the file (line and column).
    pub location: Option<Box<Location>>,
    /// Which `--set` option, when it came from one.
    pub set_option: Option<String>,
    /// What is wrong.
    pub message: String,
    /// The nearest valid key, or another hint.
    pub hint: Option<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(loc) = &self.location {
            write!(f, "{}:{}:{}: ", loc.file, loc.line, loc.column)?;
        }
        if let Some(set) = &self.set_option {
            write!(f, "--set {set}: ")?;
        }
        f.write_str(&self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "; {hint}")?;
        }
        if let Some(loc) = &self.location {
            let number = loc.line.to_string();
            let pad = " ".repeat(number.len());
            write!(
                f,
                "\n{pad} |\n{number} | {}\n{pad} | {}{}",
                loc.text,
                " ".repeat(loc.column.saturating_sub(1)),
                "^".repeat(loc.width.max(1))
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    pub(super) fn plain(message: impl Into<String>) -> ConfigError {
        ConfigError {
            location: None,
            set_option: None,
            message: message.into(),
            hint: None,
        }
    }
}

/// Line, column and text of byte offset `span` in `text`.
pub(super) fn locate(file: &str, text: &str, span: std::ops::Range<usize>) -> Location {
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line_text = &text[line_start..line_end];
    let column = text[line_start..start].chars().count() + 1;
    let end = span.end.clamp(start, line_end);
    Location {
        file: file.to_owned(),
        line: text[..start].matches('\n').count() + 1,
        column,
        text: line_text.trim_end_matches('\r').to_owned(),
        width: text[start..end].chars().count(),
    }
}

/// The section (`memory`) whose fields a `deny_unknown_fields` message
/// lists, found from the expected names.
pub(super) fn section_of(expected: &[&str]) -> Option<&'static str> {
    let first = expected.first()?;
    KEYS.iter().find_map(|k| match k.path.split_once('.') {
        Some((section, field)) if field == *first && !section.starts_with("sweep") => Some(section),
        _ => None,
    })
}

/// Turns serde's "unknown field `x`, expected one of `a`, `b`" into a
/// message naming the section and a hint with the nearest key.
pub(super) fn explain_unknown(message: &str) -> Option<(String, Option<String>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    let expected: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    let section = section_of(&expected);
    let place = match section {
        Some(section) => format!(" in [{section}]"),
        None => " at the top level".to_owned(),
    };
    let message = format!("unknown key `{field}`{place}");
    // The nearest key of the same section, else a key of that name that
    // lives in another section.
    let hint = nearest(field, expected.iter().copied())
        .map(|near| format!("did you mean `{near}`?"))
        .or_else(|| {
            KEYS.iter()
                .find(|k| k.path.rsplit('.').next() == Some(field))
                .map(|k| {
                    let (section, _) = k.path.split_once('.').unwrap_or(("", k.path));
                    format!("`{field}` belongs in [{section}]")
                })
        })
        .or_else(|| Some(format!("valid keys here: {}", expected.join(", "))));
    Some((message, hint))
}

pub(super) fn from_toml_error(err: &toml::de::Error, file: &str, text: &str) -> ConfigError {
    let raw = err.message().trim();
    let (message, hint) = explain_unknown(raw).unwrap_or_else(|| (raw.to_owned(), None::<String>));
    ConfigError {
        location: err.span().map(|span| Box::new(locate(file, text, span))),
        set_option: None,
        message,
        hint,
    }
}
