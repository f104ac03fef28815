"""The README is a short guide and ARCHITECTURE.md opens with a one-page map: a newcomer reads what fedmpi does and
the two commands that set it up on the first screen, and the map of both settings before any detail; a section
one page (or the code, a config, the Makefile) names in another ("docs/RUNNING.md, "Memory"") is
there. Commands themselves: tests/mpi/test_docs_commands.py."""
import re
from pathlib import Path

from docs_commands import ROOT, commands_in, doc_files

# What the README's opening must name (the words a reader looks for), before its first command.
DOES = ("FedFace", "Partially Federated Momentum", "Federated Validation", "FedAvg", "across devices",
        "phone per person", "Secure aggregation", "distributed DP", "Robust rules", "DP-FedAvg", "hostile parties",
        "insightface", "benchmarks", "Slurm", "submitit", "resume on another allocation", "privacy audit")
REFERENCE = re.compile(r'(docs/[A-Z_]+\.md|README)(?:\'s)?,\s+"([^"]+)"')


def headings(path) -> list[str]:
    return [re.sub(r"^#+\s*", "", line).replace("`", "").strip() for line in path.read_text().splitlines()
            if line.startswith("#")]


def test_the_readme_is_a_guide_whose_first_screen_names_everything_and_sets_up_with_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 220
    opening = text.split("```", 1)[0]
    missing = [word for word in DOES if word.lower() not in " ".join(opening.split()).lower()]
    assert missing == [], missing
    first_screen = "\n".join(text.splitlines()[:50])
    assert [c.words[:2] for c in commands_in(first_screen, "README.md")] == [("make", "demo"), ("make", "test")]


def test_architecture_opens_with_a_map_of_both_settings_secure_aggregation_and_the_packages():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    lines = text.splitlines()
    assert lines.index("## The map") < lines.index("# Reference") <= 150
    the_map = "\n".join(lines[:lines.index("# Reference")])
    for named in ("silo/", "crossdevice/", "core/seams.py", "core/trainer_loop", "Secure aggregation", "secagg/",
                  "evaluation/", "algorithms/class_parts.py", "SummaryPart", "LocalTraining",
                  "tests/unit/test_import_layering.py"):
        assert named in the_map, named


def code_files() -> list[Path]:
    """The code and configs whose comments and messages name a doc's section (a user reads them there too)."""
    return sorted([*ROOT.glob("fedmpi/**/*.py"), *ROOT.glob("tools/*.py"), *ROOT.glob("jobs/*.py"),
                   *ROOT.glob("bench/*.py"), *ROOT.glob("configs/*.yaml"), ROOT / "Makefile"])


def test_every_section_one_page_names_in_another_is_there():
    found = []
    for path in [*doc_files(), *code_files()]:
        for page, section in REFERENCE.findall(path.read_text()):
            target = ROOT / ("README.md" if page == "README" else page)
            section = " ".join(section.split())
            if not any(h.startswith(section) for h in headings(target)):
                found.append(f"{path.relative_to(ROOT)}: {page}, \"{section}\"")
    assert found == [], found
