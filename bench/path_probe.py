"""Run a module as one MPI rank and record the fedmpi modules its Python calls enter until its first aggregation
step: `python bench/path_probe.py OUT -m MOD ARGS` (used by bench/startup_path.py, run by path, so it can wrap
any checkout's `fedmpi.run`). Writes OUT/rank-<R>.json: the module of each function call into fedmpi (the body
of a module or a class, run by an import, is not a call), consecutive calls inside one module merged, up to and
with the server step's first call (the server's first aggregation) or the first upload (a trainer). Only the
main thread is followed."""
from __future__ import annotations

import atexit
import inspect
import json
import os
import runpy
import sys
from pathlib import Path

SERVER_STEP = ("fedmpi.aggregation.server_step", "__call__")   # the server's first aggregation
UPLOADS = ("send_local",)                        # a trainer's first upload of round 1


def this_rank() -> int:
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "0")))


class CallPath:
    def __init__(self, package_root: Path):
        self.root = str(package_root) + os.sep
        self.modules: list[str] = []
        self.done = False

    def module_of(self, filename: str) -> str | None:
        if not filename.startswith(self.root):
            return None
        name = filename[len(self.root) - len("fedmpi/"):].removesuffix(".py").replace(os.sep, ".")
        return name.removesuffix(".__init__")

    def __call__(self, frame, event, arg):
        # a function's code is optimized; the body of a module or a class, which an import runs, is not
        if event != "call" or self.done or not frame.f_code.co_flags & inspect.CO_OPTIMIZED:
            return
        module = self.module_of(frame.f_code.co_filename)
        if module is None:
            return
        if not self.modules or self.modules[-1] != module:
            self.modules.append(module)
        if (module, frame.f_code.co_name) == SERVER_STEP or frame.f_code.co_name in UPLOADS:
            self.done = True
            sys.setprofile(None)


def main() -> None:
    out, module, args = Path(sys.argv[1]), sys.argv[3], sys.argv[4:]
    assert sys.argv[2] == "-m", "usage: path_probe.py OUT -m MODULE [ARGS...]"
    import fedmpi

    path = CallPath(Path(fedmpi.__file__).resolve().parent)
    atexit.register(lambda: (out / f"rank-{this_rank()}.json").write_text(json.dumps(path.modules)))
    sys.argv = [module, *args]
    sys.setprofile(path)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
