"""The shell commands of the user docs (README.md, docs/*.md) and what each must name to run as written: a module
of this tree whose `--help` succeeds and lists every `--flag` given, a make target, a console script, a file of the
repository; `python -m fedmpi.run` commands get their overrides validated by the config and, under mpirun, the
world size checked against the layout. tests/mpi/test_docs_commands.py runs it; `python tests/support/docs_commands.py`
prints every problem found.

Commands are read from fenced blocks tagged bash/sh/shell (every line must be a known command) and from untagged
blocks (only lines that start like a command; diagrams and output are left alone). A trailing backslash joins
lines, `#` starts a comment, `&&` and `;` separate commands. Upper-case words (RUN, SWEEP, DIR) and `...` are
placeholders and stay unchecked.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL_TAGS = ("bash", "sh", "shell")
BUILTINS = ("source", "export", "cd", "[", "set", "unset", "echo", "ulimit")
NOT_OURS = ("squeue", "scancel", "sacct", "scontrol", "sinfo", "srun", "pip", "git", "ssh", "module")
COMMAND_START = re.compile(r"^([A-Z_]+=\S+ )*(python|mpirun|make|sbatch|fedmpi-|slurm/|tensorboard)")
SUBCOMMAND = re.compile(r"^[a-z][a-z0-9_-]*$")
REPO_PATH = re.compile(r"^(configs|slurm|tests|tools|bench|jobs|fedmpi|docs)/[\w./-]+$")


@dataclass(frozen=True)
class Command:
    where: str          # file:line
    words: tuple[str, ...]


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def commands_in(text: str, where: str) -> list[Command]:
    out, block, tag, start = [], None, "", 0
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if line.startswith("```"):
            if block is None:
                block, tag, start = [], line[3:].strip().lower(), n
            else:
                out.extend(_block_commands(block, tag, where, start))
                block = None
            continue
        if block is not None:
            block.append(line)
    return out


def _block_commands(lines: list[str], tag: str, where: str, start: int) -> list[Command]:
    if tag and tag not in SHELL_TAGS:
        return []
    out, pending, first = [], "", 0
    for offset, line in enumerate(lines, 1):
        if not pending:
            first = start + offset
            if not tag and not COMMAND_START.match(line):
                continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        text, pending = pending, ""
        try:
            words = shlex.split(text, comments=True)
        except ValueError as exc:
            out.append(Command(f"{where}:{first}", ("<unparsable>", str(exc))))
            continue
        for part in _split_on(words, ("&&", ";", "||")):
            if part:
                out.append(Command(f"{where}:{first}", tuple(part)))
    return out


def _split_on(words: list[str], separators) -> list[list[str]]:
    parts, current = [], []
    for w in words:
        if w in separators:
            parts.append(current)
            current = []
        else:
            current.append(w)
    return [*parts, current]


def console_scripts() -> dict[str, str]:
    """fedmpi-* command -> the module it runs (pyproject.toml)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]   # tomllib is Python 3.11+
    return dict(re.findall(r'^([\w-]+)\s*=\s*"([\w.]+):\w+"', section, flags=re.M))


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-zA-Z][\w-]*):", (ROOT / "Makefile").read_text(), flags=re.M))


class Checker:
    """Collects what each command needs (help texts are fetched once per module and subcommand),
    then lists the problems."""

    def __init__(self):
        self.scripts, self.targets = console_scripts(), make_targets()
        self.help: dict[tuple[str, ...], tuple[int, str]] = {}

    def problems(self, commands: list[Command]) -> list[str]:
        planned = [(c, self._plan(c)) for c in commands]
        keys = {key for _, (_, key, _) in planned if key}
        for key in sorted(keys - set(self.help)):
            self.help[key] = _help_of(key)
        found = []
        for command, (issues, key, flags) in planned:
            found += [f"{command.where}: {' '.join(command.words)}: {issue}" for issue in issues]
            if key:
                status, text = self.help[key]
                if status != 0:
                    found.append(f"{command.where}: python -m {' '.join(key)} --help fails: {text[-300:]}")
                    continue
                found += [f"{command.where}: {' '.join(key)}: no option {flag} in its --help" for flag in flags
                          if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)]
        return found

    def _plan(self, command: Command) -> tuple[list[str], tuple[str, ...] | None, list[str]]:
        """(problems found without running anything, the --help to fetch, the flags it must list)."""
        words = list(command.words)
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):      # VAR=value prefixes
            words.pop(0)
        if not words or words[0] in BUILTINS or words[0] in NOT_OURS:
            return [], None, []
        issues = [f"{w}: no such file in the repository" for w in words
                  if REPO_PATH.match(w) and not any(c in w for c in "*?<>") and not (ROOT / w).exists()]
        head = words[0]
        if head == "make":
            targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
            return issues + [f"no make target {t}" for t in targets if t not in self.targets], None, []
        if head == "sbatch":
            scripts = [w for w in words[1:] if w.endswith(".sh")]
            return issues + ([] if scripts else ["sbatch without one of slurm/*.sh"]), None, []
        if head.startswith("slurm/") or head.startswith("tests/") and head.endswith(".py"):
            return issues, None, []
        if head == "tensorboard":
            # the venv's own bin first: `make test` runs the venv's python without activating it
            venv_bin = str(Path(sys.executable).parent)
            found = shutil.which("tensorboard", path=os.pathsep.join([venv_bin, os.environ.get("PATH", "")]))
            return issues + ([] if found else ["tensorboard is not installed"]), None, []
        world = None
        if head == "mpirun":
            world, words = _mpirun_world(words)
            if not words:
                return issues + ["mpirun without a python command"], None, []
            head = words[0]
        if head in self.scripts:
            module, args = self.scripts[head], words[1:]
        elif head in ("python", "python3") and len(words) > 2 and words[1] == "-m":
            module, args = words[2], words[3:]
        elif head in ("python", "python3") and len(words) > 1 and words[1].endswith(".py"):
            return issues, None, []
        else:
            return issues + [f"{head}: not a command these docs may use"], None, []
        if module == "pytest":
            return issues, None, []
        if module == "fedmpi.run":
            return issues + _check_run(args, world), None, []
        subcommands = []
        for a in args:
            if not SUBCOMMAND.match(a):
                break
            subcommands.append(a)
        flags = sorted({a.split("=")[0] for a in args if a.startswith("--")})
        return issues, (module, *subcommands), flags


def _mpirun_world(words: list[str]) -> tuple[int | None, list[str]]:
    """(the -n of an mpirun command, the command it launches)."""
    world, i = None, 1
    while i < len(words) and words[i].startswith("-"):
        if words[i] in ("-n", "-np") and i + 1 < len(words):
            world = int(words[i + 1]) if words[i + 1].isdigit() else None
            i += 2
        elif words[i] in ("--bind-to", "--map-by", "--hostfile", "-x", "--mca"):
            i += 2 + (words[i] == "--mca")
        else:
            i += 1
    return world, words[i:]


def _check_run(args: list[str], world: int | None) -> list[str]:
    """A `python -m fedmpi.run` command: its flags, its overrides (the config validates them) and, under mpirun,
    the world size its layout needs."""
    from fedmpi.layout import build_layout
    from fedmpi.config import ConfigError, load_config
    from fedmpi.run import parse_args, party_sizes

    args = [a for a in args if a != "..."]
    try:
        parsed = parse_args(args)
    except SystemExit:
        return [f"fedmpi.run does not take {args}"]
    try:
        cfg = load_config(parsed.config, parsed.overrides, sizes=party_sizes)
    except ConfigError as exc:
        if not re.match(r"parties\.\S+\.data\.path: ", str(exc)):
            return [f"config: {exc}"]
        # the reader's own data, absent here, which optim.steps_per_epoch=auto counts: checked without it
        # (12,000 steps: whole rounds of any fed.K the docs use)
        return _check_run([*args, "optim.steps_per_epoch=12000"], world)
    except (FileNotFoundError, ValueError) as exc:
        return [f"config: {exc}"]
    needed = build_layout(cfg).world_size
    if world is not None and world != needed:
        return [f"mpirun -n {world}, but the layout needs {needed} ranks"]
    return []


def _help_of(key: tuple[str, ...]) -> tuple[int, str]:
    """(exit status, output) of `python -m MODULE [SUBCOMMAND...] --help`, run in this process: the modules'
    imports (torch among them) are paid once for all, not once per module."""
    import contextlib
    import io
    import runpy
    import warnings

    module, *subcommands = key
    out, argv = io.StringIO(), sys.argv
    sys.argv = [module, *subcommands, "--help"]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)     # runpy: the module was imported before
            runpy.run_module(module, run_name="__main__", alter_sys=False)
        status = 0
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:  # noqa: BLE001 - an import error or a crash is what this check reports
        status, _ = 1, out.write(f"{type(exc).__name__}: {exc}")
    finally:
        sys.argv = argv
    return status, out.getvalue()


def all_commands() -> list[Command]:
    return [c for path in doc_files() for c in commands_in(path.read_text(), str(path.relative_to(ROOT)))]


if __name__ == "__main__":
    found = Checker().problems(all_commands())
    print("\n".join(found) if found else "every command names what exists")
    print(json.dumps({"commands": len(all_commands()), "problems": len(found)}))
    sys.exit(1 if found else 0)
