"""A trainer's state is visible where it is made: the class has no base class (no mixin whose methods set
its attributes, in an order its __init__ must keep), and every attribute any of its methods assigns is first
assigned in its own __init__. Read with ast, as a newcomer reads the file."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def assigned(function: ast.FunctionDef) -> set[str]:
    """The names of `self.<name> = ...` (tuple targets, annotated and augmented assignments too) in `function`."""
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for element in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if (isinstance(element, ast.Attribute) and isinstance(element.value, ast.Name)
                        and element.value.id == "self"):
                    names.add(element.attr)
    return names


def hidden_state(source: str, name: str) -> tuple[list[str], list[str]]:
    """(the base classes of class `name`, the attributes its methods assign that its __init__ does not)."""
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == name)
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef)]
    in_init = set().union(*(assigned(m) for m in methods if m.name == "__init__"))
    elsewhere = set().union(*(assigned(m) for m in methods if m.name != "__init__"))
    return [ast.unparse(b) for b in cls.bases], sorted(elsewhere - in_init)


@pytest.mark.parametrize("path, name", [("silo/trainer.py", "Trainer"), ("crossdevice/trainer.py", "ClientTrainer")])
def test_the_trainers_make_their_state_in_their_init(path, name):
    bases, hidden = hidden_state((ROOT / "fedmpi" / path).read_text(), name)
    assert bases == [], f"{name}'s state is set in its base classes {bases}: build it in __init__"
    assert hidden == [], f"{name}'s methods set {hidden}, which its __init__ does not show"


def test_the_check_sees_a_mixin_and_hidden_state():
    source = ("class Parts:\n    def _build(self):\n        self.a, self.b = 1, 2\n"
              "class T(Parts):\n    def __init__(self):\n        self.c = 0\n        self._build()\n"
              "    def step(self):\n        self.c += 1\n        self.d: int = 3\n")
    assert hidden_state(source, "T") == (["Parts"], ["d"])
    assert hidden_state(source, "Parts") == ([], ["a", "b"])
