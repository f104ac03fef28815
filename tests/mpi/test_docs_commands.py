"""Every shell command in README.md and docs/*.md names what exists (tests/support/docs_commands.py): modules whose --help
succeeds and lists the flags given, make targets, console scripts, repository files, fedmpi.run overrides the
config accepts and mpirun world sizes the layout needs; and the check finds each kind of wrong command."""
from docs_commands import Checker, Command, all_commands, commands_in

WRONG = """
```bash
python -m fedmpi.analysis.summry runs/x/log.h5             # no such module
python -m fedmpi.analysis.summary RUN --formatt md         # no such flag
make demoo                                                 # no such make target
mpirun -n 4 python -m fedmpi.run --config configs/demo_cpu.yaml   # the demo layout needs 5 ranks
python -m fedmpi.run fed.algoritm=fedavg                   # no such key
sbatch slurm/fedface_7party.sh                             # no such script
fedmpi-tensorboard RUN --outdir tb                         # a console script's module, no such flag
frobnicate --now                                           # not a command the docs may use
```
"""


def test_every_command_in_the_docs_names_what_exists():
    commands = all_commands()
    readme = [c for c in commands if c.where.startswith("README.md")]
    assert len(readme) >= 15 and any(c.words[:3] == ("mpirun", "-n", "17") for c in readme)
    assert Checker().problems(commands) == []


def test_the_check_finds_each_wrong_command():
    problems = Checker().problems(commands_in(WRONG, "wrong.md"))
    expected = ["wrong.md:3: python -m fedmpi.analysis.summry --help fails",
                "wrong.md:4: fedmpi.analysis.summary: no option --formatt in its --help",
                "wrong.md:5: make demoo: no make target demoo",
                "wrong.md:6: mpirun -n 4 python -m fedmpi.run --config configs/demo_cpu.yaml: mpirun -n 4, but the "
                "layout needs 5 ranks",
                "wrong.md:7: python -m fedmpi.run fed.algoritm=fedavg: config: ",
                "wrong.md:8: sbatch slurm/fedface_7party.sh: slurm/fedface_7party.sh: no such file in the repository",
                "wrong.md:9: fedmpi.analysis.tensorboard: no option --outdir in its --help",
                "wrong.md:10: frobnicate --now: frobnicate: not a command these docs may use"]
    assert len(problems) == len(expected), "\n".join(problems)
    for problem, start in zip(problems, expected):
        assert problem.startswith(start), (problem, start)


def test_commands_are_read_as_the_shell_reads_them():
    text = """
```bash
export OMP_NUM_THREADS=1   # an environment line
mpirun -n 5 python -m fedmpi.run --config configs/demo_cpu.yaml \\
    fed.K=20   # joined with the line above
make demo && python -m fedmpi.analysis.summary "runs/a b/log.h5"
```

```
round 1/4  loss ms1m 23.556   (output: no command)
python -m fedmpi.layout --config configs/demo_cpu.yaml       # an untagged block's command line
```

```python
import fedmpi   # not a shell block
```
"""
    assert commands_in(text, "t.md") == [
        Command("t.md:3", ("export", "OMP_NUM_THREADS=1")),
        Command("t.md:4", ("mpirun", "-n", "5", "python", "-m", "fedmpi.run", "--config", "configs/demo_cpu.yaml",
                           "fed.K=20")),
        Command("t.md:6", ("make", "demo")),
        Command("t.md:6", ("python", "-m", "fedmpi.analysis.summary", "runs/a b/log.h5")),
        Command("t.md:11", ("python", "-m", "fedmpi.layout", "--config", "configs/demo_cpu.yaml")),
    ]
