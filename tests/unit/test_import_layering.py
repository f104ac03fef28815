"""The tree's imports, read with ast (tests/support/import_graph.py): no circles, no arrow against LAYERS."""
from import_graph import (LAYERS, circles, communicating, import_graph, inner_arrows, long_functions,
                          long_modules, reaching_out, source_files, upward_arrows)
from option_reads import reading_options


def test_no_import_circles():
    assert circles(import_graph(source_files())) == []


def test_no_upward_imports():
    assert upward_arrows(import_graph(source_files())) == []


def test_the_neutral_core_knows_no_setting():
    """Nor does either setting know the other: crossdevice imports no silo module and silo no crossdevice one
    (what both use sits in fedmpi/evaluation and fedmpi/core); NOT_IMPORTED_BY lists every such rule."""
    assert inner_arrows(import_graph(source_files())) == []


def test_the_mpi_floor_imports_nothing_above_it():
    assert reaching_out(import_graph(source_files())) == []


def test_the_rules_do_arithmetic_and_the_roles_communicate():
    """Nothing under fedmpi/algorithms imports torch.distributed, mpi4py, fedmpi.comm or another package's private
    name: a part that needs a collective is handed one by the silo (silo/party_comm.py)."""
    assert communicating(source_files()) == []


def test_the_settings_read_no_methods_options():
    """A class part's setting-side code (silo/, crossdevice/) calls the part's contract only: no method's option is
    read there, so that a new part runs in both settings with no change to them (tests/mpi/test_toy_summary_mpi.py)."""
    assert reading_options(source_files()) == []


def test_small_files_and_short_functions_outside_bench_and_tests():
    """The library, the jobs and the tools read in small pieces: no module over 250 lines, no function over 60
    (bench/'s one-file benchmarks and the tests are left out)."""
    files = source_files(("fedmpi", "jobs", "tools"))
    assert long_modules(files) == []
    assert long_functions(files) == []


def test_the_size_checks_see_a_long_module_and_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    (tmp_path / "long.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n" + "\n" * 200)
    files = {"fedmpi.long": tmp_path / "long.py"}
    assert long_functions(files) == [("fedmpi.long.long", 61)]
    assert long_modules(files) == [("fedmpi.long", 265)]


def test_the_graph_sees_circles_and_upward_arrows(tmp_path, monkeypatch):
    """The checks above can fail: a circle through a function-local import and a package's __init__, and the
    library importing a user command, are both found in a made-up tree."""
    import import_graph as graph

    (tmp_path / "fedmpi" / "config").mkdir(parents=True)
    (tmp_path / "fedmpi" / "rules").mkdir()
    (tmp_path / "tools").mkdir()
    (tmp_path / "fedmpi" / "__init__.py").write_text("")
    (tmp_path / "fedmpi" / "config" / "__init__.py").write_text("from fedmpi.rules.registry import RULES\n")
    (tmp_path / "fedmpi" / "rules" / "__init__.py").write_text("def build():\n    from fedmpi.config import X\n")
    (tmp_path / "fedmpi" / "rules" / "registry.py").write_text("RULES = {}\n")
    (tmp_path / "fedmpi" / "export_user.py").write_text("from tools.export import main\n")
    (tmp_path / "tools" / "__init__.py").write_text("")
    (tmp_path / "tools" / "export.py").write_text("from fedmpi import config\n")
    monkeypatch.setattr(graph, "ROOT", tmp_path)
    found = graph.import_graph(graph.source_files())
    assert graph.circles(found) == [["fedmpi.config", "fedmpi.rules"]]
    assert graph.upward_arrows(found) == [("fedmpi.export_user", "tools.export")]
    assert graph.inner_arrows(found, {"fedmpi.rules": ("fedmpi.config",)}) == [("fedmpi.rules", "fedmpi.config")]
    assert graph.reaching_out(found, {"fedmpi.rules": ("fedmpi.rules",)}) == [("fedmpi.rules", "fedmpi.config")]
    assert LAYERS["fedmpi"] == ()
    (tmp_path / "fedmpi" / "rules" / "talk.py").write_text("import torch.distributed as dist\n"
                                                            "from fedmpi.config import _private\n")
    assert graph.communicating(graph.source_files(), {"fedmpi.rules": ("torch.distributed",)}) == [
        ("fedmpi.rules.talk", "fedmpi.config._private"), ("fedmpi.rules.talk", "torch.distributed")]
    (tmp_path / "fedmpi" / "rules" / "reads.py").write_text("o = part.options\nq = part.options.clusters\n"
                                                             "build(part.options)\n")
    assert reading_options(graph.source_files(), ("fedmpi.rules",)) == [("fedmpi.rules.reads", 1),
                                                                             ("fedmpi.rules.reads", 2)]
