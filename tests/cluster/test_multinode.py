"""fedmpi across nodes: one bed of 4 nodes (tests/support/node_bed.py: network namespaces with their own hostnames on a
bridge) for the whole module, the 3-party run (server + MS1M 2 + GA 1 + VGG 1) placed as the sbatch script
places it (MS1M on one node, GA + VGG on the next, the server on a third) and launched with plain
`mpirun --hostfile` through the bed's rsh agent. What a cluster user depends on: the placement and the node-local
ranks read back from the run log, the traffic on every link against the log's byte counts, the rendezvous and
gloo on the nodes' own addresses, one error line naming the nodes whose names do not resolve or resolve to
loopback, a node that fails mid-round named in one line, and a resume on other nodes equal to the uninterrupted
run. Under Slurm: the 3-party script preempted and requeued, a node's link lost, the 12-party script on 4 nodes
launched with mpirun."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import node_bed
from multinode_runs import COLLECTIVE_TIMEOUT_S, ROUNDS, WORLD, Launch, error_lines, hosts_per_rank, workspace
from node_bed import NodeBed

NODES = ("n1", "n2", "n3", "n4")
RUN_TIMEOUT_S = 240           # a 5-rank start on 2 busy cores, 8 rounds of a tiny model
C10D_WARNING = "The hostname of the client socket cannot be retrieved"
FIGURES: dict = {}


def require_bed() -> None:
    reason = node_bed.missing_reason()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI must run the multi-node tests: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def bed():
    require_bed()
    made = NodeBed(NODES)
    with made:
        FIGURES["bed_up_s"] = made.started_s
        yield made
    assert node_bed.leftovers(made.tag) == []
    print(f"\nmulti-node figures: {FIGURES}")          # shown with pytest -s


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return workspace(tmp_path_factory.mktemp("multinode"))


def run_to_end(bed, ws, name, hosts, *extra, **kw) -> Launch:
    launch = Launch(bed, ws, name, hosts, *extra, **kw)
    status = launch.wait(RUN_TIMEOUT_S)
    assert status == 0, launch.output[-4000:]
    return launch


def final_state(ws, name):
    from fedmpi.store.checkpoint import read_part
    from fedmpi.store.h5log import LogReader

    theta = read_part(ws.folder(name) / "ckpt" / f"round_{ROUNDS:06d}" / "server.h5")["theta"]
    with LogReader(ws.folder(name) / "log.h5") as log:
        rounds = log.table("rounds")
    return theta, rounds


@pytest.fixture(scope="module")
def reference(bed, ws):
    """The uninterrupted run on n1 (MS1M), n2 (GA + VGG), n3 (server), with the traffic on every link."""
    before = bed.link_bytes()
    t0 = time.monotonic()
    launch = run_to_end(bed, ws, "reference", hosts_per_rank(["n1", "n2", "n3"]))
    FIGURES["reference_run_s"] = time.monotonic() - t0
    after = bed.link_bytes()
    traffic = {n: {k: after[n][k] - before[n][k] for k in ("in", "out")} for n in after}
    return launch, traffic


# ---------------------------------------------------------------- the bed itself


def test_the_bed_removes_all_it_made_after_a_failure_and_after_its_owner_died(tmp_path):
    require_bed()
    small = NodeBed(("x1",))
    with pytest.raises(RuntimeError, match="a test failed"):
        with small:
            node = small.nodes["x1"]
            subprocess.Popen(node.enter(["sleep", "300"]), start_new_session=True)
            deadline = time.monotonic() + 10
            while len(node.pids()) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(node.pids()) == 2                      # the holder and the sleep
            assert node_bed.leftovers(small.tag)
            raise RuntimeError("a test failed")
    assert node_bed.leftovers(small.tag) == []
    # an owner killed before its clean-up (SIGKILL: no handler runs): the next bed's start removes what it left
    owner = subprocess.Popen([sys.executable, "-c", (
        "import sys, subprocess, time; sys.path.insert(0, 'tests/support'); from node_bed import NodeBed; "
        "bed = NodeBed(('x1', 'x2')).start(); subprocess.Popen(bed.nodes['x1'].enter(['sleep', '300'])); "
        "print(bed.tag, flush=True); time.sleep(300)")], stdout=subprocess.PIPE, text=True,
        cwd=str(node_bed.ROOT))
    tag = owner.stdout.readline().strip()
    assert tag and node_bed.leftovers(tag)
    owner.kill()
    owner.wait(timeout=10)
    assert tag in node_bed.sweep_stale()
    assert node_bed.leftovers(tag) == []


def test_where_namespaces_are_refused_the_tests_skip_with_the_reason_and_fail_under_ci():
    """Root without CAP_NET_ADMIN and CAP_SYS_ADMIN (dropped from the bounding set, as in a container that refuses
    namespaces): a multi-node test is skipped with the probe's own reason, or fails with it under CI=true."""
    require_bed()
    pytest_in = ["setpriv", "--bounding-set=-net_admin,-sys_admin", sys.executable, "-m", "pytest", __file__, "-q",
                 "-rsf", "-p", "no:cacheprovider", "-p", "no:xdist", "-k", "test_placement_and_node_local_ranks"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CI"))}
    reason = "network namespaces are refused here: ip netns add: "
    skipped = subprocess.run(pytest_in, capture_output=True, text=True, timeout=120, env=env, cwd=str(node_bed.ROOT))
    assert skipped.returncode == 0 and re.search(rf"SKIPPED \[1\] .*: {reason}.*not permitted", skipped.stdout), \
        skipped.stdout + skipped.stderr
    failed = subprocess.run(pytest_in, capture_output=True, text=True, timeout=120, env={**env, "CI": "true"},
                            cwd=str(node_bed.ROOT))
    assert failed.returncode == 1 and f"CI must run the multi-node tests: {reason}" in failed.stdout, \
        failed.stdout + failed.stderr


# ---------------------------------------------------------------- a run across three nodes


def test_placement_and_node_local_ranks_are_read_from_the_log(bed, ws, reference):
    from fedmpi.store.h5log import LogReader

    launch, _ = reference
    with LogReader(ws.folder("reference") / "log.h5") as log:
        placement = log.placement
        assert list(log.table("rounds")["round"]) == list(range(ROUNDS))
    assert [p["rank"] for p in placement] == list(range(WORLD))
    assert [p["node"] for p in placement] == ["n3", "n1", "n1", "n2", "n2"]   # server, MS1M x2, GA, VGG
    local = {}
    for p in placement:
        local.setdefault(p["node"], []).append(p["local_rank"])
    assert local == {"n3": [0], "n1": [0, 1], "n2": [0, 1]}
    # the rendezvous and gloo on each node's bridge address, never loopback
    assert [p["address"] for p in placement] == [bed.nodes[p["node"]].address for p in placement]
    assert C10D_WARNING not in launch.output


def binomial_tree(members: list[int], root: int) -> list[tuple[int, int]]:
    """The (sender, receiver) world ranks of gloo's broadcast over a group (its binomial tree: in step i = 1, 2,
    4, ..., each rank that has the data, counted from the root, sends to the one i further on)."""
    members = sorted(members)
    size, start = len(members), members.index(root)
    edges, i = [], 1
    while i < size:
        edges += [(members[(v + start) % size], members[(v + i + start) % size]) for v in range(i) if v + i < size]
        i *= 2
    return edges


def expected_link_bytes(placement: list[dict], parties: list[list[int]], up: int, down: int,
                        rounds: int) -> dict:
    """Bytes on each node's link over a run, from the log's counts and where the ranks ran: in each round every
    party leader's upload crosses its node's link and the server's; the model goes down gloo's tree over the server
    and the leaders, then each party's tree over its ranks, once more than there are rounds (the start's model
    before round 1); an edge inside one node crosses no link."""
    node = [p["node"] for p in placement]
    links = {n: {"in": 0, "out": 0} for n in set(node)}
    edges = [(leader[0], 0, rounds * up) for leader in parties]
    edges += [(a, b, (rounds + 1) * down) for a, b in binomial_tree([0] + [p[0] for p in parties], 0)]
    edges += [(a, b, (rounds + 1) * down) for p in parties for a, b in binomial_tree(p, p[0])]
    for a, b, size in edges:
        if node[a] != node[b]:
            links[node[a]]["out"] += size
            links[node[b]]["in"] += size
    return links


# What is not the model on a link over the whole run: MPI's wire-up, the store, gloo's connections, the round
# statistics, the heartbeats, the output sent to mpirun (measured: 10-100 kB).
OVERHEAD_BYTES = 200_000


def test_traffic_on_every_link_is_what_the_log_counts(bed, ws, reference):
    """The log's bytes_up, bytes_down and bytes_intra against the veths' counters: the uploads cross the server's
    link, the model goes out along gloo's broadcast tree, a party's intra-party broadcast never leaves its node."""
    from fedmpi.store.h5log import LogReader

    _, traffic = reference
    with LogReader(ws.folder("reference") / "log.h5") as log:
        rounds, placement = log.table("rounds"), log.placement
    parties = [[1, 2], [3], [4]]                                  # MS1M, GA, VGG
    up, down = int(rounds["bytes_up"][0]) // 3, int(rounds["bytes_down"][0]) // 3
    assert int(rounds["bytes_intra"][0]) == 0                     # MS1M's two ranks share one copy on their node
    expected = expected_link_bytes(placement, parties, up, down, ROUNDS)
    expected.setdefault("n4", {"in": 0, "out": 0})
    table = [(node, way, expected[node][way], traffic[node][way]) for node in sorted(expected) for way in ("in", "out")]
    FIGURES["traffic"] = table
    print("\nnode way log_bytes measured_bytes (whole run)\n" + "\n".join(" ".join(map(str, r)) for r in table))
    for node, way, want, measured in table:
        assert want * 0.95 <= measured <= want * 1.05 + OVERHEAD_BYTES, (node, way, table)
    # the uploads all cross the server's link; the model crosses links once per party (bytes_down), MS1M's
    # intra-party copies (bytes_intra) none
    assert expected["n3"]["in"] == ROUNDS * 3 * up
    assert sum(e["in"] for e in expected.values()) == ROUNDS * 3 * up + (ROUNDS + 1) * 3 * down


def test_a_party_split_over_two_nodes_passes_theta_between_its_keepers_and_ends_as_on_one_node(bed, ws, reference):
    """MS1M's two ranks on n1 and n4, each the keeper of its node's one copy of Θ and PFM's M (comm/node_share.py):
    the leader passes Θ to n4 over the keepers' group, which the log counts as bytes_intra, and the run ends bitwise
    where the reference (MS1M's ranks sharing one copy on n1) ends."""
    run_to_end(bed, ws, "split", ["n3", "n1", "n4", "n2", "n2"])   # server, MS1M x2, GA, VGG
    theta, rounds = final_state(ws, "split")
    ref_theta, ref_rounds = final_state(ws, "reference")
    assert bool((theta == ref_theta).all())
    np.testing.assert_array_equal(rounds["loss"], ref_rounds["loss"])
    assert list(rounds["bytes_intra"]) == list(rounds["bytes_down"] // 3)    # Θ from n1 to n4, once a round
    assert list(ref_rounds["bytes_intra"]) == [0] * ROUNDS


# ---------------------------------------------------------------- names


def test_nodes_whose_hostnames_do_not_resolve_or_are_loopback_get_one_line_naming_them(bed, ws):
    """Without an interface for gloo, each rank needs its node's name: n2 does not know its own, and n1's resolves
    to 127.0.1.1 (Debian's default entry for the machine's own name), which the other nodes cannot reach. One line
    names both nodes and what to do, and the run writes nothing."""
    n1, n2 = bed.nodes["n1"], bed.nodes["n2"]
    n2.hosts_file.write_text(bed.hosts_text(without=("n2",)))   # in place: the bind mount keeps the inode
    n1.hosts_file.write_text(bed.hosts_text(without=("n1",)) + "127.0.1.1 n1\n")
    try:
        launch = Launch(bed, ws, "unresolved", hosts_per_rank(["n1", "n2", "n3"]), interface=False)
        status = launch.wait(RUN_TIMEOUT_S)
    finally:
        n1.hosts_file.write_text(bed.hosts_text())
        n2.hosts_file.write_text(bed.hosts_text())
    assert status != 0
    assert error_lines(launch.output) == [
        "error: the hostname of node n2 does not resolve (Name or service not known): add it to that node's "
        "/etc/hosts or DNS, or set GLOO_SOCKET_IFNAME (or OMPI_MCA_btl_tcp_if_include) to the interface between "
        "the nodes; node n1: its hostname resolves to 127.0.1.1 (loopback), which ranks on the other nodes cannot "
        "reach: map it to the node's address in /etc/hosts or DNS, or set GLOO_SOCKET_IFNAME (or "
        "OMPI_MCA_btl_tcp_if_include) to the interface between the nodes"], launch.output
    assert not (ws.folder("unresolved") / "log.h5").exists()


# ---------------------------------------------------------------- a node fails mid-round


def _fail_node(node, how: str) -> None:
    ranks = [p for p in node.pids() if p != node.holder.pid]
    if how == "link":
        node.set_link(False)
    elif how == "kill":
        node_bed._kill_all(ranks)
    elif how == "stop":
        for pid in ranks:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"fedmpi.run" in f.read():
                        os.kill(pid, signal.SIGSTOP)
            except (OSError, ProcessLookupError):
                pass


def _ranks_left(bed, nodes) -> dict[str, list[str]]:
    left = {}
    for name in nodes:
        for pid in bed.nodes[name].pids():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "fedmpi.run" in cmd or "prted" in cmd:
                left.setdefault(name, []).append(cmd[:120])
    return left


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_node_that_fails_mid_round_ends_the_job_naming_it(bed, ws, reference, how):
    name = f"fail-{how}"
    launch = Launch(bed, ws, name, hosts_per_rank(["n1", "n2", "n3"]))
    try:
        launch.wait_for_line(r"^round 3/", RUN_TIMEOUT_S)
        failed_at = time.monotonic()
        _fail_node(bed.nodes["n2"], how)
        status = launch.wait(COLLECTIVE_TIMEOUT_S + 30)
        ended_after = time.monotonic() - failed_at
    finally:
        launch.kill()
        bed.nodes["n2"].set_link(True)
        node_bed._kill_all([p for p in bed.nodes["n2"].pids() if p != bed.nodes["n2"].holder.pid])
    FIGURES[f"fail_{how}_ended_after_s"] = ended_after
    FIGURES[f"fail_{how}_status"] = status
    assert status != 0 or how == "kill", launch.output[-3000:]
    assert ended_after <= COLLECTIVE_TIMEOUT_S + 30
    deadline = time.monotonic() + 10
    while _ranks_left(bed, ["n1", "n3"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ranks_left(bed, ["n1", "n3"]) == {}
    if how == "kill":
        # the launcher's daemon on n2 died with the ranks: mpirun ends the job at once and names the node, either
        # as the daemon that failed (exit 255) or as the one it lost communication with, after which Open MPI
        # 5.0.11's mpirun exits 0: then only the log tells that the run did not finish (docs/CLUSTER.md)
        assert re.search(r"Remote host:\s+n2|Remote daemon: .* on node n2", launch.output), launch.output[-3000:]
        from fedmpi.store.h5log import LogReader

        with LogReader(ws.folder(name) / "log.h5") as log:
            assert len(log.table("rounds")["round"]) < ROUNDS
        return
    first = error_lines(launch.output)[0]
    assert re.fullmatch(r"rank \d \([a-z:0-9]+\): CommTimeout: round [3-8]: .* over group \S+ \(ranks .*\): no answer "
                        r"within run\.collective_timeout_s=10 s \(.*\); stopped answering: ranks 3, 4 on n2", first), \
        launch.output[-3000:]


# ---------------------------------------------------------------- Slurm across the nodes


@pytest.fixture(scope="module")
def slurm(bed):
    """slurmctld beside the bridge, one slurmd inside each node (tests/support/slurm_cluster.py's cluster, multi-node)."""
    from slurm_cluster import require_slurm, start_cluster

    require_slurm()
    t0 = time.monotonic()
    cluster = start_cluster(cpus=8, nodes={n: bed.nodes[n].address for n in NODES},
                            enter=lambda name, argv: bed.nodes[name].enter(argv, wd="/"),
                            controller_address=bed.gateway, tmpfs=bed.scratch)
    FIGURES["slurm_up_s"] = time.monotonic() - t0
    try:
        yield cluster
    finally:
        cluster.stop()


def submit_3party(cluster, ws, out, *extra: str, name: str | None = None, sbatch: str = "") -> str:
    """`slurm/fedface_3party.sh --config ... ARGS` from outside a job, 2 ranks per node (the script sizes the
    allocation and calls sbatch; output appended to `out`); without `name` the script names the run after the job.
    The job id."""
    from test_slurm import ROOT as REPO, job_id

    named = [f"log.name={name}"] if name else []
    submitted = cluster.run(["bash", str(REPO / "slurm" / "fedface_3party.sh"), "--config", str(ws.config), *extra,
                             f"log.dir={ws.base / 'runs'}", *named, f"data.root={ws.base / 'data'}"],
                            check=False, timeout=60, cwd=str(ws.base),
                            env={"FEDMPI_CPU": "1", "FEDMPI_RANKS_PER_NODE": "2",
                                 "FEDMPI_SBATCH_ARGS": f"--parsable --output={out} {sbatch}"})
    return job_id(submitted)


def wait_for_round(out, round_: int) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not (out.exists() and re.search(rf"^round {round_}/", out.read_text(), re.M)):
        assert time.monotonic() < deadline, out.read_text() if out.exists() else "no output"
        time.sleep(0.2)


def test_the_fence_after_mpi_init_holds_the_ranks_of_every_node_under_srun(slurm):
    """Slurm's PMIx plugin answers a fence that collects no data at once (Open MPI's last fence in MPI_Init is one),
    so a rank could leave MPI_Init and message one still inside it on another node, which Open MPI 5 crashes with
    SIGSEGV. fedmpi's fence after MPI_Init (fedmpi/comm/start.py) holds rank 2 on n2 until rank 0 on n1 came."""
    from test_mpi_start import SCRIPT, SLEEP_S, assert_held_until_rank_0_came

    out = slurm.run(["srun", "--mpi=pmix", "--nodes=2", "--ntasks=3", "--nodelist=n1,n2", "--distribution=block",
                     sys.executable, str(node_bed.ROOT / SCRIPT), str(SLEEP_S)], check=False, timeout=120,
                    env={"OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert_held_until_rank_0_came(out.stdout, 3)


def test_3party_script_on_three_nodes_is_preempted_and_resumes_each_party_on_its_nodes(bed, ws, reference, slurm):
    """`slurm/fedface_3party.sh` sizes itself (2 ranks per node: 3 nodes) and places MS1M on the first node, GA +
    VGG on the second, the server on the third. USR1 to the batch shell (what `--signal=B:USR1@300` sends before
    the time limit) mid-run: every rank checkpoints its own part on its own node, the script requeues the job, and
    the requeued job resumes in the run folder the script named after the job (no log.name given) and ends equal
    to the mpirun run. (The one preemption test of the suite: the one-node case is this one on more nodes.)"""
    from fedmpi.store.h5log import LogReader
    from fedmpi.store.manifest import read_manifest

    out = ws.base / "slurm-3party.out"
    t0 = time.monotonic()
    job = submit_3party(slurm, ws, out)
    name = f"fedface-3party-{job}"                      # the script's name for the run: the same for both attempts
    wait_for_round(out, 2)
    assert slurm.job_fields(job)["NodeList"] == "n[1-3]"
    slurm.run(["scancel", "--batch", "--signal=USR1", job])
    fields = slurm.wait_for_state(job, {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"}, RUN_TIMEOUT_S,
                                  output=out)
    FIGURES["slurm_3party_preempted_s"] = time.monotonic() - t0
    text = out.read_text()
    assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == ("COMPLETED", "0:0", "1"), text
    first, _, second = text.partition("restart 1 of job")
    stopped = max(int(r) for r in re.findall(rf"^round (\d+)/{ROUNDS}", first, re.M))
    resumed = re.findall(rf"^round (\d+)/{ROUNDS}", second, re.M)
    assert resumed and resumed[0] == str(stopped + 1) and resumed[-1] == str(ROUNDS), text
    # each part of the preemption's checkpoint written by its own rank on that rank's node
    parts = read_manifest(ws.folder(name) / "ckpt" / f"round_{stopped:06d}")["parts"]
    assert {part: (info["rank"], info["node"]) for part, info in parts.items()} == {
        "server.h5": (0, "n3"), "party-ms1m-0.h5": (1, "n1"), "party-ms1m-1.h5": (2, "n1"),
        "party-ga-0.h5": (3, "n2"), "party-vgg-0.h5": (4, "n2")}
    with LogReader(ws.folder(name) / "log.h5") as log:
        placement = log.placement                     # the requeued job's
    assert [p["node"] for p in placement] == ["n3", "n1", "n1", "n2", "n2"], text
    assert [p["local_rank"] for p in placement] == [0, 0, 1, 0, 1]
    assert [p["address"] for p in placement] == [bed.nodes[p["node"]].address for p in placement]
    assert C10D_WARNING not in text
    # the same computation as under mpirun, interrupted or not: bitwise the same model and losses, every round
    # logged once
    theta, rounds = final_state(ws, name)
    ref_theta, ref_rounds = final_state(ws, "reference")
    assert list(rounds["round"]) == list(range(ROUNDS))
    assert bool((theta == ref_theta).all())
    np.testing.assert_array_equal(rounds["loss"], ref_rounds["loss"])


def test_a_node_whose_link_goes_down_ends_the_slurm_job_and_the_run_resumes_on_other_nodes(bed, ws, reference,
                                                                                              slurm):
    """n2 (GA + VGG) drops off the network in the middle of the run: the ranks on n1 and n3 name the round, the
    group and n2's ranks, nothing is left running on them, and the run continues on n1, n3, n4 (Slurm's requeue,
    or `--resume auto` by hand where the job ended) equal to the uninterrupted run."""
    name, out = "slurm-link", ws.base / "slurm-link.out"
    job = submit_3party(slurm, ws, out, name=name)
    n2 = bed.nodes["n2"]
    wait_for_round(out, 3)
    assert slurm.job_fields(job)["NodeList"] == "n[1-3]"
    n2.set_link(False)
    failed_at = time.monotonic()
    try:
        deadline = failed_at + COLLECTIVE_TIMEOUT_S + 30
        while _ranks_left(bed, ["n1", "n3"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        FIGURES["slurm_link_ranks_gone_after_s"] = time.monotonic() - failed_at
        assert _ranks_left(bed, ["n1", "n3"]) == {}, out.read_text()
        fields = slurm.wait_for_state(job, {"PENDING", "REQUEUED", "FAILED", "NODE_FAIL", "COMPLETED", "CANCELLED"},
                                      COLLECTIVE_TIMEOUT_S + 30)
        FIGURES["slurm_link_job_state"] = (fields["JobState"], round(time.monotonic() - failed_at, 1))
    finally:
        n2.set_link(True)
        node_bed._kill_all([p for p in n2.pids() if p != n2.holder.pid and b"slurmd" not in
                            open(f"/proc/{p}/cmdline", "rb").read()])
    text = out.read_text()
    lines = [line for line in error_lines(text) if "stopped answering" in line]
    # whoever waits first says it: on a collective of a group or on a control message (e.g. the checkpoint's parts)
    assert lines and re.fullmatch(r"rank \d \([a-z:0-9]+\): CommTimeout: round [3-8]: .*(ranks|rank) .* "
                                  r"within (run\.collective_timeout_s=)?10 s.*; stopped answering: ranks 3, 4 on n2",
                                  lines[0]), text
    if fields["JobState"] not in ("PENDING", "REQUEUED"):      # the job ended: resume by hand elsewhere
        job = submit_3party(slurm, ws, out, "--resume", "auto", name=name, sbatch="--exclude=n2")
    fields = slurm.wait_for_state(job, {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"}, RUN_TIMEOUT_S,
                                  output=out)
    assert fields["JobState"] == "COMPLETED", out.read_text()
    from fedmpi.store.h5log import LogReader

    with LogReader(ws.folder(name) / "log.h5") as log:
        assert "n2" not in {p["node"] for p in log.placement}
    theta, rounds = final_state(ws, name)
    ref_theta, ref_rounds = final_state(ws, "reference")
    assert bool((theta == ref_theta).all())
    np.testing.assert_array_equal(rounds["loss"], ref_rounds["loss"])


TWELVE_PARTY = "slurm-12party"
# model.bn_batch: BatchNorm over fixed groups of 4 of a party's images, the same on 2 ranks x 4 as on 1 x 8, so that
# the run may move to other rank counts (docs/CLUSTER.md)
TWELVE_PARTY_ARGS = ["checkpoint.every=1", "model.bn_batch=4"]


def submit_12party(slurm, ws, out, *extra: str, ranks_per_node: int = 5, sbatch: str = ""):
    """`slurm/fedface_12party.sh` (the shrunk config; `extra` after it, so that its overrides win) launched with the
    site's mpirun (FEDMPI_LAUNCHER=mpirun: Open MPI's sequential mapper over the script's hostfile); the job's final
    state fields once it ended."""
    from jobs.mpirun import mpirun_binary
    from test_slurm import CONFIGS, ROOT as REPO, SHRINK, job_id, shrink_parties

    submitted = slurm.run(["bash", str(REPO / "slurm" / "fedface_12party.sh"), *SHRINK,
                           *shrink_parties(CONFIGS["12party"]), *TWELVE_PARTY_ARGS, *extra, f"log.dir={ws.base / 'runs'}",
                           f"log.name={TWELVE_PARTY}", f"data.root={ws.base / 'data12'}"], check=False, timeout=60,
                          cwd=str(ws.base),
                          env={"FEDMPI_CPU": "1", "FEDMPI_RANKS_PER_NODE": str(ranks_per_node),
                               "FEDMPI_SBATCH_ARGS": f"--parsable --output={out} {sbatch}", "FEDMPI_LAUNCHER": "mpirun",
                               "FEDMPI_MPIRUN": mpirun_binary(), "OMPI_ALLOW_RUN_AS_ROOT": "1",
                               "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    return slurm.wait_for_state(job_id(submitted), {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"}, 600, output=out)


@pytest.fixture(scope="module")
def twelve_party(bed, ws, slurm):
    """The 12-party run on the four nodes at 5 ranks per node: (the job's state fields, its output)."""
    out = ws.base / "slurm-12party.out"
    t0 = time.monotonic()
    fields = submit_12party(slurm, ws, out)
    FIGURES["slurm_12party_s"] = time.monotonic() - t0
    return fields, out.read_text()


def test_12party_script_on_four_nodes_runs_to_the_end_with_its_placement_under_mpirun(bed, ws, twelve_party):
    """`slurm/fedface_12party.sh` at 5 ranks per node sizes itself to 4 nodes and launches its 17 ranks with the
    site's mpirun (FEDMPI_LAUNCHER=mpirun: Open MPI's sequential mapper over the script's hostfile) instead of srun:
    every MS1M part, GA part and VGG part whole on one node, the node-local ranks 0..n-1 on each."""
    from fedmpi.store.h5log import LogReader

    name = TWELVE_PARTY
    fields, text = twelve_party
    assert (fields["JobState"], fields["ExitCode"], fields["NodeList"]) == ("COMPLETED", "0:0", "n[1-4]"), text
    assert "17 ranks in CPU mode" in text and "--map-by seq:file=" in text
    with LogReader(ws.folder(name) / "log.h5") as log:
        placement, parties = log.placement, log.parties
        assert log.table("rounds")["loss"].shape == (2, 12)
    assert len(placement) == 17 and {p["node"] for p in placement} == set(NODES)
    for node in NODES:
        assert sorted(p["local_rank"] for p in placement if p["node"] == node) == list(
            range(sum(p["node"] == node for p in placement)))
    # each party (2 ranks per MS1M part) whole on one node
    rank = 1
    for party in parties:
        size = 2 if party.startswith("ms1m") else 1
        assert len({placement[r]["node"] for r in range(rank, rank + size)}) == 1, (party, placement)
        rank += size


def test_12party_run_continues_on_two_nodes_with_each_ms1m_part_on_one_rank(bed, ws, slurm, twelve_party):
    """The 12-party run resubmitted with --resume on 2 nodes of 7 slots, 14 < the 17 ranks it ran on: the script
    gives three MS1M parts one rank of batch 8 instead of two of 4 (the batch per step kept: the same run, not a
    config change), and the run continues from its checkpoint for two more rounds on n1 and n2; the log records
    the one change asked for (optim.epochs)."""
    from fedmpi.store.h5log import LogReader

    assert twelve_party[0]["JobState"] == "COMPLETED"
    out = ws.base / "slurm-12party-resumed.out"
    t0 = time.monotonic()
    fields = submit_12party(slurm, ws, out, "--resume", "auto", "--allow-config-changes", "optim.epochs=2",
                            ranks_per_node=7, sbatch="--nodes=2 --ntasks-per-node=7")
    FIGURES["slurm_12party_resumed_s"] = time.monotonic() - t0
    text = out.read_text()
    assert (fields["JobState"], fields["ExitCode"], fields["NodeList"]) == ("COMPLETED", "0:0", "n[1-2]"), text
    assert re.search(r"holds fewer slots .* resuming with .*parties\.ms1m_0\.ranks=1 parties\.ms1m_0\.batch_size=8",
                     text), text
    with LogReader(ws.folder(TWELVE_PARTY) / "log.h5") as log:
        placement, rounds = log.placement, log.table("rounds")
        changes = json.loads(log.f.attrs.get("config_changes", "[]"))
    assert list(rounds["round"]) == [0, 1, 2, 3] and rounds["loss"].shape == (4, 12)
    assert len(placement) == 14 and {p["node"] for p in placement} == {"n1", "n2"}
    assert [sorted(c["changes"]) for c in changes] == [["optim.epochs"]], changes  # the batch per step kept
