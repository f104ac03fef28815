"""Where a setting reads a method's options, found with ast in the sources (tests/unit/test_import_layering.py).
The settings hand a method's options to the method's own parts (algorithms/class_parts.py, the local training),
never read one: what a setting needs of a part is what the part's contract declares, so that a new part runs in
both settings with no change to them."""
from __future__ import annotations

import ast
from pathlib import Path

from import_graph import _inside

READ_NO_OPTIONS = ("fedmpi.silo", "fedmpi.crossdevice")


def reading_options(files: dict[str, Path], packages=READ_NO_OPTIONS) -> list[tuple[str, int]]:
    """(module, line) of each read of a method's options in `packages`: `x.options.name`, or a name bound to
    `x.options` (passing `x.options` on, as an argument, is not a read)."""
    bad = []
    for module, path in files.items():
        if not any(_inside(module, package) for package in packages):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            read = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "options"
            bound = isinstance(node, ast.Assign) and any(
                isinstance(v, ast.Attribute) and v.attr == "options"
                for v in (node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]))
            if read or bound:
                bad.append((module, node.lineno))
    return sorted(bad)
