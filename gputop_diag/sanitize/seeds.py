"""What an environment names, as data: the variables of schedulers (Slurm, PBS, LSF),
Kubernetes, launchers and experiment trackers whose values are someone's names, read by
`seed_environ` from this shell and from the environments of the job's processes.

Sources: Slurm's sbatch(1) "OUTPUT ENVIRONMENT VARIABLES"; PBS Professional's and IBM Spectrum
LSF's job environment variables (PBS_JOBID, PBS_O_HOST, LSB_JOBID, LSB_HOSTS, ...); the
Kubernetes downward API (POD_NAME, NODE_NAME by convention); PyTorch's torchrun environment
(MASTER_ADDR); Weights & Biases, MLflow, Comet and Neptune environment variables.

`seed_machine`, `seed_environ` and `seed_cwd` are the sanitizer's (`Sanitizer.seed_machine`,
...): they seed a pseudonym table (`table.py`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from . import rules as R
from .run_names import learn_names
from .table import PseudonymTable
from .text import learn

USER_VARS = ("USER", "LOGNAME", "USERNAME", "SUDO_USER", "SLURM_JOB_USER", "PBS_O_LOGNAME")
HOST_VARS = (
    "HOSTNAME",
    "HOST",
    "SLURMD_NODENAME",
    "SLURM_SUBMIT_HOST",
    "SLURM_TOPOLOGY_ADDR",
    "SLURM_LAUNCH_NODE_IPADDR",
    "MASTER_ADDR",
    "PBS_O_HOST",
    "PBS_SERVER",
    "LSB_SUB_HOST",
    "POD_NAME",
    "MY_POD_NAME",
    "K8S_POD_NAME",
    "KUBERNETES_POD_NAME",
    "NODE_NAME",
    "MY_NODE_NAME",
    "KUBERNETES_NODE_NAME",
)
NODELIST_VARS = (
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_STEP_NODELIST",
    "LSB_HOSTS",
    "LSB_MCPU_HOSTS",
)
JOB_ID_VARS = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_ARRAY_JOB_ID", "PBS_JOBID", "LSB_JOBID")
WORD_VARS: dict[str, tuple[str, ...]] = {
    "job_name": (
        "SLURM_JOB_NAME",
        "PBS_JOBNAME",
        "LSB_JOBNAME",
        "WANDB_NAME",
        "WANDB_RUN_NAME",
        "WANDB_RUN_GROUP",
        "WANDB_JOB_NAME",
        "WANDB_RUN_ID",
        "MLFLOW_RUN_NAME",
        "MLFLOW_RUN_ID",
        "COMET_EXPERIMENT_NAME",
        "RUN_NAME",
        "EXPERIMENT_NAME",
        "EXP_NAME",
        "JOB_NAME",
    ),
    "project": (
        "WANDB_PROJECT",
        "WANDB_ENTITY",
        "MLFLOW_EXPERIMENT_NAME",
        "COMET_PROJECT_NAME",
        "COMET_WORKSPACE",
        "NEPTUNE_PROJECT",
        "PROJECT",
        "PROJECT_NAME",
    ),
    "account": ("SLURM_JOB_ACCOUNT", "SLURM_CLUSTER_NAME", "SBATCH_ACCOUNT", "PBS_ACCOUNT"),
    "partition": ("SLURM_JOB_PARTITION", "SBATCH_PARTITION", "PBS_QUEUE", "LSB_QUEUE"),
}
DIR_VARS = ("PWD", "SLURM_SUBMIT_DIR", "PBS_O_WORKDIR", "LS_SUBCWD", "OLDPWD")
# A variable whose value is a secret: seeded, so the value is replaced wherever it shows.
SECRET_VAR = re.compile(
    r"(?i)(?:TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|"
    r"CREDENTIALS?|AUTH)"
)
HOME = re.compile(r"/(?:home|Users)/([^/]+)/?")


def seed_machine(s: PseudonymTable, names: Any) -> None:
    """Seed what the machine knows (`collect.identity.read_machine_names`): its host names,
    this shell's environment and the job's, the job's working directories and command
    lines, the accounts of people, Slurm's answers, the machine's hardware addresses."""
    for h in names.hostnames:
        s.seed_hostname(h)
    seed_environ(s, names.environ)
    for env in getattr(names, "job_environs", ()):
        seed_environ(s, env)
    for cwd in names.cwds:
        seed_cwd(s, cwd)
    for u in names.users:
        s.seed_user(u)
    for args in getattr(names, "cmdlines", ()):
        learn_names(s, args)
    for cls, words in getattr(names, "words", {}).items():
        for word in words:
            if cls == "job":
                s.seed_job(word)
            elif cls == "hostname":
                s.seed_hostname(word)
            elif cls == "user":
                s.seed_user(word)
            else:
                s.seed_word(cls, word)
    learn(s, getattr(names, "texts", ()))


def seed_environ(s: PseudonymTable, environ: Mapping[str, str]) -> None:
    """A process environment: the user, home and working directory, the scheduler's job,
    nodes, account and partition, the run's and project's names, secrets."""
    get = environ.get
    for k in USER_VARS:
        s.seed_user(get(k))
    for k in HOST_VARS:
        s.seed_hostname(get(k))
    for k in NODELIST_VARS:
        for part in re.findall(r"[A-Za-z][\w.-]*(?:\[[\d,\-]+\][\w.-]*)?", get(k, "")):
            for name in R.expand_nodelist(part):
                s.seed_hostname(name)
    for k in JOB_ID_VARS:
        s.seed_job(get(k))
    for cls, keys in WORD_VARS.items():
        for k in keys:
            s.seed_word(cls, get(k))
    for k in DIR_VARS:
        if get(k):
            seed_cwd(s, get(k))
    m = HOME.fullmatch(get("HOME", ""))
    if m:
        s.seed_user(m.group(1))
    for k, v in environ.items():
        if v and SECRET_VAR.search(k) and k not in R.SAFE_ENV:
            s.seed_word("secret", v)


def seed_cwd(s: PseudonymTable, path: str | None) -> None:
    """A job's working directory: its own name is a project's name."""
    if not path or path == "/":
        return
    learn(s, [path])
    base = path.rstrip("/").rsplit("/", 1)[-1]
    if base and not re.fullmatch(r"[\d.]+", base):
        s.seed_word("project", base)
