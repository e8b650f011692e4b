"""The shape of the package: an acyclic import graph, files a reader can hold, tests on public
API, and every operator family complete (op module, strategies for every target, eager
function)."""

import ast
from pathlib import Path

import pytest

import gpucg
from gpucg import builtin

ROOT = Path(gpucg.__file__).resolve().parent
MAX_LINES = 400


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([target] if target else []))


def import_graph() -> dict[str, set[str]]:
    """module -> the gpucg modules its import statements name (at any depth of the file)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = (_resolve(mod, is_package, node.level, node.module) if node.level
                        else node.module or "")
                # "from . import x" names the submodule x when there is one
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                         for a in node.names]
            for name in names:
                while name and name not in mods:
                    name = name.rpartition(".")[0]
                if name and name != mod:
                    graph[mod].add(name)
    return graph


def test_the_import_graph_is_acyclic():
    graph = import_graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert "gpucg.ops" not in graph["gpucg.op"]  # the registry does not know the library


def _room(module: str) -> str:
    """The room a module belongs to: a top-level module, or a top-level package (a folder)."""
    return ".".join(module.split(".")[:2])


def test_the_folders_form_layers():
    """Seen a folder at a time (a package is one room), the imports still form no circle, so
    every room stands above what it imports: records/ and space.py under selection, the tuner
    in autotune/ above the operators, the GPU-free checks in verify/ above the backends, the
    ONNX front end in onnx/ a tool on the library that only the command line and the
    benchmarks import, and only those two above the package's face (``import gpucg``)."""
    rooms: dict[str, set[str]] = {}
    for mod, names in import_graph().items():
        for n in names:
            if _room(n) != _room(mod):
                rooms.setdefault(_room(mod), set()).add(_room(n))
    above_face = {m for m, ns in rooms.items() if "gpucg" in ns}
    assert above_face <= {"gpucg.cli", "gpucg.benchmarks"}, above_face
    done: set[str] = set()

    def below(m, path):
        if m in path:
            pytest.fail("rooms import each other: " + " -> ".join(path[path.index(m):] + [m]))
        if m not in done:
            for n in sorted(rooms.get(m, ())):
                below(n, path + [m])
            done.add(m)

    for m in sorted(rooms):
        below(m, [])
    tools = {m for m, ns in rooms.items() if "gpucg.onnx" in ns or "gpucg.torch" in ns}
    assert tools <= {"gpucg.cli", "gpucg.benchmarks"}, tools
    for low in ("gpucg.space", "gpucg.records", "gpucg.runtime"):
        assert not rooms.get(low, set()) & {"gpucg.autotune", "gpucg.verify", "gpucg.compiled",
                                            "gpucg.strategies", "gpucg.ops"}, low


def test_both_front_ends_stand_on_the_graph_layer():
    """gpucg.onnx and the torch back end (gpucg.torch) both lower into the graph layer
    (gpucg.graph) and import it; neither imports the other, and the graph layer imports
    neither: fusion, size folding and the compiled program are written once."""
    rooms: dict[str, set[str]] = {}
    for mod, names in import_graph().items():
        rooms.setdefault(_room(mod), set()).update(_room(n) for n in names)
    assert "gpucg.graph" in rooms["gpucg.onnx"] and "gpucg.graph" in rooms["gpucg.torch"]
    assert "gpucg.torch" not in rooms["gpucg.onnx"], rooms["gpucg.onnx"]
    assert "gpucg.onnx" not in rooms["gpucg.torch"], rooms["gpucg.torch"]
    assert not rooms["gpucg.graph"] & {"gpucg.onnx", "gpucg.torch", "gpucg.cli",
                                       "gpucg.benchmarks"}, rooms["gpucg.graph"]
    text = "\n".join(p.read_text() for p in (ROOT / "graph").glob("*.py"))
    assert "import onnx" not in text and "import torch" not in text


def test_no_file_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"files over {MAX_LINES} lines: {long}"


def test_tests_use_public_api_only():
    """No test reaches a private attribute (obj._name) of gpucg's objects."""
    found = []
    for path in Path(__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                found.append(f"{path.name}:{node.lineno} .{node.attr}")
    assert not found, found


def test_every_family_is_complete():
    families = builtin.families()
    assert {"scan", "topk", "conv2d", "conv2d_winograd", "elementwise"} <= set(families)
    for name in gpucg.list_ops():
        op = gpucg.get_op(name)
        if not op.module.startswith("gpucg.ops."):
            continue  # registered by a user (a test)
        keys = op.strategy.registered_keys()
        assert {"gpu", "cpu"} <= set(keys), (name, keys)
        assert callable(getattr(gpucg.ops, name, None)), f"gpucg.ops.{name} is missing"


def test_a_missing_strategy_fails_at_load(monkeypatch):
    """A family whose strategies module lacks an operator is refused when loaded."""
    import types

    import gpucg.strategies.elementwise as elementwise

    monkeypatch.setattr(elementwise, "STRATEGIES", {k: v for k, v in elementwise.STRATEGIES.items()
                                                    if k != "relu"})
    with pytest.raises(gpucg.OpError, match=r"operator 'relu' .* has no strategy for target key"):
        builtin.load()
    monkeypatch.setattr(elementwise, "STRATEGIES", types.SimpleNamespace())
    with pytest.raises(gpucg.OpError, match="must define STRATEGIES"):
        builtin.load()


def test_a_kernel_key_mismatch_fails_at_declaration():
    def run(ctx, scan, extra):
        pass

    with pytest.raises(gpucg.StrategyError, match=r"launches \['extra', 'scan'\] but the "
                                                  r"declared kernels are \['scan'\]"):
        gpucg.kernel_impl("probe", run, scan=gpucg.Kernel("scan/scan_rows.j2"))
    with pytest.raises(gpucg.StrategyError, match="names template 'scan/nope.j2'"):
        gpucg.kernel_impl("probe", lambda ctx, scan: None, scan=gpucg.Kernel("scan/nope.j2"))


def test_every_kernel_launch_names_its_arguments():
    """A run function passes every kernel argument by the name its template declares (the one
    parameter list: gpucg/codegen/signature.py checks it at the launch, which also refuses
    arguments by position); the backends' Programs (runtime/, run_context's call of them) take
    the ordered list."""
    found = []
    for path in ROOT.rglob("*.py"):
        text = path.read_text()
        if "block=" not in text or path.parent.name == "runtime" or path.name == "run_context.py":
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and node.args \
                    and {"grid", "block"} <= {k.arg for k in node.keywords}:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"launches with arguments by position: {found}"


def test_every_builtin_operator_declares_cases_that_compile():
    """Representative calls drive the checks of every implementation (resources, Oclgrind,
    traffic, tuning): each built-in operator has benchmark-sized and small ones."""
    for name in gpucg.list_ops():
        op = gpucg.get_op(name)
        if not op.module.startswith("gpucg.ops."):
            continue
        assert op.representative("bench") and op.representative("small"), name
        for case in op.representative():
            assert all(t.is_static for t in case.inputs), (name, case)
            for target in ("cuda", "opencl -device=gpu", "numpy"):
                gpucg.explain(name, *case.inputs, target=target, **case.attrs)


def test_grad_without_a_registered_gradient_is_a_clear_error():
    import numpy as np

    with pytest.raises(gpucg.OpError, match="has no gradient registered"):
        gpucg.grad("argsort", np.ones(3), out_grad=np.ones(3))
