"""An operator for the tuner's tests: host implementations whose config says how a candidate
behaves (fast, slow, wrong, crashing, hanging), on the numpy target. Workers import this module
by name (the operator's module), as they would a user's."""

import os
import signal
import time

import numpy as np

import gpucg
from gpucg.autotune import ConfigSpace

RAN: list = []


def _behave(ctx):
    mode, delay = ctx.config["mode"], ctx.config["delay"]
    RAN.append((mode, delay))
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "hang":
        time.sleep(3600)
    time.sleep(delay / 1000 + (0.1 if os.environ.get("GPUCG_TUNE_PROBE_SLOW") else 0))
    return ctx.inputs[0] * (3 if mode == "wrong" else 2)


PROBE = gpucg.host_impl("probe_host", _behave)
MODES = ("ok", "wrong", "crash", "hang", "fast")


def _strategy(attrs, inputs, outputs, target):
    s = gpucg.Strategy(target)
    modes = MODES if attrs.risky else ("ok", "fast")
    s.add(PROBE, 10, space=ConfigSpace({"delay": (0, 1, 2, 3, 4, 5, 6, 7), "mode": modes},
                                       {"mode": "ok", "delay": 5}))
    return s


from dataclasses import dataclass  # noqa: E402


@dataclass(frozen=True)
class ProbeAttrs:
    risky: bool = False


gpucg.register_op("tune_probe", attrs=ProbeAttrs, num_inputs=1,
                  type_rel=lambda ins, attrs: ins[0], pattern=gpucg.OpPattern.INJECTIVE,
                  reference=lambda x, attrs: np.asarray(x) * 2, input_names=("x",),
                  override=True)
gpucg.register_strategy("tune_probe", ["cpu"], _strategy, override=True)
