"""A stand-in training job for the watch tests: two worker processes, tqdm-style progress on
stderr (redrawn with \r, as tqdm does), a CUDA error line, then an exit code.

argv: STEPS STEP_SECONDS EXIT_CODE [SIGNAL]: with SIGNAL, it kills itself with that signal.
Options (after those): --keep-workers[=SECONDS] leaves the workers running when it ends (they
sleep SECONDS, default 60, from their start); the options and
whatever follows are otherwise ignored (a command line's look only)."""

import os
import signal
import subprocess
import sys
import time

keep = next((a for a in sys.argv if a.startswith("--keep-workers")), None)
worker_s = float(keep.partition("=")[2] or 60) if keep else 60.0
argv = list(sys.argv)
for i, a in enumerate(argv):
    if a.startswith("--"):  # options follow the positional arguments
        argv = argv[:i]
        break
steps, pause, code = int(argv[1]), float(argv[2]), int(argv[3])
workers = [
    subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({worker_s})"])
    for _ in range(2)
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
