//! Every parser numalab-bench offers a user's text to, given any text:
//! it reads or it refuses, and never panics (the coverage-guided fuzz
//! targets in fuzz/ go further; docs/testing.md, "Fuzzing").

use numalab_bench::document::Document;
use numalab_bench::experiment::config::settable_keys;
use numalab_bench::experiment::{Experiment, RunReport, SweepReport};
use numalab_bench::matrix::MatrixReport;
use proptest::prelude::*;

/// Values as people type them after `--set KEY=`: numbers of every
/// magnitude, with and without units, words, TOML of other types.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|x| x.to_string()),
        (
            "[0-9]{1,25}(\\.[0-9]{0,4})?",
            "|s|ms|us|ns|m|h|K|M|G|T|KiB|MiB|GiB|B|x"
        )
            .prop_map(|(n, unit)| format!("{n}{unit}")),
        "[a-z:0-9,=!-]{0,16}",
        Just("[1, 2]".to_owned()),
        Just("{a = 1}".to_owned()),
        Just("\"\"".to_owned()),
        any::<String>(),
        proptest::sample::select(vec![
            "0",
            "-1",
            "4294967295",
            "4294967296",
            "18446744073709551615",
            "18446744073709551616",
            "1e308",
            "nan",
            "inf",
            "-inf",
            "99999999999999999999s",
            "1e300s",
            "18446744073709551615T",
        ])
        .prop_map(str::to_owned),
    ]
}

proptest! {
    /// Any text as an experiment file.
    #[test]
    fn any_text_is_an_experiment_or_refused(text in any::<String>()) {
        if let Err(err) = Experiment::from_toml_str(&text, "x.toml") {
            prop_assert!(!err.to_string().is_empty());
        }
    }

    /// Any value, set with `--set` on every key.
    #[test]
    fn any_value_of_any_key_is_set_or_refused(value in value()) {
        let exp = Experiment::from_toml_str("", "x.toml").unwrap();
        for key in settable_keys() {
            let _ = exp.with_overrides(&[format!("{key}={value}")]);
        }
    }

    /// Any text as a result file `numalab plot` reads.
    #[test]
    fn any_text_is_a_result_or_refused(text in any::<String>()) {
        let _ = Document::<MatrixReport>::parse(&text);
        let _ = serde_json::from_str::<RunReport>(&text);
        let _ = serde_json::from_str::<SweepReport>(&text);
    }
}
