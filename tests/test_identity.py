"""The machine's own names reach the sanitizer: read by collect/identity.py, seeded by the
sanitizer, and gone from any text it cleans afterwards."""

from __future__ import annotations

from types import SimpleNamespace

from gputop_diag import sim
from gputop_diag.collect.identity import read_machine_names
from gputop_diag.sanitize.sanitizer import Sanitizer


def test_the_simulated_machine_names_itself_and_its_jobs_directories():
    src = sim.build("compute-bound")
    pid = next(p.pid for p in src.psutil.process_iter() if p.pid > 1)
    names = read_machine_names(src, [pid])
    assert names.hostnames == (src.hostname(),)
    assert names.users == ()  # a simulated machine has no `pwd` of its own
    s = Sanitizer()
    s.seed_machine(names)
    assert src.hostname() not in s.text(f"ssh {src.hostname()} nvidia-smi")


def test_what_cannot_be_read_is_left_out_and_the_rest_is_seeded():
    class Gone:
        def cwd(self):
            raise ProcessLookupError

    def no_name():
        raise OSError("no name")

    src = SimpleNamespace(
        hostname=no_name,
        psutil=SimpleNamespace(Process=lambda pid: Gone()),
        environ={"SLURM_JOB_NODELIST": "gpu-a17", "SLURM_JOB_ID": "91823"},
        simulated=True,
    )
    names = read_machine_names(src, [4242])
    assert names.hostnames == () and names.cwds == ()
    s = Sanitizer()
    s.seed_machine(names)
    out = s.text("job 91823 on gpu-a17")
    assert "gpu-a17" not in out and "91823" not in out
