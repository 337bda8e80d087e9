//! Which task of which job wrote a report, as the launcher's environment
//! variables say: Slurm, Open MPI, PMI, PMIx, PBS and a Kubernetes indexed
//! Job. numalab links no MPI and starts nothing across hosts: it reads the
//! variables the launcher already set, by name, and records those present
//! under the launcher that sets them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The Slurm variables recorded (`srun` sets them in every task).
pub const SLURM_VARS: &[&str] = &[
    "SLURM_CLUSTER_NAME",
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_PARTITION",
    "SLURM_JOB_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    "SLURM_NODEID",
    "SLURM_LOCALID",
    "SLURM_NTASKS",
    "SLURMD_NODENAME",
];

/// The Open MPI variables recorded (`mpirun` sets them).
pub const OPEN_MPI_VARS: &[&str] = &[
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_NODE_RANK",
];

/// The PMI variables recorded (MPICH's and Intel MPI's Hydra set them).
pub const PMI_VARS: &[&str] = &["PMI_RANK", "PMI_SIZE"];

/// The PMIx variables recorded (PRRTE, `srun --mpi=pmix`).
pub const PMIX_VARS: &[&str] = &["PMIX_RANK", "PMIX_NAMESPACE"];

/// The PBS variables recorded (`pbsdsh`, `mpiexec` under PBS Pro and
/// Torque).
pub const PBS_VARS: &[&str] = &["PBS_JOBID", "PBS_JOBNAME", "PBS_NODENUM", "PBS_TASKNUM"];

/// The Kubernetes variables recorded, when the task runs in a pod (one of
/// `KUBERNETES_SERVICE_HOST` or `JOB_COMPLETION_INDEX` is set):
/// `JOB_COMPLETION_INDEX` (an indexed Job), `HOSTNAME` (the pod's name),
/// and `NODE_NAME`, `POD_NAME`, `POD_NAMESPACE` when the pod's spec sets
/// them from the downward API.
pub const KUBERNETES_VARS: &[&str] = &[
    "JOB_COMPLETION_INDEX",
    "HOSTNAME",
    "NODE_NAME",
    "POD_NAME",
    "POD_NAMESPACE",
];

/// The longest value kept, in bytes; a longer one (a node list of
/// thousands of hosts) is cut and ends in `…`.
pub const MAX_VALUE_BYTES: usize = 4096;

/// The launcher's variables present when the report was written, by
/// launcher; a launcher none of whose variables is set is left out.
///
/// ```
/// use numalab_bench::host::TaskIdentity;
///
/// let task = TaskIdentity::from_vars([
///     ("SLURM_JOB_ID", "4242"),
///     ("SLURM_PROCID", "7"),
///     ("SLURM_NODEID", "7"),
///     ("HOME", "/home/me"),
/// ]);
/// assert_eq!(task.slurm["SLURM_JOB_ID"], "4242");
/// assert_eq!(task.rank(), Some(7));
/// assert_eq!(task.summary(), "slurm job 4242 rank 7 node 7");
/// assert!(task.open_mpi.is_empty() && task.kubernetes.is_empty());
/// let json = serde_json::to_string(&task)?;
/// assert_eq!(json, r#"{"slurm":{"SLURM_JOB_ID":"4242","SLURM_NODEID":"7","SLURM_PROCID":"7"}}"#);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskIdentity {
    /// Slurm's variables ([`SLURM_VARS`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub slurm: BTreeMap<String, String>,
    /// Open MPI's ([`OPEN_MPI_VARS`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub open_mpi: BTreeMap<String, String>,
    /// PMI's ([`PMI_VARS`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pmi: BTreeMap<String, String>,
    /// PMIx's ([`PMIX_VARS`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pmix: BTreeMap<String, String>,
    /// PBS's ([`PBS_VARS`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pbs: BTreeMap<String, String>,
    /// Kubernetes' ([`KUBERNETES_VARS`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kubernetes: BTreeMap<String, String>,
}

impl TaskIdentity {
    /// This process's identity, from its environment.
    pub fn current() -> TaskIdentity {
        let names = [
            SLURM_VARS,
            OPEN_MPI_VARS,
            PMI_VARS,
            PMIX_VARS,
            PBS_VARS,
            KUBERNETES_VARS,
            &["KUBERNETES_SERVICE_HOST"],
        ];
        TaskIdentity::from_vars(
            names
                .iter()
                .flat_map(|names| names.iter())
                .filter_map(|&name| {
                    let value = std::env::var_os(name)?;
                    Some((name, value.to_string_lossy().into_owned()))
                }),
        )
    }

    /// The identity these variables give; names numalab does not record
    /// are passed over, values are cut to [`MAX_VALUE_BYTES`].
    pub fn from_vars<K, V>(vars: impl IntoIterator<Item = (K, V)>) -> TaskIdentity
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut task = TaskIdentity::default();
        let mut in_pod = false;
        let mut kubernetes = BTreeMap::new();
        for (name, value) in vars {
            let (name, value) = (name.as_ref(), cut(value.as_ref()));
            let table = if SLURM_VARS.contains(&name) {
                &mut task.slurm
            } else if OPEN_MPI_VARS.contains(&name) {
                &mut task.open_mpi
            } else if PMI_VARS.contains(&name) {
                &mut task.pmi
            } else if PMIX_VARS.contains(&name) {
                &mut task.pmix
            } else if PBS_VARS.contains(&name) {
                &mut task.pbs
            } else if KUBERNETES_VARS.contains(&name) {
                in_pod |= name == "JOB_COMPLETION_INDEX";
                &mut kubernetes
            } else {
                in_pod |= name == "KUBERNETES_SERVICE_HOST";
                continue;
            };
            table.insert(name.to_owned(), value);
        }
        // HOSTNAME is set in every shell: it names a pod only in one.
        if in_pod {
            task.kubernetes = kubernetes;
        }
        task
    }

    /// Whether no launcher's variable was present.
    pub fn is_empty(&self) -> bool {
        self == &TaskIdentity::default()
    }

    /// The task's rank: `SLURM_PROCID`, `OMPI_COMM_WORLD_RANK`,
    /// `PMIX_RANK`, `PMI_RANK`, `PBS_TASKNUM` or `JOB_COMPLETION_INDEX`,
    /// the first present.
    pub fn rank(&self) -> Option<u64> {
        [
            self.slurm.get("SLURM_PROCID"),
            self.open_mpi.get("OMPI_COMM_WORLD_RANK"),
            self.pmix.get("PMIX_RANK"),
            self.pmi.get("PMI_RANK"),
            self.pbs.get("PBS_TASKNUM"),
            self.kubernetes.get("JOB_COMPLETION_INDEX"),
        ]
        .into_iter()
        .flatten()
        .find_map(|v| v.parse().ok())
    }

    /// The identity in brief, `slurm job 4242 rank 7 node 7`, `open_mpi
    /// rank 3 of 16`, `kubernetes index 5 pod numalab-5-x7k2p`; empty
    /// when nothing was recorded.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        let mut say = |words: &[(&str, Option<&String>)]| {
            let said: Vec<String> = words
                .iter()
                .filter_map(|(word, value)| Some(format!("{word} {}", (*value)?)))
                .collect();
            if !said.is_empty() {
                parts.push(said.join(" "));
            }
        };
        if !self.slurm.is_empty() {
            say(&[
                ("slurm job", self.slurm.get("SLURM_JOB_ID")),
                ("step", self.slurm.get("SLURM_STEP_ID")),
                ("rank", self.slurm.get("SLURM_PROCID")),
                ("node", self.slurm.get("SLURM_NODEID")),
            ]);
        }
        let (rank, size) = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
        say(&[
            ("open_mpi rank", self.open_mpi.get(rank)),
            ("of", self.open_mpi.get(size)),
        ]);
        say(&[
            ("pmi rank", self.pmi.get("PMI_RANK")),
            ("of", self.pmi.get("PMI_SIZE")),
        ]);
        say(&[("pmix rank", self.pmix.get("PMIX_RANK"))]);
        say(&[
            ("pbs job", self.pbs.get("PBS_JOBID")),
            ("node", self.pbs.get("PBS_NODENUM")),
        ]);
        if !self.kubernetes.is_empty() {
            say(&[
                (
                    "kubernetes index",
                    self.kubernetes.get("JOB_COMPLETION_INDEX"),
                ),
                (
                    "pod",
                    self.kubernetes
                        .get("POD_NAME")
                        .or(self.kubernetes.get("HOSTNAME")),
                ),
                ("node", self.kubernetes.get("NODE_NAME")),
            ]);
        }
        parts.join("; ")
    }
}

/// `value` cut to [`MAX_VALUE_BYTES`] at a character boundary.
fn cut(value: &str) -> String {
    if value.len() <= MAX_VALUE_BYTES {
        return value.to_owned();
    }
    let mut end = MAX_VALUE_BYTES;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &value[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shells_hostname_is_not_a_pod() {
        let task = TaskIdentity::from_vars([("HOSTNAME", "login1")]);
        assert!(task.is_empty(), "{task:?}");
        let pod = TaskIdentity::from_vars([
            ("HOSTNAME", "numalab-3-abcde"),
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
            ("JOB_COMPLETION_INDEX", "3"),
        ]);
        assert_eq!(pod.kubernetes.len(), 2, "{pod:?}");
        assert_eq!(pod.rank(), Some(3));
        assert_eq!(pod.summary(), "kubernetes index 3 pod numalab-3-abcde");
    }

    #[test]
    fn every_launcher_is_named_by_its_source() {
        let task = TaskIdentity::from_vars([
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "16"),
            ("PMI_RANK", "3"),
            ("PMIX_RANK", "3"),
            ("PBS_JOBID", "12.pbs"),
        ]);
        assert_eq!(
            task.summary(),
            "open_mpi rank 3 of 16; pmi rank 3; pmix rank 3; pbs job 12.pbs"
        );
        assert_eq!(task.rank(), Some(3));
    }

    #[test]
    fn long_values_are_cut() {
        let list = "n".repeat(MAX_VALUE_BYTES + 10);
        let task = TaskIdentity::from_vars([("SLURM_JOB_NODELIST", list.as_str())]);
        let kept = &task.slurm["SLURM_JOB_NODELIST"];
        assert!(kept.ends_with('…') && kept.len() == MAX_VALUE_BYTES + '…'.len_utf8());
    }
}
