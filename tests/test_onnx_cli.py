"""`gpucg onnx run` and `gpucg onnx dump` on small graphs built here with onnx.helper: run on
random inputs on the numpy target, checked against onnxruntime; dump for CUDA renders every
kernel and dispatcher without a GPU, a directory a node."""

from __future__ import annotations

import numpy as np
import pytest

for _module in ("onnx", "onnxruntime"):
    pytest.importorskip(_module, reason=f"gpucg onnx's tests need {_module}")

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from gpucg.cli import main  # noqa: E402


def _save(tmp_path, name, nodes, inits=()):
    """A graph x (n, 4) float32 -> y through ``nodes``, saved; its path."""
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return str(path)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """MatMul + Add + Relu (dense with its epilogue), then Softmax."""
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((4, 3)).astype(np.float32), np.float32([0.5, -1, 0])
    return _save(tmp_path_factory.mktemp("onnx"), "mlp", [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
        helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
        helper.make_node("Relu", ["hb"], ["r"], name="act"),
        helper.make_node("Softmax", ["r"], ["y"], axis=-1, name="probs")],
        [("w", w), ("b", b)])


def test_run_checks_against_onnxruntime(mlp, capsys):
    assert main(["onnx", "run", mlp, "--target", "numpy", "--input", "x=5,4:float32",
                 "--check", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "inputs x (5, 4) float32" in out and "output y: (5, 3) float32" in out
    assert "check y against onnxruntime: max abs error" in out and "(ok)" in out
    assert main(["onnx", "run", mlp, "--target", "numpy", "--dim", "n=2", "--repeat", "1"]) == 0
    assert "inputs x (2, 4) float32" in capsys.readouterr().out


def test_run_names_what_is_missing(mlp, capsys):
    assert main(["onnx", "run", mlp, "--target", "numpy"]) == 2
    err = capsys.readouterr().err
    assert "input 'x' is" in err and "--input x=DIMS:float32" in err and "--dim" in err
    assert main(["onnx", "run", mlp, "--target", "numpy", "--input", "z=1,4:float32"]) == 2
    assert "NAME one of the model's inputs: x" in capsys.readouterr().err
    assert main(["onnx", "run", mlp, "--target", "numpy", "--input", "x=n,4:float32"]) == 2
    assert "every dimension must be an int" in capsys.readouterr().err


def test_dump_cuda_renders_every_kernel_without_a_gpu(tmp_path, capsys):
    model = _save(tmp_path, "act", [helper.make_node("Relu", ["x"], ["r"], name="act"),
                                    helper.make_node("Softmax", ["r"], ["y"], axis=-1,
                                                     name="probs/softmax")])
    out = tmp_path / "dump"
    assert main(["onnx", "dump", model, "--target", "cuda", "-o", str(out)]) == 0
    dirs = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert dirs == ["000_fused_act", "001_softmax_probs_softmax"]  # relu as a fused kernel
    for d in dirs:
        files = {p.name for p in (out / d).iterdir()}
        assert "dispatcher.py" in files and any(f.endswith(".cu") for f in files), (d, files)
        for f in files - {"dispatcher.py"}:
            assert "__global__" in (out / d / f).read_text()
    index = (out / "index.txt").read_text()
    assert "000 fused: act (Relu) -> 000_fused_act/" in index
    assert "001 softmax: probs/softmax (Softmax)" in index
    assert str(out / "index.txt") in capsys.readouterr().out


def test_docs_coverage_table_lists_every_lowered_operator():
    """docs/onnx.md's operator coverage table names every ONNX operator gpucg.onnx lowers."""
    from pathlib import Path

    from gpucg.onnx.nodes import TABLE

    doc = (Path(__file__).parent.parent / "docs" / "onnx.md").read_text()
    table = doc[doc.index("## Operator coverage"):doc.index("## Speed")]
    named = {w.strip(" `") for row in table.splitlines() if row.startswith("| ")
             for w in row.split("|")[1].replace(",", " ").split()}
    assert not set(TABLE) - named, sorted(set(TABLE) - named)


def test_subpackages_load_on_first_use_and_python_m_gpucg_runs():
    """``import gpucg`` imports neither gpucg.onnx nor onnx, yet ``gpucg.onnx.compile`` is
    there after it (a lazy attribute, as SciPy's subpackages); ``python -m gpucg`` is the CLI."""
    import subprocess
    import sys

    code = ("import sys, gpucg; before = {'onnx', 'gpucg.onnx', 'gpucg.autotune'} & "
            "set(sys.modules); f = gpucg.onnx.compile; v = gpucg.verify; "
            "print(sorted(before), callable(f), 'onnx' in dir(gpucg))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["[]", "True", "True"]
    cli = subprocess.run([sys.executable, "-m", "gpucg", "onnx", "--help"], capture_output=True,
                         text=True)
    assert cli.returncode == 0 and "explain" in cli.stdout
