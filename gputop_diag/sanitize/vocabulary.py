"""Words the sanitizer must tell from names, as data: program and thread names that are public
(a runtime's, not a person's), words that are also common account names, the directories of
the system's own paths, public Python packages, and file extensions (which are not top-level
domains).

A seeded name that is also one of these words is replaced only where it stands as that name
(a user field, `user=`, a path component, `name@host`), never inside other text: a Jetson's
default account is `nvidia`, and `nvidia-smi` must still read as itself.
"""

from __future__ import annotations

import re

# Kernel modules of the GPU and network stacks, as the kernel log, lsmod and modinfo name them
# (the kernel reads `-` and `_` in a module's name alike: modprobe(8)): public vocabulary, never a
# host or a person, in either spelling (`nvidia-peermem error`, `modinfo nvidia_peermem`).
# NVIDIA's driver modules (https://download.nvidia.com/XFree86/Linux-x86_64/latest/README/
# installedcomponents.html), GPUDirect RDMA's and GPUDirect Storage's
# (https://docs.nvidia.com/cuda/gpudirect-rdma/), the RDMA stack's and its adapters' drivers
# (https://github.com/torvalds/linux/tree/master/drivers/infiniband), Lustre's and NFS's.
_MODULES = """nvidia nvidia_uvm nvidia_modeset nvidia_drm nvidia_peermem nvidia_fs nvidia_vgpu_vfio
    nvidia_wmi_ec_backlight nvidia_nvswitch nvidia_caps nv_peer_mem gdrdrv nvme nvme_core
    nvme_fabrics nvme_rdma mlx5_core mlx5_ib mlx5_vdpa mlx4_core mlx4_ib mlx4_en mlxfw mlx_compat
    ib_core ib_uverbs ib_umad ib_ipoib ib_cm ib_iser ib_isert ib_srp ib_srpt iw_cm rdma_cm rdma_ucm
    rdma_rxe irdma bnxt_en bnxt_re efa qedr hfi1 i40e ixgbe knem xpmem lustre lnet
    ko2iblnd ksocklnd nfs nfsv3 nfsv4 nfs_acl sunrpc rpcrdma lockd""".split()
KERNEL_MODULES = frozenset(n.replace("_", sep) for n in _MODULES for sep in "_-")


def kernel_module(name: str) -> bool:
    """`name` is a kernel module of the GPU or network stack, in either spelling."""
    return name.lower() in KERNEL_MODULES


# Account names that are also words of the tool's output or of the trade (Jetson's `nvidia`,
# cloud images' `ubuntu`, `admin`, `ec2-user`, ...), and the kernel modules: replaced only in a
# name's own context.
VOCABULARY = (
    frozenset(
        """nvidia admin administrator user users guest test tester testing demo ubuntu root jetson
    cuda docker dev devel developer default service services operator student students staff
    ml ai gpu gpus cpu cpus data research lab labs team work worker workers train training
    trainer model models compute node nodes host hosts server client master main system sys
    info debug log logs run runs job jobs batch queue slurm torch python pytorch cluster hpc
    scratch shared share public common local remote cloud linux unix centos rocky fedora debian
    redhat alma azure azureuser opc ec2 ec2-user core power memory mem driver kernel sync input
    output error errors warning warn step steps time limit max min avg sum top all none null
    nobody any app apps web www api build builder runner ci backup monitor monitoring ops
    devops sre support help deploy ray spark hadoop hdfs yarn jupyter notebook conda anaconda
    miniconda mail news proxy list games man lp bin daemon adm sshd syslog messagebus
    pci mig mac url env arg path secret serial domain account partition container project
    jobname guid uuid ip ip6 file files home tmp var opt usr etc mnt srv bus dgx hgx nccl nvml
    smi cudnn trt tensorrt triton vllm jax tensorflow pi orin nano agx xavier tegra l4t
    gpuuser gpu-user mluser ml-user aiuser ai-user""".split()
    )
    | KERNEL_MODULES
)

# Process and thread names that name a public program or runtime, kept as they are. Anything
# else in a name field is someone's (a script, a run, a title set with setproctitle): replaced.
SAFE_PROGRAM = re.compile(
    r"""^(?:
    python[\d.]*[dmu]?|pypy[\d.]*|ipython[\d.]*|uv|uvx|pip[\d.]*|conda|mamba|micromamba
    |torchrun|accelerate|deepspeed|vllm|sglang|ray|raylet|gcs_server|dashboard
    |ray::(?:IDLE|RayTrainWorker|TrainTrainable|_[A-Za-z]\w*)(?:\.\w+)*(?:\(\))?
    |VLLM::\w+|(?:Engine|Worker|Scheduler)Core\w*
    |pt_[a-z]+(?:_[a-z]+)*_?\d*|pt_main_thread
    |tf_data_[a-z_]+|(?:Fork|Spawn|ForkServer)PoolWorker-\d+|\[DALI\]\[TP\d+\]|dali_[a-z_]+
    # (input pipelines' workers, read by diagnose/host_figures.py: tf.data's thread pools,
    # Lib/multiprocessing/pool.py's workers, DALI's thread pool)
    |NCCL\ [A-Za-z]+(?:\ \d+)?|nccl[\w-]*
    |cuda-?[A-Za-z]+|cuda\w*|cudnn\w*|cublas\w*|cufft\w*
    |tritonserver|trtllm-\w+|nvidia-[\w-]+|nv-hostengine|nv-fabricmanager|dcgm[\w-]*
    |nv-\w+|nvtop|nvitop|gpustat|gputop-diag|htop|top|nsys|ncu|nsight\w*
    |jupyter(?:-[\w-]+)?|ipykernel(?:_launcher)?|tensorboard
    |bash|sh|dash|zsh|fish|tcsh|env|time|nohup|stdbuf|taskset|numactl|timeout|tini|dumb-init
    |srun|sbatch|salloc|slurmstepd|slurmd|slurm_script|mpirun|mpiexec|orted|prted|prterun
    |hydra_pmi_proxy|pmix\w*|tmux(?::\ \w+)?|screen|sshd|ssh|sleep|tail|cat|less|vim?|nano
    |apptainer|singularity|docker|podman|containerd-shim\w*|runc|conmon
    |Thread-\d+(?:\ \([\w.]+\))?|ThreadPoolExecutor-\d+_\d+|MainThread|QueueFeederThread
    |Dummy-\d+|pool-\d+-thread-\d+|tokio-runtime-w\w*|rayon-\w*|grpc_\w+|default-executor
    |jemalloc_bg_thd|gmain|gdbus|dconf\ worker|pool-spawner
    |kworker/[\w:+-]+|ksoftirqd/\d+|migration/\d+|rcu_\w+|irq/\d+-[\w-]+|nvidia-modeset/[\w-]+
    )$""",
    re.X,
)

# Directories and files of the system's own paths (under /usr, /etc, /var, /lib, ...): kept.
# Any other component there is someone's (a project installed under /usr/local, a config
# named after a site): it and what follows it are replaced.
SYSTEM_DIRS = frozenset(
    """bin sbin lib lib32 lib64 libx32 libexec local share include src etc opt games
    x86_64-linux-gnu aarch64-linux-gnu powerpc64le-linux-gnu arm-linux-gnueabihf sbsa-linux
    i386-linux-gnu nvidia cuda targets stubs compat firmware modules kernel drivers video
    updates dkms extra misc systemd system user udev rules.d modprobe.d ld.so.conf.d
    tmpfiles.d sysctl.d security default profile.d site-packages dist-packages doc man
    licenses man1 man5 man8 slurm slurm-llnl munge docker containerd cdi
    nvidia-container-runtime nvidia-container-toolkit nvidia-persistenced nvidia-fabricmanager
    nvidia-imex log journal cache spool run tmp apt dpkg yum rpm alternatives pkgconfig cmake
    gcc debug .build-id ssl certs ca-certificates python3 pkgs conda gres.conf slurm.conf
    cgroup.conf topology.conf daemon.json config.toml hosts hostname passwd group os-release
    fstab environment ld.so.conf ld.so.cache kern.log syslog messages dmesg nccl.conf
    resolv.conf nsswitch.conf sudoers lsb-release issue timezone localtime machine-id
    nvidia-smi nvcc nvidia-cuda-mps-control nvidia-cuda-mps-server nvidia-persistenced
    ldconfig ld.so modprobe nvidia-modprobe dcgmi nv-hostengine python torchrun
    accelerate deepspeed srun sbatch scontrol squeue sacct journalctl dmesg lspci bash sh env
    libcuda.so libnvidia-ml.so""".split()
)
SYSTEM_DIR_SHAPES = re.compile(
    r"^(?:\d+(?:\.\d+)*(?:[-+][\w.+-]*)?|v\d+(?:\.\d+)*|cuda-\d+(?:\.\d+)*|python\d(?:\.\d+)?"
    r"|nvidia-\d+(?:\.\d+)*|nvidia-[a-z-]+|lib[\w+.-]*\.so(?:\.\d+)*|[\w+.-]+-linux-gnu\w*"
    r"|(?:kern|sys|auth|daemon|dmesg|messages|syslog|Xorg|nvidia|slurm|cuda|dcgm)[\w.-]*\.log"
    r"(?:\.\d+)?(?:\.gz)?|gcc-\d+|\d+\.\d+\.\d+-[\w.+-]+|nvidia[\w-]*\.ko(?:\.\w+)?)$"
)
# Packages of the Python index whose files are public code: a path into them is kept whole
# (`…/site-packages/torch/cuda/__init__.py`); any other package's path is replaced.
PUBLIC_PACKAGES = frozenset(
    """torch torchvision torchaudio torchgen functorch nvidia triton transformers accelerate
    deepspeed vllm sglang jax jaxlib tensorflow keras flash_attn xformers apex megatron nemo
    lightning pytorch_lightning lightning_fabric numpy scipy cupy pandas datasets tokenizers
    safetensors huggingface_hub peft bitsandbytes tensorrt tensorrt_llm onnx onnxruntime ray
    pynvml nvitop gpustat psutil setuptools pip wandb mlflow tqdm requests urllib3 aiohttp
    multiprocess dill fsspec gputop_diag""".split()
)
PACKAGE_DIR = re.compile(r"^([A-Za-z_][\w]*?)(?:-[\w.+]+\.(?:dist|egg)-info)?$")

# The last part of a dotted name that makes it a file, not a host name (`shard-01.json`).
FILE_EXTENSIONS = frozenset(
    """py pyc pyi so json jsonl yaml yml toml txt log out err md rst csv tsv h5 hdf5 pt pth
    ckpt bin safetensors npy npz pkl pickle gz bz2 xz zst tar tgz zip sh bash zsh cfg conf ini
    cu cuh cc cpp cxx c h hpp hh o a lock whl egg parquet arrow ipynb html htm xml png jpg jpeg
    gif svg pdf onnx engine plan trt idx pem key crt csr tmp bak swp sqlite db lst cubin ptx
    fatbin sock pid env service timer mount target scope slice gguf ggml tflite pb mlmodel
    jar class js ts mjs css map wasm rs go java rb pl lua r jl m mm swift kt scala so
    dist info sbatch slurm batch run job out err stderr stdout""".split()
)

# The source trees of public projects whose messages name their own `file:line`: NCCL's WARN
# lines (`transport/net_ib.cc:1293`, `misc/socket.cc:484`; github.com/NVIDIA/nccl, src/) and
# PyTorch's (`torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:616`, `c10/cuda/CUDAException.cpp`;
# github.com/pytorch/pytorch). A relative `dir/…/file.ext:LINE` whose directories are all
# these, with a source file's extension, is vocabulary (which code printed the line), kept.
PUBLIC_SOURCE_DIRS = frozenset(
    """transport graph misc collectives device include plugin ras register proxy net nccl src
    torch csrc c10 c10d aten ATen native cuda cudnn distributed autograd core jit utils
    nn optim lib python profiler dynamo inductor _inductor runtime cpu third_party gloo tensorpipe
    rpc api functorch kineto fbgemm cutlass cub thrust""".split()
)
SOURCE_EXTENSIONS = frozenset("c cc cpp cxx cu cuh h hh hpp hxx py pyx inl".split())
