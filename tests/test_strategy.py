"""Selection: plevels, ties, CNF conditions, the records hook, the generated dispatcher."""

import logging

import numpy as np
import pytest
import sympy

import gpucg
from gpucg.autotune import RecordList, RecordLog, make_record
from gpucg.space import ConfigSpace
from gpucg.strategy import Implementation, Strategy

RAN: list = []
IMPLS: dict = {}


def _runner(name):
    def run(ctx):
        RAN.append((name, ctx.config.get("tile")))
        ctx.outputs[0][...] = ctx.inputs[0] * 2
    return run


def _strategy(attrs, inputs, outputs, target):
    (x,) = inputs
    n = x.shape[0]
    s = Strategy()
    for name, plevel, cond in IMPLS["list"]:
        s.add_implementation(Implementation(
            name, plevel, _runner(name), condition=cond(n) if cond else None,
            space=ConfigSpace({"tile": (1, 2, 4)}, {"tile": 1})))
    return s


gpucg.register_op("probe_double", num_inputs=1, type_rel=lambda ins, attrs: ins[0],
                  pattern=gpucg.OpPattern.INJECTIVE, reference=lambda x, a: x * 2,
                  input_names=("x",), override=True)
gpucg.register_strategy("probe_double", ["cpu"], _strategy, override=True)


@pytest.fixture(autouse=True)
def _reset():
    RAN.clear()
    yield
    IMPLS.clear()


def _impls(*items):
    IMPLS["list"] = list(items)


def test_highest_plevel_wins_for_constant_shapes(caplog):
    _impls(("small", 20, lambda n: n <= 16), ("big", 15, lambda n: n > 16), ("any", 5, None))
    with caplog.at_level(logging.INFO, logger="gpucg.select"):
        sel = gpucg.explain("probe_double", gpucg.tensor((8,), "float32"), target="numpy")
    assert [c.impl.name for c in sel.choices] == ["small"] and not sel.dynamic
    verdicts = {c.name: c.verdict for c in sel.candidates}
    assert verdicts == {"small": "selected", "big": "excluded", "any": "lost"}
    assert "selected small" in caplog.text
    sel = gpucg.explain("probe_double", gpucg.tensor((100,), "float32"), target="numpy")
    assert sel.choices[0].impl.name == "big"


def test_plevel_tie_broken_by_registration_order_with_warning():
    _impls(("first", 10, None), ("second", 10, None))
    with pytest.warns(UserWarning, match="tie at plevel 10"):
        sel = gpucg.explain("probe_double", gpucg.tensor((8,), "float32"), target="numpy")
    assert sel.choices[0].impl.name == "first"
    assert "registration order" in {c.name: c.reason for c in sel.candidates}["second"]


def test_no_fallback_is_rejected():
    _impls(("small", 20, lambda n: n <= 16), ("big", 15, lambda n: n > 16))
    with pytest.raises(gpucg.StrategyError, match="no unconditioned implementation"):
        gpucg.explain("probe_double", gpucg.tensor((gpucg.var("n"),), "float32"), target="numpy")


def test_symbolic_dispatch_runs_the_generated_source():
    n = gpucg.var("n")
    _impls(("small", 20, lambda n: n <= 16),
           ("mid", 15, lambda n: sympy.And(n > 16, sympy.Or(n <= 64, sympy.Eq(n, 100)))),
           ("any", 5, None))
    f = gpucg.compile("probe_double", gpucg.tensor((n,), "float32"), target="numpy")
    assert f.selection.dynamic
    src = f.dispatcher_source
    assert "if n <= 16:" in src and "return _plan(2," in src
    # the function that runs is compiled from exactly this source
    code = compile(src, "<gpucg dispatcher probe_double>", "exec")
    fn_code = [c for c in code.co_consts if hasattr(c, "co_code")][0]
    assert f.dispatcher.__code__.co_code == fn_code.co_code
    for size, want in [(3, "small"), (16, "small"), (17, "mid"), (64, "mid"), (65, "any"),
                       (100, "mid"), (101, "any")]:
        RAN.clear()
        np.testing.assert_array_equal(f(np.ones(size, np.float32)), np.full(size, 2, np.float32))
        assert RAN == [(want, 1)], size


def test_records_hook_picks_tuned_impl_and_config(tmp_path):
    _impls(("small", 20, lambda n: n <= 16), ("any", 5, None))
    t = gpucg.tensor((8,), "float32")
    recs = RecordList([make_record("probe_double", (t,), "any", {"tile": 4}, 1e-6, "numpy"),
                       make_record("probe_double", (t,), "small", {"tile": 2}, 5e-6, "numpy"),
                       make_record("probe_double", (gpucg.tensor((9,), "float32"),), "small",
                                   {"tile": 2}, 1e-9, "numpy")])
    f = gpucg.compile("probe_double", t, target="numpy", records=recs)
    assert f.selection.choices[0].impl.name == "any"
    f(np.ones(8, np.float32))
    assert RAN == [("any", 4)]
    # a log file with a corrupt line still loads its good records
    log = tmp_path / "records.jsonl"
    good = make_record("probe_double", (t,), "small", {"tile": 2}, 1e-7, "numpy")
    log.write_text(good.to_json() + "\n{broken\n")
    loaded = RecordLog(log)
    assert len(loaded.records) == 1
    f = gpucg.compile("probe_double", t, target="numpy", records=loaded)
    assert f.selection.choices[0].impl.name == "small" and f.selection.choices[0].config["tile"] == 2


def test_signature_errors():
    n = gpucg.var("n")
    _impls(("any", 5, None))
    f = gpucg.compile("probe_double", gpucg.tensor((n, 4), "float32"), target="numpy")
    with pytest.raises(gpucg.SignatureError, match="rank 1"):
        f(np.ones(3, np.float32))
    with pytest.raises(gpucg.SignatureError, match="dtype float64"):
        f(np.ones((3, 4)))
    with pytest.raises(gpucg.SignatureError, match=r"x.shape\[1\] is 5"):
        f(np.ones((3, 5), np.float32))
    with pytest.raises(gpucg.SignatureError, match="compiled for 1 input"):
        f()
    with pytest.raises(gpucg.InputError, match="must be a numpy.ndarray"):
        f([[1.0] * 4])


def test_condition_on_foreign_symbol_is_rejected():
    k = gpucg.var("k")
    _impls(("odd", 20, lambda n: k <= 3), ("any", 5, None))
    with pytest.raises(gpucg.ConditionError, match="appear in no input"):
        gpucg.explain("probe_double", gpucg.tensor((gpucg.var("n"),), "float32"), target="numpy")


def test_plan_and_run_are_the_call_in_two_steps():
    """plan checks the arrays and decides once; run carries a plan out on those arrays or on
    others of the same dtypes and shapes (what the eager path memoizes and the tuner times)."""
    n = gpucg.var("n")
    f = gpucg.compile("cumsum", gpucg.tensor((n, 5), "float32"), axis=1, target="numpy")
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    plan = f.plan(x)
    assert plan.out_shapes == ((3, 5),) and not plan.wide and f.dispatcher(x) == plan
    np.testing.assert_array_equal(f.run(plan, x), np.cumsum(x, axis=1))
    np.testing.assert_array_equal(f.run(plan, -x), np.cumsum(-x, axis=1))
    with pytest.raises(gpucg.SignatureError, match="rank 1"):
        f.plan(np.ones(5, np.float32))
    attrs = gpucg.get_op("cumsum").make_attrs(axis=1)
    g = gpucg.CompiledOp.with_attrs("cumsum", [gpucg.tensor((n, 5), "float32")], attrs,
                                    target="numpy")
    np.testing.assert_array_equal(g(x), f(x))
    with pytest.raises(gpucg.InputError, match="must be a ScanAttrs"):
        gpucg.CompiledOp.with_attrs("cumsum", [gpucg.tensor((n, 5), "float32")], {"axis": 1})


def test_params_is_the_deprecated_name_of_fixed():
    """``params=`` (the documented name before ``fixed=``) still works, with a warning."""
    decl = gpucg.kernel_impl("probe_fixed", lambda ctx, main: None,
                             main=gpucg.Kernel("schedules/injective.j2"))
    with pytest.warns(DeprecationWarning, match="use fixed="):
        kernel = gpucg.Kernel("schedules/injective.j2", params={"wg": 64})
    assert dict(kernel.fixed) == {"wg": 64}
    s = Strategy(gpucg.target.resolve("opencl"))
    with pytest.warns(DeprecationWarning, match="use fixed="):
        impl = s.add(decl, 10, params={"in_dtype": "float32"})
    assert dict(impl.fixed) == {"in_dtype": "float32"}
    with pytest.warns(DeprecationWarning, match="Implementation.fixed"):
        assert dict(impl.params) == {"in_dtype": "float32"}
    with pytest.raises(gpucg.StrategyError, match="fixed= only"):
        s.add(decl, 10, fixed={"a": 1}, params={"b": 2})


def test_a_knob_and_a_fixed_parameter_may_not_share_a_name():
    """A tuning knob no longer silently overrides a fixed parameter of the same name: offering
    both is an error naming the implementation, the name and both values."""
    decl = gpucg.kernel_impl("probe_clash", lambda ctx, main: None,
                             main=gpucg.Kernel("schedules/injective.j2"))
    s = Strategy(gpucg.target.resolve("opencl"))
    with pytest.raises(gpucg.StrategyError,
                       match=r"probe_clash.opencl: 'wg' is both a tuning knob \(candidates "
                             r"\(64, 256\), default 256\) and a fixed parameter \(wg=128\)"):
        s.add(decl, 10, space=ConfigSpace({"wg": (64, 256)}, {"wg": 256}), fixed={"wg": 128})
    impl = s.add(decl, 10, space=ConfigSpace({"wg": (64, 256)}, {"wg": 256}), fixed={"n": 3})
    assert impl.template_params("main", impl.space.default) == {"n": 3, "wg": 256}


def test_a_space_chooses_a_costly_default_when_first_read():
    """A default given as a function is chosen when first read, once, and checked then: on
    CUDA conv2d's direct kernel ranks first, so the fused Winograd defaults' search (about two
    seconds a shape) never runs for a compile that does not reach them."""
    from gpucg.space import ConfigSpace

    calls = []

    def choose():
        calls.append(1)
        return {"a": 2}

    space = ConfigSpace({"a": (1, 2)}, choose)
    assert not calls
    assert space.default == {"a": 2} and space.default == {"a": 2} and calls == [1]
    with pytest.raises(gpucg.InputError, match="not allowed"):
        ConfigSpace({"a": (1, 2)}, lambda: {"a": 3}).default
    from gpucg.strategies import conv2d_fused

    searched = conv2d_fused.default_for.cache_info().misses
    sel = gpucg.explain("conv2d", gpucg.tensor((7, 64, 56, 56)), gpucg.tensor((64, 64, 3, 3)),
                        padding=1, target="cuda")
    assert sel.choices[0].impl.name == "direct.cuda"
    assert any(c.name.startswith("winograd_fused") for c in sel.candidates)
    assert conv2d_fused.default_for.cache_info().misses == searched
