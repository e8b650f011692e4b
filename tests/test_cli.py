"""The command line: every verb, and errors as one line with a non-zero exit."""

import numpy as np
import pytest

from gpucg.cli import main, parse_attr, parse_input


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_parse_helpers():
    t = parse_input("n,1024:float32")
    assert str(t) == "Tensor[(n, 1024), float32]"
    assert parse_attr("axis=1") == ("axis", 1)
    assert parse_attr("strides=[1, 1]") == ("strides", (1, 1))
    assert parse_attr("layout=NCHW") == ("layout", "NCHW")
    assert parse_attr("exclusive=true") == ("exclusive", True)


def test_targets_and_ops(capsys):
    code, out, _ = run(capsys, "targets")
    assert code == 0 and "numpy" in out and "default:" in out
    code, out, _ = run(capsys, "ops")
    assert code == 0 and "scan_rows.cuda" in out and "plevel" in out and "cumprod" in out


def test_explain(capsys):
    code, out, _ = run(capsys, "explain", "cumsum", "--input", "n,1024:float32", "--attr", "axis=1",
                       "--target", "cuda")
    assert code == 0 and "scan_rows.cuda" in out and "selected" in out


def test_dump_to_stdout_and_files_compile_as_is(capsys, tmp_path, nvrtc_or_skip):
    from gpucg.verify import nvrtc

    code, out, _ = run(capsys, "dump", "cumsum", "--input", "n,m:float32", "--attr", "axis=1",
                       "--target", "cuda")
    assert code == 0 and "extern \"C\" __global__" in out and "def dispatch(data):" in out
    code, out, _ = run(capsys, "dump", "cumsum", "--input", "n,m:float32", "--attr", "axis=1",
                       "--target", "cuda", "-o", str(tmp_path / "cu"))
    files = sorted((tmp_path / "cu").glob("*.cu"))
    assert code == 0 and len(files) >= 4 and (tmp_path / "cu" / "dispatcher.py").exists()
    for f in files:
        nvrtc.compile_to_ptx(f.read_text(), "sm_90")
    compile((tmp_path / "cu" / "dispatcher.py").read_text(), "dispatcher.py", "exec")


def test_dump_opencl_files_build_on_pocl(capsys, tmp_path):
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    from gpucg.runtime import get_backend

    code, _, _ = run(capsys, "dump", "cumprod", "--input", "n,m:int32", "--attr", "axis=0",
                     "--attr", "exclusive=true", "--target", "opencl", "-o", str(tmp_path / "cl"))
    files = sorted((tmp_path / "cl").glob("*.cl"))
    assert code == 0 and files
    for f in files:
        src = f.read_text()
        entry = src.split("__kernel void ", 1)[1].split("(", 1)[0].strip()
        get_backend("opencl").compile(src, entry)


def test_run_check(capsys):
    code, out, _ = run(capsys, "run", "cumsum", "--input", "n,300:float32", "--attr", "axis=1",
                       "--size", "n=50", "--target", "numpy", "--check")
    assert code == 0 and "max abs error" in out and "ok" in out


def test_run_check_opencl(capsys):
    from conftest import backend_or_skip

    backend_or_skip("opencl")
    code, out, _ = run(capsys, "run", "cumprod", "--input", "n,m:int64", "--attr", "axis=0",
                       "--size", "n=30", "--size", "m=70", "--target", "opencl", "--check")
    assert code == 0 and "ok" in out


@pytest.mark.parametrize("argv,match", [
    (["explain", "cumsum", "--input", "n,4:float32", "--attr", "axis=3"], "axis=3 is out of range"),
    (["explain", "nosuchop", "--input", "4:float32"], "unknown operator 'nosuchop'"),
    (["explain", "cumsum", "--input", "4"], "must look like DIMS:DTYPE"),
    (["explain", "cumsum", "--input", "4:float32", "--target", "tpu"], "unknown kind"),
    (["explain", "cumsum", "--input", "4:float32", "--attr", "bogus=1"], "unknown attribute 'bogus'"),
])
def test_errors_are_one_line(capsys, argv, match):
    code, out, err = run(capsys, *argv)
    assert code == 2 and err.startswith("gpucg: error: ") and match in err.splitlines()[0]


def test_demo(capsys, tmp_path):
    code, out, _ = run(capsys, "demo", "-o", str(tmp_path / "demo"))
    assert code == 0, out
    assert "max abs error against np.cumsum" in out and ": ok" in out
    assert list((tmp_path / "demo" / "cuda").glob("*.cu"))
    assert list((tmp_path / "demo" / "opencl").glob("*.cl"))


def test_bench_quick(capsys):
    from gpucg.benchmarks.scan import main as bench

    assert bench(["--quick", "--repeat", "1", "--json"]) == 0
    out = capsys.readouterr().out
    assert "/peer0" in out and "GB/s" in out and "np.cumsum" in out and "warm eager cumsum" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("warm eager cumsum on 1000 elements (numpy)"))
    assert np.isfinite(float(line.split("overhead ")[1].split(" us")[0]))
    by_input = [ln for ln in out.splitlines() if ln.startswith("warm eager cumsum on 1000 elements by input")]
    assert by_input and all("NOT on the fast path" not in ln for ln in by_input)
    assert "numpy.ndarray" in by_input[0] and "(fast path, its share" in by_input[0]


def test_bench_topk_quick(capsys):
    code, out, _ = run(capsys, "bench", "topk", "--quick", "--repeat", "1", "--json")
    assert code == 0, out
    assert "numpy argpartition+sort" in out and "/peer0" in out and "GB/s" in out
    assert "VALUES DIFFER" not in out
    assert "gpucg numpy [topk_partition.numpy]" in out


def test_explain_topk_shows_size_conditions(capsys):
    code, out, _ = run(capsys, "explain", "topk", "--input", "m,n:float32", "--attr", "k=300",
                       "--target", "cuda")
    assert code == 0, out
    assert "dispatch at run time" in out
    assert "topk_radix.cuda" in out and "n >= 8192" in out and "m <= 32" in out
    assert "sort_merge.cuda" in out and "fallback" in out


def test_bench_conv2d_quick(capsys):
    code, out, _ = run(capsys, "bench", "conv2d", "--quick", "--repeat", "1", "--cases",
                       "64x56x56,stem,576x14x14", "--json")
    assert code == 0, out
    assert "numpy einsum (window view)" in out and "TFLOP/s" in out and "/peer0" in out
    assert "TOO LARGE" not in out
    assert "gpucg numpy [conv2d_im2col.numpy]" in out
    assert out.count("\nresnet 3x3") == 1 and "stem 7x7/2" in out and "depthwise 3x3 576" in out
    _lowp_rows(out, 3)


def _lowp_rows(out, cases):
    """float16, bfloat16 and TF32 rows: measured on a GPU, else said not to be, per case, with
    the kernel and config selection picks for an H100 (sm_90)."""
    from gpucg.benchmarks.lowp import NOT_MEASURED, gpu_present

    if gpu_present():
        assert out.count("float16") >= cases and "tf32" in out
    else:
        for precision in ("float16", "bfloat16", "tf32"):
            rows = [ln for ln in out.splitlines()
                    if f"gpucg cuda {precision} [" in ln and f"{NOT_MEASURED}: sm_90: " in ln]
            assert len(rows) == cases
            # sm_90a's plan where it differs (dense: gemm_wgmma; TF32 takes it for dense only)
            hopper = [ln for ln in out.splitlines()
                      if f"gpucg cuda {precision} [" in ln and f"{NOT_MEASURED}: sm_90a: " in ln]
            assert all("wgmma" in ln for ln in hopper)


def test_bench_dense_quick_has_reduced_precision_rows(capsys):
    code, out, _ = run(capsys, "bench", "dense", "--quick", "--repeat", "1", "--cases",
                       "square 1024", "--targets", "numpy", "--json")
    assert code == 0, out
    assert "numpy matmul (BLAS)" in out and "TOO LARGE" not in out
    _lowp_rows(out, 1)


def test_bench_dense_fp8_rows(capsys):
    code, out, _ = run(capsys, "bench", "dense", "--quick", "--repeat", "1", "--cases", "fp8",
                       "--targets", "numpy")
    assert code == 0, out
    assert "gpucg numpy [numpy_dense_fp8.numpy]" in out and "TOO LARGE" not in out
    assert "torch._scaled_mm (cpu)" in out
    assert "gpucg cuda dense_fp8" in out and "square 1024" not in out
    from gpucg.benchmarks.lowp import gpu_present

    assert gpu_present() or "[fp8_wgmma.cuda]      not measured on a GPU: sm_90a: " in out


def test_explain_conv2d_shows_the_winograd_guard(capsys):
    code, out, _ = run(capsys, "explain", "conv2d", "--input", "n,64,h,w:float32", "--input",
                       "64,64,3,3:float32", "--attr", "padding=1", "--target", "cuda")
    assert code == 0, out
    assert "dispatch at run time" in out
    assert "winograd_4x4.cuda" in out and "(h >= 14) & (w >= 14)" in out
    assert "depthwise.cuda" in out and "never: needs groups == input channels > 1" in out
    code, out, _ = run(capsys, "explain", "conv2d", "--input", "8,64,56,56:float32", "--input",
                       "64,64,3,3:float32", "--attr", "padding=1", "--attr", "strides=2",
                       "--target", "cuda")
    assert code == 0, out
    assert "excluded   if never: needs a 3x3 kernel, stride 1, dilation 1, groups 1" in out
    assert "direct.cuda" in out and "selected" in out


def test_ops_lists_conv2d_with_its_example(capsys):
    code, out, _ = run(capsys, "ops")
    assert code == 0, out
    assert "conv2d (opaque, inputs: data, weight, bias, residual)" in out
    assert "winograd_4x4.cuda" in out and "(h >= 14) & (w >= 14)" in out
