//! Messages that name settings, each spelt by whoever shows the message:
//! the engine says `«block_size» must be 1 byte to 1 GiB`, the `numalab`
//! command shows `--block-size must be …`, a program using the engine
//! sees `block_size must be …`. Flag names are the command's; the engine
//! never spells them.

use std::fmt;

/// A message whose settings are written `«name»` (the engine's name of
/// the setting, as its config field): [`Message::spelt`] gives each its
/// caller's spelling, `Display` the name itself.
///
/// ```
/// use numalab_bench::message::Message;
/// let said = Message::new("«replicate» cannot be combined with «mmap»");
/// assert_eq!(said.to_string(), "replicate cannot be combined with mmap");
/// let flag = |name: &str| match name {
///     "replicate" => Some("--replicate"),
///     "mmap" => Some("--mmap"),
///     _ => None,
/// };
/// assert_eq!(said.spelt(flag), "--replicate cannot be combined with --mmap");
/// assert_eq!(said.settings().collect::<Vec<_>>(), ["replicate", "mmap"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message(String);

impl Message {
    /// A message from its template.
    pub fn new(template: impl Into<String>) -> Message {
        Message(template.into())
    }

    /// The settings it names, in order.
    pub fn settings(&self) -> impl Iterator<Item = &str> {
        self.0
            .split('«')
            .skip(1)
            .filter_map(|part| part.split_once('»').map(|(name, _)| name))
    }

    /// The message with each setting spelt by `spell` (its name where
    /// `spell` has none).
    pub fn spelt<'a>(&'a self, spell: impl Fn(&str) -> Option<&'a str>) -> String {
        let mut out = String::with_capacity(self.0.len());
        let mut rest = self.0.as_str();
        while let Some((before, after)) = rest.split_once('«') {
            out.push_str(before);
            match after.split_once('»') {
                Some((name, tail)) => {
                    out.push_str(spell(name).unwrap_or(name));
                    rest = tail;
                }
                None => {
                    out.push('«');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.spelt(|_| None))
    }
}
