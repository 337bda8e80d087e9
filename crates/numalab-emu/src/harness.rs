//! The host side of the suite: build the guest, boot each preset, read
//! and judge what the guest reported.

use std::env;
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::initramfs::{Initramfs, INIT};
use crate::preset::Preset;
use crate::qemu::{self, BootOptions, Ending, Missing, Prerequisites};
use crate::report::{GuestReport, Status};

/// The workspace this crate belongs to.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether this is a CI run (`CI` set to anything but empty, `0` or
/// `false`), where a missing prerequisite is a failure, not a skip.
pub fn is_ci() -> bool {
    env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// The binaries that go into the guest.
#[derive(Debug, Clone)]
pub(crate) struct GuestBinaries {
    /// The `numalab` command.
    pub(crate) numalab: PathBuf,
    /// The guest side of this suite.
    pub(crate) guest: PathBuf,
}

/// Builds `numalab` and `numalab-guest` (release) with cargo and returns
/// their paths, as cargo reports them.
pub(crate) fn build_guest_binaries(workspace: &Path) -> Result<GuestBinaries> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(&cargo)
        .current_dir(workspace)
        .args([
            "build",
            "--release",
            "--message-format=json-render-diagnostics",
            "-p",
            "numalab-cli",
            "-p",
            "numalab-emu",
            "--bins",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running cargo build")?;
    let stdout = child.stdout.take().context("cargo's output")?;
    let mut stderr = child.stderr.take().context("cargo's errors")?;
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let (mut numalab, mut guest) = (None, None);
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.context("reading cargo's output")?;
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let (Some(name), Some(exe)) = (
            message["target"]["name"].as_str(),
            message["executable"].as_str(),
        ) else {
            continue;
        };
        match name {
            "numalab" => numalab = Some(PathBuf::from(exe)),
            "numalab-guest" => guest = Some(PathBuf::from(exe)),
            _ => {}
        }
    }
    let status = child.wait().context("waiting for cargo")?;
    let errors = errors.join().unwrap_or_default();
    if !status.success() {
        bail!("cargo build of the guest binaries failed:\n{errors}");
    }
    match (numalab, guest) {
        (Some(numalab), Some(guest)) => Ok(GuestBinaries { numalab, guest }),
        _ => bail!("cargo build did not report the numalab and numalab-guest executables"),
    }
}

/// Everything needed to boot presets: host tools, and an initramfs holding
/// the freshly built binaries.
#[derive(Debug, Clone)]
pub(crate) struct Suite {
    /// QEMU, kernel, busybox.
    pub(crate) prerequisites: Prerequisites,
    /// The guest's root file system.
    pub(crate) initramfs: PathBuf,
    /// Where results files go.
    pub(crate) workdir: PathBuf,
}

/// Why a suite could not be prepared.
#[derive(Debug)]
pub(crate) enum PrepareError {
    /// A host prerequisite is missing: skip (outside CI) or fail (in CI).
    Missing(Missing),
    /// Anything else: a failure.
    Failed(anyhow::Error),
}

impl Suite {
    /// Finds the prerequisites, builds the binaries and the initramfs.
    pub(crate) fn prepare() -> Result<Suite, PrepareError> {
        let prerequisites = Prerequisites::find().map_err(PrepareError::Missing)?;
        eprintln!("numalab-emu: building numalab and numalab-guest (release) and the initramfs");
        let workspace = workspace_root();
        let build = || -> Result<Suite> {
            let binaries = build_guest_binaries(&workspace)?;
            let workdir = binaries
                .numalab
                .parent()
                .and_then(Path::parent)
                .map_or_else(|| workspace.join("target"), Path::to_path_buf)
                .join("numalab-emu");
            let mut fs = Initramfs::new();
            fs.add_bytes("/init", INIT.as_bytes().to_vec(), 0o755);
            fs.add_executable("/bin/busybox", &prerequisites.busybox)?;
            fs.add_executable("/bin/numalab", &binaries.numalab)?;
            fs.add_executable("/bin/numalab-guest", &binaries.guest)?;
            match disk_files(&prerequisites.kernel, &mut fs)? {
                None => {}
                Some(missing) if is_ci() => return Err(DiskMissing(missing).into()),
                Some(missing) => fs.add_bytes(DISK_MISSING, missing.into_bytes(), 0o644),
            }
            let initramfs = fs.write_cached(&workdir)?;
            Ok(Suite {
                prerequisites: prerequisites.clone(),
                initramfs,
                workdir,
            })
        };
        build().map_err(|err| match err.downcast::<DiskMissing>() {
            Ok(DiskMissing(what)) => PrepareError::Missing(Missing {
                what,
                fix: "install with apt-get install util-linux linux-image-amd64 (its modules), or \
                      point NUMALAB_EMU_KERNEL at a kernel whose modules are in /lib/modules"
                    .into(),
            }),
            Err(err) => PrepareError::Failed(err),
        })
    }

    /// Boots one preset and reads its report.
    pub(crate) fn run(&self, preset: &Preset, options: &BootOptions) -> PresetRun {
        match qemu::boot(
            &self.prerequisites,
            &self.initramfs,
            preset,
            options,
            &self.workdir,
        ) {
            Ok(boot) => PresetRun::judge(preset, boot),
            Err(err) => PresetRun {
                preset: preset.name.clone(),
                report: GuestReport::default(),
                console: String::new(),
                qemu_errors: String::new(),
                elapsed: Duration::ZERO,
                problems: vec![format!("{err:#}")],
            },
        }
    }
}

/// Where the guest finds the modules to load, in order, for a disk file
/// system (`loop`, `ext4` for ext2), one guest path a line.
pub const DISK_MODULES: &str = "/lib/modules/numalab/order";
/// Why the guest has no disk file system (the host lacked something).
pub const DISK_MISSING: &str = "/lib/modules/numalab/missing";

/// A host file the guest's disk check needs is missing (under CI: a
/// failure).
#[derive(Debug)]
struct DiskMissing(String);

impl std::fmt::Display for DiskMissing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DiskMissing {}

/// Puts into `fs` what the guest needs for a file system whose page
/// cache can be dropped (its root is tmpfs, whose cannot): the `loop` and
/// `ext4` modules of the booted kernel with their dependencies, in load
/// order ([`DISK_MODULES`]), and util-linux `fincore` with its libraries.
/// `Ok(Some(why))`: something is missing on the host.
fn disk_files(kernel: &Path, fs: &mut Initramfs) -> Result<Option<String>> {
    let Some(version) = kernel
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("vmlinuz-"))
    else {
        return Ok(Some(format!(
            "cannot tell the kernel version of {} (not named vmlinuz-VERSION)",
            kernel.display()
        )));
    };
    let Some(fincore) = ["/usr/bin/fincore", "/bin/fincore"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
    else {
        return Ok(Some("util-linux fincore not found on the host".into()));
    };
    let root = PathBuf::from("/lib/modules").join(version);
    let Ok(dep) = std::fs::read_to_string(root.join("modules.dep")) else {
        return Ok(Some(format!("no {}/modules.dep", root.display())));
    };
    let builtin = std::fs::read_to_string(root.join("modules.builtin")).unwrap_or_default();
    let mut order: Vec<String> = Vec::new();
    // ext4 asks the crypto API for crc32c when it mounts (a soft
    // dependency modules.dep does not list).
    for module in [
        "kernel/drivers/block/loop.ko",
        "kernel/crypto/crc32c_generic.ko",
        "kernel/fs/ext4/ext4.ko",
    ] {
        if builtin.lines().any(|l| l.trim() == module) {
            continue;
        }
        let Some(line) = dep.lines().find(|l| {
            l.split(':')
                .next()
                .is_some_and(|m| m == module || m.strip_suffix(".xz") == Some(module))
        }) else {
            return Ok(Some(format!(
                "{module} is neither built into {version} nor in its modules.dep"
            )));
        };
        let (name, deps) = line.split_once(':').unwrap_or((line, ""));
        // modprobe loads the dependencies last-listed first.
        for path in deps.split_whitespace().rev().chain([name]) {
            if !order.iter().any(|o| o == path) {
                order.push(path.to_string());
            }
        }
    }
    let mut guest_paths = Vec::new();
    for path in &order {
        let host = root.join(path);
        let data = if path.ends_with(".ko") {
            std::fs::read(&host).with_context(|| format!("reading {}", host.display()))?
        } else if path.ends_with(".ko.xz") {
            let out = Command::new("xz").arg("-dc").arg(&host).output();
            match out {
                Ok(out) if out.status.success() => out.stdout,
                _ => return Ok(Some(format!("cannot decompress {} (xz)", host.display()))),
            }
        } else {
            return Ok(Some(format!(
                "{} is compressed in a way the guest cannot load",
                host.display()
            )));
        };
        let name = path
            .rsplit('/')
            .next()
            .unwrap_or(path)
            .trim_end_matches(".xz");
        let guest = format!("/lib/modules/numalab/{name}");
        fs.add_bytes(&guest, data, 0o644);
        guest_paths.push(guest);
    }
    fs.add_bytes(
        DISK_MODULES,
        (guest_paths.join("\n") + "\n").into_bytes(),
        0o644,
    );
    fs.add_executable("/bin/fincore", &fincore)?;
    Ok(None)
}

/// One preset's boot, judged.
#[derive(Debug, Clone)]
pub(crate) struct PresetRun {
    /// The preset's name.
    pub(crate) preset: String,
    /// What the guest reported.
    pub(crate) report: GuestReport,
    /// The guest's console.
    pub(crate) console: String,
    /// QEMU's own errors.
    pub(crate) qemu_errors: String,
    /// Wall time of the boot, checks and power-off.
    pub(crate) elapsed: Duration,
    /// What went wrong besides failed checks (timeout, crash, a guest
    /// that thought it ran another preset).
    pub(crate) problems: Vec<String>,
}

impl PresetRun {
    fn judge(preset: &Preset, boot: qemu::Boot) -> PresetRun {
        let report = GuestReport::parse(&boot.results);
        let mut problems = Vec::new();
        if let Ending::TimedOut(after) = boot.ending {
            problems.push(format!(
                "the guest did not power off within {} s and was killed (raise the limit with --timeout \
                 or NUMALAB_EMU_TIMEOUT=SECONDS)",
                after.as_secs()
            ));
        }
        match &report.start {
            None => problems
                .push("the guest never started its checks (see the console below)".to_owned()),
            Some(start) if start.preset != preset.name => problems.push(format!(
                "the guest ran preset {:?}, not {:?}",
                start.preset, preset.name
            )),
            Some(_) => {}
        }
        let missing = report.missing();
        if let Some(first) = missing.first() {
            problems.push(format!(
                "the guest stopped during check {first}; {} check(s) never reported: {}",
                missing.len(),
                missing.join(", ")
            ));
        }
        if report.start.is_some() && report.end.is_none() && missing.is_empty() {
            problems.push("the guest never reported the end of its checks".to_owned());
        }
        for line in &report.unreadable {
            problems.push(format!("unreadable report line: {line}"));
        }
        if let Ending::Exited(Some(code)) = boot.ending {
            if code != 0 {
                problems.push(format!("QEMU exited with status {code}"));
            }
        }
        PresetRun {
            preset: preset.name.clone(),
            report,
            console: boot.console,
            qemu_errors: boot.qemu_errors,
            elapsed: boot.elapsed,
            problems,
        }
    }

    /// Whether the boot went through and every check passed (or did not
    /// apply).
    pub(crate) fn passed(&self) -> bool {
        self.problems.is_empty() && self.report.passed()
    }

    fn count(&self, status: Status) -> usize {
        self.report
            .results
            .iter()
            .filter(|r| r.status == status)
            .count()
    }

    /// `cxl: 16 passed, 1 failed, 0 n/a in 31.2 s`.
    pub(crate) fn summary(&self) -> String {
        format!(
            "{}: {} passed, {} failed, {} n/a in {:.1} s{}",
            self.preset,
            self.count(Status::Pass),
            self.count(Status::Fail),
            self.count(Status::NotApplicable),
            self.elapsed.as_secs_f64(),
            if self.passed() { "" } else { "  FAILED" }
        )
    }

    /// One line per check: status, name, time in the guest, detail.
    pub(crate) fn checks_table(&self) -> String {
        let mut out = String::new();
        let width = self
            .report
            .results
            .iter()
            .map(|r| r.check.len())
            .max()
            .unwrap_or(0);
        for result in &self.report.results {
            let detail = result.detail.lines().next().unwrap_or("");
            let _ = writeln!(
                out,
                "  {:<4} {:<width$} {:>6.2} s  {detail}",
                result.status.to_string(),
                result.check,
                result.seconds,
            );
        }
        out
    }

    /// Everything needed to understand a failure: problems, each failed
    /// check's expected-versus-found table, and the guest's console.
    pub(crate) fn failure_report(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "==== preset {} failed", self.preset);
        for problem in &self.problems {
            let _ = writeln!(out, "problem: {problem}");
        }
        for result in &self.report.results {
            if result.status == Status::Fail {
                out.push('\n');
                out.push_str(&result.render_diff());
            }
        }
        if !self.qemu_errors.trim().is_empty() {
            let _ = writeln!(out, "\n---- QEMU's errors\n{}", self.qemu_errors.trim_end());
        }
        let _ = writeln!(
            out,
            "\n---- the guest's console ({} lines)\n{}\n---- end of console",
            self.console.lines().count(),
            self.console.trim_end()
        );
        out
    }
}

/// The per-preset time limit: `NUMALAB_EMU_TIMEOUT` seconds, else 240 s
/// (a boot takes about 15 s and the checks about as long again under TCG
/// on a loaded 2-core machine).
pub fn default_timeout() -> Duration {
    env::var("NUMALAB_EMU_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(240), Duration::from_secs)
}

/// How a suite run ended.
///
/// ```no_run
/// use numalab_emu::harness::{default_timeout, run_suite, SuiteEnd};
/// use numalab_emu::preset::Presets;
/// use numalab_emu::qemu::BootOptions;
///
/// let presets = Presets::builtin()?;
/// let options = BootOptions { timeout: default_timeout(), checks: None, shell: false, echo: false };
/// match run_suite(&[presets.get("lopsided")?], &options) {
///     SuiteEnd::Passed => println!("every check passed"),
///     SuiteEnd::Skipped(missing) => println!("skipped: {missing}"),
///     SuiteEnd::Failed => std::process::exit(1),
/// }
/// # Ok::<(), String>(())
/// ```
#[derive(Debug)]
pub enum SuiteEnd {
    /// Every preset booted and passed.
    Passed,
    /// Something failed (a check, a boot, the build, or a prerequisite in
    /// CI).
    Failed,
    /// A prerequisite is missing outside CI: nothing ran.
    Skipped(Missing),
}

/// Prepares the suite and boots `presets` one after the other, printing
/// progress on standard error and results on standard output: a summary
/// and the checks of each preset, and for a failed one the diff and the
/// guest's console. A missing prerequisite is a skip outside CI and a
/// failure in CI.
pub fn run_suite(presets: &[&Preset], options: &BootOptions) -> SuiteEnd {
    let suite = match Suite::prepare() {
        Ok(suite) => suite,
        Err(PrepareError::Missing(missing)) if is_ci() => {
            println!("numalab-emu: error: {missing} (CI is set, so this is a failure)");
            return SuiteEnd::Failed;
        }
        Err(PrepareError::Missing(missing)) => {
            println!("skipped: {missing}");
            return SuiteEnd::Skipped(missing);
        }
        Err(PrepareError::Failed(err)) => {
            println!("numalab-emu: error: {err:#}");
            return SuiteEnd::Failed;
        }
    };
    eprintln!(
        "numalab-emu: kernel {}, initramfs {}",
        suite.prerequisites.kernel.display(),
        suite.initramfs.display()
    );
    let mut runs = Vec::new();
    for preset in presets {
        eprintln!(
            "numalab-emu: booting {} ({}), {}",
            preset.name,
            preset.summary(),
            preset.about
        );
        let run = suite.run(preset, options);
        println!("{}", run.summary());
        print!("{}", run.checks_table());
        if !run.passed() {
            println!("\n{}", run.failure_report());
        }
        runs.push(run);
    }
    if runs.len() > 1 {
        println!("\nnumalab-emu: run time per preset (boot, checks, power-off; TCG)");
        for run in &runs {
            println!(
                "  {:<12} {:>6.1} s  {}",
                run.preset,
                run.elapsed.as_secs_f64(),
                if run.passed() { "passed" } else { "FAILED" }
            );
        }
        let total: f64 = runs.iter().map(|r| r.elapsed.as_secs_f64()).sum();
        println!("  {:<12} {total:>6.1} s", "total");
    }
    if runs.iter().all(PresetRun::passed) {
        SuiteEnd::Passed
    } else {
        SuiteEnd::Failed
    }
}
