//! The experiment file's tests: keys, sweeps, errors and loading.

use super::error::*;
use super::*;

fn parse(text: &str) -> Result<Experiment, ConfigError> {
    Experiment::from_toml_str(text, "exp.toml")
}

#[test]
fn design_example_parses() {
    let exp = parse(include_str!("../../../../../examples/deck-exp1-cell.toml")).unwrap();
    assert_eq!(exp.name, "deck-exp1-cell");
    assert_eq!(exp.threads.count, 12);
    assert_eq!(exp.memory.size, ByteSize(150 << 20));
    assert_eq!(exp.memory.sharing, Sharing::PerNode);
    assert_eq!(exp.memory.huge_pages, numalab::HugePages::Transparent);
    assert_eq!(exp.access.op_size, ByteSize(128));
    assert_eq!(
        exp.access.mix(),
        Mix {
            reads: 2,
            writes: 1
        }
    );
    assert_eq!(exp.access.total_ops(), Some(100_000_000));
    assert_eq!(exp.run.repeats, 5);
    let keys: Vec<&str> = exp.sweep.axes.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["threads.count", "memory.policy"], "file order kept");
    assert_eq!(exp.sweep.cells(), 18);
}

#[test]
fn defaults_fill_everything_but_the_name() {
    let exp = parse("").unwrap();
    assert_eq!(exp.name, "experiment");
    assert_eq!(exp.threads, Threads::default());
    assert_eq!(exp.memory, Memory::default());
    assert_eq!(exp.access, Access::default());
    assert_eq!(exp.run, RunSettings::default());
    assert_eq!(exp.access.total_ops(), Some(DEFAULT_OPS));
}

#[test]
fn unknown_key_names_line_column_and_nearest() {
    let err = parse("name = \"x\"\n\n[memory]\nsise = \"1GiB\"\n").unwrap_err();
    let loc = err.location.clone().unwrap();
    assert_eq!(
        (loc.file.as_str(), loc.line, loc.column),
        ("exp.toml", 4, 1)
    );
    assert_eq!(err.message, "unknown key `sise` in [memory]");
    assert_eq!(err.hint.as_deref(), Some("did you mean `size`?"));
    let text = err.to_string();
    assert!(
        text.starts_with("exp.toml:4:1: unknown key `sise` in [memory]; did you mean `size`?"),
        "{text}"
    );
    assert!(text.contains("4 | sise = \"1GiB\"\n  | ^^^^"), "{text}");
}

#[test]
fn key_in_the_wrong_section_says_where_it_belongs() {
    let err = parse("[memory]\nop_size = 64\n").unwrap_err();
    assert_eq!(err.hint.as_deref(), Some("`op_size` belongs in [access]"));
    let err = parse("[acess]\nop_size = 64\n").unwrap_err();
    assert_eq!(err.message, "unknown key `acess` at the top level");
    assert_eq!(err.hint.as_deref(), Some("did you mean `access`?"));
}

#[test]
fn wrong_types_and_values_are_located() {
    let err = parse("[threads]\ncount = \"twelve\"\n").unwrap_err();
    assert_eq!(err.location.as_ref().unwrap().line, 2);
    assert!(err.message.contains("expected u32"), "{}", err.message);

    let err = parse("[memory]\npolicy = \"near\"\n").unwrap_err();
    let loc = err.location.as_ref().unwrap();
    assert_eq!((loc.line, loc.column), (2, 10));
    assert!(
        err.message.contains("unknown memory policy \"near\""),
        "{}",
        err.message
    );

    let err = parse("[memory]\nsize = \"12 parsecs\"\n").unwrap_err();
    assert!(err.message.contains("invalid size"), "{}", err.message);

    let exp = parse("[memory]\npolicy = \"replicate\"\nreplication = \"log\"\n").unwrap();
    assert_eq!(exp.memory.policy, PolicySpec::Replicate(None));
    assert_eq!(exp.memory.replication, Replication::Log);
    let err = parse("[memory]\nreplication = \"gossip\"\n").unwrap_err();
    assert_eq!(err.location.as_ref().unwrap().line, 2);
    assert!(
        err.message.contains("copies") && err.message.contains("log"),
        "{}",
        err.message
    );
}

#[test]
fn impossible_values_are_refused() {
    let err = parse("[access]\nop_size = 100\n").unwrap_err();
    assert!(
        err.message.starts_with("access.op_size: 100 bytes"),
        "{err}"
    );
    assert_eq!(err.location.as_ref().map(|l| l.line), Some(2), "{err}");
    let err = parse("[access]\nops = 10\nduration = \"1s\"\n").unwrap_err();
    assert!(err.message.contains("not both"), "{err}");
    let err = parse("[access]\npattern = \"copy\"\nread_write = \"2:1\"\n").unwrap_err();
    assert!(err.message.contains("1:1"), "{err}");
    assert!(parse("[threads]\ncount = 0\n").is_err());
    assert!(parse("[run]\nrepeats = 0\n").is_err());
    assert!(parse("[memory]\nsize = \"1KiB\"\n[access]\nop_size = \"4KiB\"\n").is_err());
}

#[test]
fn overrides_are_type_checked() {
    let exp = parse("[threads]\ncount = 2\n").unwrap();
    let set =
        |sets: &[&str]| exp.with_overrides(&sets.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let over = set(&[
        "threads.count=8",
        "access.op_size=128",
        "memory.policy=interleave:0",
    ])
    .unwrap();
    assert_eq!(over.threads.count, 8);
    assert_eq!(over.access.op_size, ByteSize(128));
    assert_eq!(
        over.memory.policy,
        PolicySpec::Kernel("interleave:0".into())
    );
    let over = set(&["memory.size=1GiB", "access.ops=1_000", "run.counters=false"]).unwrap();
    assert_eq!(over.memory.size, ByteSize(1 << 30));
    assert_eq!(over.access.ops, Some(1000));
    assert!(!over.run.counters);

    let err = set(&["threads.cont=8"]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "--set threads.cont=8: unknown key `threads.cont`; did you mean `threads.count`?"
    );
    let err = set(&["threads.count=eight"]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("--set threads.count=eight: threads.count = \"eight\": invalid type"),
        "{err}"
    );
    let err = set(&["threads.count"]).unwrap_err();
    assert!(err.to_string().contains("KEY=VALUE"), "{err}");
    let err = set(&["access.op_size=12"]).unwrap_err();
    assert!(err.to_string().contains("8-byte words"), "{err}");
}

#[test]
fn sweep_cells_cover_the_grid_in_order() {
    let exp = parse(
        "[sweep]\n\"threads.count\" = [1, 2]\n\"memory.policy\" = [\"local\", \"remote\", \"interleave\"]\n",
    )
    .unwrap();
    let cells = exp.cells().unwrap();
    assert_eq!(cells.len(), 6);
    let names: Vec<(u32, String)> = cells
        .iter()
        .map(|(_, e)| (e.threads.count, e.memory.policy.to_string()))
        .collect();
    assert_eq!(names[0], (1, "local".into()));
    assert_eq!(names[2], (1, "interleave".into()));
    assert_eq!(names[3], (2, "local".into()));
    assert!(cells.iter().all(|(_, e)| e.sweep.is_empty()));
    // A key set on the command line is no longer swept.
    let fixed = exp.with_overrides(&["threads.count=4".into()]).unwrap();
    assert_eq!(fixed.cells().unwrap().len(), 3);
}

#[test]
fn sweep_errors_point_at_the_axis() {
    let err = parse("[sweep]\n\"threads.cuont\" = [1, 2]\n").unwrap_err();
    assert_eq!(err.location.as_ref().unwrap().line, 2);
    assert_eq!(err.hint.as_deref(), Some("did you mean \"threads.count\"?"));
    let err = parse("\n[sweep]\n\"memory.policy\" = [\"local\", \"nowhere\"]\n").unwrap_err();
    assert_eq!(err.location.as_ref().unwrap().line, 3);
    assert!(err.message.contains("\"nowhere\""), "{err}");
    let err = parse("[sweep]\n\"threads.count\" = 4\n").unwrap_err();
    assert!(err.message.contains("must be a list"), "{err}");
    assert!(parse("[sweep]\n\"threads.count\" = []\n").is_err());
}

#[test]
fn more_repeats_while_undecided_cannot_be_swept_with_the_repeats() {
    let exp = parse("[run]\nrepeats = 5\nmax_repeats = 20\n[sweep]\n\"run.repeats\" = [5, 10]\n")
        .unwrap();
    let err = exp.cells().unwrap_err();
    assert!(
        err.message
            .contains("run.repeats and run.max_repeats cannot be swept with it"),
        "{err}"
    );
    // One look (no max_repeats): the repeats may be swept.
    let exp = parse("[run]\nrepeats = 5\n[sweep]\n\"run.repeats\" = [5, 10]\n").unwrap();
    assert_eq!(exp.cells().unwrap().len(), 2);
}

#[test]
fn counts_past_their_limits_are_refused_naming_key_value_and_limit() {
    for (text, message) in [
        (
            "[threads]\ncount = 2147483648\n",
            "threads.count = 2147483648 is more than 4096, the most threads numalab starts",
        ),
        (
            "[threads]\ncount = 100000\noversubscribe = true\n",
            "threads.count = 100000 is more than 4096",
        ),
        (
            "[run]\nrepeats = 4294967295\n",
            "run.repeats = 4294967295 is more than 1000, the most repeats numalab runs",
        ),
        (
            "[run]\nwarmup = 4294967295\n",
            "run.warmup = 4294967295 is more than 100",
        ),
        (
            "[run]\nmax_repeats = 4294967295\n",
            "run.max_repeats = 4294967295 is more than 1000, the most repeats numalab runs",
        ),
        (
            "[run]\nrepeats = 5\nmax_repeats = 3\n",
            "run.max_repeats: 3 is fewer than run.repeats (5)",
        ),
        (
            "[run]\nrepeats = 5\nmax_repeats = 12\n",
            "run.max_repeats: 12 is not a multiple of run.repeats (5): the sweep looks at its differences after every 5 rounds, so it may stop at 5, 10, 15",
        ),
        (
            "[run]\nrepeats = 2\nmax_repeats = 42\n",
            "run.max_repeats: 42 is 21 times run.repeats (2), more than 20 looks",
        ),
        (
            "[run]\nrepeats = 5\nmax_repeats = 10\norder = \"grouped\"\n",
            "run.max_repeats: more repeats when the differences are not yet told apart needs run.order = \"interleaved\"",
        ),
        (
            "[threads]\ncount = 100\n[run]\nrepeats = 10\nmax_repeats = 1000\n",
            "threads.count: 100 threads x (1 warm-up + 1000 repeats) make 100100 per-thread rows",
        ),
        (
            "[access]\nops = 100000000000000\n",
            "access.ops = 100000000000000 is more than 1000000000000, the most operations",
        ),
        (
            "[access]\nlock_stripes = 4294967295\n",
            "access.lock_stripes = 4294967295 is more than 65536",
        ),
        (
            "[threads]\ncount = 4096\noversubscribe = true\n[run]\nrepeats = 1000\n",
            "threads.count: 4096 threads x (1 warm-up + 1000 repeats) make 4100096 per-thread rows, more than 100000",
        ),
        (
            "[memory]\nsize = \"1TiB\"\n[access]\nops = 1000000000000\nop_size = \"4MiB\"\n",
            "access.ops: 1000000000000 operations of 4MiB move",
        ),
        (
            "[memory]\nsize = \"1MiB\"\n[access]\npattern = \"strided:16000000T\"\n",
            "access.pattern: strided:17592186044416000000 steps further than a region (1MiB)",
        ),
    ] {
        let err = parse(text).unwrap_err();
        assert!(err.message.starts_with(message), "{text}: {err}");
        let key = message.split([':', ' ']).next().unwrap();
        let line = err.location.as_ref().map(|l| l.text.clone()).unwrap_or_default();
        let field = key.rsplit('.').next().unwrap();
        assert!(line.starts_with(field), "{text}: pinned on {line:?}");
    }
    // The same through --set, before anything else happens.
    let exp = parse("[threads]\ncount = 2\n").unwrap();
    let err = exp
        .with_overrides(&["run.repeats=4294967295".into()])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "--set run.repeats=4294967295: run.repeats = 4294967295 is more than 1000, the most repeats numalab runs"
    );
    // At the limits, accepted.
    parse("[threads]\ncount = 4096\n[run]\nrepeats = 20\nwarmup = 1\n").unwrap();
    parse("[run]\nrepeats = 1000\nwarmup = 100\n[access]\nops = 1000000000000\nlock_stripes = 65536\n").unwrap();
}

#[test]
fn durations_past_a_day_are_refused_without_a_panic() {
    for text in ["99999999999999999999s", "1e20s", "25h", "86401s"] {
        let err = parse(&format!("[access]\nduration = \"{text}\"\n")).unwrap_err();
        assert_eq!(err.location.as_ref().unwrap().line, 2, "{text}: {err}");
        assert!(!err.message.is_empty());
    }
    let err = parse("[access]\nduration = \"99999999999999999999s\"\n").unwrap_err();
    assert!(
        err.message
            .contains("longer than 24h, the longest numalab runs"),
        "{err}"
    );
    let exp = parse("[access]\nduration = \"24h\"\n").unwrap();
    assert_eq!(
        exp.access.duration.unwrap().0,
        crate::experiment::values::MAX_DURATION
    );
    let err = exp
        .with_overrides(&["access.duration=1e300s".into()])
        .unwrap_err();
    assert!(err.to_string().contains("access.duration"), "{err}");
}

#[test]
fn a_sweep_grid_is_counted_before_any_cell_is_made() {
    // 4000 x 2000 cells used to be made (and cloned) before a check.
    let seeds: Vec<String> = (0..4000).map(|i| i.to_string()).collect();
    let ops: Vec<String> = (1..=2000).map(|i| i.to_string()).collect();
    let text = format!(
        "[sweep]\n\"access.seed\" = [{}]\n\"access.ops\" = [{}]\n",
        seeds.join(", "),
        ops.join(", ")
    );
    let err = parse(&text).unwrap_err();
    assert_eq!(
        err.message,
        "[sweep] has 4000 x 2000 = 8000000 cells, more than 10000, the most a sweep runs"
    );
    assert_eq!(err.location.as_ref().unwrap().line, 2);
    // A grid built by hand is counted by cells() too.
    let mut exp = parse("").unwrap();
    exp.sweep.axes = vec![
        (
            "access.seed".into(),
            (0..4000).map(toml::Value::Integer).collect(),
        ),
        (
            "access.ops".into(),
            (1..=2000).map(toml::Value::Integer).collect(),
        ),
    ];
    assert!(exp.cells().unwrap_err().message.contains("8000000 cells"));
    // And the rows the cells' results would hold, summed.
    let exp = parse(
        "[threads]\ncount = 4000\noversubscribe = true\n[run]\nrepeats = 20\n[sweep]\n\"access.seed\" = [1, 2]\n",
    )
    .unwrap();
    let err = exp.cells().unwrap_err();
    assert!(err.message.contains("168000 per-thread rows"), "{err}");
}

#[test]
fn sweep_errors_are_pinned_on_the_key_that_is_wrong() {
    // A comment naming the key came first: the error pointed at it.
    let err = parse(
        "# sweeps \"threads.count\"\n[sweep]\n\"memory.policy\" = [\"local\"]\n\"threads.count\" = [1, \"two\"]\n",
    )
    .unwrap_err();
    let at = err.location.as_ref().unwrap();
    assert_eq!((at.line, at.column), (4, 1), "{err}");
    // A value that is not a list: on its key, not on [sweep].
    let err =
        parse("[sweep]\n\"threads.count\" = [1]\n\"memory.policy\" = \"local\"\n").unwrap_err();
    assert_eq!(err.location.as_ref().unwrap().line, 3, "{err}");
    assert_eq!(
        err.message,
        "sweep \"memory.policy\" must be a list of values, as in \"memory.policy\" = [\"local\"]"
    );
    // A dotted key without quotes is a table `memory` to TOML.
    let err = parse("[sweep]\n\"threads.count\" = [1]\nmemory.policy = [\"local\"]\n").unwrap_err();
    assert_eq!(err.location.as_ref().unwrap().line, 3, "{err}");
    assert!(
        err.message
            .starts_with("sweep key memory.policy is not quoted"),
        "{err}"
    );
    assert!(err.message.contains("\"memory.policy\" = [...]"), "{err}");
    // A value out of its key's range, on that key's line.
    let err = parse("[sweep]\n\"memory.policy\" = [\"local\"]\n\"threads.count\" = [1, 0]\n")
        .unwrap_err();
    assert_eq!(err.location.as_ref().unwrap().line, 3, "{err}");
    assert_eq!(
        err.message,
        "sweep \"threads.count\" value 0: threads.count: must be at least 1"
    );
    // The axes keep the file's order, whatever a comment says first.
    let exp = parse(
        "# \"memory.policy\" then \"threads.count\"\n[sweep]\n\"threads.count\" = [1]\n\"memory.policy\" = [\"local\"]\n",
    )
    .unwrap();
    let keys: Vec<&str> = exp.sweep.axes.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["threads.count", "memory.policy"]);
}

#[test]
fn an_experiment_file_that_sets_no_key_is_refused() {
    let dir = std::env::temp_dir().join(format!("numalab-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for text in ["", "# nothing yet\n\n", "[threads]\n[memory]\n"] {
        let path = dir.join("empty.toml");
        std::fs::write(&path, text).unwrap();
        let err = Experiment::from_file(&path).unwrap_err();
        assert!(
            err.message
                .starts_with(&format!("{} sets no key", path.display())),
            "{text:?}: {err}"
        );
        assert!(err.message.contains("name = \"empty\""), "{err}");
    }
    let path = dir.join("named.toml");
    std::fs::write(&path, "name = \"defaults\"\n").unwrap();
    assert_eq!(Experiment::from_file(&path).unwrap().name, "defaults");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn docs_document_every_key() {
    let readme = include_str!("../../../../../docs/experiment-file.md");
    for key in KEYS {
        assert!(
            readme.contains(&format!("| `{}` |", key.path)),
            "docs/experiment-file.md lacks {}",
            key.path
        );
    }
}

#[test]
fn keys_table_matches_the_types() {
    // Every leaf of a fully written experiment is documented, and every
    // documented key can be set.
    let mut exp = Experiment::from_toml_str("", "x").unwrap();
    exp.access.read_write = Some("1:1".parse().unwrap());
    exp.access.ops = Some(1);
    exp.run.min_time = Some("50ms".parse().unwrap());
    exp.run.max_repeats = Some(10);
    let table = toml::Table::try_from(&exp).unwrap();
    let mut leaves = Vec::new();
    for (key, value) in &table {
        match value {
            toml::Value::Table(inner) => leaves.extend(inner.keys().map(|k| format!("{key}.{k}"))),
            _ => leaves.push(key.clone()),
        }
    }
    leaves.push("access.duration".into());
    leaves.push("description".into());
    leaves.sort();
    let mut documented: Vec<String> = settable_keys().map(str::to_owned).collect();
    documented.sort();
    assert_eq!(leaves, documented);
    for key in settable_keys() {
        let value = match key {
            "access.duration" => toml::Value::String("1s".into()),
            "run.min_time" => toml::Value::String("50ms".into()),
            _ => table
                .get(key.split('.').next().unwrap())
                .and_then(|t| match key.split_once('.') {
                    Some((_, f)) => t.get(f).cloned(),
                    None => Some(t.clone()),
                })
                .unwrap_or(toml::Value::String("x".into())),
        };
        let mut e = Experiment::from_toml_str("", "x").unwrap();
        e.set_value(key, value)
            .unwrap_or_else(|err| panic!("{key}: {err}"));
    }
}
