//! `numalab pagecache load` and `drop`: each file's page cache read onto
//! one node or dropped, counted per node before and after.

use std::fs::File;
use std::path::{Path, PathBuf};

use numalab::pagecache::{file_cache, open_for_cache, FileCache};
use numalab::system::NodeMemory;
use serde::{Deserialize, Serialize};

use crate::document::Schema;
use crate::fincore::{node_memory, FincoreError, Unreadable};

/// What `numalab pagecache load` or `drop` did to each file's cache
/// (`--json`).
///
/// ```
/// use numalab_bench::pagecache::{change, CacheAction};
/// let path = std::env::temp_dir().join(format!("numalab-change-doc-{}", std::process::id()));
/// std::fs::write(&path, vec![3u8; 64 << 10])?;
/// let report = change(&[path.clone()], CacheAction::Load { node: 0 });
/// std::fs::remove_file(&path)?;
/// let report = report?;
/// assert_eq!(report.files[0].after.cached, 16);
/// assert_eq!(report.files[0].after.per_node.get(&0), Some(&16));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheChangeReport {
    /// What was done.
    pub action: CacheAction,
    /// Each file, before and after.
    pub files: Vec<ChangedFile>,
    /// Each node's memory afterwards.
    pub nodes: Vec<NodeMemory>,
    /// Files that could not be changed, with why.
    pub failed: Vec<Unreadable>,
}

impl Schema for CacheChangeReport {
    const NAME: &'static str = "numalab.pagecache";
    const VERSION: u32 = 1;
}

/// `load` onto a node, or `drop`.
///
/// ```
/// use numalab_bench::pagecache::CacheAction;
/// assert_eq!(CacheAction::Load { node: 1 }.to_string(), "load onto node 1");
/// assert_eq!(CacheAction::Drop.to_string(), "drop");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum CacheAction {
    /// Read the files so that their pages are cached on `node`.
    Load {
        /// The node.
        node: u32,
    },
    /// Drop the files' clean pages from the cache.
    Drop,
}

impl std::fmt::Display for CacheAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheAction::Load { node } => write!(f, "load onto node {node}"),
            CacheAction::Drop => write!(f, "drop"),
        }
    }
}

/// One file's cache before and after ([`CacheChangeReport`]).
///
/// ```
/// use numalab_bench::pagecache::ChangedFile;
/// let file = ChangedFile {
///     path: "a".into(),
///     before: Default::default(),
///     after: Default::default(),
///     read_bytes: None,
///     unflushed_pages: Some(0),
///     in_memory: false,
/// };
/// assert_eq!(file.elsewhere(0), 0);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangedFile {
    /// The path.
    pub path: String,
    /// Its cache before.
    pub before: FileCache,
    /// Its cache after.
    pub after: FileCache,
    /// Bytes read (`load`).
    pub read_bytes: Option<u64>,
    /// Dirty and under-writeback pages after (`cachestat(2)`, Linux
    /// 6.5): pages `drop` cannot drop until they are written.
    pub unflushed_pages: Option<u64>,
    /// Whether it lives in memory (tmpfs, shared memory): its pages are
    /// the file itself and no drop evicts them.
    #[serde(default)]
    pub in_memory: bool,
}

impl ChangedFile {
    /// Pages cached after on nodes other than `node` (or of unknown
    /// node).
    pub fn elsewhere(&self, node: u32) -> u64 {
        self.after.off_node(node)
    }
}

/// Why `numalab pagecache load` cannot start.
///
/// ```
/// use numalab_bench::pagecache::{change, CacheAction, ChangeError};
/// let err = change(&["x".into()], CacheAction::Load { node: 1000 }).unwrap_err();
/// assert!(err.to_string().starts_with("node 1000 does not exist; this machine has node"), "{err}");
/// let err = change(&["x".into()], CacheAction::Load { node: 4096 }).unwrap_err();
/// assert_eq!(err.to_string(), "node 4096 is out of range: Linux numbers nodes from 0 to 1023");
/// ```
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The node does not exist, may not be used, or has no memory: said
    /// as every command says it.
    #[error(transparent)]
    Node(#[from] numalab::SpecError),
    /// A node's memory could not be read.
    #[error(transparent)]
    Fincore(#[from] FincoreError),
}

/// Loads (reads, preferring `node` for the pages it brings in) or drops
/// each file's page cache, counting its cached pages per node before and
/// after. A node without memory is refused before any file is touched;
/// a file that cannot be changed is kept in [`CacheChangeReport::failed`].
pub fn change(paths: &[PathBuf], action: CacheAction) -> Result<CacheChangeReport, ChangeError> {
    change_with(paths, action, false)
}

/// [`change`], a load dropping each file's cache first when
/// `drop_first` (so pages cached elsewhere move): only once the node and
/// the file are known to be fit for the load, so a refused load drops
/// nothing. "Before" is then after the drop.
///
/// ```
/// use numalab_bench::pagecache::{change_with, CacheAction};
/// let path = std::env::temp_dir().join(format!("numalab-reload-doc-{}", std::process::id()));
/// std::fs::write(&path, vec![3u8; 64 << 10])?;
/// // A node without memory: refused before anything is dropped.
/// assert!(change_with(&[path.clone()], CacheAction::Load { node: 4096 }, true).is_err());
/// let report = change_with(&[path.clone()], CacheAction::Load { node: 0 }, true)?;
/// std::fs::remove_file(&path)?;
/// assert_eq!(report.files[0].after.cached, 16);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn change_with(
    paths: &[PathBuf],
    action: CacheAction,
    drop_first: bool,
) -> Result<CacheChangeReport, ChangeError> {
    let inventory = numalab::NodeInventory::live();
    if let CacheAction::Load { node } = action {
        // A number past Linux's last node is refused, as every command
        // refuses it.
        let nodes = numalab::NodeSet::try_single(node).map_err(numalab::SpecError::from)?;
        inventory.check_memory_nodes(&nodes)?;
    }
    // Pages read past what the node holds push out the ones read before
    // (or land elsewhere): the files loaded together are bounded by the
    // node's memory, and a file that would take them past it (a sparse
    // one of exabytes among them) is refused before it is read.
    let mut room = match action {
        CacheAction::Load { node } => {
            let total = NodeMemory::read(node)
                .map_err(|source| FincoreError::Node { node, source })?
                .total_bytes;
            Some(Room {
                node: total,
                left: total,
            })
        }
        CacheAction::Drop => None,
    };
    let mut change = CacheChangeReport {
        action,
        files: Vec::new(),
        nodes: Vec::new(),
        failed: Vec::new(),
    };
    for path in paths {
        let result = open_for_cache(path, true)
            .map_err(|err| err.to_string())
            .and_then(|file| one_change(&file, path, action, room, drop_first));
        match result {
            Ok(changed) => {
                if let (Some(room), Some(read)) = (&mut room, changed.read_bytes) {
                    room.left = room.left.saturating_sub(read);
                }
                change.files.push(changed);
            }
            Err(error) => change.failed.push(Unreadable::new(path, error)),
        }
    }
    change.nodes = node_memory(&inventory.with_memory)?;
    Ok(change)
}

/// The node's memory, and what is left of it for the files still to be
/// loaded.
#[derive(Debug, Clone, Copy)]
struct Room {
    node: u64,
    left: u64,
}

impl Room {
    /// Why a file of `size` bytes cannot be loaded on `node` now, if it
    /// cannot.
    fn refuses(self, size: u64, node: u32) -> Option<String> {
        let format_size = numalab::units::format_size;
        if size > self.node {
            return Some(format!(
                "is {}, more than node {node}'s {} of memory: its cache cannot all be there (nothing read)",
                format_size(size),
                format_size(self.node)
            ));
        }
        (size > self.left).then(|| {
            // Sizes that round alike are told apart in bytes.
            let (size, left) = match (format_size(size), format_size(self.left)) {
                (a, b) if a == b => (format!("{size} bytes"), format!("{} bytes", self.left)),
                pair => pair,
            };
            format!(
                "is {size}, more than the {left} of node {node}'s {} of memory the files loaded before it leave: loaded together, their caches cannot all be there (nothing read; load it alone)",
                format_size(self.node)
            )
        })
    }
}

/// Changes one file's cache; a file to load larger than what is left of
/// `room` (the node's memory) is refused unread.
fn one_change(
    file: &File,
    path: &Path,
    action: CacheAction,
    room: Option<Room>,
    drop_first: bool,
) -> Result<ChangedFile, String> {
    let size = numalab::pagecache::file_size(file).map_err(|err| err.to_string())?;
    if let (CacheAction::Load { node }, Some(room)) = (action, room) {
        if let Some(why) = room.refuses(size, node) {
            return Err(why);
        }
    }
    let counted = |file| file_cache(file).map_err(|err| err.to_string());
    if drop_first && matches!(action, CacheAction::Load { .. }) {
        numalab::pagecache::drop_cache(file).map_err(|err| err.to_string())?;
    }
    let before = counted(file)?;
    let read_bytes = match action {
        CacheAction::Load { node } => {
            Some(numalab::pagecache::load_on(file, node).map_err(|err| err.to_string())?)
        }
        CacheAction::Drop => {
            numalab::pagecache::drop_cache(file).map_err(|err| err.to_string())?;
            None
        }
    };
    Ok(ChangedFile {
        path: path.display().to_string(),
        before,
        after: counted(file)?,
        read_bytes,
        unflushed_pages: numalab::pagecache::unflushed_pages(file),
        in_memory: numalab::pagecache::in_memory(file),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_loaded_together_are_bounded_by_the_nodes_memory() {
        let dir = std::env::temp_dir().join(format!("numalab-load-total-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let node = numalab::NodeInventory::live().with_memory.first().unwrap();
        let total = NodeMemory::read(node).unwrap().total_bytes;
        // A real 1 MiB file, then a sparse one that alone would fit the
        // node but not beside the first: refused, unread.
        let (first, second) = (dir.join("first"), dir.join("second"));
        std::fs::write(&first, vec![5u8; 1 << 20]).unwrap();
        let sparse = File::create(&second).unwrap();
        sparse.set_len(total - (512 << 10)).unwrap();
        let change = change(&[first, second], CacheAction::Load { node }).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(change.files.len(), 1, "{change:?}");
        assert_eq!(change.failed.len(), 1);
        assert!(
            change.failed[0]
                .error
                .contains("the files loaded before it leave"),
            "{:?}",
            change.failed[0]
        );
    }
}
