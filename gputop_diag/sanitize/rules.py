"""What the sanitizer (`sanitizer.py`) recognises, as data: the identifier classes with their
pseudonym prefixes, the shapes it finds in free text, and the allow-lists of what survives.

Shapes follow what NVML and the tools print (nvidia-smi(1), NVML's `nvmlDeviceGetUUID`: GPU UUIDs,
MIG UUIDs, board serials, PCI bus ids, MACs and InfiniBand GUIDs, Slurm ids and node lists,
container ids) and `sos clean`'s parsers (host names seeded from the machine, IPv4/IPv6, MACs, user
names seeded, not guessed).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from .vocabulary import SAFE_PROGRAM


@dataclass(frozen=True, slots=True)
class IdClass:
    key: str
    label: str  # what the redaction summary calls it
    prefix: str | None  # the pseudonym's prefix; None: removed, not replaced
    leak_checked: bool = True  # a surviving original counts as a leak


# In the order the redaction summary lists them.
CLASSES: dict[str, IdClass] = {
    c.key: c
    for c in (
        IdClass("hostname", "host names and FQDNs", "host"),
        IdClass("domain", "domain names", "domain"),
        IdClass("nodelist", "Slurm node lists", "nodes"),
        IdClass("ipv4", "IPv4 addresses", "ip"),
        IdClass("ipv6", "IPv6 addresses", "ip6"),
        IdClass("mac", "MAC addresses and hardware addresses", "mac"),
        IdClass("ib_guid", "InfiniBand GUIDs", "guid"),
        IdClass("gpu_uuid", "GPU UUIDs", "GPU"),
        IdClass("mig_uuid", "MIG UUIDs", "MIG"),
        IdClass("uuid", "other UUIDs", "uuid"),
        IdClass("serial", "board serials and board ids", "serial"),
        IdClass("pci", "PCI bus ids", "pci"),
        IdClass("minor", "minor numbers and /dev/nvidiaN nodes", None),
        IdClass("user", "user names", "user"),
        IdClass("email", "e-mail addresses", "email"),
        IdClass("path", "home, project and scratch paths", "path"),
        IdClass("project", "project names (job working directories)", "project"),
        IdClass("job", "Slurm job ids", "job"),
        IdClass("job_name", "job names", "jobname"),
        IdClass("account", "Slurm accounts", "account"),
        IdClass("partition", "Slurm partitions", "partition"),
        IdClass("container", "container ids", "container"),
        IdClass("container_name", "container names", "ctrname"),
        IdClass("namespace", "Kubernetes namespaces", "ns"),
        IdClass("cloud", "cloud instance and resource ids", "cloud"),
        IdClass("secret", "tokens and keys", "secret"),
        IdClass("url", "URL paths and queries", "url", leak_checked=False),
        IdClass("env", "environment values", "env", leak_checked=False),
        IdClass("arg", "command-line arguments", "arg", leak_checked=False),
        # a distributed job's ranks name their processes (a number: its original is no shape
        # the final check could look for; the rank table replaces it by field)
        IdClass("pid", "process ids of a job's ranks", "pid", leak_checked=False),
        IdClass("kernel_log", "raw kernel-log lines", None),
    )
}
PSEUDONYM_PREFIXES = tuple(c.prefix for c in CLASSES.values() if c.prefix)

# -- allow-lists -------------------------------------------------------------------------------

ALLOWED_WORDS = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
# A GPU model name as NVML gives it ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB MIG
# 3g.40gb"): allowed verbatim; anything else in a name field is free text.
GPU_MODEL = re.compile(
    r"^(?:NVIDIA|Tesla|Quadro|GeForce|TITAN|RTX|GRID|A\d|H\d|L\d|B\d|G[HB]\d)"
    r"[A-Za-z0-9 .()+-]{0,60}$"
)
VERSION = re.compile(r"^\d+(?:\.\d+){1,3}$")  # a driver, NVML or CUDA version
# Public documentation and package hosts: kept in URLs and host names.
PUBLIC_DOMAINS = (
    "nvidia.com",
    "github.com",
    "githubusercontent.com",
    "pytorch.org",
    "python.org",
    "pypi.org",
    "kernel.org",
    "schedmd.com",
    "ubuntu.com",
    "debian.org",
    "redhat.com",
    "anaconda.org",
    "conda.io",
    "docker.io",
    "nvcr.io",
    "readthedocs.io",
    "huggingface.co",
    "wandb.ai",
)
# Hosts whose URL paths are documentation, not data: the whole URL is kept.
DOC_DOMAINS = ("nvidia.com", "pytorch.org", "python.org", "kernel.org", "schedmd.com")
# Accounts that name no person (sos's skip list, trimmed).
SYSTEM_USERS = frozenset(
    "root nobody daemon bin sys sync adm lp mail news uucp proxy www-data backup list irc "
    "gnats messagebus sshd syslog _apt ubuntu ec2-user cloud-user nvidia-persistenced slurm "
    "munge polkitd".split()
)
# Kubernetes' own namespaces, on every cluster: they name no one (kubernetes.io/docs/concepts/
# overview/working-with-objects/namespaces/, "Initial namespaces").
K8S_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
# Partition, account and directory names too common to replace wherever they stand as words;
# they are still replaced where the context names them (`Partition=gpu`).
COMMON_WORDS = frozenset(
    "gpu gpus cpu cpus debug normal batch main short long medium dev devel test tests compute "
    "default standard general interactive shared low high express preempt preemptible "
    "scavenger work data code src home project projects train training run runs output outputs "
    "tmp scratch models model repo repos workspace experiments exp logs llm ml ai research "
    "a100 h100 h200 v100 l40s b200 user users jobs job node nodes".split()
)

# -- environment variables and command lines ---------------------------------------------------

# Variables whose value is a fact of the diagnosis (the value still goes through the sanitizer:
# a GPU UUID in CUDA_VISIBLE_DEVICES becomes its pseudonym).
SAFE_ENV = frozenset(
    """CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER NVIDIA_VISIBLE_DEVICES NVIDIA_DRIVER_CAPABILITIES
    CUDA_LAUNCH_BLOCKING CUDA_MODULE_LOADING CUDA_DEVICE_MAX_CONNECTIONS PYTORCH_CUDA_ALLOC_CONF
    PYTORCH_ALLOC_CONF TORCH_NCCL_ASYNC_ERROR_HANDLING TORCH_DISTRIBUTED_DEBUG TORCH_USE_CUDA_DSA
    TORCH_NCCL_BLOCKING_WAIT NCCL_DEBUG NCCL_DEBUG_SUBSYS NCCL_P2P_DISABLE NCCL_P2P_LEVEL
    NCCL_IB_DISABLE NCCL_SHM_DISABLE NCCL_NET_GDR_LEVEL NCCL_ALGO NCCL_PROTO NCCL_SOCKET_IFNAME
    NCCL_IB_HCA NCCL_NVLS_ENABLE NCCL_CUMEM_ENABLE OMP_NUM_THREADS MKL_NUM_THREADS WORLD_SIZE
    RANK LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK MASTER_PORT SLURM_JOB_GPUS SLURM_STEP_GPUS
    GPU_DEVICE_ORDINAL SLURM_GPUS_ON_NODE SLURM_GPUS_PER_NODE SLURM_GPUS SLURM_NTASKS
    SLURM_NNODES SLURM_PROCID SLURM_LOCALID SLURM_NODEID SLURM_CPUS_PER_TASK SLURM_CPUS_ON_NODE
    SLURM_RESTART_COUNT LANG LC_ALL SHELL TERM""".split()
)
# A value that says nothing about a person or a site: numbers, booleans, dtypes, backends.
SAFE_VALUE = re.compile(
    r"^(?:-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\d+(?:,\d+)+|true|false|True|False|yes|no|on|off|"
    r"none|None|auto|bf16|fp16|fp32|fp8|tf32|float16|bfloat16|float32|half|float|nccl|gloo|mpi|"
    r"cuda|cpu|gpu|c10d|static|PCI_BUS_ID|FASTEST_FIRST|INFO|WARN|TRACE)$"
)
# Programs whose name is kept as it is (the first word of a command line is always kept).
SAFE_MODULES = re.compile(
    r"^(?:torch|accelerate|deepspeed|vllm|sglang|transformers|lightning|pytorch_lightning|jax|"
    r"tensorflow|megatron|nemo|ipykernel_launcher|ipykernel|jupyter|notebook|jupyterlab|pip|"
    r"pytest|cProfile|torch_xla|nvitop|gpustat)(?:\.[A-Za-z_]\w*)*$"
)
# Options whose name is no one's secret; their values are kept only when SAFE_VALUE.
SAFE_FLAGS = frozenset(
    """-u -O -OO -B -E -s -I -m --nproc_per_node --nproc-per-node --nnodes --node_rank
    --node-rank --master_port --master-port --rdzv_backend --rdzv-backend --standalone
    --local_rank --local-rank --num_processes --num-processes --num_machines --num-machines
    --mixed_precision --mixed-precision --multi_gpu --multi-gpu --num_gpus --num-gpus --gpus
    --devices --accelerator --strategy --batch-size --batch_size --micro-batch-size
    --micro_batch_size --global-batch-size --global_batch_size --per_device_train_batch_size
    --per_device_eval_batch_size --gradient_accumulation_steps --gradient-accumulation-steps
    --num_workers --num-workers --workers --epochs --num_train_epochs --max_steps --max-steps
    --train-iters --seed --lr --learning_rate --learning-rate --bf16 --fp16 --tf32 --fp8
    --precision --dtype --compile --gradient_checkpointing --gradient-checkpointing
    --tensor-parallel-size --tensor_parallel_size --pipeline-parallel-size
    --pipeline_parallel_size --tensor-model-parallel-size --pipeline-model-parallel-size -tp -pp
    --tp --pp --max-model-len --max_model_len --gpu-memory-utilization --max-num-seqs
    --world-size --world_size --rank --log-interval --log_interval --eval-interval
    --save-interval --seq-length --seq_length --max_seq_length --zero_stage --zero-stage
    --deepspeed --fsdp --ddp --amp --no-cuda --cuda --distributed --port --config
    --config-file --config_file --model --model_name_or_path --data --data-path --data_path
    --dataset --dataset_name --output_dir --output-dir --resume --resume_from_checkpoint
    --checkpoint --save --load --host -f -c""".split()
)
INTERPRETERS = frozenset(
    "python python2 python3 pypy pypy3 bash sh zsh env uv srun mpirun mpiexec torchrun "
    "accelerate deepspeed apptainer singularity docker podman numactl nsys ncu time nohup "
    "stdbuf taskset conda mamba micromamba".split()
)


def safe_program(name: str) -> bool:
    """`name` is a public program's or runtime's (an interpreter, `vocabulary.SAFE_PROGRAM`)."""
    return name in INTERPRETERS or SAFE_PROGRAM.match(name) is not None


# -- paths ------------------------------------------------------------------------------------

# Absolute paths under these roots are the system's, kept (the user names and host names in
# them are still replaced). Everything else is someone's files: replaced.
SYSTEM_ROOTS = frozenset("usr lib lib32 lib64 libx32 bin sbin etc proc sys dev boot".split())
SYSTEM_PREFIXES = ("/run/nvidia", "/run/systemd/journal")
HOME_ROOTS = frozenset({"home", "Users"})
# Roots named as they are in the report (what kind of storage), their contents replaced.
KNOWN_ROOTS = frozenset(
    "scratch lustre gpfs data mnt work projects project shared nfs srv opt tmp var run media "
    "storage fsx efs workspace datasets checkpoints net raid nvme local cluster root".split()
)
KEEP_BASENAME = re.compile(r"^(?:lib[\w+.-]*\.so(?:\.\d+)*|python\d?(?:\.\d+)?)$")

# -- shapes in free text ----------------------------------------------------------------------

H = "[0-9a-fA-F]"
UUID = rf"{H}{{8}}-{H}{{4}}-{H}{{4}}-{H}{{4}}-{H}{{12}}"
TLDS = frozenset(
    """com net org edu gov mil int info biz io ai co uk de fr jp kr cn ca au us eu ch nl se no fi
    it es ru br tw sg hk il at be dk pl cz pt ie nz za local localdomain lan internal intranet
    corp home cluster hpc priv private site cloud dev app tech xyz""".split()
)


def valid_ipv4(text: str) -> bool:
    """Four numbers up to 255; leading zeros allowed (`010.020.030.041`, as inet_aton's
    callers write them); loopback, `0.0.0.0` and the broadcast address name no one."""
    parts = text.split(".")
    if len(parts) != 4 or not all(p.isdigit() and len(p) <= 3 and int(p) <= 255 for p in parts):
        return False
    norm = [int(p) for p in parts]
    return not (norm[0] in (0, 127) or norm == [255, 255, 255, 255])


# A four-part number right after a library's name or "version" is a version (cuDNN 8.9.7.29,
# TensorRT 10.0.1.6), not an address.
VERSION_BEFORE = re.compile(
    r"(?i)(?:\bv|version|release|cudnn|tensorrt|trt|nccl|cuda|driver|torch|jax|tensorflow|"
    r"==|>=|<=|~=)[\s:=_-]*\Z"
)


def valid_ipv6(text: str) -> bool:
    addr = text.split("%", 1)[0]
    if "::" not in addr and addr.count(":") != 7:
        return False
    try:
        ip = ipaddress.IPv6Address(addr)
    except ValueError:
        return False
    return not (ip.is_loopback or ip.is_unspecified)


# The shapes that must never survive in shared output: a final check over every section
# (`Sanitizer.leaks`), independent of how the section was built. Each with a quick test that
# must hit first (a plain pattern the regex engine scans fast).
LEAK_SHAPES: tuple[tuple[str, re.Pattern[str], re.Pattern[str]], ...] = tuple(
    (cls, re.compile(pattern), re.compile(quick))
    for cls, pattern, quick in (
        ("mig_uuid", rf"MIG-(?:GPU-)?{UUID}", "MIG-"),
        ("gpu_uuid", rf"GPU-{UUID}", "GPU-"),
        ("uuid", rf"(?<![0-9a-fA-F]){UUID}(?![0-9a-fA-F])", f"{H}{{4}}-{H}{{4}}-"),
        ("container", r"(?<![0-9a-fA-F])[0-9a-f]{64}(?![0-9a-fA-F])", "[0-9a-f]{64}"),
        # a pod's uid as the kubelet's systemd driver writes it in a cgroup (`-` as `_`)
        (
            "uuid",
            rf"{H}{{8}}_{H}{{4}}_{H}{{4}}_{H}{{4}}_{H}{{12}}(?![0-9a-fA-F])",
            f"{H}{{4}}_{H}{{4}}_",
        ),
        (
            "mac",
            rf"(?<![\w:-]){H}{{2}}(?:[:-]{H}{{2}}){{5}}(?![\w-]|:{H})",
            f"{H}{{2}}[:-]{H}{{2}}[:-]",
        ),
        (
            "ib_guid",
            rf"(?<![\w:]){H}{{4}}(?::{H}{{4}}){{3}}(?![\w:])|0x{H}{{16}}\b",
            f"{H}{{4}}:{H}{{4}}:|0x{H}{{16}}",
        ),
        (
            "pci",
            rf"(?<![\w:]){H}{{4}}(?:{H}{{4}})?:{H}{{2}}:{H}{{2}}(?:\.[0-7])?(?![\w:])",
            f"{H}{{4}}:{H}{{2}}:{H}{{2}}",
        ),
        (
            "ipv4",
            r"(?<![A-Za-z0-9.])(?:\d{1,3}\.){3}\d{1,3}(?![A-Za-z0-9]|\.\d)",
            r"\d\.\d+\.\d+\.\d",
        ),
        (
            "ipv6",
            r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])",
            f"::|:{H}{{1,4}}:{H}{{1,4}}:{H}{{0,4}}:",
        ),
        ("path", r"/(?:home|Users)/[A-Za-z_][\w.-]*", "/home/|/Users/"),
        ("email", r"\b[\w.+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,63}\b", "@"),
        (
            "secret",
            r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|sk-[\w-]{20,}|"
            r"(?:AKIA|ASIA)[A-Z0-9]{16})|(?<![\w.-])eyJ[\w-]{6,}\.[\w-]*",
            "hf_|gh[pousr]_|sk-|AKIA|ASIA|eyJ",
        ),
        ("pci", rf"(?i)\bbus_?id\s*[=:]?\s*(?:0x)?{H}{{4,12}}\b(?![:.])", "(?i)busid"),
        ("pci", rf"(?<![\w/])(?:GPU|PCI|NIC)/(?:\d+-)?{H}{{4,12}}(?![\w:.])", "GPU/|PCI/|NIC/"),
        ("cloud", r"\bi-(?:[0-9a-f]{17}|[0-9a-f]{8})\b", r"\bi-"),
    )
)


def shape_ok(cls: str, text: str, before: str = "") -> bool:
    """Whether a LEAK_SHAPES hit really is one (an IPv4 shape can be a version: `before` is
    the text in front of it)."""
    if cls == "ipv4":
        return valid_ipv4(text) and not VERSION_BEFORE.search(before[-40:])
    if cls == "ipv6":
        return valid_ipv6(text)
    return True


def expand_nodelist(text: str) -> list[str]:
    """Slurm's host list syntax: `gpu-a[1-3,07]x` → gpu-a1x, gpu-a2x, gpu-a3x, gpu-a07x (zero
    padding kept); at most 4096 names."""
    m = re.fullmatch(r"([A-Za-z][\w.-]*)\[([\d,\-]+)\]([\w.-]*)", text)
    if not m:
        return [text]
    head, ranges, tail = m.groups()
    out: list[str] = []
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit():
            continue
        width = len(lo)
        top = int(hi) if hi.isdigit() else int(lo)
        for n in range(int(lo), min(top, int(lo) + 4096) + 1):
            out.append(f"{head}{n:0{width}d}{tail}")
            if len(out) >= 4096:
                return out
    return out
