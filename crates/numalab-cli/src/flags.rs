//! An engine's error, its settings spelt as the command's flags. Engines
//! name a setting by its config field (`«block_size»`, see
//! [`Message`]); each command keeps the table from those names to its
//! flags, and only here do the two meet.

use std::error::Error;
use std::fmt;

use numalab_bench::message::Message;

/// A command's flags by the engine's setting names: `("block_size",
/// "--block-size")`.
pub type Flags = [(&'static str, &'static str)];

/// `message` with every setting spelt as its flag in `flags` (its own
/// name where the table has none).
pub fn spell(message: &Message, flags: &Flags) -> String {
    message.spelt(|name| {
        flags
            .iter()
            .find(|(setting, _)| *setting == name)
            .map(|(_, flag)| *flag)
    })
}

/// `err` as the command shows it: `message` (the error's own, with
/// settings) spelt with `flags`, followed by the causes `err` had. An
/// error without settings is shown as it is.
pub fn with_flags<E>(err: E, message: Option<Message>, flags: &Flags) -> anyhow::Error
where
    E: Error + Send + Sync + 'static,
{
    match message {
        Some(message) => anyhow::Error::new(Spelt {
            text: spell(&message, flags),
            error: err,
        }),
        None => anyhow::Error::new(err),
    }
}

/// An error shown with the command's spelling, keeping its causes.
#[derive(Debug)]
struct Spelt<E> {
    text: String,
    error: E,
}

impl<E> fmt::Display for Spelt<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<E: Error + 'static> Error for Spelt<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.error.source()
    }
}

/// The setting names `message` uses that `flags` cannot spell (for a
/// command's tests: every name an engine uses has its flag).
#[cfg(test)]
pub fn unspelt<'a>(message: &'a Message, flags: &Flags) -> Vec<&'a str> {
    message
        .settings()
        .filter(|name| !flags.iter().any(|(setting, _)| setting == name))
        .collect()
}

/// The long flags of a command's arguments, `--name` each.
#[cfg(test)]
pub fn longs_of<A: clap::Args>() -> Vec<String> {
    A::augment_args(clap::Command::new("test"))
        .get_arguments()
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Plain(std::io::Error);

    impl fmt::Display for Plain {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("plain")
        }
    }

    impl Error for Plain {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn settings_are_spelt_and_causes_kept() {
        const FLAGS: &Flags = &[("block_size", "--block-size")];
        let message = Message::new("«block_size»=3 «blocks»=2");
        assert_eq!(spell(&message, FLAGS), "--block-size=3 blocks=2");
        assert_eq!(unspelt(&message, FLAGS), ["blocks"]);
        let cause = std::io::Error::other("no room");
        let err = with_flags(Plain(cause), Some(message), FLAGS);
        let chain: Vec<String> = err.chain().map(|c| c.to_string()).collect();
        assert_eq!(chain, ["--block-size=3 blocks=2", "no room"]);
        let err = with_flags(Plain(std::io::Error::other("x")), None, FLAGS);
        assert_eq!(err.to_string(), "plain");
    }
}
