"""Figures laid out for reading: no two texts (titles, axis labels, drawn tick labels) of any figure the report
commands draw overlap. Each study's report is rewritten from its committed logs (the folder under docs/results whose
index.json names the study's sweep) into a temporary folder, with every Figure.savefig checked on the way
(tests/support/figure_text.py), so a figure a report gains is checked too."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from figure_text import checked_figures, overlaps
from jobs.mpirun import ROOT
from jobs.reproduce import STUDIES


def stacked(hspace: float):
    from fedmpi.analysis.plots import pyplot

    fig, axes = pyplot().subplots(2, 1, figsize=(4, 4))
    fig.subplots_adjust(hspace=hspace)
    for ax in axes:
        ax.set_title("a title over the panel")
        ax.set_xlabel("an x label under it")
    return fig


def test_the_check_finds_a_title_drawn_over_the_x_label_above_it_and_passes_room_between():
    found = overlaps(stacked(0.3))   # room for the tick labels between the panels, not for the x label and the title too
    assert "axes 0 x label 'an x label under it' / axes 1 title 'a title over the panel'" in found
    assert overlaps(stacked(0.6)) == []


@pytest.mark.parametrize("rotation, crowded", [(0, True), (30, False)])
def test_the_check_reads_rotated_labels_by_their_drawn_rectangle(rotation, crowded):
    from fedmpi.analysis.plots import pyplot

    fig, ax = pyplot().subplots(figsize=(4, 3))
    ax.set_xticks(range(4), [f"a long label number {i}" for i in range(4)], rotation=rotation, ha="right")
    found = overlaps(fig)
    assert bool(found) == crowded and all(" x tick " in pair for pair in found)


def committed_folder(study: str) -> Path | None:
    """The committed sweep folder of a study (its index.json names the sweep), or None."""
    for index in sorted((ROOT / "docs" / "results").glob("*/index.json")):
        if json.loads(index.read_text()).get("sweep") == study:
            return index.parent
    return None


@pytest.mark.parametrize("study", sorted(STUDIES))
def test_no_text_of_a_study_report_s_figures_overlaps(study, tmp_path):
    folder = committed_folder(study)
    assert folder is not None, f"no committed logs of the {study} study under docs/results"
    module, function = STUDIES[study][2].split(":")
    with checked_figures() as found:
        getattr(importlib.import_module(module), function)(folder, tmp_path / f"{study}_cpu.md")
    assert found, f"the {study} report drew no figure"
    assert {name: pairs for name, pairs in found.items() if pairs} == {}


def test_no_text_of_the_partition_figure_overlaps(tmp_path):
    from fedmpi.analysis.hsu_partition import main

    with checked_figures() as found:
        main(["--fig", str(tmp_path / "partition.png")])
    assert list(found) == ["partition.png"] and found["partition.png"] == []
