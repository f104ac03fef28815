"""jobs.watch reads submitit's result pickles only from a job folder private to the user, and fedmpi keeps
gloo/NCCL on the interface Open MPI was pinned to."""
from __future__ import annotations

import os
from types import SimpleNamespace

from jobs.watch import _collect, unsafe_folder


def test_results_in_a_folder_others_can_write_are_not_unpickled(tmp_path):
    folder = tmp_path / "jobs"
    folder.mkdir()
    folder.chmod(0o777)
    read = []
    job = SimpleNamespace(job_id="42", paths=SimpleNamespace(folder=folder), results=lambda: read.append(1))
    outcome = _collect(job, "COMPLETED")
    assert outcome.state == "FAILED" and not read
    assert outcome.error == (f"refusing to read the result: job folder {folder} is writable by others "
                             f"(mode drwxrwxrwx); make it private")
    folder.chmod(0o700)
    assert unsafe_folder(folder) == ""


def test_gloo_and_nccl_follow_the_interface_open_mpi_uses(monkeypatch):
    from fedmpi import comm

    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):   # restored after the test, set or not
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("OMPI_MCA_btl_tcp_if_include", "ib0")
    comm.use_mpi_interface()
    assert os.environ["GLOO_SOCKET_IFNAME"] == "ib0" and os.environ["NCCL_SOCKET_IFNAME"] == "ib0"
    monkeypatch.setenv("OMPI_MCA_btl_tcp_if_include", "eth0,ib0")   # several: not one to choose
    assert comm.mpi_interface() is None
