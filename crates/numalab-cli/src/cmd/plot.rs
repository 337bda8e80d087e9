//! `numalab plot`: figures redrawn from a saved result file.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use numalab_bench::document::{Document, DocumentError, Schema};
use numalab_bench::experiment::result::{
    RunReport, SweepReport, RUN_SCHEMA, SCHEMA_VERSION, SWEEP_SCHEMA,
};
use numalab_bench::matrix::MatrixReport;
use numalab_bench::profile::ProfileReport;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::render::{experiment::text, figures};

/// Redraw the figures of a saved result (numalab sweep/run/matrix/profile
/// --json) as SVG and PNG
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    numalab sweep exp.toml -o sweep.json && numalab plot sweep.json      sweep.svg, sweep.png\n  \
    numalab plot run.json -o figures/run                                 figures/run.svg, .png\n  \
    numalab matrix --json -o m.json && numalab plot m.json               heat maps, loaded-latency curve\n  \
    numalab profile -o p.json -- ./app && numalab plot p.json            memory per node over time\n\n\
A sweep is drawn as the time to the last thread against the swept parameter, one line per \
policy; a run as each thread's busy time, one line per repeat; a matrix as heat maps of \
latency and bandwidth and, when measured, the loaded-latency curve; a profile as the program's \
memory on each node over time.")]
pub struct PlotArgs {
    /// A result file written with --json (numalab.sweep, numalab.run,
    /// numalab.matrix or numalab.profile)
    #[arg(value_name = "RESULTS.json")]
    pub results: PathBuf,

    /// Write STEM.svg and STEM.png, in a directory that exists (default:
    /// the results file without its extension)
    #[arg(long, short = 'o', value_name = "STEM")]
    pub output: Option<PathBuf>,
}

/// Runs `numalab plot`.
pub fn run(args: &PlotArgs) -> Result<()> {
    let path = &args.results;
    let stem = args
        .output
        .clone()
        .unwrap_or_else(|| path.with_extension(""));
    // The input first: `numalab plot /dev/zero` is refused for what it
    // reads, not for the figures it would write beside it.
    let text_in = numalab::files::read_text_limited(
        path,
        crate::saved::MAX_RESULT_BYTES,
        "result files numalab plots",
    )?;
    crate::plot::check_stem(&stem)?;
    // No figure over the results it is drawn from (`plot r.svg`).
    let figure = |ext: &str| {
        let mut name = stem.clone().into_os_string();
        name.push(format!(".{ext}"));
        std::path::PathBuf::from(name)
    };
    let (svg, png) = (figure("svg"), figure("png"));
    let read: Vec<_> = crate::output::input("the results", path)
        .into_iter()
        .collect();
    crate::output::not_an_input(&[("a figure", &svg), ("a figure", &png)], &read)?;
    // Only the envelope first: the rest of the file is read once, into
    // the result its schema names, never held as a tree of JSON values
    // (which takes ten times the text and more).
    let envelope: Envelope = serde_json::from_str(&text_in)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    let schema = envelope.schema.unwrap_or_default();
    let load_err = || format!("reading {} as {schema}", path.display());
    // A run or sweep result is read as its type directly (below), so its
    // version is checked here: a newer numalab's result may mean something
    // else in the same fields.
    if schema == SWEEP_SCHEMA || schema == RUN_SCHEMA {
        let version = envelope.schema_version;
        if version != Some(u64::from(SCHEMA_VERSION)) {
            let name = if schema == RUN_SCHEMA {
                RUN_SCHEMA
            } else {
                SWEEP_SCHEMA
            };
            let Some(found) = version.and_then(|v| u32::try_from(v).ok()) else {
                bail!(
                    "{}: {name} without a schema_version numalab can read; this numalab reads version {SCHEMA_VERSION}",
                    path.display()
                );
            };
            let err = DocumentError::OtherVersion {
                schema: name,
                expected: SCHEMA_VERSION,
                found,
            };
            bail!("{}: {err}", path.display());
        }
    }
    // A run or sweep result carries its schema fields itself, so it is
    // read as its type directly; a matrix result or a profile is a
    // document of its schema, checked for name and version as it is read.
    let paths = match schema.as_str() {
        SWEEP_SCHEMA => {
            let sweep: SweepReport = serde_json::from_str(&text_in).with_context(load_err)?;
            figures::draw_sweep(&sweep, &stem)?
        }
        RUN_SCHEMA => {
            let run: RunReport = serde_json::from_str(&text_in).with_context(load_err)?;
            figures::draw_run(&run, &stem)?
        }
        MatrixReport::NAME => {
            let result = Document::<MatrixReport>::parse(&text_in).with_context(load_err)?;
            figures::draw_matrix(&result, &stem)?
        }
        ProfileReport::NAME => {
            let report = Document::<ProfileReport>::parse(&text_in).with_context(load_err)?;
            report
                .check_saved_size()
                .map_err(|why| anyhow!("{}: {why}", path.display()))?;
            figures::draw_profile(&report, &stem)?
        }
        "" => bail!(
            "{} has no \"schema\" field; numalab plot reads files written by numalab run/sweep/matrix/profile --json",
            path.display()
        ),
        other => bail!(
            "{}: schema {other:?} has no figure; numalab plot draws {SWEEP_SCHEMA}, {RUN_SCHEMA}, {} and {}",
            path.display(),
            MatrixReport::NAME,
            ProfileReport::NAME
        ),
    };
    eprintln!("{}", text::wrote(&paths));
    Ok(())
}

/// What a result file says it is: its `schema` when that is a string and
/// its `schema_version` when that is a whole number, as `numalab plot`
/// dispatches on them. Everything else in the file — other fields, and
/// these two when they are anything else — is read past without being
/// kept, so a file of any shape costs no memory here; a file that is not
/// JSON is still an error.
#[derive(Debug, Default, PartialEq)]
struct Envelope {
    schema: Option<String>,
    schema_version: Option<u64>,
}

/// A value of the envelope, read only when it is a string or a whole
/// number.
enum Scalar {
    Text(String),
    Count(u64),
    Other,
}

impl<'de> Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Envelope;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON document")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope, A::Error> {
                #[derive(serde::Deserialize)]
                #[serde(field_identifier, rename_all = "snake_case")]
                enum Key {
                    Schema,
                    SchemaVersion,
                    #[serde(other)]
                    Other,
                }
                // As a JSON tree would have it, the last of a repeated
                // key counts.
                let mut envelope = Envelope::default();
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Schema => {
                            envelope.schema = match map.next_value()? {
                                Scalar::Text(text) => Some(text),
                                _ => None,
                            }
                        }
                        Key::SchemaVersion => {
                            envelope.schema_version = match map.next_value()? {
                                Scalar::Count(n) => Some(n),
                                _ => None,
                            }
                        }
                        Key::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(envelope)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Envelope, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Envelope::default())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Envelope, E> {
                Ok(Envelope::default())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Envelope, E> {
                Ok(Envelope::default())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Envelope, E> {
                Ok(Envelope::default())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Envelope, E> {
                Ok(Envelope::default())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Envelope, E> {
                Ok(Envelope::default())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Envelope, E> {
                Ok(Envelope::default())
            }
        }
        deserializer.deserialize_any(Fields)
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Value;
        impl<'de> Visitor<'de> for Value {
            type Value = Scalar;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(text.to_owned()))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Scalar, E> {
                Ok(Scalar::Count(n))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
        }
        deserializer.deserialize_any(Value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(text: &str) -> Envelope {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn the_envelope_is_read_whatever_surrounds_it() {
        let sweep = Envelope {
            schema: Some(SWEEP_SCHEMA.into()),
            schema_version: Some(1),
        };
        assert_eq!(
            envelope(r#"{"x": [0, {"a": [1]}], "schema": "numalab.sweep", "schema_version": 1}"#),
            sweep
        );
        // Anything but a string or a whole number is as good as missing.
        for text in [
            "{}",
            "[1, 2]",
            "7",
            "null",
            r#"{"schema": 5, "schema_version": -1}"#,
            r#"{"schema": ["numalab.sweep"], "schema_version": [1]}"#,
            r#"{"schema": {"a": 1}, "schema_version": 1.0}"#,
        ] {
            assert_eq!(envelope(text), Envelope::default(), "{text}");
        }
        // Not JSON is still an error.
        for text in [
            "",
            "{",
            r#"{"schema": "numalab.sweep", "x": [0,]}"#,
            "{} {}",
        ] {
            assert!(serde_json::from_str::<Envelope>(text).is_err(), "{text}");
        }
    }
}
