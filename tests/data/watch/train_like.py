"""A stand-in training job for the watch tests: two worker processes, tqdm-style progress on
stderr (redrawn with \r, as tqdm does), a CUDA error line, then an exit code.

argv: STEPS STEP_SECONDS EXIT_CODE [SIGNAL]: with SIGNAL, it kills itself with that signal.
Options (anywhere): --keep-workers leaves the workers sleeping when it ends; the options and
whatever follows are otherwise ignored (a command line's look only)."""

import os
import signal
import subprocess
import sys
import time

keep = "--keep-workers" in sys.argv
argv = list(sys.argv)
for i, a in enumerate(argv):
    if a.startswith("--"):  # options follow the positional arguments
        argv = argv[:i]
        break
steps, pause, code = int(argv[1]), float(argv[2]), int(argv[3])
workers = [
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)
]
print(f"workers {' '.join(str(w.pid) for w in workers)}", flush=True)
for i in range(1, steps + 1):
    pct = 100 * i // steps
    sys.stderr.write(f"\r{pct:3d}%|####      | {i}/{steps} [00:01<00:02, 20.00it/s]")
    sys.stderr.flush()
    time.sleep(pause)
sys.stderr.write("\n")
print("RuntimeError: CUDA error: an illegal memory access was encountered", flush=True)
for w in workers:
    if not keep:
        w.kill()
        w.wait()
if len(argv) > 4:
    os.kill(os.getpid(), getattr(signal, argv[4]))
sys.exit(code)
