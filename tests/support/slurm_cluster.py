"""A one-node Slurm on localhost for the tests: munged (as user munge, on a socket of its own), slurmctld and
slurmd with a generated slurm.conf in a temporary folder, PMIx for `srun --mpi=pmix`, and a `sacct`
stand-in (tests/support/fake_sacct.py) answering from scontrol and the jobcomp file, since there is no accounting
database. Debian's packages (`.ci/install_slurm.sh`) provide the daemons.

Use the session fixture `slurm_cluster`; it sets SLURM_CONF and PATH for the whole session. Where Slurm is
missing the tests that use it are skipped with the reason, except in CI (CI=true), where that fails.
"""
from __future__ import annotations

import atexit
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel", "sinfo")
CPUS = 20
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0


def missing_reason() -> str | None:
    """Why a local Slurm cannot be brought up here, or None."""
    missing = [b for b in BINARIES if not shutil.which(b, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")]
    if missing:
        return f"Slurm is not installed (missing {', '.join(missing)}): run .ci/install_slurm.sh"
    if os.geteuid() != 0:
        return "the local Slurm needs root (munged runs as user munge, slurmd as root)"
    try:
        import pwd

        pwd.getpwnam("munge")
    except KeyError:
        return "user munge does not exist: run .ci/install_slurm.sh"
    if not Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so").exists() and not list(
            Path("/usr/lib").glob("*/slurm-wlm/mpi_pmix*.so")):
        return "Slurm's PMIx plugin is missing: run .ci/install_slurm.sh (libpmix-dev)"
    return None


def require_slurm() -> None:
    """Skip (or, in CI, fail) when no local Slurm can be brought up."""
    reason = missing_reason()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI must run the Slurm tests: {reason}")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sbin(name: str) -> str:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") or name


@dataclass
class SlurmCluster:
    """A running cluster; `env` is what a Slurm client needs (also set in os.environ). One node on localhost by
    default; with `nodes` ({name: address}) and `enter` (argv -> argv run on that node, e.g. tests/support/node_bed.py's
    Node.enter), one slurmd per node, each inside its node, and slurmctld on `controller_address` (the machine's
    own address on the nodes' network; its SlurmctldHost is still the machine's hostname, as slurmctld checks)."""
    root: Path
    node: str
    cpus: int
    env: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)
    enter: object = None
    controller_address: str = "127.0.0.1"
    tmpfs: Path | None = None
    _daemons: list = field(default_factory=list)
    _munged_pid: int | None = None
    _saved_env: dict = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def jobcomp(self) -> Path:
        return self.root / "jobcomp.txt"

    def run(self, argv: list[str], timeout: float = 60, check: bool = True, **kw) -> subprocess.CompletedProcess:
        """A command with the cluster's environment; output captured as text; bounded by `timeout`."""
        env = {**os.environ, **self.env, **kw.pop("env", {})}
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, **kw)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, argv))} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
        return out

    def job_fields(self, job_id: str) -> dict[str, str]:
        """scontrol's record of a job as key -> value (empty when Slurm no longer knows it)."""
        out = self.run(["scontrol", "show", "job", "-o", str(job_id)], check=False, timeout=15)
        fields = {}
        for item in out.stdout.split():
            key, sep, value = item.partition("=")
            if sep and key not in fields:
                fields[key] = value
        return fields

    def wait_for_state(self, job_id: str, states: set[str], timeout: float,
                       output: Path | None = None) -> dict[str, str]:
        """Poll until the job is in one of `states`. Past `timeout`: cancel the job (so that it does not load the
        tests after it) and raise TimeoutError with its last record, the machine's load, the tail of the job's
        `output` file and the Slurm logs."""
        deadline = time.monotonic() + timeout
        fields: dict[str, str] = {}
        while time.monotonic() < deadline:
            fields = self.job_fields(job_id)
            if fields.get("JobState") in states:
                return fields
            time.sleep(0.5)
        self.run(["scancel", str(job_id)], check=False, timeout=15)
        printed = ""
        if output is not None:
            lines = output.read_text(errors="replace").splitlines() if output.exists() else ["(no output file)"]
            printed = f"--- {output.name} (last 40 lines)\n" + "\n".join(lines[-40:]) + "\n"
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        raise TimeoutError(f"job {job_id} not in {sorted(states)} after {timeout:.0f} s (cancelled); last: "
                           f"{fields.get('JobState')} {fields.get('Reason')}; load average {load}\n"
                           f"{printed}{self.logs_tail()}")

    def cancel_all(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Cancel every job of this cluster and wait (bounded) until none is left."""
        self.run(["scancel", "--user", str(os.getuid())], check=False, timeout=15)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.run(["squeue", "-h", "-o", "%i"], check=False, timeout=15)
            if out.returncode != 0 or not out.stdout.strip():
                return
            time.sleep(0.5)

    def logs_tail(self, lines: int = 30) -> str:
        text = []
        for path in sorted((self.root / "log").glob("slurm*.log")):
            name = path.name
            if path.exists():
                text.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(text)

    # ------------------------------------------------------------------ start / stop

    def start(self) -> None:
        self._start_munge()
        self._write_conf()
        self._make_bin()
        self._saved_env = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        daemons = [([_sbin("slurmctld"), "-D", "-i", "-f", str(self.conf)], "slurmctld.out")]
        for name in self.nodes or [self.node]:
            slurmd = [_sbin("slurmd"), "-D", "-f", str(self.conf), "-N", name]
            daemons.append((self.enter(name, slurmd) if self.enter else slurmd, f"slurmd-{name}.out"))
        for argv, log in daemons:
            with open(self.root / "log" / log, "wb") as out:
                self._daemons.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                                      env={**os.environ, **self.env}, start_new_session=True))
        deadline = time.monotonic() + START_TIMEOUT_S
        state = ""
        while time.monotonic() < deadline:
            for proc in self._daemons:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited {proc.returncode} at start:\n{self.logs_tail()}")
            out = self.run(["sinfo", "-h", "-N", "-o", "%T"], check=False, timeout=10)
            state = out.stdout.strip()
            states = state.split()
            if out.returncode == 0 and len(states) == len(self.nodes or [self.node]) and \
                    set(states) <= {"idle", "mixed", "allocated"}:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the local Slurm did not come up in {START_TIMEOUT_S:.0f} s (node state "
                           f"{state!r}):\n{self.logs_tail()}")

    def stop(self) -> None:
        try:
            if self._daemons:
                self.cancel_all()
        finally:
            for proc in reversed(self._daemons):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(timeout=STOP_TIMEOUT_S)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(timeout=STOP_TIMEOUT_S)
            self._daemons.clear()
            self._stop_munge()
            for key, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            if os.environ.get("FEDMPI_KEEP_SLURM") != "1":
                shutil.rmtree(self.root, ignore_errors=True)

    def _start_munge(self) -> None:
        munge = self.root / "munge"
        munge.mkdir()
        shutil.chown(munge, "munge", "munge")
        munge.chmod(0o711)
        as_munge = ["runuser", "-u", "munge", "--"]
        subprocess.run(as_munge + [_sbin("mungekey"), "--create", "--keyfile", str(munge / "munge.key")],
                       check=True, capture_output=True, timeout=30)
        subprocess.run(as_munge + [_sbin("munged"), "--socket", str(munge / "munge.socket"),
                                   "--key-file", str(munge / "munge.key"), "--pid-file", str(munge / "munged.pid"),
                                   "--log-file", str(munge / "munged.log"), "--seed-file", str(munge / "munged.seed")],
                       check=True, capture_output=True, timeout=30)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            pid_file = munge / "munged.pid"
            if pid_file.exists() and pid_file.read_text().strip() and (munge / "munge.socket").exists():
                self._munged_pid = int(pid_file.read_text())
                return
            time.sleep(0.1)
        raise RuntimeError(f"munged did not start: {(munge / 'munged.log').read_text(errors='replace')}")

    def _stop_munge(self) -> None:
        if self._munged_pid is None:
            return
        try:
            os.kill(self._munged_pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                os.kill(self._munged_pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        self._munged_pid = None

    def _write_conf(self) -> None:
        for sub in ("state", "spool", "log", "tmp"):
            (self.root / sub).mkdir()
        r = self.root
        tmpfs = self.tmpfs or r / "tmp"
        if self.nodes:
            node_lines = "\n".join(f"NodeName={n} NodeAddr={a} CPUs={self.cpus} State=UNKNOWN"
                                    for n, a in self.nodes.items())
            node_list = ",".join(self.nodes)
        else:
            node_lines = f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN"
            node_list = self.node
        self.conf.write_text(f"""\
# Generated by tests/support/slurm_cluster.py.
ClusterName=fedmpitest
# Job ids that no earlier test cluster used: Open MPI names its shared-memory segments after the job (under srun:
# the Slurm job and step), and a killed job leaves its /dev/shm/sm_segment.* behind; a new job 1 attaching to an
# old job 1's segment crashed in mca_btl_sm_poll_handle_frag.
FirstJobId={random.randrange(1000, 60_000_000)}
SlurmctldHost={socket.gethostname().split(".")[0]}({self.controller_address})
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also sets how long a requeued job waits before it may start again (default 120 s).
AuthInfo=socket={r}/munge/munge.socket,cred_expire=5
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
# The nodes' scratch (PMIx puts its per-step folders there): this cluster's own, since job ids restart at 1; on
# several nodes sharing this filesystem, one path with a private folder mounted behind it on each node.
TmpFS={tmpfs}
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdParameters=config_overrides
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# Finished jobs stay visible to scontrol for the whole session (the sacct stand-in reads them there).
MinJobAge=3600
KillWait=5
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=10
InactiveLimit=0
{node_lines}
PartitionName=debug Nodes={node_list} Default=YES MaxTime=INFINITE State=UP
""")
        (self.root / "mpi.conf").write_text(f"PMIxCliTmpDirBase={tmpfs}\n")
        self.env["SLURM_CONF"] = str(self.conf)

    def _make_bin(self) -> None:
        """A `sacct` that answers from scontrol and the jobcomp file, first on PATH."""
        bin_dir = self.root / "bin"
        bin_dir.mkdir()
        sacct = bin_dir / "sacct"
        sacct.write_text(f"#!/bin/sh\nexec {sys.executable} {ROOT / 'tests' / 'support' / 'fake_sacct.py'} \"$@\"\n")
        sacct.chmod(0o755)
        self.env["PATH"] = f"{bin_dir}:{os.environ.get('PATH', '')}"


def start_cluster(cpus: int = CPUS, **nodes) -> SlurmCluster:
    """A running cluster: one node on localhost, or (`nodes`, `enter`, `controller_address`, `tmpfs`: see
    SlurmCluster) one slurmd on each of several nodes."""
    root = Path(tempfile.mkdtemp(prefix="fedmpi-slurm-", dir="/tmp"))
    root.chmod(0o755)
    cluster = SlurmCluster(root=root, node=socket.gethostname().split(".")[0], cpus=cpus, **nodes)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


# One cluster per test session, shared by every module that imports the fixture; stopped when the last
# module's fixture is finalised (or at exit, should the session end abruptly).
_SHARED: dict = {"cluster": None, "users": 0}


def _release() -> None:
    _SHARED["users"] -= 1
    if _SHARED["users"] <= 0 and _SHARED["cluster"] is not None:
        cluster, _SHARED["cluster"] = _SHARED["cluster"], None
        cluster.stop()


def _stop_at_exit() -> None:
    if _SHARED["cluster"] is not None:
        _SHARED["users"] = 0
        _release()


atexit.register(_stop_at_exit)


@pytest.fixture(scope="session")
def slurm_cluster():
    require_slurm()
    if _SHARED["cluster"] is None:
        _SHARED["cluster"] = start_cluster()
    _SHARED["users"] += 1
    try:
        yield _SHARED["cluster"]
    finally:
        _release()
