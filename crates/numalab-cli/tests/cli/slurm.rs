//! numalab on a real Slurm cluster of four compute nodes, all on this
//! machine: `munged`, `slurmctld`, and one `slurmd` per node, each in a
//! UTS and a mount namespace of its own, so that it, its jobs and its
//! health checks see their own host name (`n1` … `n4`), with their own
//! port, spool, log and pid file. In its mount namespace, each node sees a
//! copy of node 0's `meminfo` taken at the start, bind-mounted (a VM that
//! onlines memory as it is used changes node 0's size under a running
//! test); node `n4` is a machine of another kind, with 3/4 of that memory,
//! as a node with DIMMs fewer would be.
//!
//! On it, in one test:
//! 1. the script `numalab fleet --sbatch` prints, on all four nodes: a
//!    report from each, written at once into the job's directory, and a
//!    merge that has every node, in two groups;
//! 2. the same script while node `n3` dies: its task hangs (a `TaskProlog`
//!    stand-in for a node that stops answering), then its `slurmd` and
//!    everything in its namespace are killed. The job ends, the three
//!    other reports are merged, and `n3` is named as missing;
//! 3. `numalab check --baseline … --drain` as slurmd's `HealthCheckProgram`,
//!    the baseline made by `numalab fleet --baseline` from step 1's
//!    reports, with `n2` drained by an administrator first: every node
//!    stays up and `n2`'s drain is untouched; with the baseline's memory
//!    for `n4`'s group changed, `n4` alone is drained with numalab's
//!    reason in `sinfo -R`; with the baseline put right, `n4` is resumed,
//!    `n2` still drained with the administrator's reason.
//!
//! What is compared is Slurm's own account (`sbatch`'s exit status,
//! `sinfo`'s states and reasons) and the files the nodes wrote, never
//! numalab's verdict alone. Every wait is bounded and ends on progress the
//! test can see (a state in `sinfo`, a file written, a health check logged
//! as started and ended), never on elapsed time.
//!
//! Nothing system-wide is used or touched: the munge key, the socket, the
//! configuration, the state, the spools, the logs and the pid files are in
//! one scratch directory; the ports are free ones found at the start, so a
//! system Slurm is neither reached nor disturbed. Every daemon, every job,
//! every process in a node's namespaces and every process carrying this
//! cluster's `SLURM_CONF` is ended, and the directory removed, when
//! [`Cluster`] drops, also when the test fails; a failure prints the
//! daemons' logs first.
//!
//! Needs root (the daemons, namespaces and mounts, `slurmd` starting jobs)
//! and Debian's `slurmctld slurmd slurm-client munge` (`scripts/setup.sh
//! --test`). Without them it prints `skipped: …` and passes, except under
//! `CI=true`, where it fails.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{cannot_check, is_root, stderr, stdout, Scratch};

/// The programs the test runs, found on `PATH` or in `/usr/sbin`, `/sbin`.
const PROGRAMS: [&str; 11] = [
    "munged",
    "slurmctld",
    "slurmd",
    "sbatch",
    "sinfo",
    "squeue",
    "scancel",
    "scontrol",
    "srun",
    "unshare",
    "mount",
];
/// The compute nodes.
const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];
/// The node of another kind: NUMA node 0 with 3/4 of its memory.
const SMALL: &str = "n4";
/// The node that dies in step 2.
const LOST: &str = "n3";
/// The node an administrator drains in step 3.
const ADMIN: &str = "n2";
const ADMIN_REASON: &str = "admin: DIMM replaced, burn-in pending";
/// The longest the daemons may take to answer: munged's socket, a node
/// idle, a node seen down.
const START: Duration = Duration::from_secs(60);
/// The longest a job may take (four `report --quick`, seconds each; with
/// a node lost, slurmctld's `SlurmdTimeout` before it says so).
const JOB: Duration = Duration::from_secs(300);
/// The longest a round of health checks on every node may take.
const ROUND: Duration = Duration::from_secs(180);
/// The longest a daemon or a job may take to end once told to.
const STOP: Duration = Duration::from_secs(10);
const CLUSTER_NAME: &str = "numalabtest";
const PARTITION: &str = "numalab";
/// The fleet's threshold in this test: a figure is flagged only 100 times
/// off its group's median, so that four nodes measuring on two CPUs at
/// once, on a busy host, agree; what is tested is what Slurm does.
const THRESHOLD: &str = "0.01";

#[test]
fn fleet_and_health_check_on_a_four_node_slurm() {
    let Some(programs) = prerequisites() else {
        return;
    };
    let started = Instant::now();
    let mut cluster = Cluster::start(programs);
    let up = started.elapsed();
    let work = cluster.scratch.0.join("work");
    let results = work.join("results");
    std::fs::create_dir(&work).unwrap();
    let job_script = work.join("numalab-fleet.sbatch");
    std::fs::write(&job_script, printed_script(&results)).unwrap();

    // 1. Every node reports; the merge has them all.
    let job = cluster.submit(&job_script, &work);
    let (status, first) = cluster.finish(job, &work);
    assert!(
        status.success(),
        "job {first}: {status}\n{}",
        job_outputs(&work)
    );
    let job_out = job_output(&work, &first);
    assert!(
        job_out.contains("4 hosts from 4 files, in 2 groups")
            && job_out.contains("0 hosts of the 4 expected without a report"),
        "{job_out}"
    );
    assert!(work.join(format!("numalab-fleet-{first}.html")).is_file());
    let first_dir = results.join(&first);
    assert_eq!(file_names(&first_dir), NODES.map(|n| format!("{n}.json")));
    let mut ranks = Vec::new();
    for node in NODES {
        let text = std::fs::read_to_string(first_dir.join(format!("{node}.json"))).unwrap();
        let report: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(report["schema"], "numalab.report");
        assert_eq!(report["host"], node, "the node's own host name");
        let slurm = &report["task"]["slurm"];
        assert_eq!(slurm["SLURMD_NODENAME"], node, "{slurm}");
        assert_eq!(slurm["SLURM_JOB_ID"], first.as_str(), "{slurm}");
        assert_eq!(slurm["SLURM_NTASKS"], "4", "{slurm}");
        assert_eq!(slurm["SLURM_CLUSTER_NAME"], CLUSTER_NAME, "{slurm}");
        assert_eq!(slurm["SLURM_JOB_PARTITION"], PARTITION, "{slurm}");
        assert_eq!(slurm["SLURM_JOB_NAME"], "numalab-fleet", "{slurm}");
        ranks.push(slurm["SLURM_PROCID"].as_str().unwrap_or("?").to_owned());
    }
    ranks.sort();
    assert_eq!(ranks, ["0", "1", "2", "3"], "one task on each node");
    let merged = merge(&first_dir);
    assert_eq!(merged["missing"], Value::Array(vec![]), "{merged}");
    assert_eq!(merged["expected"], 4);
    assert_eq!(groups_of(&merged), [vec!["n1", "n2", "n3"], vec![SMALL]]);
    let measured = started.elapsed() - up;

    // 2. A node dies mid-job: its task hangs, then its slurmd and all it
    // started are killed. The job goes on, the others are merged.
    let hanging = cluster.scratch.0.join(format!("hanging-{LOST}"));
    std::fs::write(cluster.scratch.0.join(format!("hang-{LOST}")), "").unwrap();
    let job = cluster.submit(&job_script, &work);
    cluster.wait_for(&format!("{LOST}'s task started"), JOB, || hanging.exists());
    cluster.kill_node(LOST);
    let (status, second) = cluster.finish(job, &work);
    let job_out = job_output(&work, &second);
    assert_eq!(status.code(), Some(1), "{job_out}");
    assert!(
        job_out.contains(&format!("no report from 1 host of the 4 expected: {LOST}")),
        "{job_out}"
    );
    let second_dir = results.join(&second);
    assert_eq!(file_names(&second_dir), ["n1.json", "n2.json", "n4.json"]);
    let merged = merge(&second_dir);
    assert_eq!(merged["missing"], serde_json::json!([LOST]), "{merged}");
    assert_eq!(merged["hosts"].as_array().unwrap().len(), 3);
    cluster.wait_state(LOST, |state| state.starts_with("down"));
    std::fs::remove_file(cluster.scratch.0.join(format!("hang-{LOST}"))).unwrap();
    cluster.start_node(LOST);
    cluster.wait_idle(LOST);
    let lost = started.elapsed() - up - measured;

    // 3. numalab check as the HealthCheckProgram, on a baseline of the
    // nodes' own reports.
    let baseline = cluster.scratch.0.join("baseline.json");
    let out = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .arg("fleet")
        .arg(&first_dir)
        .args(["--threshold", THRESHOLD, "--baseline"])
        .arg(&baseline)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let good = std::fs::read_to_string(&baseline).unwrap();
    cluster.scontrol(&[
        "update",
        &format!("NodeName={ADMIN}"),
        "State=DRAIN",
        &format!("Reason={ADMIN_REASON}"),
    ]);
    cluster.enable_health_checks(&baseline);

    let round = cluster.health_round();
    assert_eq!(
        round,
        [("n1", 0), ("n2", 0), ("n3", 0), ("n4", 0)].map(|(n, c)| (n.to_owned(), c)),
        "every node healthy by the baseline of its own reports"
    );
    assert_eq!(
        drained(&cluster),
        [(ADMIN.to_owned(), ADMIN_REASON.to_owned())].into(),
        "no node drained but the administrator's"
    );

    // The baseline's memory for n4's group doubled: n4 alone is drained.
    let mut wrong: Value = serde_json::from_str(&good).unwrap();
    let group = wrong["groups"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|g| g["hosts"] == serde_json::json!([SMALL]))
        .unwrap_or_else(|| panic!("no group of {SMALL} alone in {good}"));
    let memory = &mut group["fingerprint"]["nodes"][0]["memory_bytes"];
    *memory = (memory.as_u64().unwrap() * 2).into();
    replace(&baseline, &wrong.to_string());
    let round = cluster.health_round();
    assert_eq!(round[3], (SMALL.to_owned(), 1), "{round:?}");
    let reasons = drained(&cluster);
    let listed = cluster.output("sinfo", &["-R", "--format=%N %E"]);
    assert_eq!(reasons.len(), 2, "{listed}");
    assert_eq!(reasons[ADMIN], ADMIN_REASON, "{listed}");
    assert!(
        reasons[SMALL].starts_with(
            "numalab check: no baseline group has this machine's fingerprint; nearest is group"
        ) && reasons[SMALL].contains("node 0: memory"),
        "{listed}"
    );
    let states = cluster_states(&cluster);
    assert!(
        ["n1", "n3"].iter().all(|n| states[*n] == "idle"),
        "{states:?}"
    );

    // Put right: n4 is resumed, the administrator's drain stays.
    replace(&baseline, &good);
    let round = cluster.health_round();
    assert_eq!(round[3], (SMALL.to_owned(), 0), "{round:?}");
    assert_eq!(
        drained(&cluster),
        [(ADMIN.to_owned(), ADMIN_REASON.to_owned())].into()
    );
    assert_eq!(cluster_states(&cluster)[SMALL], "idle");
    let checked = started.elapsed() - up - measured - lost;

    // Everything it started ends, everything it wrote goes.
    let (conf, dir) = (cluster.conf.clone(), cluster.scratch.0.clone());
    let namespaces = cluster.namespaces.clone();
    drop(cluster);
    assert_eq!(processes_of(&conf, &namespaces), Vec::<u32>::new(), "left");
    assert!(!dir.exists(), "{} left", dir.display());
    eprintln!(
        "slurm: 4 nodes idle in {:.1} s; fleet job {first} and the job losing {LOST} in {:.1} s; \
         health checks (3 rounds) in {:.1} s. sinfo -R with {SMALL}'s baseline wrong:\n{listed}",
        up.as_secs_f64(),
        measured.as_secs_f64() + lost.as_secs_f64(),
        checked.as_secs_f64()
    );
}

/// The batch script `numalab fleet --sbatch` prints, its reports going
/// under `results`, the merge allowing the two kinds of node.
fn printed_script(results: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["fleet", "--sbatch", "--quick", "--max-groups", "2"])
        .args(["--threshold", THRESHOLD, "--out-dir"])
        .arg(results)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

/// `numalab fleet DIR --expect n[1-4] --json`, by the test.
fn merge(dir: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .arg("fleet")
        .arg(dir)
        .args(["--expect", "n[1-4]", "--threshold", THRESHOLD, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let merged: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(merged["schema"], "numalab.fleet");
    merged
}

/// The host names of each group of a merge, by group.
fn groups_of(merged: &Value) -> Vec<Vec<String>> {
    let mut groups: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for host in merged["hosts"].as_array().unwrap() {
        let group = host["group"].as_u64().unwrap();
        let name = host["host"].as_str().unwrap().to_owned();
        groups.entry(group).or_default().push(name);
    }
    groups.into_values().collect()
}

/// The names in `dir`, sorted.
fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Writes `text` to `path` as one change (a new file renamed over it), as
/// an administrator installs a baseline.
fn replace(path: &Path, text: &str) {
    let new = path.with_extension("new");
    std::fs::write(&new, text).unwrap();
    std::fs::rename(&new, path).unwrap();
}

/// Each node's state in `sinfo` (`idle`, `drained`, `down*`, …).
fn cluster_states(cluster: &Cluster) -> BTreeMap<String, String> {
    sinfo_by_node(cluster, &["--noheader", "--Node", "--format=%N|%T"])
}

/// Each node drained (or down) with a reason, and the reason, as `sinfo
/// -R` lists them.
fn drained(cluster: &Cluster) -> BTreeMap<String, String> {
    sinfo_by_node(cluster, &["-R", "--noheader", "--format=%N|%E"])
}

/// `sinfo ARGS`, whose format prints `node|field` lines, by node.
fn sinfo_by_node(cluster: &Cluster, args: &[&str]) -> BTreeMap<String, String> {
    let out = cluster.output("sinfo", args);
    out.lines()
        .filter_map(|line| line.split_once('|'))
        .map(|(node, field)| (node.to_owned(), field.trim().to_owned()))
        .collect()
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
            "{} not installed (apt-get install slurmctld slurmd slurm-client munge util-linux \
             mount, or scripts/setup.sh --test)",
            missing.join(", ")
        );
        cannot_check(why);
        return None;
    }
    if !is_root() {
        let why = "munged, slurmctld, slurmd and the nodes' namespaces need root";
        cannot_check(why);
        return None;
    }
    Some(found.into_iter().flatten().collect())
}

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into(), "/usr/bin".into()])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A four-node Slurm of this test's own: its daemons, its configuration,
/// its scratch directory. Dropping it ends every job, every daemon and
/// every process they started, then removes the directory.
struct Cluster {
    programs: Vec<PathBuf>,
    /// The daemons, in the order started: `munged`, `slurmctld`, then
    /// `slurmd n1` and so on.
    daemons: Vec<(String, Child)>,
    /// `slurm.conf`, named by `SLURM_CONF` in every command and so in the
    /// environment of every process the daemons start.
    conf: PathBuf,
    /// Each node's `slurmd` port.
    ports: BTreeMap<&'static str, u16>,
    /// The UTS namespaces of the nodes (`uts:[…]`), every one they had.
    namespaces: Vec<String>,
    /// The health checks' log: `<node> start`, `<node> end <status>`.
    health_log: PathBuf,
    /// Dropped last: removed once everything is ended.
    scratch: Scratch,
}

impl Cluster {
    /// Writes the key and the configuration, starts `munged`, `slurmctld`
    /// and the nodes' `slurmd`s, and waits until every node is idle.
    fn start(programs: Vec<PathBuf>) -> Cluster {
        let scratch = Scratch::new("slurm");
        // munged wants the socket's directory searchable by everyone, the
        // key's not writable by group or others.
        std::fs::set_permissions(&scratch.0, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = scratch.0.clone();
        let mut cluster = Cluster {
            programs,
            daemons: Vec::new(),
            conf: dir.join("slurm.conf"),
            ports: BTreeMap::new(),
            namespaces: Vec::new(),
            health_log: dir.join("health.log"),
            scratch,
        };

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
        cluster.spawn("munged".into(), munged);
        cluster.wait_for("munged's socket", START, || socket.exists());

        // This machine as slurmd sees it: "NodeName=host CPUs=… RealMemory=…";
        // each node is described so, under its own name.
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
        let hardware = node_line
            .split_once(' ')
            .map_or("", |(_, rest)| rest)
            .to_owned();
        // The controller's host must be this host's name, as slurmctld
        // checks; its address is the loopback, as every node's.
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap()
            .trim()
            .split('.')
            .next()
            .unwrap()
            .to_owned();
        let ports = free_ports(1 + NODES.len());
        for (node, port) in NODES.iter().zip(&ports[1..]) {
            cluster.ports.insert(node, *port);
        }
        for sub in ["state", "spool"] {
            std::fs::create_dir(dir.join(sub)).unwrap();
        }
        for node in NODES {
            std::fs::create_dir(dir.join("spool").join(node)).unwrap();
        }
        let at = |name: &str| dir.join(name).display().to_string();
        let mut conf = format!(
            "# Written by numalab's test crates/numalab-cli/tests/cli/slurm.rs\n\
             ClusterName={CLUSTER_NAME}\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={ctld_port}\n\
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
             SlurmdTimeout=10\n\
             AccountingStorageType=accounting_storage/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             StateSaveLocation={state}\n\
             SlurmdSpoolDir={spool}/%n\n\
             SlurmctldPidFile={ctld_pid}\n\
             SlurmdPidFile={slurmd_pid}\n\
             SlurmctldLogFile={ctld_log}\n\
             SlurmdLogFile={slurmd_log}\n\
             TaskProlog={prolog}\n",
            ctld_port = ports[0],
            socket = socket.display(),
            state = at("state"),
            spool = at("spool"),
            ctld_pid = at("slurmctld.pid"),
            slurmd_pid = at("slurmd-%n.pid"),
            ctld_log = at("slurmctld.log"),
            slurmd_log = at("slurmd-%n.log"),
            prolog = at("task-prolog"),
        );
        for (node, port) in &cluster.ports {
            conf += &format!(
                "NodeName={node} NodeAddr=127.0.0.1 Port={port} {hardware} State=UNKNOWN\n"
            );
        }
        conf += &format!(
            "PartitionName={PARTITION} Nodes=n[1-{}] Default=YES MaxTime=INFINITE State=UP\n",
            NODES.len()
        );
        std::fs::write(&cluster.conf, conf).unwrap();

        // Before each task: on a node told to hang (a file hang-<node>),
        // say so and wait, as a node that stops answering.
        let prolog = format!(
            "#!/bin/sh\n\
             node=$(cat /proc/sys/kernel/hostname)\n\
             if [ -e {dir}/hang-$node ]; then\n\
             \x20   : > {dir}/hanging-$node\n\
             \x20   while :; do sleep 1; done\n\
             fi\n",
            dir = dir.display()
        );
        std::fs::write(dir.join("task-prolog"), prolog).unwrap();
        std::fs::set_permissions(
            dir.join("task-prolog"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();

        // Node 0's memory as each node sees it, fixed for the whole test:
        // a VM may online memory as it is used, so that node 0's MemTotal
        // grows (this development VM's does) and a node would no longer
        // match its own baseline. n1 to n3 see this machine's as it is
        // now, n4 3/4 of it.
        let meminfo = std::fs::read_to_string("/sys/devices/system/node/node0/meminfo").unwrap();
        let scaled = |times: u64, by: u64| -> String {
            meminfo
                .lines()
                .map(|line| match line.split_once("MemTotal:") {
                    Some((head, kb)) => {
                        let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().unwrap();
                        format!("{head}MemTotal: {:>15} kB\n", kb / by * times)
                    }
                    None => format!("{line}\n"),
                })
                .collect()
        };
        std::fs::write(dir.join("meminfo"), scaled(1, 1)).unwrap();
        std::fs::write(dir.join("small-meminfo"), scaled(3, 4)).unwrap();

        let mut slurmctld = cluster.command("slurmctld");
        slurmctld.arg("-D");
        cluster.spawn("slurmctld".into(), slurmctld);
        for node in NODES {
            cluster.start_node(node);
        }
        for node in NODES {
            cluster.wait_idle(node);
        }
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

    /// What `name args` prints; panics when it fails.
    fn output(&self, name: &str, args: &[&str]) -> String {
        let out = self.command(name).args(args).output().unwrap();
        assert!(out.status.success(), "{name} {args:?}: {}", stderr(&out));
        stdout(&out)
    }

    fn scontrol(&self, args: &[&str]) {
        self.output("scontrol", args);
    }

    /// Starts `node`'s slurmd in new UTS and mount namespaces: the host
    /// name the node's, node 0's `meminfo` the test's copy (3/4 of the
    /// memory for [`SMALL`]).
    fn start_node(&mut self, node: &'static str) {
        let meminfo = self.scratch.0.join(if node == SMALL {
            "small-meminfo"
        } else {
            "meminfo"
        });
        let mount = format!(
            "{} --bind {} /sys/devices/system/node/node0/meminfo && ",
            self.program("mount").display(),
            meminfo.display()
        );
        // `/sys` made private in the new namespace, so that the bind mount
        // stays there (not `--propagation private`, which changes `/` and
        // fails where `/` is no mount point: in a chroot).
        let mut slurmd = self.command("unshare");
        slurmd
            .args([
                "--uts",
                "--mount",
                "--propagation",
                "unchanged",
                "--",
                "sh",
                "-c",
            ])
            .arg(format!(
                "{} --make-rprivate /sys && echo {node} > /proc/sys/kernel/hostname && \
                 {mount}exec \"$0\" -D -N {node}",
                self.program("mount").display()
            ))
            .arg(self.program("slurmd"));
        self.spawn(format!("slurmd {node}"), slurmd);
    }

    /// Waits at most [`START`] until `node`'s state in `sinfo` is one
    /// `wanted` takes.
    fn wait_state(&mut self, node: &str, wanted: impl Fn(&str) -> bool) {
        let conf = self.conf.clone();
        let sinfo = self.program("sinfo").to_owned();
        let mut last = String::new();
        self.wait_for(&format!("{node}'s state in sinfo"), START, || {
            let out = slurm_command(&sinfo, &conf)
                .args(["--noheader", "--Node", "--format=%T", "--nodes", node])
                .output()
                .unwrap();
            last = stdout(&out).trim().to_owned();
            out.status.success() && wanted(&last)
        });
    }

    /// Waits until `node` is idle in `sinfo`, and notes its namespace.
    fn wait_idle(&mut self, node: &str) {
        self.wait_state(node, |state| state == "idle");
        let pid = self.daemon(&format!("slurmd {node}")).id();
        let namespace = std::fs::read_link(format!("/proc/{pid}/ns/uts")).unwrap();
        self.namespaces
            .push(namespace.to_string_lossy().into_owned());
    }

    fn daemon(&self, name: &str) -> &Child {
        let (_, child) = self.daemons.iter().find(|(n, _)| n == name).unwrap();
        child
    }

    /// `node` dies: its slurmd and every process in its namespaces, killed.
    fn kill_node(&mut self, node: &str) {
        let name = format!("slurmd {node}");
        let at = self.daemons.iter().position(|(n, _)| *n == name).unwrap();
        let (_, mut child) = self.daemons.remove(at);
        let namespace = std::fs::read_link(format!("/proc/{}/ns/uts", child.id())).unwrap();
        let namespace = namespace.to_string_lossy().into_owned();
        kill_all(&processes_in(&[namespace]));
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Submits `script` from `work` with `sbatch --wait`.
    fn submit(&self, script: &Path, work: &Path) -> Child {
        self.command("sbatch")
            .args(["--parsable", "--wait", "--nodes", &NODES.len().to_string()])
            .arg(script)
            .current_dir(work)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The end of a job `submit` started: `sbatch --wait`'s exit status
    /// (the job's) and the job's id.
    fn finish(&self, mut sbatch: Child, work: &Path) -> (ExitStatus, String) {
        let Some(status) = wait_bounded(&mut sbatch, JOB) else {
            let _ = sbatch.kill();
            let _ = sbatch.wait();
            panic!("the job did not end within {JOB:?}:\n{}", job_outputs(work));
        };
        let mut said = String::new();
        sbatch
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut said)
            .unwrap();
        // `--parsable`: "JOBID" or "JOBID;CLUSTER".
        let job = said
            .lines()
            .next()
            .and_then(|line| line.split(';').next())
            .unwrap_or_default()
            .trim()
            .to_owned();
        if job.parse::<u64>().is_err() {
            let mut complaints = String::new();
            let _ = sbatch
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut complaints);
            panic!("sbatch --wait: {status}, printed {said:?}, said {complaints:?}");
        }
        (status, job)
    }

    /// Makes `numalab check --baseline BASELINE --drain` every node's
    /// HealthCheckProgram (through a script that logs each check's start
    /// and end), and has the daemons read the configuration again.
    fn enable_health_checks(&self, baseline: &Path) {
        let program = self.scratch.0.join("health-check");
        // slurmd runs its health check with an environment of its own:
        // scontrol is told where this cluster's configuration is.
        let script = format!(
            "#!/bin/sh\n\
             export SLURM_CONF={conf}\n\
             node=$(cat /proc/sys/kernel/hostname)\n\
             echo \"$node start\" >> {log}\n\
             {numalab} check --baseline {baseline} --drain >>{log}.out 2>>{log}.err\n\
             echo \"$node end $?\" >> {log}\n",
            conf = self.conf.display(),
            log = self.health_log.display(),
            numalab = env!("CARGO_BIN_EXE_numalab"),
            baseline = baseline.display(),
        );
        std::fs::write(&program, script).unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut conf = std::fs::read_to_string(&self.conf).unwrap();
        conf += &format!(
            "HealthCheckProgram={}\nHealthCheckInterval=5\nHealthCheckNodeState=IDLE\n",
            program.display()
        );
        std::fs::write(&self.conf, conf).unwrap();
        self.scontrol(&["reconfigure"]);
    }

    /// Waits for a round of health checks: on every node, one that
    /// started after this call and ended. Returns each node's exit
    /// status, by node.
    fn health_round(&mut self) -> Vec<(String, i32)> {
        let log = self.health_log.clone();
        let from = std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
        let mut round = Vec::new();
        self.wait_for("a health check on every node", ROUND, || {
            let text = std::fs::read(&log).unwrap_or_default();
            let text = String::from_utf8_lossy(&text[from.min(text.len())..]).into_owned();
            let mut started = BTreeMap::new();
            let mut ended = BTreeMap::new();
            for line in text.lines() {
                let words: Vec<&str> = line.split(' ').collect();
                match words[..] {
                    [node, "start"] => {
                        started.insert(node.to_owned(), ());
                    }
                    [node, "end", status] if started.contains_key(node) => {
                        ended
                            .entry(node.to_owned())
                            .or_insert_with(|| status.parse::<i32>().unwrap_or(-1));
                    }
                    _ => {}
                }
            }
            round = ended.into_iter().collect();
            round.len() == NODES.len()
        });
        round
    }

    /// Starts a daemon, its standard output and error to `<name>.out`.
    fn spawn(&mut self, name: String, mut command: Command) {
        let file = self
            .scratch
            .0
            .join(format!("{}.out", name.replace(' ', "-")));
        let log = std::fs::File::create(file).unwrap();
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        self.daemons.push((name, child));
    }

    /// Waits at most `limit` for `ready`; panics, with the logs, when the
    /// time is up or a daemon has ended.
    fn wait_for(&mut self, what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
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
                "waiting for {what}: not within {limit:?}"
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
            .filter(|p| {
                p.extension()
                    .is_some_and(|x| x == "log" || x == "out" || x == "err")
            })
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
        if self.daemons.iter().any(|(name, _)| name == "slurmctld") {
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
        // Whatever the daemons started and outlived them (slurmstepd, a
        // job's processes, a health check): in a node's namespace, or
        // carrying this cluster's SLURM_CONF.
        let deadline = Instant::now() + STOP;
        loop {
            let left = processes_of(&self.conf, &self.namespaces);
            if left.is_empty() || Instant::now() >= deadline {
                break;
            }
            kill_all(&left);
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
/// their `SLURM_CONF`, or that are in one of the UTS `namespaces`.
fn processes_of(conf: &Path, namespaces: &[String]) -> Vec<u32> {
    let mut entry = b"SLURM_CONF=".to_vec();
    entry.extend_from_slice(conf.as_os_str().as_encoded_bytes());
    let mut pids: Vec<u32> = all_processes()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == entry.as_slice()))
        })
        .chain(processes_in(namespaces))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The processes in one of the UTS `namespaces`.
fn processes_in(namespaces: &[String]) -> Vec<u32> {
    all_processes()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/uts"))
                .is_ok_and(|ns| namespaces.iter().any(|n| ns.as_os_str() == n.as_str()))
        })
        .collect()
}

/// Every process but this one.
fn all_processes() -> impl Iterator<Item = u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(move |pid| *pid != me)
}

fn kill_all(pids: &[u32]) {
    for pid in pids {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
}

/// `count` TCP ports free now, for slurmctld and the slurmds: a system
/// Slurm's 6817 and 6818, or a second run's, are not taken.
fn free_ports(count: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..count)
        .map(|_| std::net::TcpListener::bind(("0.0.0.0", 0)).unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
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

/// The output of job `job`.
fn job_output(work: &Path, job: &str) -> String {
    std::fs::read_to_string(work.join(format!("numalab-fleet-{job}.out")))
        .unwrap_or_else(|e| panic!("no output of job {job}: {e}\n{}", job_outputs(work)))
}

/// What the jobs wrote to their output, for a failure's message.
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
