//! The host side of the suite: build the guest, boot each preset, read
//! and judge what the guest reported.

use std::env;
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use numalab::NodeSet;

use crate::initramfs::{Initramfs, INIT};
use crate::preset::Preset;
use crate::qemu::{self, BootOptions, Ending, Kernel, Missing, Prerequisites};
use crate::report::{GuestReport, Status};

/// The workspace this crate belongs to.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether this is a CI run, where a missing prerequisite is a failure,
/// not a skip: [`numalab::testing::ci`], the one rule of every test.
pub fn is_ci() -> bool {
    numalab::testing::ci()
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

/// Everything needed to boot presets: host tools, and for each kernel an
/// initramfs holding the freshly built binaries and that kernel's modules.
#[derive(Debug, Clone)]
pub(crate) struct Suite {
    /// QEMU, kernels, busybox.
    pub(crate) prerequisites: Prerequisites,
    /// The guest's root file system for each of `prerequisites.kernels`.
    pub(crate) initramfs: Vec<PathBuf>,
    /// The same with the Python package, for presets with `python = true`
    /// (none when the package was not built, outside CI).
    pub(crate) python_initramfs: Vec<Option<PathBuf>>,
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

/// A copy of `binary` in `dir` without its symbols and debug sections
/// (binutils `strip`), for a smaller initramfs: the guest unpacks it into
/// node 0's memory at every boot. The binary itself when `strip` is
/// missing or fails.
fn stripped(binary: &Path, dir: &Path) -> PathBuf {
    let Some(name) = binary.file_name() else {
        return binary.to_path_buf();
    };
    let copy = dir.join(format!("{}.stripped", name.to_string_lossy()));
    let tmp = dir.join(format!(
        ".{}.stripped.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let done = Command::new("strip")
        .arg("-o")
        .arg(&tmp)
        .arg(binary)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
        && std::fs::rename(&tmp, &copy).is_ok();
    let _ = std::fs::remove_file(&tmp);
    if done {
        copy
    } else {
        binary.to_path_buf()
    }
}

impl Suite {
    /// Finds the prerequisites, builds the binaries and the initramfs of
    /// each kernel.
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
            std::fs::create_dir_all(&workdir)
                .with_context(|| format!("creating {}", workdir.display()))?;
            let mut base = Initramfs::new();
            base.add_bytes("/init", INIT.as_bytes().to_vec(), 0o755);
            base.add_executable("/bin/busybox", &prerequisites.busybox)?;
            base.add_executable("/bin/numalab", &stripped(&binaries.numalab, &workdir))?;
            base.add_executable("/bin/numalab-guest", &stripped(&binaries.guest, &workdir))?;
            match oracle_tools(&mut base)? {
                None => {}
                Some(missing) if is_ci() => return Err(DiskMissing(missing, DISK_FIX).into()),
                Some(missing) => base.add_bytes(ORACLES_MISSING, missing.into_bytes(), 0o644),
            }
            match c_program(&workspace, &workdir, &mut base)? {
                None => {}
                Some(missing) if is_ci() => {
                    return Err(DiskMissing(missing, "apt-get install gcc").into())
                }
                Some(missing) => base.add_bytes(C_MISSING, missing.into_bytes(), 0o644),
            }
            let mut python = Initramfs::new();
            match python_files(&workdir, &mut python)? {
                None => {}
                Some(missing) if is_ci() => {
                    return Err(DiskMissing(
                        missing,
                        "bash scripts/python.sh (it builds the wheel and installs it into \
                         target/py-venv), or point NUMALAB_EMU_PYTHON at a Python with numalab",
                    )
                    .into())
                }
                Some(missing) => base.add_bytes(PYTHON_MISSING, missing.into_bytes(), 0o644),
            }
            let mut initramfs = Vec::new();
            let mut python_initramfs = Vec::new();
            for kernel in &prerequisites.kernels {
                let mut fs = base.clone();
                match disk_files(&kernel.path, &mut fs)? {
                    None => {}
                    Some(missing) if is_ci() => return Err(DiskMissing(missing, DISK_FIX).into()),
                    Some(missing) => fs.add_bytes(DISK_MISSING, missing.into_bytes(), 0o644),
                }
                initramfs.push(fs.write_cached(&workdir, &kernel.release)?);
                python_initramfs.push(if python.is_empty() {
                    None
                } else {
                    let mut with_python = fs.clone();
                    with_python.merge(&python);
                    Some(
                        with_python
                            .write_cached(&workdir, &format!("{}-python", kernel.release))?,
                    )
                });
            }
            Ok(Suite {
                prerequisites: prerequisites.clone(),
                initramfs,
                python_initramfs,
                workdir,
            })
        };
        build().map_err(|err| match err.downcast::<DiskMissing>() {
            Ok(DiskMissing(what, fix)) => PrepareError::Missing(Missing {
                what,
                fix: fix.into(),
            }),
            Err(err) => PrepareError::Failed(err),
        })
    }

    /// Boots one preset on the `kernel`-th kernel and reads its report.
    pub(crate) fn run(&self, preset: &Preset, kernel: usize, options: &BootOptions) -> PresetRun {
        let image = &self.prerequisites.kernels[kernel];
        let initramfs = match &self.python_initramfs[kernel] {
            Some(with_python) if preset.python => with_python,
            _ => &self.initramfs[kernel],
        };
        match qemu::boot(
            &self.prerequisites,
            image,
            initramfs,
            preset,
            options,
            &self.workdir,
        ) {
            Ok(boot) => PresetRun::judge(preset, image, boot),
            Err(err) => PresetRun {
                preset: preset.name.clone(),
                kernel: image.clone(),
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

/// The tools the oracle checks compare numalab with, each put at
/// `/bin/NAME` in the guest with its libraries (Debian packages `numactl`
/// and `hwloc`, which `scripts/setup.sh` installs).
pub const ORACLE_TOOLS: [&str; 3] = ["numactl", "numastat", "lstopo-no-graphics"];
/// Why the guest has no oracle tools (the host lacked one).
pub const ORACLES_MISSING: &str = "/lib/numalab/oracles-missing";

/// Puts [`ORACLE_TOOLS`] into `fs`; `Some(why)` when the host lacks one.
fn oracle_tools(fs: &mut Initramfs) -> Result<Option<String>> {
    for name in ORACLE_TOOLS {
        let Some(host) = ["/usr/bin", "/bin"]
            .iter()
            .map(|dir| Path::new(dir).join(name))
            .find(|p| p.is_file())
        else {
            return Ok(Some(format!(
                "{name} not found on the host (apt-get install numactl hwloc)"
            )));
        };
        fs.add_executable(&format!("/bin/{name}"), &host)?;
    }
    Ok(None)
}

/// The C program of check `c.place`, in the guest.
pub const C_CHECK: &str = "/bin/numalab-c-check";
/// Why the guest has no C program (the host lacked a compiler).
pub const C_MISSING: &str = "/lib/numalab/c-missing";

/// Builds `src/guest/c_check.c` against `libnumalab.a` (cargo builds
/// crates/numalab-c) with the host's C compiler and puts it, stripped,
/// with the libraries it needs, at [`C_CHECK`]. Returns why not, when
/// there is no C compiler.
fn c_program(workspace: &Path, workdir: &Path, fs: &mut Initramfs) -> Result<Option<String>> {
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        return Ok(Some(format!(
            "no C compiler ({}): apt-get install gcc",
            cc.to_string_lossy()
        )));
    }
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .current_dir(workspace)
        .args([
            "build",
            "--release",
            "--message-format=json",
            "-p",
            "numalab-c",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("building libnumalab (cargo build -p numalab-c)")?;
    if !output.status.success() {
        bail!("cargo build -p numalab-c failed");
    }
    let library = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .flat_map(|m| {
            m["filenames"]
                .as_array()
                .map(|f| {
                    f.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .find(|f| f.ends_with("libnumalab_c.a"))
        .context("cargo made no libnumalab_c.a")?;
    let program = workdir.join("numalab-c-check");
    let status = Command::new(&cc)
        .args([
            "-O2",
            "-std=c11",
            "-Wall",
            "-Werror",
            "-Wl,--gc-sections",
            "-o",
        ])
        .arg(&program)
        .arg(workspace.join("crates/numalab-emu/src/guest/c_check.c"))
        .arg("-I")
        .arg(workspace.join("crates/numalab-c/include"))
        .arg(&library)
        .args(["-lhwloc", "-lpthread", "-ldl", "-lm", "-lgcc_s"])
        .status()
        .context("running the C compiler")?;
    if !status.success() {
        bail!("compiling src/guest/c_check.c failed");
    }
    fs.add_executable(C_CHECK, &stripped(&program, workdir))?;
    Ok(None)
}

/// Where the guest finds the Python package: the interpreter's path, then
/// the module search path (`PYTHONPATH`), one a line.
pub const PYTHON_ENV: &str = "/lib/numalab/python";
/// Why the guest has no Python package (the host lacked it).
pub const PYTHON_MISSING: &str = "/lib/numalab/python-missing";

/// Puts into `fs` the host's Python interpreter with the installed
/// package (the virtual environment `scripts/python.sh` makes beside the
/// build, or `NUMALAB_EMU_PYTHON`): every file the check's script imports
/// and every library they load, each at its host path, so the interpreter
/// finds its standard library where it was built to. Returns why not,
/// when the package is missing.
fn python_files(workdir: &Path, fs: &mut Initramfs) -> Result<Option<String>> {
    let python = match std::env::var_os("NUMALAB_EMU_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => match workdir.parent() {
            Some(target) => target.join("py-venv/bin/python"),
            None => return Ok(Some("no target directory".into())),
        },
    };
    if !python.is_file() {
        return Ok(Some(format!(
            "{} not found (the Python package's virtual environment)",
            python.display()
        )));
    }
    let script = workdir.join("python_check.py");
    std::fs::write(&script, crate::guest::python::SCRIPT)
        .with_context(|| format!("writing {}", script.display()))?;
    let output = Command::new(&python)
        .arg("-B")
        .arg(&script)
        .arg("--list")
        .output()
        .with_context(|| format!("running {}", python.display()))?;
    if !output.status.success() {
        return Ok(Some(format!(
            "{} cannot import numalab: {}",
            python.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let listing: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("reading the Python package's file list")?;
    let executable = listing["executable"].as_str().unwrap_or_default();
    let path: Vec<&str> = listing["path"]
        .as_array()
        .map(|p| p.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    for file in listing["files"].as_array().into_iter().flatten() {
        let Some(file) = file.as_str() else { continue };
        if file.contains(".so") || file == executable {
            fs.add_executable(file, Path::new(file))?;
        } else {
            fs.add_file(file, Path::new(file))?;
        }
    }
    fs.add_bytes(
        PYTHON_ENV,
        format!("{executable}\n{}\n", path.join(":")).into_bytes(),
        0o644,
    );
    Ok(None)
}

/// A host file the guest's disk or oracle checks need is missing (under
/// CI: a failure).
#[derive(Debug)]
struct DiskMissing(String, &'static str);

/// What to do about missing disk or oracle files.
const DISK_FIX: &str =
    "install with apt-get install util-linux linux-image-amd64 (its modules), or \
                        point NUMALAB_EMU_KERNEL at a kernel whose modules are in /lib/modules";

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

/// One preset's boot on one kernel, judged.
#[derive(Debug, Clone)]
pub(crate) struct PresetRun {
    /// The preset's name.
    pub(crate) preset: String,
    /// The kernel it booted.
    pub(crate) kernel: Kernel,
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

/// Whether `check` may say it does not apply on `preset` under a kernel
/// of `version`: decided here by the preset and the kernel alone, never
/// by the guest or by numalab, so a broken detection cannot turn a check
/// off everywhere. `Err` says why it must apply. Prerequisites of the
/// suite's own (the oracle tools, a disk file system in the guest) may
/// be missing outside CI only.
///
/// ```
/// use numalab_emu::harness::may_not_apply;
/// use numalab_emu::preset::Presets;
/// let presets = Presets::builtin().unwrap();
/// let two = presets.get("two-socket").unwrap();
/// assert!(may_not_apply("exec.weights-restored-on-sigterm", two, (6, 1)).is_ok());
/// assert!(may_not_apply("exec.weights-restored-on-sigterm", two, (6, 12)).is_err());
/// assert!(may_not_apply("topo.tiers", two, (6, 12)).is_err());
/// assert!(may_not_apply("profile.writes", two, (6, 1)).is_err());
/// assert!(may_not_apply("pagecache.post", two, (6, 12)).is_err());
/// assert!(may_not_apply("advise.decides", two, (6, 1)).is_ok());
/// assert!(may_not_apply("advise.decides", two, (6, 12)).is_err());
/// let cxl = presets.get("cxl").unwrap();
/// assert!(may_not_apply("python.place", cxl, (6, 12)).is_ok());
/// ```
pub fn may_not_apply(check: &str, preset: &Preset, version: (u64, u64)) -> Result<(), String> {
    let memory = preset.memory_nodes().len();
    let cpus = preset.cpu_nodes().len();
    let both = preset
        .cpu_nodes()
        .intersection(&preset.memory_nodes())
        .len();
    let (allowed, rule) = match check {
        "buffer.weighted-interleave" | "exec.weighted-interleave" | "fill.spill"
        | "fill.bind-refused" => (memory < 2, "the preset has two or more nodes with memory"),
        "exec.weights-restored-on-sigterm" => (
            memory < 2 || version < (6, 9),
            "the preset has two or more nodes with memory and the kernel (6.9 or later) has weighted interleave",
        ),
        "buffer.while-balancing" => (cpus == 0, "the preset has nodes with CPUs"),
        "pagecache.post" | "run.placement" => {
            (cpus < 2, "the preset has two or more nodes with CPUs")
        }
        "ring.blog" => (both < 2, "the preset has two nodes with CPUs and memory"),
        // Every placement runs 6 to 10 times: on 8 nodes, or on both
        // kernels, minutes of TCG.
        "advise.decides" => (
            memory > 4 || version < (6, 9),
            "the preset has at most 4 nodes with memory and the kernel is 6.9 or later",
        ),
        "advise.steady" => {
            let homes: NodeSet = preset
                .cpu_nodes()
                .iter()
                .map(|n| preset.home_node(n))
                .collect();
            (
                both > 4 || homes.len() < 2 || version < (6, 9),
                "the preset has at most 4 nodes with CPUs and memory, and two nodes with CPUs whose first touch lands on different nodes, and the kernel is 6.9 or later",
            )
        }
        // Memory tiers are in sysfs from Linux 6.1; soft-dirty bits are in
        // every kernel the suite boots (Debian's, CONFIG_MEM_SOFT_DIRTY).
        "topo.tiers" => (version < (6, 1), "Linux 6.1 and later show memory tiers"),
        "python.place" => (
            !preset.python || !is_ci(),
            "the preset boots with the Python package (python = true) and CI is set: it is required",
        ),
        "c.place" => (
            !is_ci(),
            "CI is set: a C compiler and libnumalab are required",
        ),
        oracle
            if oracle.starts_with("oracle.")
                || oracle == "pagecache.load-drop"
                || oracle == "profile.numastat" =>
        (
            !is_ci(),
            "CI is set: the guest's tools and disk file system are required",
        ),
        _ => (false, "the check applies to every preset and kernel"),
    };
    if allowed {
        Ok(())
    } else {
        Err(rule.to_owned())
    }
}

impl PresetRun {
    fn judge(preset: &Preset, kernel: &Kernel, boot: qemu::Boot) -> PresetRun {
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
            Some(start) if start.kernel != kernel.release => problems.push(format!(
                "the guest runs Linux {}, not {} as booted",
                start.kernel, kernel.release
            )),
            Some(_) => {}
        }
        for result in &report.results {
            if result.status != Status::NotApplicable {
                continue;
            }
            if let Err(applies) = may_not_apply(&result.check, preset, kernel.version()) {
                problems.push(format!(
                    "check {} said it does not apply ({}), but {applies}",
                    result.check,
                    result.detail.trim()
                ));
            }
        }
        let missing = report.missing();
        if let Some(first) = missing.first() {
            problems.push(format!(
                "the guest stopped during check {first}; {} never reported: {}",
                numalab::units::count(missing.len(), "check"),
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
            kernel: kernel.clone(),
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

    /// `cxl on Linux 6.12: 16 passed, 1 failed, 0 n/a in 31.2 s`.
    pub(crate) fn summary(&self) -> String {
        format!(
            "{} on Linux {}: {} passed, {} failed, {} n/a in {:.1} s{}",
            self.preset,
            self.kernel.series(),
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
        let _ = writeln!(
            out,
            "==== preset {} on Linux {} failed",
            self.preset, self.kernel.release
        );
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

/// The per-boot time limit: `NUMALAB_EMU_TIMEOUT` seconds, else 1200 s.
/// Only a hung guest reaches it: most boots take 1–2 minutes with their
/// checks under TCG on a 2-core machine running two at a time, the 8-node
/// `snc` about 3, and a busy host about doubles that (`snc` on 6.12 took
/// 372 s beside `stress-ng --cpu 2`, close to the 420 s this once was).
pub fn default_timeout() -> Duration {
    env::var("NUMALAB_EMU_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(1200), Duration::from_secs)
}

/// How many guests boot at once: `NUMALAB_EMU_JOBS`, else 2 (a guest
/// spends much of its time with vCPUs idle, waiting on one check's single
/// thread, so two share a 2-core host well; see docs/figures.md for the
/// measured effect).
pub fn default_jobs() -> usize {
    env::var("NUMALAB_EMU_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(2)
}

/// How a suite run ended.
///
/// ```no_run
/// use numalab_emu::harness::{default_jobs, default_timeout, run_suite, SuiteEnd};
/// use numalab_emu::preset::Presets;
/// use numalab_emu::qemu::BootOptions;
///
/// let presets = Presets::builtin()?;
/// let options = BootOptions {
///     timeout: default_timeout(),
///     checks: None,
///     shell: false,
///     echo: false,
///     kernels: vec!["6.12".into()],
///     jobs: default_jobs(),
/// };
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

/// The kernels of `all` that `wanted` names (a series such as `6.12`, or
/// the start of a release), all of them when `wanted` is empty.
fn chosen_kernels(all: &[Kernel], wanted: &[String]) -> Result<Vec<usize>, String> {
    if wanted.is_empty() {
        return Ok((0..all.len()).collect());
    }
    let mut chosen = Vec::new();
    for want in wanted {
        let found: Vec<usize> = (0..all.len())
            .filter(|&i| {
                all[i].series() == *want
                    || all[i]
                        .release
                        .strip_prefix(want.as_str())
                        .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit()))
            })
            .collect();
        if found.is_empty() {
            return Err(format!(
                "--kernel {want}: no such kernel; the suite found {}",
                all.iter()
                    .map(|k| k.release.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        for i in found {
            if !chosen.contains(&i) {
                chosen.push(i);
            }
        }
    }
    Ok(chosen)
}

/// Prepares the suite and boots every preset of `presets` on every chosen
/// kernel, `options.jobs` guests at a time, printing progress on standard
/// error and results on standard output as each boot ends: a summary and
/// the checks, and for a failed one the diff and the guest's console; at
/// the end, the time of every check on every preset and kernel. A missing
/// prerequisite (the second kernel series included) is a skip outside CI
/// and a failure in CI.
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
    let mut failed = false;
    if let Some(missing) = &suite.prerequisites.missing_kernel {
        if is_ci() {
            println!("numalab-emu: error: {missing} (CI is set, so this is a failure)");
            failed = true;
        } else {
            println!("skipped on one kernel series: {missing}");
        }
    }
    let kernels = match chosen_kernels(&suite.prerequisites.kernels, &options.kernels) {
        // A shell is one guest: the newest kernel unless one was named.
        Ok(kernels) if options.shell => kernels.last().copied().into_iter().collect(),
        Ok(kernels) => kernels,
        Err(err) => {
            println!("numalab-emu: error: {err}");
            return SuiteEnd::Failed;
        }
    };
    for &k in &kernels {
        eprintln!(
            "numalab-emu: Linux {} ({}), initramfs {}",
            suite.prerequisites.kernels[k].release,
            suite.prerequisites.kernels[k].path.display(),
            suite.initramfs[k].display()
        );
    }
    // The biggest machines first, so the last boots to start are short.
    let mut jobs: Vec<(&Preset, usize)> = presets
        .iter()
        .flat_map(|&p| kernels.iter().map(move |&k| (p, k)))
        .collect();
    jobs.sort_by_key(|(p, _)| std::cmp::Reverse(p.weight()));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let runs = std::sync::Mutex::new(Vec::new());
    let workers = options.jobs.clamp(1, jobs.len().max(1));
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(preset, kernel)) = jobs.get(i) else {
                    break;
                };
                eprintln!(
                    "numalab-emu: booting {} on Linux {} ({}), {}",
                    preset.name,
                    suite.prerequisites.kernels[kernel].series(),
                    preset.summary(),
                    preset.about
                );
                let run = suite.run(preset, kernel, options);
                let mut text = format!("{}\n{}", run.summary(), run.checks_table());
                if !run.passed() {
                    text.push_str(&format!("\n{}\n", run.failure_report()));
                }
                let mut runs = runs.lock().unwrap_or_else(|e| e.into_inner());
                print!("{text}");
                runs.push(run);
            });
        }
    });
    let mut runs = runs.into_inner().unwrap_or_else(|e| e.into_inner());
    let order = |run: &PresetRun| {
        (
            presets.iter().position(|p| p.name == run.preset),
            run.kernel.version(),
        )
    };
    runs.sort_by_key(order);
    if runs.len() > 1 {
        print!("\n{}", timing_table(&runs, started.elapsed(), workers));
    }
    if !failed && runs.iter().all(PresetRun::passed) {
        SuiteEnd::Passed
    } else {
        SuiteEnd::Failed
    }
}

/// Where the guest looks for the presets it judges by before its own
/// built-in copy: [`boot_with_expectations`] puts a different file there.
pub const GUEST_PRESETS: &str = "/etc/numalab/presets.toml";

/// How a boot against other expectations ended.
#[derive(Debug)]
pub enum ExpectationRun {
    /// The guest ran its checks: whether they passed, and everything the
    /// suite prints of the run (summary, checks, and for a failure the
    /// expected-versus-found tables and the console).
    Ran {
        /// Every check passed or did not apply.
        passed: bool,
        /// The run as the suite prints it.
        text: String,
    },
    /// A host prerequisite is missing (a failure under CI, for the caller
    /// to decide).
    Skipped(Missing),
    /// The suite could not boot at all.
    Failed(String),
}

/// Boots `preset` — the machine as presets.toml describes it — on the
/// newest kernel found, with the guest judging it by `expectations`
/// instead: a presets file in which the preset of the same name expects
/// something else. This is the path a new preset takes when one of its
/// expectations is wrong; the result says how readable its failure is.
pub fn boot_with_expectations(
    preset: &Preset,
    expectations: &str,
    options: &BootOptions,
) -> ExpectationRun {
    if let Err(err) = crate::preset::Presets::parse(expectations) {
        return ExpectationRun::Failed(format!("the expectations do not read: {err}"));
    }
    let suite = match Suite::prepare() {
        Ok(suite) => suite,
        Err(PrepareError::Missing(missing)) => return ExpectationRun::Skipped(missing),
        Err(PrepareError::Failed(err)) => return ExpectationRun::Failed(format!("{err:#}")),
    };
    let kernel = suite.prerequisites.kernels.len() - 1;
    // The archive with the other presets file appended: Linux unpacks
    // concatenated archives in order, the later file replacing none here.
    let mut extra = Initramfs::new();
    extra.add_bytes(GUEST_PRESETS, expectations.as_bytes().to_vec(), 0o644);
    let path = suite.workdir.join(format!(
        "initramfs-expectations-{}.cpio",
        std::process::id()
    ));
    let written = (|| -> Result<()> {
        let mut archive = std::fs::read(&suite.initramfs[kernel])
            .with_context(|| format!("reading {}", suite.initramfs[kernel].display()))?;
        extra.write_cpio(&mut archive)?;
        std::fs::write(&path, archive).with_context(|| format!("writing {}", path.display()))
    })();
    if let Err(err) = written {
        return ExpectationRun::Failed(format!("{err:#}"));
    }
    let mut suite = suite;
    suite.initramfs[kernel] = path.clone();
    // The guest must boot this archive, even for a preset that would boot
    // the one with Python.
    suite.python_initramfs[kernel] = None;
    let run = suite.run(preset, kernel, options);
    let _ = std::fs::remove_file(&path);
    let mut text = format!("{}\n{}", run.summary(), run.checks_table());
    if !run.passed() {
        text.push_str(&format!("\n{}\n", run.failure_report()));
    }
    ExpectationRun::Ran {
        passed: run.passed(),
        text,
    }
}

/// Every check's time in each guest (one column per preset and kernel),
/// each boot's wall time, and the suite's.
fn timing_table(runs: &[PresetRun], wall: Duration, jobs: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "numalab-emu: seconds per check in each guest (TCG time), and each boot's wall time"
    );
    let mut checks: Vec<&str> = Vec::new();
    for run in runs {
        for result in &run.report.results {
            if !checks.contains(&result.check.as_str()) {
                checks.push(&result.check);
            }
        }
    }
    let width = checks.iter().map(|c| c.len()).max().unwrap_or(5).max(12);
    let columns: Vec<String> = runs
        .iter()
        .map(|r| format!("{} {}", r.preset, r.kernel.series()))
        .collect();
    let column = columns.iter().map(String::len).max().unwrap_or(6).max(6);
    let _ = write!(out, "  {:<width$}", "check");
    for name in &columns {
        let _ = write!(out, " {name:>column$}");
    }
    out.push('\n');
    for check in checks {
        let _ = write!(out, "  {check:<width$}");
        for run in runs {
            let cell = run
                .report
                .results
                .iter()
                .find(|r| r.check == check)
                .map_or_else(
                    || "-".to_owned(),
                    |r| match r.status {
                        Status::Pass => format!("{:.1}", r.seconds),
                        Status::NotApplicable => "n/a".to_owned(),
                        Status::Fail => format!("FAIL {:.1}", r.seconds),
                    },
                );
            let _ = write!(out, " {cell:>column$}");
        }
        out.push('\n');
    }
    let _ = write!(out, "  {:<width$}", "boot (wall)");
    for run in runs {
        let cell = format!(
            "{:.1}{}",
            run.elapsed.as_secs_f64(),
            if run.passed() { "" } else { " FAILED" }
        );
        let _ = write!(out, " {cell:>column$}");
    }
    out.push('\n');
    let total: f64 = runs.iter().map(|r| r.elapsed.as_secs_f64()).sum();
    let _ = writeln!(
        out,
        "  {} boots, {total:.1} s of boots, {:.1} s wall with {jobs} at a time",
        runs.len(),
        wall.as_secs_f64()
    );
    out
}
