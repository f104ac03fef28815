"""The list files of MegaFace challenge 1 as insightface's test pack and the MegaFace devkit ship them:

  ROOT/facescrub_lst        one probe image per line, relative to facescrub_images/: .../IDENTITY/FILE
  ROOT/megaface_lst         one distractor per line, relative to megaface_images/: .../A/B/FILE
  ROOT/facescrub_noises.txt insightface's refined list: '#' comments, then FaceScrub file names (FILE) that
                            show another person
  ROOT/megaface_noises.txt  '#' comments, then distractor paths (A/B/FILE; a tab-separated line: the 2nd field)
                            that show a FaceScrub identity
  ROOT/templatelists/megaface_features_list.json_<N>_1   (or ROOT/devkit/templatelists/) the devkit's
                            distractor subsets, JSON {"path": [".../A/B/FILE", ...]}: the gallery of size N

Entries are matched on their last parts without the file extension (IDENTITY/FILE, A/B/FILE).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from fedmpi.data.errors import DataError
from fedmpi.protocols.tables import LineError, read_rows, require_file

DEVKIT_LIST = re.compile(r"^megaface_features_list\.json_(\d+)_1$")
DEVKIT_FOLDERS = ("templatelists", "devkit/templatelists")


def read_list(path: Path, depth: int, what: str) -> list[str]:
    """The lines of a list file; each a relative path ending in `depth` parts (IDENTITY/FILE, A/B/FILE)."""
    names = []
    for number, (name,) in read_rows(path, 1, what):
        if len(Path(name).parts) < depth:
            raise LineError(path, number, f"{name!r}: expected a path ending in {what}")
        names.append(name)
    if not names:
        raise LineError(path, 1, f"empty list ({what})")
    return names


def read_noises(path: Path, column_tab: bool) -> set[str]:
    require_file(path, "MegaFace refined list")
    noises = set()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        fields = line.strip().split("\t")
        noises.add(fields[1] if column_tab and len(fields) > 1 else fields[0].strip())
    return noises


def list_key(name: str, depth: int) -> str:
    """The last `depth` parts of a path without the file extension (lists and refined lists are matched on it)."""
    return str(Path(*Path(name).parts[-depth:]).with_suffix(""))


def devkit_list_files(root: Path) -> dict[int, Path]:
    """{gallery size: list file} of set 1 in the first devkit folder that has any; {} when none does."""
    for folder in DEVKIT_FOLDERS:
        found = {int(m.group(1)): path for path in sorted((Path(root) / folder).glob("megaface_features_list.json_*_1"))
                 if (m := DEVKIT_LIST.match(path.name))}
        if found:
            return dict(sorted(found.items()))
    return {}


def read_devkit_galleries(files: dict[int, Path], distractors: list[str]) -> dict[int, list[int]]:
    """{size: indices into `distractors` of the list's images}; an image missing from megaface_lst is an error."""
    index = {list_key(d, 3): i for i, d in enumerate(distractors)}
    galleries = {}
    for size, path in files.items():
        try:
            paths = json.loads(path.read_text(encoding="utf-8"))["path"]
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(path, f"not a devkit feature list (JSON with a 'path' list): {exc}") from None
        missing = [p for p in paths if list_key(p, 3) not in index]
        if missing:
            raise DataError(path, f"{missing[0]!r} is not in megaface_lst ({len(missing)} such entries)")
        galleries[size] = [index[list_key(p, 3)] for p in paths]
    return galleries
