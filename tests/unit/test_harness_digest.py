"""The bit-identical harness's own pieces (tests/support/run_digest.py, harness_diff.py): a run's printed lines with
the machine's rates and clocks masked and its folder named <WORKDIR>, floats as their exact hex, and the diff that
names each differing leaf."""
from pathlib import Path

from harness_diff import differences
from run_digest import exact, said

LAUNCH = """=== fedmpi.run --config c.yaml log.dir=/w log.name=first data.root=/w/data
round 1/2  loss clients 1.729  90 img/s  elapsed 0:01  eta 0:01  eps 94
log: /w/first/log.h5
  wall time 0:04
=== fedmpi.run log.name=second
what leaves each client: backbone"""


def test_a_runs_lines_are_its_own_with_the_machines_figures_masked():
    assert said(LAUNCH, Path("/w")) == {
        "first": ["round 1/2  loss clients 1.729  N img/s  elapsed T  eta T  eps 94", "log: <WORKDIR>/first/log.h5",
                  "  wall time T"],
        "second": ["what leaves each client: backbone"]}


def test_floats_are_written_exactly_and_the_diff_names_the_leaf_that_moved():
    assert exact([0.1, 1 / 3]) == ["0x1.999999999999ap-4", "0x1.5555555555555p-2"] and exact([3]) == [3]
    before = {"run": {"loss": exact([0.1, 0.2]), "theta_sha256": "ab"}}
    after = {"run": {"loss": exact([0.1, 0.2 + 2 ** -55]), "theta_sha256": "ab"}, "new": {"x": 1}}
    assert differences(before, before) == []
    assert differences(before, after) == ["/new/x: '<absent>' -> '1'",
                                          "/run/loss[1]: '0x1.999999999999ap-3' -> '0x1.999999999999bp-3'"]
