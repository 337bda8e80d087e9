//! `numalab fleet --sbatch`'s batch script run by a real Slurm: `munged`,
//! `slurmctld` and `slurmd` started for this test alone, one node (this
//! machine, as `slurmd -C` describes it), the script submitted with `sbatch
//! --wait`, and what its one task wrote checked: the report file named
//! after the host, carrying the job's Slurm identity, and the merge.
//!
//! Nothing system-wide is used or touched: the munge key, the socket, the
//! configuration, the state, the spool, the logs and the pid files are in
//! one scratch directory; the ports are free ones found at the start, so a
//! system Slurm is neither reached nor disturbed. Every daemon, every job
//! and every process of a job is ended, and the directory removed, when
//! [`Cluster`] drops, also when the test fails; a failure prints the
//! daemons' logs first. Every wait is bounded.
//!
//! Needs root (the daemons, and `slurmd` starting jobs) and Debian's
//! `slurmctld slurmd slurm-client munge` (`scripts/setup.sh --test`).
//! Without them it prints `skipped: …` and passes, except under `CI=true`,
//! where it fails.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{cannot_check, stderr, stdout, Scratch};

/// The programs the test runs, found on `PATH` or in `/usr/sbin`, `/sbin`.
const PROGRAMS: [&str; 8] = [
    "munged",
    "slurmctld",
    "slurmd",
    "sbatch",
    "sinfo",
    "squeue",
    "scancel",
    "srun",
];
/// The longest the daemons may take to answer: munged's socket, the node idle.
const START: Duration = Duration::from_secs(30);
/// The longest the job may take (a `report --quick` takes seconds).
const JOB: Duration = Duration::from_secs(300);
/// The longest a daemon or a job may take to end once told to.
const STOP: Duration = Duration::from_secs(10);
const CLUSTER_NAME: &str = "numalabtest";
const PARTITION: &str = "numalab";

#[test]
fn fleet_sbatch_script_runs_on_a_real_slurm() {
    let Some(programs) = prerequisites() else {
        return;
    };
    let started = Instant::now();
    let cluster = Cluster::start(programs);
    let up = started.elapsed();

    let work = cluster.scratch.0.join("work");
    let results = work.join("results");
    std::fs::create_dir(&work).unwrap();
    let job_script = work.join("numalab-fleet.sbatch");
    std::fs::write(&job_script, printed_script(&results)).unwrap();

    // `sbatch --wait` ends with the job's exit status: the script's last
    // command, the merge with --fail-on-outliers.
    let mut sbatch = cluster
        .command("sbatch")
        .args(["--parsable", "--wait"])
        .arg(&job_script)
        .current_dir(&work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let Some(status) = wait_bounded(&mut sbatch, JOB) else {
        let _ = sbatch.kill();
        let _ = sbatch.wait();
        panic!(
            "the job did not end within {JOB:?}:\n{}",
            job_outputs(&work)
        );
    };
    let mut said = String::new();
    sbatch
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    let mut complaints = String::new();
    sbatch
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut complaints)
        .unwrap();
    // `--parsable`: "JOBID" or "JOBID;CLUSTER".
    let job_id = said
        .lines()
        .next()
        .and_then(|line| line.split(';').next())
        .unwrap_or_default()
        .trim()
        .to_owned();
    assert!(
        status.success() && job_id.parse::<u64>().is_ok(),
        "sbatch --wait: {status}, printed {said:?}, said {complaints:?}\n{}",
        job_outputs(&work)
    );
    let ran = started.elapsed() - up;

    // The script's merge wrote its table to the job's output and its page
    // beside it.
    let job_out = std::fs::read_to_string(work.join(format!("numalab-fleet-{job_id}.out")))
        .unwrap_or_else(|e| panic!("no output of job {job_id}: {e}\n{}", job_outputs(&work)));
    assert!(
        job_out.contains("1 host from 1 file, in 1 group") && job_out.contains("0 figures flagged"),
        "{job_out}"
    );
    assert!(work.join(format!("numalab-fleet-{job_id}.html")).is_file());

    // One file, named after this host, as the one task wrote it.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned();
    let files: Vec<String> = std::fs::read_dir(&results)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, [format!("{host}.json")], "{job_out}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(results.join(&files[0])).unwrap()).unwrap();
    assert_eq!(report["schema"], "numalab.report");
    assert_eq!(report["host"], host.as_str());
    let slurm = &report["task"]["slurm"];
    assert_eq!(slurm["SLURM_JOB_ID"], job_id.as_str(), "{slurm}");
    assert_eq!(slurm["SLURM_PROCID"], "0", "{slurm}");
    assert_eq!(slurm["SLURM_NODEID"], "0", "{slurm}");
    assert_eq!(slurm["SLURM_NTASKS"], "1", "{slurm}");
    assert_eq!(slurm["SLURM_CLUSTER_NAME"], CLUSTER_NAME, "{slurm}");
    assert_eq!(slurm["SLURM_JOB_PARTITION"], PARTITION, "{slurm}");
    assert_eq!(slurm["SLURMD_NODENAME"], cluster.node.as_str(), "{slurm}");
    assert_eq!(slurm["SLURM_JOB_NAME"], "numalab-fleet", "{slurm}");

    // The merge as JSON: one host in one group, nothing flagged or left out.
    let out = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .arg("fleet")
        .arg(&results)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let merged: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(merged["schema"], "numalab.fleet");
    assert_eq!(merged["groups"].as_array().unwrap().len(), 1, "{merged}");
    assert_eq!(merged["groups"][0]["hosts"], 1, "{}", merged["groups"][0]);
    assert_eq!(merged["outliers"], Value::Array(vec![]));
    assert_eq!(merged["left_out"], Value::Array(vec![]));
    let hosts = merged["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 1, "{hosts:?}");
    assert_eq!(hosts[0]["host"], host.as_str());
    assert_eq!(hosts[0]["group"], 1);
    assert_eq!(hosts[0]["outliers"], 0);
    assert_eq!(hosts[0]["task"]["slurm"]["SLURM_JOB_ID"], job_id.as_str());

    // Everything it started ends, everything it wrote goes.
    let (conf, dir) = (cluster.conf.clone(), cluster.scratch.0.clone());
    drop(cluster);
    assert_eq!(processes_of(&conf), Vec::<u32>::new(), "processes left");
    assert!(!dir.exists(), "{} left", dir.display());
    eprintln!(
        "slurm: daemons up and the node idle in {:.1} s, job {job_id} ran in {:.1} s",
        up.as_secs_f64(),
        ran.as_secs_f64()
    );
}

/// The batch script `numalab fleet --sbatch` prints, its reports going to
/// `results`.
fn printed_script(results: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["fleet", "--sbatch", "--quick", "--out-dir"])
        .arg(results)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

/// The programs' paths, in the order of [`PROGRAMS`]; `None`, having said
/// why, where one is missing or this is not root (a panic under CI).
fn prerequisites() -> Option<Vec<PathBuf>> {
    let found: Vec<Option<PathBuf>> = PROGRAMS.iter().map(|name| find_program(name)).collect();
    let missing: Vec<&str> = PROGRAMS
        .iter()
        .zip(&found)
        .filter(|(_, path)| path.is_none())
        .map(|(name, _)| *name)
        .collect();
    if !missing.is_empty() {
        let why = format!(
            "{} not installed (apt-get install slurmctld slurmd slurm-client munge, \
             or scripts/setup.sh --test)",
            missing.join(", ")
        );
        cannot_check(why);
        return None;
    }
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root {
        let why = "munged, slurmctld and slurmd started by the test need root";
        cannot_check(why);
        return None;
    }
    Some(found.into_iter().flatten().collect())
}

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A one-node Slurm of this test's own: its daemons, its configuration,
/// its scratch directory. Dropping it ends every job, every daemon and
/// every process they started, then removes the directory.
struct Cluster {
    programs: Vec<PathBuf>,
    /// The daemons, in the order started.
    daemons: Vec<(&'static str, Child)>,
    /// `slurm.conf`, named by `SLURM_CONF` in every command and so in the
    /// environment of every process the daemons start.
    conf: PathBuf,
    /// The node's name: this host's short name, as `slurmd -C` says.
    node: String,
    /// Dropped last: removed once everything is ended.
    scratch: Scratch,
}

impl Cluster {
    /// Writes the key and the configuration, starts `munged`, `slurmctld`
    /// and `slurmd`, and waits until the node is idle.
    fn start(programs: Vec<PathBuf>) -> Cluster {
        let scratch = Scratch::new("slurm");
        // munged wants the socket's directory searchable by everyone, the
        // key's not writable by group or others.
        std::fs::set_permissions(&scratch.0, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut cluster = Cluster {
            programs,
            daemons: Vec::new(),
            conf: scratch.0.join("slurm.conf"),
            node: String::new(),
            scratch,
        };
        let dir = cluster.scratch.0.clone();

        // The key, owned by the user munged runs as (root, here), 0400.
        let mut key = [0u8; 1024];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut random| random.read_exact(&mut key))
            .unwrap();
        let key_file = dir.join("munge.key");
        std::fs::write(&key_file, key).unwrap();
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o400)).unwrap();
        let socket = dir.join("munge.socket");
        let mut munged = Command::new(cluster.program("munged"));
        munged
            .arg("--foreground")
            .arg(format!("--key-file={}", key_file.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", dir.join("munged.pid").display()))
            .arg(format!("--log-file={}", dir.join("munged.log").display()))
            .arg(format!("--seed-file={}", dir.join("munged.seed").display()));
        cluster.spawn("munged", munged);
        cluster.wait_for("munged's socket", || socket.exists());

        // This machine as slurmd sees it: "NodeName=host CPUs=… RealMemory=…".
        let out = Command::new(cluster.program("slurmd"))
            .arg("-C")
            .env_remove("SLURM_CONF")
            .output()
            .unwrap();
        let node_line = stdout(&out)
            .lines()
            .find(|line| line.starts_with("NodeName="))
            .unwrap_or_else(|| panic!("slurmd -C: {}{}", stdout(&out), stderr(&out)))
            .trim()
            .to_owned();
        cluster.node = node_line["NodeName=".len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned();
        let (ctld_port, slurmd_port) = free_ports();
        for sub in ["state", "spool"] {
            std::fs::create_dir(dir.join(sub)).unwrap();
        }
        let at = |name: &str| dir.join(name).display().to_string();
        let conf = format!(
            "# Written by numalab's test crates/numalab-cli/tests/cli/slurm.rs\n\
             ClusterName={CLUSTER_NAME}\n\
             SlurmctldHost={node}(127.0.0.1)\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={slurmd_port}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             AuthInfo=socket={socket}\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SelectType=select/cons_tres\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             AccountingStorageType=accounting_storage/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             StateSaveLocation={state}\n\
             SlurmdSpoolDir={spool}\n\
             SlurmctldPidFile={ctld_pid}\n\
             SlurmdPidFile={slurmd_pid}\n\
             SlurmctldLogFile={ctld_log}\n\
             SlurmdLogFile={slurmd_log}\n\
             {node_line} NodeAddr=127.0.0.1 State=UNKNOWN\n\
             PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP\n",
            node = cluster.node,
            socket = socket.display(),
            state = at("state"),
            spool = at("spool"),
            ctld_pid = at("slurmctld.pid"),
            slurmd_pid = at("slurmd.pid"),
            ctld_log = at("slurmctld.log"),
            slurmd_log = at("slurmd.log"),
        );
        std::fs::write(&cluster.conf, conf).unwrap();

        let mut slurmctld = cluster.command("slurmctld");
        slurmctld.arg("-D");
        cluster.spawn("slurmctld", slurmctld);
        let mut slurmd = cluster.command("slurmd");
        slurmd.arg("-D");
        cluster.spawn("slurmd", slurmd);
        let (sinfo, conf) = (cluster.program("sinfo").to_owned(), cluster.conf.clone());
        let idle = format!("{} idle", cluster.node);
        cluster.wait_for("the node idle in sinfo", || {
            let out = slurm_command(&sinfo, &conf)
                .args(["--noheader", "--Node", "--format=%N %T"])
                .output()
                .unwrap();
            out.status.success() && stdout(&out).trim() == idle
        });
        cluster
    }

    fn program(&self, name: &str) -> &Path {
        let at = PROGRAMS.iter().position(|p| *p == name).unwrap();
        &self.programs[at]
    }

    /// `name` with this cluster's configuration.
    fn command(&self, name: &str) -> Command {
        slurm_command(self.program(name), &self.conf)
    }

    /// Starts a daemon, its standard output and error to `<name>.out`.
    fn spawn(&mut self, name: &'static str, mut command: Command) {
        let log = std::fs::File::create(self.scratch.0.join(format!("{name}.out"))).unwrap();
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        self.daemons.push((name, child));
    }

    /// Waits at most [`START`] for `ready`; panics, with the logs, when the
    /// time is up or a daemon has ended.
    fn wait_for(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + START;
        loop {
            if ready() {
                return;
            }
            for (name, child) in &mut self.daemons {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("waiting for {what}: {name} ended, {status}");
                }
            }
            assert!(
                Instant::now() < deadline,
                "waiting for {what}: not within {START:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The end of every log in the scratch directory.
    fn logs(&self) -> String {
        let mut all = String::new();
        let mut names: Vec<PathBuf> = std::fs::read_dir(&self.scratch.0)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "log" || x == "out"))
            .collect();
        names.sort();
        for path in names {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(30)..].join("\n");
            all += &format!("== {}\n{tail}\n", path.display());
        }
        all
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        // Jobs first, while slurmctld can still cancel them.
        if self.daemons.iter().any(|(name, _)| *name == "slurmctld") {
            let _ = self
                .command("scancel")
                .arg(format!("--partition={PARTITION}"))
                .output();
            let deadline = Instant::now() + STOP;
            while Instant::now() < deadline {
                let queued = self.command("squeue").arg("--noheader").output();
                if queued.is_ok_and(|out| !out.status.success() || out.stdout.is_empty()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        // The daemons, last started first: SIGTERM, SIGKILL if they linger.
        while let Some((name, mut child)) = self.daemons.pop() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            if wait_bounded(&mut child, STOP).is_none() {
                eprintln!("{name} did not end within {STOP:?} of SIGTERM: killed");
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // Whatever slurmd started and outlived it (slurmstepd, a job's
        // processes): it carries this cluster's SLURM_CONF.
        let deadline = Instant::now() + STOP;
        loop {
            let left = processes_of(&self.conf);
            if left.is_empty() || Instant::now() >= deadline {
                break;
            }
            for pid in left {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // `scratch` drops next and removes the directory.
    }
}

/// `program` with the configuration `conf` and none of a Slurm job's
/// variables the test may run under.
fn slurm_command(program: &Path, conf: &Path) -> Command {
    let mut command = Command::new(program);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("SLURM") {
            command.env_remove(key);
        }
    }
    command.env("SLURM_CONF", conf);
    command
}

/// The processes, other than this one, whose environment names `conf` as
/// their `SLURM_CONF`.
fn processes_of(conf: &Path) -> Vec<u32> {
    let mut entry = b"SLURM_CONF=".to_vec();
    entry.extend_from_slice(conf.as_os_str().as_encoded_bytes());
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == entry.as_slice()))
        })
        .collect()
}

/// Two TCP ports free now, for slurmctld and slurmd: a system Slurm's
/// 6817 and 6818, or a second run's, are not taken.
fn free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind(("0.0.0.0", 0)).unwrap();
    let b = std::net::TcpListener::bind(("0.0.0.0", 0)).unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

/// `child`'s exit status, waiting at most `limit`; `None` if it still runs.
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What the job wrote to its output, for a failure's message.
fn job_outputs(work: &Path) -> String {
    std::fs::read_dir(work)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "out"))
        .map(|p| {
            format!(
                "== {}\n{}",
                p.display(),
                std::fs::read_to_string(&p).unwrap_or_default()
            )
        })
        .collect()
}
