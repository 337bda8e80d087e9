//! Finding what the suite needs on the host, and booting one guest.

use std::env;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::preset::Preset;

/// The Debian packages that provide everything the suite needs.
pub(crate) const INSTALL: &str = "install with apt-get install qemu-system-x86 linux-image-amd64 \
     linux-image-6.12-amd64 busybox-static cpio";

/// A prerequisite the host lacks.
///
/// ```
/// use numalab_emu::qemu::Missing;
/// let missing = Missing { what: "busybox not found".into(), fix: "install with apt-get install busybox-static".into() };
/// assert_eq!(
///     format!("skipped: {missing}"),
///     "skipped: busybox not found, install with apt-get install busybox-static"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// What is missing or unusable.
    pub what: String,
    /// How to get it.
    pub fix: String,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}, {}", self.what, self.fix)
    }
}

/// A guest kernel image and the release it boots (`6.12.117+deb12-amd64`,
/// from its file name `vmlinuz-RELEASE`, which also names its modules'
/// directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    /// The image.
    pub path: PathBuf,
    /// The release, or the file name when it is not `vmlinuz-RELEASE`.
    pub release: String,
}

impl Kernel {
    /// The kernel at `path`.
    pub fn at(path: PathBuf) -> Kernel {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let release = name.strip_prefix("vmlinuz-").unwrap_or(&name).to_owned();
        Kernel { path, release }
    }

    /// `(major, minor)` of the release, `(0, 0)` when it has none.
    pub fn version(&self) -> (u64, u64) {
        let key = version_key(&self.release);
        (
            key.first().copied().unwrap_or(0),
            key.get(1).copied().unwrap_or(0),
        )
    }

    /// `6.12`: the series, as the suite's output names the kernel.
    pub fn series(&self) -> String {
        let (major, minor) = self.version();
        format!("{major}.{minor}")
    }
}

/// The kernel series the suite boots by default: one before Linux 6.9
/// (Debian bookworm's 6.1) and one from 6.9 on, where weighted interleave,
/// HMAT access classes for CPU initiators and HMAT-based memory tiers are.
pub(crate) const NEWER_KERNEL: (u64, u64) = (6, 9);

/// What to install for the newer kernel.
pub(crate) const INSTALL_NEWER: &str = "install with apt-get install linux-image-6.12-amd64";

/// The host programs and files a boot needs.
#[derive(Debug, Clone)]
pub(crate) struct Prerequisites {
    /// `qemu-system-x86_64`.
    pub(crate) qemu: PathBuf,
    /// The Linux kernel images to boot, oldest first.
    pub(crate) kernels: Vec<Kernel>,
    /// A kernel series the suite should boot but the host lacks (outside
    /// CI: said, and the others run; in CI: a failure).
    pub(crate) missing_kernel: Option<Missing>,
    /// A busybox to be the guest's shell and tools.
    pub(crate) busybox: PathBuf,
}

fn in_path(name: &str) -> Option<PathBuf> {
    env::split_paths(&env::var_os("PATH")?)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// Orders kernel image names by version: `vmlinuz-6.1.0-56-amd64` after
/// `vmlinuz-6.1.0-9-amd64`.
fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap_or(0))
        .collect()
}

/// From the images in `/boot`, the newest before [`NEWER_KERNEL`] and the
/// newest from it on (either may be absent), oldest first.
fn default_kernels(images: Vec<PathBuf>) -> Vec<Kernel> {
    let mut kernels: Vec<Kernel> = images.into_iter().map(Kernel::at).collect();
    kernels.sort_by_key(|k| version_key(&k.release));
    let older = kernels
        .iter()
        .rfind(|k| k.version() < NEWER_KERNEL)
        .cloned();
    let newer = kernels
        .iter()
        .rfind(|k| k.version() >= NEWER_KERNEL)
        .cloned();
    older.into_iter().chain(newer).collect()
}

impl Prerequisites {
    /// Looks for QEMU, the kernels (`$NUMALAB_EMU_KERNEL`, one image or
    /// several separated by `:`, else from `/boot` the newest image before
    /// Linux 6.9 and the newest from 6.9 on) and busybox; says what is
    /// missing and how to get it.
    pub(crate) fn find() -> Result<Prerequisites, Missing> {
        let missing = |what: String| Missing {
            what,
            fix: INSTALL.to_owned(),
        };
        let qemu = in_path("qemu-system-x86_64")
            .ok_or_else(|| missing("qemu-system-x86_64 not found".into()))?;
        let busybox = ["/bin/busybox", "/usr/bin/busybox"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .or_else(|| in_path("busybox"))
            .ok_or_else(|| missing("busybox not found".into()))?;
        in_path("ldd").ok_or_else(|| Missing {
            what: "ldd not found".into(),
            fix: "install with apt-get install libc-bin".into(),
        })?;
        let mut missing_kernel = None;
        let kernels = match env::var_os("NUMALAB_EMU_KERNEL") {
            Some(paths) => env::split_paths(&paths)
                .filter(|p| !p.as_os_str().is_empty())
                .map(Kernel::at)
                .collect(),
            None => {
                let images: Vec<PathBuf> = fs::read_dir("/boot")
                    .map(|dir| {
                        dir.flatten()
                            .map(|e| e.path())
                            .filter(|p| {
                                p.file_name()
                                    .and_then(|n| n.to_str())
                                    .is_some_and(|n| n.starts_with("vmlinuz-"))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let kernels = default_kernels(images);
                if kernels.len() == 1 {
                    let (major, minor) = NEWER_KERNEL;
                    missing_kernel = Some(if kernels[0].version() < NEWER_KERNEL {
                        Missing {
                            what: format!(
                                "no Linux {major}.{minor} or later kernel image in /boot"
                            ),
                            fix: INSTALL_NEWER.to_owned(),
                        }
                    } else {
                        Missing {
                            what: format!(
                                "no kernel image older than Linux {major}.{minor} in /boot"
                            ),
                            fix: "install with apt-get install linux-image-amd64 (Debian 12)"
                                .into(),
                        }
                    });
                }
                kernels
            }
        };
        if kernels.is_empty() {
            return Err(missing("no Linux kernel image in /boot".into()));
        }
        for kernel in &kernels {
            if let Err(err) = fs::File::open(&kernel.path) {
                let what = format!(
                    "cannot read the kernel image {}: {err}",
                    kernel.path.display()
                );
                return Err(if err.kind() == std::io::ErrorKind::PermissionDenied {
                    Missing {
                        what,
                        fix: format!(
                            "Debian installs kernel images readable by root only (mode 0600): run \
                             as root, or point NUMALAB_EMU_KERNEL at readable copies (sudo install \
                             -m 0644 {} ~/vmlinuz-{}), several separated by `:`",
                            kernel.path.display(),
                            kernel.release
                        ),
                    }
                } else {
                    missing(what)
                });
            }
        }
        Ok(Prerequisites {
            qemu,
            kernels,
            missing_kernel,
            busybox,
        })
    }
}

/// How to boot one guest.
///
/// ```
/// use std::time::Duration;
/// use numalab_emu::qemu::BootOptions;
/// // Only the topology checks on Linux 6.12, console shown as the guest
/// // boots.
/// let options = BootOptions {
///     timeout: Duration::from_secs(120),
///     checks: Some("topo".into()),
///     shell: false,
///     echo: true,
///     kernels: vec!["6.12".into()],
///     jobs: 1,
/// };
/// assert_eq!(options.checks.as_deref(), Some("topo"));
/// ```
#[derive(Debug, Clone)]
pub struct BootOptions {
    /// Kill the guest after this long.
    pub timeout: Duration,
    /// Only these checks (comma-separated names or prefixes), else all.
    pub checks: Option<String>,
    /// Keep the guest running with a shell on this terminal after the
    /// checks.
    pub shell: bool,
    /// Copy the guest's console to standard error as it comes.
    pub echo: bool,
    /// Boot only these kernels (a series such as `6.12`, or the start of
    /// a release); every kernel found when empty.
    pub kernels: Vec<String>,
    /// How many guests [`run_suite`](crate::harness::run_suite) boots at
    /// once.
    pub jobs: usize,
}

/// How a boot ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ending {
    /// QEMU exited (the guest powered off, or QEMU refused to start).
    Exited(Option<i32>),
    /// The guest ran past the timeout and was killed.
    TimedOut(Duration),
}

/// What a boot left behind.
#[derive(Debug, Clone)]
pub(crate) struct Boot {
    /// Everything on the guest's console (kernel messages and the checks'
    /// own output).
    pub(crate) console: String,
    /// QEMU's own error output.
    pub(crate) qemu_errors: String,
    /// The guest's results port.
    pub(crate) results: String,
    /// How it ended.
    pub(crate) ending: Ending,
    /// Wall time from start to end.
    pub(crate) elapsed: Duration,
}

/// The kernel command line for a preset.
pub(crate) fn kernel_command_line(preset: &Preset, options: &BootOptions) -> String {
    // panic=-1 and oops=panic turn a kernel crash into a reboot, which
    // -no-reboot turns into QEMU's exit: a crashed guest ends at once.
    // nokaslr keeps the kernel image on node 0 in every boot, so memory
    // per node is the same from run to run. softlockup_panic=1 ends a
    // guest whose CPU is stuck in the kernel (seen once in 40 boots of
    // profile.timeline under a loaded host: a soft lockup in the tracer
    // while another vCPU took no timer interrupts) at the watchdog's
    // first report instead of at the boot timeout. no_timer_check skips
    // the boot's test that the IO-APIC timer ticks within a few emulated
    // milliseconds: on a busy host an emulated CPU can miss it, and Linux
    // 6.1 then panicked ("IO-APIC + timer doesn't work!", once in the
    // first busy-host run of the suite); virtual machines' kernels are
    // booted with it for that reason. watchdog_thresh=60 (the most Linux
    // takes) reports a soft lockup after 120 s instead of 20: a busy host
    // left an emulated CPU zeroing huge pages unscheduled for 26 s, and
    // softlockup_panic ended a healthy guest (memless 6.12, in the second
    // busy-host run); a CPU really stuck still ends the guest in two
    // minutes, not at the boot timeout.
    let mut line = format!(
        "console=ttyS0 loglevel=4 softlockup_panic=1 watchdog_thresh=60 panic=-1 oops=panic nokaslr no_timer_check rdinit=/init numalab.preset={}",
        preset.name
    );
    if let Some(checks) = &options.checks {
        line.push_str(&format!(" numalab.checks={checks}"));
    }
    if options.shell {
        line.push_str(" numalab.shell=1");
    }
    line
}

/// QEMU's accelerator: `tcg,thread=single` (one host thread runs every
/// vCPU in turn), or `$NUMALAB_EMU_ACCEL`.
///
/// Not multi-threaded TCG: with a host thread per vCPU, a vCPU sometimes
/// executes kernel code another vCPU has just finished patching, and the
/// guest dies with `Oops: int3` in `__schedule` or stops without a word.
/// Linux patches its text whenever a static key flips (perf events opened
/// and closed, `numa_balancing` switched, a tracepoint enabled), so
/// `numalab report`, `run` and `profile` hit it. `repro/tcg-text-poke.sh`
/// shows it with busybox alone; README "What emulation cannot show".
pub fn accel() -> String {
    env::var("NUMALAB_EMU_ACCEL").unwrap_or_else(|_| "tcg,thread=single".to_owned())
}

/// Boots `preset` with `initramfs` and waits for it to power off (or for
/// the timeout). `workdir` receives the results port's file.
pub(crate) fn boot(
    prerequisites: &Prerequisites,
    kernel: &Kernel,
    initramfs: &Path,
    preset: &Preset,
    options: &BootOptions,
    workdir: &Path,
) -> Result<Boot> {
    fs::create_dir_all(workdir).with_context(|| format!("creating {}", workdir.display()))?;
    let results_path = workdir.join(format!(
        "results-{}-{}-{}.txt",
        preset.name,
        kernel.release,
        std::process::id()
    ));
    let _ = fs::remove_file(&results_path);
    let mut command = Command::new(&prerequisites.qemu);
    command
        .args(["-accel", &accel(), "-cpu", "max"])
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
        ])
        .args(preset.qemu_args())
        .arg("-kernel")
        .arg(&kernel.path)
        .arg("-initrd")
        .arg(initramfs)
        .arg("-append")
        .arg(kernel_command_line(preset, options))
        .arg("-serial")
        .arg(if options.shell { "mon:stdio" } else { "stdio" })
        .arg("-serial")
        .arg(format!("file:{}", results_path.display()));
    // A guest ends with the suite: killed or interrupted, the harness
    // leaves no QEMU running on (seen after a killed `cargo test`). The
    // death signal goes with the thread that starts QEMU, which waits for
    // it to end.
    let parent = std::process::id();
    // SAFETY: end_with_parent makes two system calls and allocates
    // nothing, which is what may run between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
            numalab::system::end_with_parent(parent)
        })
    };
    let start = Instant::now();
    let result = if options.shell {
        let status = command
            .status()
            .with_context(|| format!("starting {}", prerequisites.qemu.display()))?;
        Ok((String::new(), String::new(), Ending::Exited(status.code())))
    } else {
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", prerequisites.qemu.display()))?;
        supervise(child, options)
    };
    let results = fs::read_to_string(&results_path).unwrap_or_default();
    let _ = fs::remove_file(&results_path);
    let (console, qemu_errors, ending) = result?;
    Ok(Boot {
        console,
        qemu_errors,
        results,
        ending,
        elapsed: start.elapsed(),
    })
}

/// Collects a running QEMU's output until it exits or the timeout passes.
fn supervise(mut child: Child, options: &BootOptions) -> Result<(String, String, Ending)> {
    let console = Arc::new(Mutex::new(String::new()));
    let stdout = child.stdout.take().context("QEMU's standard output")?;
    let echo = options.echo;
    let sink = Arc::clone(&console);
    let reader = thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        while let Ok(n) = reader.read_until(b'\n', &mut line) {
            if n == 0 {
                break;
            }
            let text = String::from_utf8_lossy(&line).replace('\r', "");
            if echo {
                eprint!("{text}");
            }
            sink.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_str(&text);
            line.clear();
        }
    });
    let mut stderr = child.stderr.take().context("QEMU's error output")?;
    let errors = thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let start = Instant::now();
    let ending = loop {
        if let Some(status) = child.try_wait().context("waiting for QEMU")? {
            break Ending::Exited(status.code());
        }
        if start.elapsed() > options.timeout {
            let _ = child.kill();
            let _ = child.wait();
            break Ending::TimedOut(options.timeout);
        }
        thread::sleep(Duration::from_millis(100));
    };
    let _ = reader.join();
    let qemu_errors = errors.join().unwrap_or_default();
    let console = std::mem::take(&mut *console.lock().unwrap_or_else(|e| e.into_inner()));
    Ok((console, qemu_errors, ending))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_kernel_sorts_last() {
        let mut names = [
            "/boot/vmlinuz-6.1.0-56-amd64",
            "/boot/vmlinuz-6.10.0-1-amd64",
            "/boot/vmlinuz-6.1.0-9-amd64",
        ];
        names.sort_by_key(|n| version_key(n));
        assert_eq!(names.last(), Some(&"/boot/vmlinuz-6.10.0-1-amd64"));
        assert_eq!(names.first(), Some(&"/boot/vmlinuz-6.1.0-9-amd64"));
    }

    #[test]
    fn one_kernel_before_6_9_and_one_from_it() {
        let images = [
            "/boot/vmlinuz-6.1.0-9-amd64",
            "/boot/vmlinuz-6.12.117+deb12-amd64",
            "/boot/vmlinuz-6.1.0-56-amd64",
            "/boot/vmlinuz-6.10.2-amd64",
        ];
        let kernels = default_kernels(images.iter().map(PathBuf::from).collect());
        let releases: Vec<&str> = kernels.iter().map(|k| k.release.as_str()).collect();
        assert_eq!(releases, ["6.1.0-56-amd64", "6.12.117+deb12-amd64"]);
        assert_eq!(kernels[1].series(), "6.12");
        assert_eq!(kernels[0].version(), (6, 1));
        let only_old = default_kernels(vec![PathBuf::from("/boot/vmlinuz-6.1.0-56-amd64")]);
        assert_eq!(only_old.len(), 1);
        assert_eq!(Kernel::at(PathBuf::from("/tmp/bzImage")).release, "bzImage");
    }

    #[test]
    fn command_line_carries_the_preset_and_options() {
        let presets = crate::preset::Presets::builtin().unwrap();
        let preset = presets.get("cxl").unwrap();
        let options = BootOptions {
            timeout: Duration::from_secs(1),
            checks: Some("topo".into()),
            shell: true,
            echo: false,
            kernels: Vec::new(),
            jobs: 1,
        };
        let line = kernel_command_line(preset, &options);
        assert!(line.contains("console=ttyS0"), "{line}");
        assert!(line.contains(" no_timer_check "), "{line}");
        assert!(line.contains(" watchdog_thresh=60 "), "{line}");
        assert!(line.contains("numalab.preset=cxl numalab.checks=topo numalab.shell=1"));
    }
}
