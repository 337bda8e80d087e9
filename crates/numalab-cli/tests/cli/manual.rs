//! The manual pages and the shell completions, generated from the same
//! clap definitions as `--help`: one page per command `--help` lists,
//! each rendered by man(1) without a warning, and bash completing
//! commands, flags and this machine's node numbers.

use crate::common::*;
use std::process::Command;

/// The commands `--help` lists under "Commands:", `help` left out.
fn listed_commands(args: &[&str]) -> Vec<String> {
    let help = stdout(&numalab(args));
    let Some((_, after)) = help.split_once("Commands:\n") else {
        return Vec::new();
    };
    after
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// Whether `tool` runs here; under CI=true a missing tool fails the test.
fn have(tool: &str, args: &[&str]) -> bool {
    let found = Command::new(tool).args(args).output().is_ok();
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{tool} is missing (scripts/setup.sh --test installs it)"
        );
        eprintln!("skipped: {tool} is missing (scripts/setup.sh --test installs it)");
    }
    found
}

#[test]
fn a_manual_page_for_every_command_that_man_renders_cleanly() {
    let dir = Scratch::new("manpages");
    let out = numalab(&["manpages", dir.0.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut expected = vec!["numalab.1".to_owned()];
    for command in listed_commands(&["--help"]) {
        expected.push(format!("numalab-{command}.1"));
        for sub in listed_commands(&[&command, "--help"]) {
            expected.push(format!("numalab-{command}-{sub}.1"));
        }
    }
    expected.sort();
    assert_eq!(dir.files(), expected);
    if !have("man", &["--version"]) {
        return;
    }
    for page in &expected {
        let path = dir.path(page);
        let rendered = Command::new("man")
            .args(["--warnings", "-l", &path])
            .env("MANWIDTH", "80")
            .output()
            .unwrap();
        // Bold and underline come as overstrikes (`N\bN`): keep the last.
        let mut text = String::new();
        for c in String::from_utf8_lossy(&rendered.stdout).chars() {
            if c == '\u{8}' {
                text.pop();
            } else {
                text.push(c);
            }
        }
        let warnings = String::from_utf8_lossy(&rendered.stderr);
        assert!(
            rendered.status.success() && warnings.trim().is_empty(),
            "{page}: {warnings}"
        );
        for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "SEE ALSO"] {
            assert!(
                text.contains(&format!("\n{section}\n")),
                "{page} lacks {section}:\n{text}"
            );
        }
    }
    // The exit statuses follow docs/exit-status.md: exec's own are 125-127.
    let exec = std::fs::read_to_string(dir.path("numalab-exec.1")).unwrap();
    assert!(exec.contains("125") && exec.contains("127"), "{exec}");
}

/// What bash completes for `words` (the last one being typed), through
/// the script `numalab completions bash` prints.
fn bash_completes(script: &str, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source '{script}'\nCOMP_WORDS=({words})\nCOMP_CWORD={cword}\nCOMP_LINE='{line}'\nCOMP_POINT=${{#COMP_LINE}}\n_numalab numalab '{current}' '{previous}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        words = quoted.join(" "),
        cword = words.len() - 1,
        line = words.join(" "),
        current = words[words.len() - 1],
        previous = words[words.len() - 2],
    );
    let out = Command::new("bash")
        .args(["--noprofile", "--norc", "-c", &program])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).lines().map(str::to_owned).collect()
}

#[test]
fn bash_completes_commands_and_flags() {
    let dir = Scratch::new("completions");
    for shell in ["bash", "zsh", "fish"] {
        let out = numalab(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        assert!(stdout(&out).contains("membind"), "{shell}");
        std::fs::write(dir.path(shell), &out.stdout).unwrap();
    }
    let script = dir.path("bash");
    assert_eq!(bash_completes(&script, &["numalab", "ex"]), ["exec"]);
    assert_eq!(
        bash_completes(&script, &["numalab", "exec", "--mem"]),
        ["--membind"]
    );
    // Node numbers come from this machine's /sys; `all` where a set of
    // nodes is taken, not where one node is.
    let nodes: Vec<String> = sysfs_nodes().iter().map(u32::to_string).collect();
    let mut sets = nodes.clone();
    sets.push("all".into());
    assert_eq!(
        bash_completes(&script, &["numalab", "exec", "--membind", ""]),
        sets
    );
    assert_eq!(
        bash_completes(&script, &["numalab", "matrix", "--mem-nodes", ""]),
        sets
    );
    assert_eq!(
        bash_completes(&script, &["numalab", "exec", "--preferred", ""]),
        nodes
    );
    assert_eq!(
        bash_completes(&script, &["numalab", "ring", "--memory-node", ""]),
        nodes
    );
    let commands = bash_completes(&script, &["numalab", ""]);
    for command in listed_commands(&["--help"]) {
        assert!(commands.contains(&command), "{command} not in {commands:?}");
    }
    // A shell numalab does not know is a usage error.
    assert_eq!(numalab(&["completions", "tcsh"]).status.code(), Some(2));
}
