//! The guest's root file system: busybox, the numalab binaries, every
//! shared library they load, and an `/init` script, in an uncompressed
//! `newc` cpio archive (what the kernel unpacks into its rootfs; leaving it
//! uncompressed spares the emulated CPU a decompression).
//!
//! Archives are cached by the hash of everything in them, so booting the
//! same binaries again reuses the archive.

use std::collections::BTreeMap;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// What `/init` does: mount the kernel's file systems, run the checks,
/// optionally open a shell, power off. The preset, the checks to run and
/// whether to open a shell come from the kernel command line
/// (`numalab.preset=`, `numalab.checks=`, `numalab.shell=1`).
pub const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
cd /tmp
/bin/numalab-guest --results /dev/ttyS1
case " $(cat /proc/cmdline) " in
*" numalab.shell=1 "*)
    echo "numalab-emu: a shell on the emulated machine; numalab is /bin/numalab; exit to power off"
    setsid cttyhack sh -l
    ;;
esac
poweroff -f
"#;

/// One file of the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Dir,
    File { data: Vec<u8>, mode: u32 },
    CharDevice { major: u32, minor: u32 },
}

/// An archive being put together: guest paths to contents.
#[derive(Debug, Default, Clone)]
pub struct Initramfs {
    entries: BTreeMap<String, Entry>,
}

impl Initramfs {
    /// An archive with the directories every guest needs and the console
    /// device the kernel opens before `/init` runs.
    pub fn new() -> Initramfs {
        let mut fs = Initramfs::default();
        for dir in ["bin", "dev", "proc", "sys", "tmp", "root", "etc"] {
            fs.entries.insert(dir.into(), Entry::Dir);
        }
        fs.entries.insert(
            "dev/console".into(),
            Entry::CharDevice { major: 5, minor: 1 },
        );
        fs
    }

    /// Adds a file with the given contents at `guest_path` (absolute).
    pub fn add_bytes(&mut self, guest_path: &str, data: Vec<u8>, mode: u32) {
        let path = guest_path.trim_start_matches('/').to_owned();
        let mut parent = Path::new(&path).parent();
        while let Some(dir) = parent.filter(|d| !d.as_os_str().is_empty()) {
            self.entries
                .insert(dir.to_string_lossy().into_owned(), Entry::Dir);
            parent = dir.parent();
        }
        self.entries.insert(path, Entry::File { data, mode });
    }

    /// Adds a host file (following symbolic links) at `guest_path`.
    pub fn add_file(&mut self, guest_path: &str, host_path: &Path) -> Result<()> {
        let data =
            fs::read(host_path).with_context(|| format!("reading {}", host_path.display()))?;
        self.add_bytes(guest_path, data, 0o755);
        Ok(())
    }

    /// Adds an executable at `guest_path` and every shared library `ldd`
    /// lists for it, each at its host path (the dynamic loader included).
    pub fn add_executable(&mut self, guest_path: &str, host_path: &Path) -> Result<()> {
        self.add_file(guest_path, host_path)?;
        for library in shared_libraries(host_path)? {
            let guest = library.to_string_lossy().into_owned();
            if !self.entries.contains_key(guest.trim_start_matches('/')) {
                self.add_file(&guest, &library)?;
            }
        }
        Ok(())
    }

    /// Whether the archive holds no file (only directories and the
    /// console).
    pub fn is_empty(&self) -> bool {
        !self
            .entries
            .values()
            .any(|e| matches!(e, Entry::File { .. }))
    }

    /// Adds every entry of `other` (its files replacing ones at the same
    /// path).
    pub fn merge(&mut self, other: &Initramfs) {
        for (path, entry) in &other.entries {
            self.entries.insert(path.clone(), entry.clone());
        }
    }

    /// A hash of everything in the archive, for caching.
    pub fn content_hash(&self) -> u64 {
        let mut hasher = std::hash::DefaultHasher::new();
        for (path, entry) in &self.entries {
            path.hash(&mut hasher);
            match entry {
                Entry::Dir => 0u8.hash(&mut hasher),
                Entry::File { data, mode } => {
                    1u8.hash(&mut hasher);
                    mode.hash(&mut hasher);
                    data.hash(&mut hasher);
                }
                Entry::CharDevice { major, minor } => {
                    2u8.hash(&mut hasher);
                    (major, minor).hash(&mut hasher);
                }
            }
        }
        hasher.finish()
    }

    /// The archive in `newc` format.
    pub fn write_cpio(&self, out: &mut impl Write) -> io::Result<()> {
        for (ino, (path, entry)) in (1..).zip(&self.entries) {
            let (mode, data, rdev): (u32, &[u8], (u32, u32)) = match entry {
                Entry::Dir => (0o040_755, &[], (0, 0)),
                Entry::File { data, mode } => (0o100_000 | mode, data, (0, 0)),
                Entry::CharDevice { major, minor } => (0o020_600, &[], (*major, *minor)),
            };
            write_entry(out, path, ino, mode, data, rdev)?;
        }
        write_entry(out, "TRAILER!!!", 0, 0, &[], (0, 0))
    }

    /// Writes the archive into `dir` as `initramfs-KIND-HASH.cpio`, unless
    /// that file is already there, and removes older archives of the same
    /// kind (one kernel's archive never evicts another's). Returns its path.
    pub fn write_cached(&self, dir: &Path, kind: &str) -> Result<PathBuf> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let prefix = format!("initramfs-{kind}-");
        let name = format!("{prefix}{:016x}.cpio", self.content_hash());
        let path = dir.join(&name);
        if path.is_file() {
            return Ok(path);
        }
        let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
        let result = (|| -> io::Result<()> {
            let mut file = io::BufWriter::new(fs::File::create(&tmp)?);
            self.write_cpio(&mut file)?;
            file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            fs::rename(&tmp, &path)
        })();
        if let Err(err) = result {
            let _ = fs::remove_file(&tmp);
            return Err(err).with_context(|| format!("writing {}", path.display()));
        }
        for old in fs::read_dir(dir)?.flatten() {
            let old_name = old.file_name().to_string_lossy().into_owned();
            let same_kind = old_name
                .strip_prefix(&prefix)
                .is_some_and(|rest| !rest.contains('-'));
            if same_kind && old_name != name {
                let _ = fs::remove_file(old.path());
            }
        }
        Ok(path)
    }
}

fn write_entry(
    out: &mut impl Write,
    name: &str,
    ino: u32,
    mode: u32,
    data: &[u8],
    (rdev_major, rdev_minor): (u32, u32),
) -> io::Result<()> {
    let name_size = name.len() + 1;
    let fields = [
        ino,
        mode,
        0, // uid
        0, // gid
        if mode & 0o170_000 == 0o040_000 { 2 } else { 1 },
        0, // mtime: fixed, so archives are reproducible
        data.len() as u32,
        0,
        0,
        rdev_major,
        rdev_minor,
        name_size as u32,
        0, // check
    ];
    let mut header = String::from("070701");
    for field in fields {
        header.push_str(&format!("{field:08x}"));
    }
    out.write_all(header.as_bytes())?;
    out.write_all(name.as_bytes())?;
    out.write_all(&[0])?;
    pad(out, header.len() + name_size)?;
    out.write_all(data)?;
    pad(out, data.len())
}

fn pad(out: &mut impl Write, written: usize) -> io::Result<()> {
    let padding = (4 - written % 4) % 4;
    out.write_all(&[0; 3][..padding])
}

/// The shared libraries `ldd` lists for `binary` (none for a static one).
pub fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let output = Command::new("ldd")
        .arg(binary)
        .output()
        .context("running ldd (from the libc-bin package)")?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let err = String::from_utf8_lossy(&output.stderr);
        if text.contains("not a dynamic executable") || err.contains("not a dynamic executable") {
            return Ok(Vec::new());
        }
        bail!("ldd {} failed: {err}", binary.display());
    }
    Ok(parse_ldd(&text))
}

/// The absolute paths in `ldd`'s output.
fn parse_ldd(text: &str) -> Vec<PathBuf> {
    let mut libraries: Vec<PathBuf> = text
        .split_whitespace()
        .filter(|word| word.starts_with('/'))
        .map(PathBuf::from)
        .collect();
    libraries.sort();
    libraries.dedup();
    libraries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ldd_output() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibhwloc.so.15 => /lib/x86_64-linux-gnu/libhwloc.so.15 (0x00007f5c)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f5b)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f5c)\n";
        let libs = parse_ldd(text);
        assert_eq!(
            libs,
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib/x86_64-linux-gnu/libhwloc.so.15"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
    }

    #[test]
    fn cpio_entries_are_aligned_and_terminated() {
        let mut fs = Initramfs::new();
        fs.add_bytes("/init", INIT.as_bytes().to_vec(), 0o755);
        fs.add_bytes("/lib/x86_64-linux-gnu/libx.so", vec![1, 2, 3], 0o644);
        let mut cpio = Vec::new();
        fs.write_cpio(&mut cpio).unwrap();
        assert_eq!(cpio.len() % 4, 0);
        assert!(cpio.starts_with(b"070701"));
        let text = String::from_utf8_lossy(&cpio);
        assert!(
            text.contains("lib/x86_64-linux-gnu\0"),
            "parent directories are added"
        );
        assert!(text.contains("dev/console\0"));
        assert!(text.ends_with("TRAILER!!!\0\0\0\0") || text.contains("TRAILER!!!\0"));
        // Every header starts on a 4-byte boundary.
        let mut offset = 0;
        let mut names = Vec::new();
        while offset < cpio.len() {
            let header = std::str::from_utf8(&cpio[offset..offset + 110]).unwrap();
            assert!(header.starts_with("070701"), "at {offset}: {header}");
            let field = |i: usize| {
                u32::from_str_radix(&header[6 + 8 * i..14 + 8 * i], 16).unwrap() as usize
            };
            let (size, name_size) = (field(6), field(11));
            let name = std::str::from_utf8(&cpio[offset + 110..offset + 110 + name_size - 1])
                .unwrap()
                .to_owned();
            offset += (110 + name_size).next_multiple_of(4) + size.next_multiple_of(4);
            if name == "TRAILER!!!" {
                assert_eq!(offset, cpio.len());
            }
            names.push(name);
        }
        assert_eq!(names.last().map(String::as_str), Some("TRAILER!!!"));
        assert!(names.contains(&"init".to_string()));
    }

    #[test]
    fn cache_is_keyed_by_content() {
        let dir = std::env::temp_dir().join(format!("numalab-emu-cpio-{}", std::process::id()));
        let mut fs = Initramfs::new();
        fs.add_bytes("/init", b"one".to_vec(), 0o755);
        let first = fs.write_cached(&dir, "6.1").unwrap();
        assert_eq!(
            fs.write_cached(&dir, "6.1").unwrap(),
            first,
            "same content, same file"
        );
        let other_kernel = fs.write_cached(&dir, "6.12").unwrap();
        fs.add_bytes("/init", b"two".to_vec(), 0o755);
        let second = fs.write_cached(&dir, "6.1").unwrap();
        assert_ne!(first, second);
        assert!(!first.exists(), "the older archive is removed");
        assert!(other_kernel.exists(), "another kernel's archive is kept");
        let names: Vec<_> = fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(names.len(), 2, "no temporary left behind");
        fs::remove_dir_all(&dir).unwrap();
    }
}
