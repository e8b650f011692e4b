"""The tuner: search methods (replayed, deterministic), measuring workers and their typed
errors, resuming after kill -9, records (keys, stale ones, pruning), applying records in
compile/explain/eager calls and as per-bucket dispatcher branches, Ray, the CLI."""

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gpucg
from gpucg import procwatch
from gpucg import eager, settings
from gpucg.autotune import RecordList, RecordLog, RecordsError, make_record, open_log
from gpucg.records.apply import pick_best
from gpucg.autotune.search import SEARCHES, Candidates, make_search
from gpucg.cli import main

from conftest import backend_or_skip

sys.path.insert(0, str(Path(__file__).parent))
import tune_probe  # noqa: E402  (registers the tune_probe operator)

ROOT = Path(__file__).parent.parent
RECORDED = Path(__file__).parent / "data" / "conv2d_1x1_pocl.jsonl"
CONV_1X1 = (gpucg.tensor((1, 64, 28, 28), "float32"), gpucg.tensor((64, 64, 1, 1), "float32"))
T8 = gpucg.tensor((8,), "float32")


# -- search methods, with fake costs (no device) ---------------------------------------

def _space():
    from gpucg.autotune import ConfigSpace

    a = ConfigSpace({"x": tuple(range(8)), "y": tuple(range(6))}, {"x": 0, "y": 0})
    b = ConfigSpace({"z": tuple(range(10))}, {"z": 0})
    return Candidates([("a", a.knobs, list(a)), ("b", b.knobs, list(b))])


def _cost(cands, i):
    name, c = cands.items[i]
    if name == "a":
        return 1.0 + (c["x"] - 5) ** 2 + 0.5 * (c["y"] - 2) ** 2
    return 30.0 + c["z"]


def _run(name, seed, trials=25):
    cands = _space()
    s = make_search(name, cands, seed)
    order = []
    while len(order) < trials:
        batch = s.ask(1)
        if not batch:
            break
        for i in batch:
            order.append(i)
            s.tell(i, _cost(cands, i))
    return order


@pytest.mark.parametrize("name", SEARCHES)
def test_every_search_is_deterministic_and_never_repeats(name):
    first, again = _run(name, 3), _run(name, 3)
    assert first == again and len(set(first)) == len(first) == 25
    if name in ("random", "anneal", "model"):
        assert _run(name, 4) != first  # the seed matters
    cands = _space()
    assert len(_run(name, 0, trials=len(cands) + 5)) == len(cands)  # it ends when all are told


def test_grid_interleaves_implementations_and_anneal_walks_neighbours():
    cands = _space()
    order = _run("grid", 0, 4)
    assert [cands.items[i][0] for i in order] == ["a", "b", "a", "b"]
    walk = _run("anneal", 1, 12)
    near = sum(any(j in cands.neighbours(i) for i in walk[:k]) for k, j in enumerate(walk))
    assert near >= 9  # mostly one knob one step from a config it stood on


def test_ties_within_noise_go_to_the_earlier_config():
    items = [("late", 1.00, 0.05, 2), ("early", 1.03, 0.05, 1), ("far", 0.5, 0.01, 3)]
    best = pick_best(items[:2], lambda t: t[1], lambda t: t[2], lambda t: t[3])
    assert best[0] == "early"  # 1.03 is within 0.05 of 1.00
    assert pick_best(items, lambda t: t[1], lambda t: t[2], lambda t: t[3])[0] == "far"


# -- replaying a recorded space (PoCL, conv2d 1x1: every config of the direct GEMM) ----------

def _replay(search, trials, seed=0):
    return gpucg.tune("conv2d", *CONV_1X1, target="opencl", replay=RECORDED, search=search,
                      trials=trials, seed=seed, progress=False).buckets[0]


@pytest.mark.parametrize("search", SEARCHES)
def test_replay_is_deterministic_for_every_search(search):
    a, b = _replay(search, 30), _replay(search, 30)
    assert [(t.impl, t.config) for t in a.trials] == [(t.impl, t.config) for t in b.trials]
    assert a.best == b.best and a.best.ok and len(a.trials) == 30
    # the default config is measured first where the log holds it: direct's default (vw = 4,
    # double-buffered) came after these records, which stand for vw = 1 without double buffering
    default = gpucg.explain("conv2d", *CONV_1X1, target="opencl", records=False).choices[0]
    recorded = {(t.impl, tuple(sorted(t.config.items()))) for t in a.trials}
    held = (default.impl.name, tuple(sorted(default.config.items()))) in recorded
    assert a.trials[0].default == held


def test_model_search_reaches_the_grid_best_in_fewer_trials():
    grid = _replay("grid", 1000)
    n = grid.candidates
    assert n >= 100 and len(grid.trials) == n
    best = grid.best.cost
    for seed in (0, 1, 2):
        model = _replay("model", n // 4, seed)
        reached = model.trials_to(best)
        assert reached is not None and reached < grid.trials_to(best), (seed, reached)
        assert model.trials_to(best * 1.05) <= n // 4


# -- measuring workers: typed errors, timeouts, crashes ------------------------------------

def test_workers_record_wrong_answers_crashes_and_timeouts(tmp_path):
    path = tmp_path / "records.jsonl"
    r = gpucg.tune("tune_probe", T8, target="numpy", risky=True, search="grid", trials=6,
                   records=path, timeout_s=4, progress=False, workers=2)
    kinds = {t.config["mode"]: t.error for t in r.buckets[0].trials if t.config["delay"] == 0}
    assert kinds == {"ok": None, "wrong": "wrong", "crash": "crash", "hang": "timeout",
                     "fast": None}
    crash = [t for t in r.buckets[0].trials if t.error == "crash"][0]
    assert "SIGSEGV" in crash.message
    assert r.best.error is None and r.best.config["delay"] == 0
    assert r.buckets[0].speedup > 1
    logged = RecordLog(path).records
    assert len(logged) == 6 and {x.error for x in logged} == {None, "wrong", "crash", "timeout"}


def test_workers_on_a_gpu_compile_in_parallel_and_run_one_at_a_time():
    from gpucg.autotune.measure import Task
    from gpucg.autotune.workers import LocalPool

    attrs = gpucg.get_op("tune_probe").make_attrs()
    tasks = [Task("tune_probe", ("tune_probe",), "numpy", (T8,), attrs, "probe_host.numpy",
                  {"mode": "ok", "delay": d}) for d in (4, 0, 2)]
    with LocalPool(2, timeout_s=30, exclusive=False) as pool:
        results = pool.measure(tasks)
        assert len(pool.workers) == 2
    assert all(r.ok for r in results)
    assert results[0].cost > results[1].cost  # in the order of the tasks


def test_tuning_on_given_arrays_within_a_time_budget(tmp_path):
    x = np.arange(8, dtype=np.float32)
    r = gpucg.tune("tune_probe", x, target="numpy", trials=16, budget_s=0.5,
                   records=RecordList(), progress=False, search="anneal")
    b = r.buckets[0]
    assert 1 <= len(b.trials) < 16 and b.best.ok  # the budget stopped it
    with pytest.raises(gpucg.InputError, match="either gpucg.tensor types or arrays"):
        gpucg.tune("tune_probe", x, T8, target="numpy")
    with pytest.raises(gpucg.InputError, match="give the sizes to tune at"):
        gpucg.tune("tune_probe", gpucg.tensor((gpucg.var("n"),), "float32"), target="numpy")


def test_a_killed_tune_resumes_without_losing_or_repeating(tmp_path):
    path = tmp_path / "records.jsonl"
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "import gpucg, tune_probe\n"
            f"gpucg.tune('tune_probe', gpucg.tensor((8,), 'float32'), target='numpy', "
            f"search='random', trials=12, records={str(path)!r}, progress=False)\n")
    env = dict(os.environ, GPUCG_TUNE_PROBE_SLOW="1")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not path.exists() or
                                           path.read_text().count("\n") < 3):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    assert 3 <= len(before) < 12
    procwatch.run([sys.executable, "-c", code], env=env, check=True)
    after = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    assert after[:len(before)] == before  # nothing lost
    keys = [json.dumps(r["config"], sort_keys=True) for r in after]
    assert len(keys) == len(set(keys)) == 12  # nothing measured twice


def test_device_limit_checks_drop_configs_before_they_run(monkeypatch):
    backend_or_skip("opencl")
    from gpucg.autotune import checks
    from gpucg.autotune.measure import Measurer, Task
    from gpucg.runtime import get_backend

    t = gpucg.tensor((4, 300), "float32")
    f = gpucg.compile("cumsum", t, axis=1, target="opencl", impl="scan_rows",
                      config={"wg": 128, "items": 4})
    be = get_backend("opencl")
    prog = f.program(0, "scan", False)
    limit = int(be.device.max_work_group_size)
    assert "CL_DEVICE_MAX_WORK_GROUP_SIZE" in checks.opencl_work_group(be, prog, "scan", 1,
                                                                       limit * 2)
    assert checks.opencl_work_group(be, prog, "scan", 1, 128) is None
    assert checks.opencl_local_memory(be, prog, "scan", 1, 128) is None
    monkeypatch.setitem(checks.CHECKS, "opencl", [lambda *a: "a limit of this test"])
    attrs = gpucg.get_op("cumsum").make_attrs(axis=1)
    task = Task("cumsum", (), "opencl", (t,), attrs, "scan_rows.opencl", {"wg": 128, "items": 4})
    res = Measurer().measure(task)
    assert res.error == "dropped" and "a limit of this test" in res.message
    monkeypatch.setitem(checks.CHECKS, "opencl", [])
    assert Measurer().measure(task).ok


def test_gpu_implementations_of_scan_topk_and_conv2d_have_8_configs_or_more():
    for op in ("cumsum", "cumprod", "topk", "sort", "argsort", "conv2d"):
        for case in gpucg.get_op(op).representative():
            for target in ("cuda", "opencl -device=gpu"):
                t = gpucg.Target(target)
                o = gpucg.get_op(op)
                attrs = o.make_attrs(**case.attrs)
                s = o.strategy(attrs, case.inputs, o.infer(case.inputs, attrs), target=t)
                for impl in s.implementations:
                    if impl.name.startswith("sort_radix."):
                        # one work-item per digit value (256) and a tile that must fit shared
                        # memory leave the radix sort two tile sizes (4 or 8 keys a work-item;
                        # 64-bit keys only 4)
                        assert len(impl.space) >= 1, (op, case.label, target, impl.name)
                        continue
                    assert len(impl.space) >= 8, (op, case.label, target, impl.name)


# -- records: keys, stale records, buckets, applying them ---------------------------------

def test_records_of_another_device_or_template_are_ignored_with_the_reason():
    good = make_record("tune_probe", (T8,), "probe_host", {"mode": "fast", "delay": 1}, 1e-6,
                       "numpy")
    other = dataclasses.replace(good, device="Some Other GPU", cost=1e-9)
    changed = dataclasses.replace(good, hash="0123456789abcdef", cost=1e-9)
    sel = gpucg.explain("tune_probe", T8, target="numpy", records=RecordList([other, changed]))
    assert sel.choices[0].config["mode"] == "ok"  # the default: both ignored
    text = str(sel)
    assert "tuned on device 'Some Other GPU'" in text and "templates changed" in text
    sel = gpucg.explain("tune_probe", T8, target="numpy",
                        records=RecordList([other, changed, good]))
    assert dict(sel.choices[0].config) == {"mode": "fast", "delay": 1}
    assert "best tuning record" in str(sel)


def test_default_records_reach_compile_and_eager_calls(tmp_path):
    path = tmp_path / "records.jsonl"
    log = open_log(path)
    log.append(make_record("tune_probe", (T8,), "probe_host", {"mode": "fast", "delay": 2},
                           1e-6, "numpy"))
    x = np.ones(8, np.float32)
    with settings.scope(GPUCG_RECORDS=str(path)):
        eager.clear()
        tune_probe.RAN.clear()
        np.testing.assert_array_equal(eager.call("tune_probe", [x], target="numpy"), x * 2)
        eager.call("tune_probe", [x], target="numpy")
        assert tune_probe.RAN == [("fast", 2), ("fast", 2)]
        tune_probe.RAN.clear()
        eager.call("tune_probe", [np.ones(9, np.float32)], target="numpy")
        assert tune_probe.RAN == [("ok", 5)]  # another size: no record applies
    with settings.scope(GPUCG_RECORDS="off"):
        assert gpucg.explain("tune_probe", T8, target="numpy").choices[0].config["mode"] == "ok"
    eager.clear()


def test_size_buckets_become_dispatcher_branches():
    n = gpucg.var("n")
    t = gpucg.tensor((n,), "float32")
    recs = RecordList([make_record("tune_probe", (t,), "probe_host", {"mode": m, "delay": d},
                                   1e-6, "numpy", sizes={"n": size})
                       for size, m, d in ((1, "fast", 0), (64, "ok", 1), (4096, "fast", 3))])
    f = gpucg.compile("tune_probe", t, target="numpy", records=recs)
    src = f.dispatcher_source
    assert "if n < 64:" in src and "if n >= 64 and n < 4096:" in src and "if n >= 4096:" not in src
    assert src.count("# tuned: record") == 2 and "# tuned: n >= 4096: record" in src
    for size, want in ((1, (("fast", 0))), (63, ("fast", 0)), (64, ("ok", 1)),
                       (4095, ("ok", 1)), (5000, ("fast", 3))):
        tune_probe.RAN.clear()
        np.testing.assert_array_equal(f(np.ones(size, np.float32)), np.full(size, 2, np.float32))
        assert tune_probe.RAN == [want], size
    text = str(f.explain())
    assert "1. if n < 64: probe_host.numpy config delay=0,mode=fast <- record" in text
    assert "measured on float32[4096]" in text


def test_records_files_that_cannot_be_used_are_clear_errors(tmp_path, caplog):
    with pytest.raises(RecordsError, match="is a directory"):
        RecordLog(tmp_path)
    with pytest.raises(RecordsError, match="is a directory"):
        gpucg.tune("tune_probe", T8, target="numpy", records=tmp_path, progress=False)
    path = tmp_path / "r.jsonl"
    good = make_record("tune_probe", (T8,), "probe_host", {"mode": "fast", "delay": 1}, 1e-6,
                       "numpy")
    path.write_text("garbage\n" + good.to_json() + "\n" + dataclasses.replace(
        good, cost=2e-6).to_json() + "\n{\"version\": 2}\n")
    log = RecordLog(path)
    assert len(log.records) == 2 and log.skipped == 2
    assert "skipped an unreadable record" in caplog.text
    inode = path.stat().st_ino
    assert main(["records", str(path), "--prune"]) == 0
    kept = RecordLog(path)
    assert len(kept.records) == 1 and kept.records[0].cost == 2e-6 and kept.skipped == 0
    assert path.stat().st_ino != inode  # rewritten by rename, never in place


@pytest.mark.parametrize("argv, message", [
    (["--search", "bogus"], "search='bogus' is not a search method"),
    (["--budget", "ten minutes"], "--budget 'ten minutes' must be a time"),
    (["--size", "n=a"], "--size 'n=a' must look like NAME=INT"),
    (["--ray", "127.0.0.1:1"], "cannot be reached"),
])
def test_bad_tune_arguments_are_one_clear_line(argv, message, capsys, tmp_path):
    pytest.importorskip("ray") if "--ray" in argv else None
    args = ["tune", "tune_probe", "--input", "8:float32", "--target", "numpy",
            "--records", str(tmp_path / "r.jsonl"), "--quiet"] + argv
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "r.jsonl").exists()


# -- end to end on OpenCL, and Ray ---------------------------------------------------------

def test_cli_tune_then_a_new_process_explains_the_tuned_choice(tmp_path):
    backend_or_skip("opencl")
    pytest.importorskip("tqdm")
    pytest.importorskip("matplotlib")
    rec, png = tmp_path / "records.jsonl", tmp_path / "tune.png"
    env = dict(os.environ, GPUCG_RECORDS=str(rec))
    call = ["cumsum", "--input", "64,1024:float32", "--attr", "axis=1", "--target", "opencl"]
    gpucg_cli = [sys.executable, "-m", "gpucg.cli"]
    out = procwatch.run(gpucg_cli + ["tune", *call, "--trials", "3", "--plot", str(png)],
                         env=env)
    assert out.returncode == 0, out.stderr
    assert "3/3" in out.stderr and "trial" in out.stderr  # the progress bar
    assert png.read_bytes()[:4] == b"\x89PNG"
    best = [ln for ln in out.stdout.splitlines() if "best:" in ln][0]
    shown = procwatch.run(gpucg_cli + ["explain", *call], env=env)
    assert "best tuning record (record records.jsonl:" in shown.stdout
    impl = best.split("best:")[1].split()[0]
    assert f"{impl}  " in shown.stdout or f"{impl} " in shown.stdout


def test_symbolic_tune_on_opencl_dispatches_per_bucket(tmp_path):
    backend_or_skip("opencl")
    n = gpucg.var("n")
    t = gpucg.tensor((n, 256), "float32")
    r = gpucg.tune("cumsum", t, axis=1, target="opencl", sizes={"n": [1, 64]}, trials=2,
                   records=tmp_path / "r.jsonl", progress=False)
    assert [b.bucket for b in r.buckets] == [{"n": 1}, {"n": 64}]
    f = gpucg.compile("cumsum", t, axis=1, target="opencl", records=tmp_path / "r.jsonl")
    assert "if n < 64:" in f.dispatcher_source and "n >= 64" in f.dispatcher_source
    for rows in (1, 7, 64, 100):
        x = np.random.default_rng(rows).random((rows, 256), np.float32)
        np.testing.assert_allclose(f(x), np.cumsum(x, axis=1), rtol=1e-5)
    compiles = gpucg.stats()["compiles"]
    f(np.ones((33, 256), np.float32))
    assert gpucg.stats()["compiles"] == compiles  # a new size in a tuned bucket: no compile


def test_ray_measures_on_a_local_instance(tmp_path):
    backend_or_skip("opencl")
    ray = pytest.importorskip("ray", reason="Ray (the 'ray' extra) is not installed")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        r = gpucg.tune("cumsum", gpucg.tensor((8, 300), "float32"), axis=1, target="opencl",
                       trials=3, ray=True, records=tmp_path / "r.jsonl", progress=False)
    finally:
        ray.shutdown()
    assert len(r.buckets[0].trials) == 3 and all(t.ok for t in r.buckets[0].trials)
    assert len(RecordLog(tmp_path / "r.jsonl").records) == 3
    assert math.isfinite(r.best.cost)


def test_records_older_than_an_attribute_keep_matching():
    """tests/data's conv2d records predate allow_tf32: they were measured in exact float32, so
    they stand for allow_tf32=False and match such a workload (and nothing else)."""
    from gpucg.records.store import Record, attrs_key

    line = RECORDED.read_text().splitlines()[0]
    assert "allow_tf32" not in json.loads(line)["attrs"]
    rec = Record.from_json(line)
    assert json.loads(rec.attrs)["allow_tf32"] is False
    w = gpucg.autotune.Workload("conv2d", CONV_1X1, target="opencl")
    assert rec.attrs == attrs_key(w.attrs)
    w32 = gpucg.autotune.Workload("conv2d", CONV_1X1, target="opencl", allow_tf32=True)
    assert rec.attrs != attrs_key(w32.attrs)


def test_configs_older_than_a_knob_take_its_default():
    """A config that leaves out a knob (a record written before the knob existed, a user's
    forced config) takes the knob's default; a knob the space lacks stays an error naming it."""
    old = make_record("tune_probe", (T8,), "probe_host", {"mode": "fast"}, 1e-6, "numpy")
    sel = gpucg.explain("tune_probe", T8, target="numpy", records=RecordList([old]))
    assert dict(sel.choices[0].config) == {"mode": "fast", "delay": 5}
    assert "best tuning record" in str(sel)
    f = gpucg.compile("tune_probe", T8, target="numpy", impl="probe_host", config={"delay": 2})
    assert dict(f.selection.choices[0].config) == {"mode": "ok", "delay": 2}
    tune_probe.RAN.clear()
    np.testing.assert_array_equal(f(np.ones(8, np.float32)), np.full(8, 2, np.float32))
    assert tune_probe.RAN == [("ok", 2)]
    with pytest.raises(gpucg.InputError, match=r"'speed'.*allowed: delay, mode"):
        gpucg.compile("tune_probe", T8, target="numpy", impl="probe_host",
                      config={"mode": "ok", "speed": 3})


def test_recorded_configs_replay_once_the_space_has_more_knobs():
    """tests/data's conv2d records name the five tile knobs the direct kernel had then; its
    space has more today (vw, double_buffer, conflict_free), and the replay fills them with their defaults."""
    recorded = {tuple(sorted(json.loads(line)["config"])) for line in
                RECORDED.read_text().splitlines() if '"direct.opencl"' in line}
    assert recorded == {("BK", "BM", "BN", "TM", "TN")}  # the file's old spellings
    sel = gpucg.explain("conv2d", *CONV_1X1, target="opencl", records=False)
    direct = next(c.impl for c in sel.choices if c.impl.name == "direct.opencl")
    assert {"vw", "double_buffer", "conflict_free"} <= set(direct.space.knobs)
    b = _replay("grid", 12)
    assert len(b.trials) == 12 and b.best.ok
    assert {"vw", "double_buffer", "conflict_free"} <= set(b.best.config)


def test_records_with_old_knob_spellings_keep_replaying():
    """Records written before the knobs were renamed (old spellings: BM, VW, WG, ipt, per_item...) read with
    today's names: the recorded PoCL space replays, and its configs are in today's space."""
    from gpucg.records.store import KNOB_RENAMES, Record

    line = RECORDED.read_text().splitlines()[0]
    old = json.loads(line)["config"]
    assert {"BM", "BN", "BK", "TM", "TN"} <= set(old)  # the file keeps the old spellings
    rec = Record.from_json(line)
    assert rec.config == {KNOB_RENAMES[k]: v for k, v in old.items()}
    w = gpucg.autotune.Workload("conv2d", CONV_1X1, target="opencl")
    impls, _ = w.strategy({})
    direct = next(i for i in impls if i.name == rec.impl)
    assert rec.config.items() <= dict(direct.space.validate(rec.config)).items()
    best = _replay("grid", 5).best
    assert best.ok and set(best.config) == set(direct.space.knobs)
    assert not set(KNOB_RENAMES) & set(KNOB_RENAMES.values())  # no name is renamed twice
