import numpy as np
import pytest

import gpucg
from gpucg import settings
from gpucg.generic_func import GenericFunc
from gpucg.strategy import Implementation, Strategy


def test_target_parsing_and_keys():
    assert gpucg.Target("cuda").keys == ("cuda", "gpu")
    assert gpucg.Target("opencl").keys == ("opencl", "gpu")
    assert gpucg.Target("cpu").kind == "numpy" and gpucg.Target("numpy").keys == ("cpu",)
    t = gpucg.Target("cuda -arch=sm_90")
    assert t.attrs == {"arch": "sm_90"} and str(t) == "cuda -arch=sm_90"


@pytest.mark.parametrize("spec,match", [
    ("tpu", "unknown kind 'tpu'"), ("cuda -arch=90", "sm_XY"), ("cuda arch", "-name=value"),
    ("numpy -arch=sm_80", "takes no option"), ("", "must be a string"), (3, "must be a string")])
def test_target_errors(spec, match):
    with pytest.raises(gpucg.TargetError, match=match):
        gpucg.Target(spec)


def test_targets_report_and_default():
    report = {t.name: t for t in gpucg.targets()}
    assert report["numpy"].usable
    for t in report.values():
        assert t.usable or t.reason
    with settings.scope(GPUCG_TARGET="numpy"):
        assert gpucg.default_target() == gpucg.Target("numpy")


def test_unusable_target_lists_usable_ones():
    if gpucg.Target("cuda") in [gpucg.Target(t.name) for t in gpucg.targets() if t.usable]:
        pytest.skip("CUDA is usable here")
    with pytest.raises(gpucg.TargetUnavailableError, match="usable targets: .*numpy"):
        gpucg.ops.cumsum(np.ones(3), target="cuda")


def test_generic_func_lookup_order_and_double_registration():
    f = GenericFunc("f", default=lambda target: "default")
    f.register(["gpu"], lambda target: "gpu")
    assert f(target=gpucg.Target("cuda")) == "gpu"
    assert f(target=gpucg.Target("numpy")) == "default"
    f.register("cuda", lambda target: "cuda")
    assert f(target=gpucg.Target("cuda")) == "cuda" and f(target=gpucg.Target("opencl")) == "gpu"
    with pytest.raises(gpucg.StrategyError, match="already registered"):
        f.register("cuda", lambda target: "again")
    f.register("cuda", lambda target: "again", override=True)
    assert f(target=gpucg.Target("cuda")) == "again"
    g = GenericFunc("g")
    with pytest.raises(gpucg.StrategyError, match="nothing registered"):
        g(target=gpucg.Target("numpy"))


# A made-up target registered from this test module, with its own strategy for cumsum.
gpucg.register_target_kind("mytarget", keys=("mytarget", "cpu"), backend="numpy", override=True)
RAN = []


def _my_cumsum_strategy(attrs, inputs, outputs, target):
    def run(ctx):
        RAN.append("mine")
        ctx.outputs[0][...] = np.cumsum(ctx.inputs[0], axis=ctx.attrs.axis, dtype=ctx.outputs[0].dtype)

    s = Strategy()
    s.add_implementation(Implementation("my_scan.mytarget", 10, run))
    return s


gpucg.register_strategy("cumsum", ["mytarget"], _my_cumsum_strategy, override=True)


def test_external_target_registration():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = gpucg.ops.cumsum(x, axis=1, target="mytarget")
    assert RAN == ["mine"]
    np.testing.assert_array_equal(y, np.cumsum(x, axis=1))
    assert gpucg.explain("cumsum", gpucg.tensor((2, 3), "float32"), axis=1,
                         target="mytarget").choices[0].impl.name == "my_scan.mytarget"
    with pytest.raises(gpucg.TargetError, match="already registered"):
        gpucg.register_target_kind("mytarget", keys=("x",), backend="numpy")
