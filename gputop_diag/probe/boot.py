"""The `sitecustomize` of `gputop-diag watch --probe`: copied into a boot directory that
launch.probe_environment puts first on the child's PYTHONPATH.

Python imports `sitecustomize` once, the first one on `sys.path`, after the site directories are
in place (https://docs.python.org/3/library/site.html#module-sitecustomize). This one first runs
the user's own `sitecustomize`, if there is one further on the path, as if it were the only one
(it becomes `sys.modules["sitecustomize"]`; its error, if any, is raised after the probe starts,
so `site` reports it as usual), then starts the probe. It puts nothing on `sys.path`:
`gputop_diag` is imported from the directory the launcher names, as one package, so a child
running another Python environment keeps its own packages first and in order. It never raises.

This file is run as a copy, not imported from the package: it must stand alone (standard
library only, Python 3.8 syntax).
"""

import os
import sys

_HOME_VARIABLE = "GPUTOP_DIAG_PROBE_HOME"  # the directory of the gputop_diag package


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _run_user_sitecustomize():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if not _same_file(p or os.curdir, here)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _import_gputop_diag(home):
    import importlib.util

    if "gputop_diag" in sys.modules:
        return
    init = os.path.join(home, "__init__.py")
    found = importlib.util.find_spec("gputop_diag")
    if found is not None and found.origin and _same_file(found.origin, init):
        return  # this Python has the same gputop_diag: a plain import will do
    spec = importlib.util.spec_from_file_location(
        "gputop_diag", init, submodule_search_locations=[home]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["gputop_diag"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["gputop_diag"]
        raise


def _start_probe():
    home = os.environ.get(_HOME_VARIABLE)
    if not home:
        return
    _import_gputop_diag(home)
    from gputop_diag import probe

    probe._start(by_hand=False)


def _boot():
    error = None
    try:
        _run_user_sitecustomize()
    except BaseException as exc:  # the user's own error: reported by `site` once we are done
        error = exc
    try:
        _start_probe()
    except Exception:
        pass
    if error is not None:
        raise error


if __name__ == "sitecustomize":  # the copy in the boot directory; importing this module is inert
    _boot()
