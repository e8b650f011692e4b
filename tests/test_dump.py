"""Dumped kernels are for people (docs/adding_an_operator.md, section 5).

For representative calls of every operator, every implementation that can run (forced with
impl=), both dialects and both index widths: entry names, a comment header and an algorithm
comment, no folding noise (``x * 1``, ``+ 0``, ``% 1``, ``16 * 3``, ``(int)0``, ``(j)``), no
``#define``, no unused helper or variable, 4-space indentation; the dispatcher has no rendering
artifacts. Nothing here needs a device: rendering is plain text.
"""

from __future__ import annotations

import ast
import re

import pytest

import gpucg
from gpucg.cli import main as cli_main

n, m, k = gpucg.var("n"), gpucg.var("m"), gpucg.var("k")
h, w = gpucg.var("h"), gpucg.var("w")
T = gpucg.tensor

#: (id, op, input types, attributes)
CALLS = [
    ("cumsum_rows", "cumsum", (T((n, m), "float32"),), dict(axis=1)),
    ("cumprod_middle", "cumprod", (T((n, m, k), "int32"),), dict(axis=1)),
    ("cumsum_flat_exclusive", "cumsum", (T((n,), "float32"),), dict(axis=0, exclusive=True)),
    ("cumsum_long_rows_float64", "cumsum", (T((n, 100000), "float64"),),
     dict(axis=1, exclusive=True)),
    ("topk_k8", "topk", (T((n, m), "float32"),), dict(k=8)),
    ("topk_k300_float16", "topk", (T((n, m), "float16"),), dict(k=300)),
    ("topk_k1_ascending_int64_index", "topk", (T((n, m), "int32"),),
     dict(k=1, is_ascend=True, dtype="int64")),
    ("argsort_int64", "argsort", (T((n, m), "int64"),), dict(axis=1)),
    ("conv2d_nchw_bias_relu", "conv2d",
     (T((n, 16, h, w)), T((32, 16, 3, 3)), T((32,))), dict(padding=1, activation="relu")),
    ("conv2d_depthwise", "conv2d", (T((n, 16, h, w)), T((16, 1, 3, 3))),
     dict(padding=1, groups=16)),
    ("conv2d_depthwise_nhwc_float16", "conv2d",
     (T((n, h, w, 16), "float16"), T((3, 3, 1, 32), "float16"), T((32,), "float16")),
     dict(padding=1, groups=16, strides=2, dilation=2, data_layout="NHWC",
          kernel_layout="HWIO", activation="relu")),
    ("conv2d_groups2", "conv2d", (T((n, 16, h, w)), T((48, 8, 3, 3))), dict(padding=1, groups=2)),
    ("conv2d_nhwc_stride2", "conv2d", (T((n, h, w, 16)), T((3, 3, 16, 32))),
     dict(padding=1, strides=2, data_layout="NHWC", kernel_layout="HWIO")),
    ("conv2d_mma_nchw_float16_groups2", "conv2d",
     (T((n, 32, h, w), "float16"), T((32, 16, 3, 3), "float16"), T((32,), "float16")),
     dict(padding=1, groups=2, strides=2, activation="gelu", alpha=0.5)),
    ("conv2d_mma_nhwc_tf32", "conv2d", (T((n, h, w, 16)), T((3, 3, 16, 32))),
     dict(padding=1, data_layout="NHWC", kernel_layout="HWIO", allow_tf32=True)),
    ("conv2d_winograd_pretransformed", "conv2d_winograd_without_weight_transform",
     (T((n, 16, h, w)), T((6, 6, 32, 16))), dict(padding=1)),
    ("relu", "relu", (T((n, m)),), {}),
    ("add_broadcast", "add", (T((n, m)), T((m,))), {}),
    ("sum_middle", "sum", (T((n, m, k)),), dict(axis=1)),
    ("cumsum_reverse_uint8", "cumsum", (T((n, m), "uint8"),), dict(axis=1, reverse=True)),
    ("cumprod_float16_columns", "cumprod", (T((n, m, k), "float16"),), dict(axis=1)),
    ("cumsum_bfloat16_rows", "cumsum", (T((n, m), "bfloat16"),), dict(axis=1, exclusive=True)),
    ("dense_bias_gelu", "dense", (T((n, 256)), T((64, 256)), T((64,))),
     dict(activation="gelu")),
    ("dense_splitk", "dense", (T((n, 4096)), T((64, 4096))), {}),
    ("matmul_float16", "matmul", (T((n, 128), "float16"), T((128, 96), "float16")),
     {}),
    ("batch_matmul", "batch_matmul", (T((4, n, 64)), T((4, 64, 48))), {}),
    ("dense_float16_bias_residual", "dense",
     (T((n, 256), "float16"), T((64, 256), "float16"), T((64,), "float16"),
      T((n, 64), "float16")), dict(activation="relu")),
    ("batch_matmul_tf32_transposed", "batch_matmul", (T((4, 64, n)), T((4, 48, 64))),
     dict(transpose_a=False, transpose_b=True, allow_tf32=True)),
    ("exp_float64", "exp", (T((n, m), "float64"),), {}),
    ("silu_and_mul_float16", "silu_and_mul", (T((n, 2 * m), "float16"),), {}),
    ("gelu_and_mul_tanh_bfloat16", "gelu_and_mul", (T((n, k, 2 * m), "bfloat16"),),
     dict(approximate="tanh")),
    ("rotary_neox_float16", "rotary_embedding", (T((n, 32, 128), "float16"),
                                                 T((m, 64), "float32"), T((m, 64), "float32"),
                                                 T((n,), "int64")), {}),
    ("rotary_gptj_partial_bfloat16", "rotary_embedding",
     (T((n, 8, 80), "bfloat16"), T((m, 32), "bfloat16"), T((m, 32), "bfloat16"),
      T((n,), "int32")), dict(style="gptj", rotary_dim=64)),
    ("dense_int4_zeros_bias", "dense_int4", (T((n, 4096), "float16"), T((m, 2048), "uint8"),
                                             T((m, 32), "float16"), T((m,), "float16"),
                                             T((m, 32), "uint8")), {}),
    ("dense_int8_bfloat16", "dense_int8", (T((n, k), "bfloat16"), T((m, k), "int8"),
                                           T((m,), "float32")), {}),
    ("activations_fused_float16", "fused", (T((n, m), "float16"), T((n, m), "float16")),
     dict(expr="multiply(silu(x0), add(mish(x1), selu(hardsigmoid(elu(softplus(hardswish(x0)"
               "), alpha=0.5), alpha=0.25))))")),
    ("where_broadcast", "where", (T((n, 1), "bool"), T((n, m)), T((m,))), {}),
    ("sum_rows_keepdims", "sum", (T((n, m), "int16"),), dict(axis=-1, keepdims=True)),
    ("argmax_rows", "argmax", (T((n, m)),), dict(axis=1)),
    ("mean_columns", "mean", (T((n, m)),), dict(axis=0)),
    ("softmax_rows", "softmax", (T((n, m)),), dict(axis=-1)),
    ("layer_norm_float16", "layer_norm", (T((n, m), "float16"), T((m,), "float16"),
                                          T((m,), "float16")), {}),
    ("layer_norm_bfloat16", "layer_norm", (T((n, m), "bfloat16"), T((m,), "bfloat16"),
                                            T((m,), "bfloat16")), {}),
    ("dense_bfloat16_residual", "dense", (T((n, 256), "bfloat16"), T((64, 256), "bfloat16"),
                                          T((64,), "bfloat16"), T((n, 64), "bfloat16")),
     dict(activation="relu")),
    ("add_bfloat16_float16", "add", (T((n, m), "bfloat16"), T((m,), "float16")), {}),
    ("cast_float32_float8", "cast", (T((n,), "float32"),), dict(dtype="float8_e4m3fn")),
    ("dense_fp8_blockwise", "dense_fp8", (T((n, 256), "float8_e4m3fn"), T((64, 256), "float8_e5m2"),
                                          T((n, 2), "float32"), T((1, 2), "float32"),
                                          T((64,), "bfloat16")), dict(block_size=(128, 128))),
    ("dense_fp8_per_token", "dense_fp8", (T((n, 96), "float8_e4m3fn"), T((64, 96), "float8_e4m3fn"),
                                          T((n, 1), "float32"), T((64,), "float32")),
     dict(out_dtype="float16")),
    ("topk_k300_bfloat16", "topk", (T((n, m), "bfloat16"),), dict(k=300)),
    ("rms_norm", "rms_norm", (T((n, m)), T((m,))), {}),
    ("rms_norm_residual_float16", "rms_norm", (T((n, m), "float16"), T((m,), "float16"),
                                               T((n, m), "float16")), {}),
    ("log_softmax_columns", "log_softmax", (T((n, m)),), dict(axis=0)),
    ("max_pool_ceil", "max_pool2d", (T((n, 8, h, w)),),
     dict(kernel=3, strides=2, padding=1, ceil_mode=True)),
    ("avg_pool_nhwc", "avg_pool2d", (T((n, h, w, 8)),),
     dict(kernel=2, strides=2, layout="NHWC", count_include_pad=False)),
    ("global_avg_pool", "global_avg_pool2d", (T((n, 8, h, w)),), {}),
    ("concatenate_float16", "concatenate", (T((n, 3), "float16"), T((n, m), "float16")),
     dict(axis=-1)),
    ("split_points", "split", (T((6, 10), "int8"),), dict(indices_or_sections=(3, 7), axis=1)),
    ("strided_slice_backwards", "strided_slice", (T((7, 9, 4)),),
     dict(begin=(-1, 2), end=(-100, 8), strides=(-2, 3))),
    ("take_embedding", "take", (T((n, 64)), T((m, k), "int64")), dict(axis=0)),
    ("take_middle_float16", "take", (T((3, n, 4), "float16"), T((m,), "uint8")), dict(axis=1)),
    ("take_flat", "take", (T((n, m), "int16"), T((k,), "int32")), {}),
    ("flatten", "flatten", (T((n, 3, m)),), dict(axis=2)),
    ("cast_float64_int8", "cast", (T((n, m), "float64"),), dict(dtype="int8")),
    ("cast_float32_uint64", "cast", (T((n,), "float32"),), dict(dtype="uint64")),
    ("cast_int64_float16", "cast", (T((n,), "int64"),), dict(dtype="float16")),
    ("cast_float16_bool", "cast", (T((n,), "float16"),), dict(dtype="bool")),
    ("batch_norm_float16", "batch_norm", (T((n, 8, h, w), "float16"),) + (T((8,), "float16"),) * 4,
     {}),
    ("batch_norm_channels_last", "batch_norm", (T((n, m)),) + (T((m,)),) * 4, dict(axis=-1)),
    ("attention_gqa_causal", "attention", (T((n, 8, m, 64), "float16"),)
     + (T((n, 2, k, 64), "float16"),) * 2, dict(causal=True, return_lse=True)),
    ("attention_mask_softcap_bshd", "attention", (T((n, m, 4, 32)),) + (T((n, k, 4, 32)),) * 2
     + (T((m, k), "bool"),), dict(layout="BSHD", softcap=30.0)),
    ("attention_additive_mask_bfloat16", "attention", (T((n, 4, m, 80), "bfloat16"),)
     + (T((n, 4, k, 80), "bfloat16"),) * 2 + (T((n, 1, m, k), "float32"),), {}),
    ("attention_window_alibi", "attention", (T((n, 8, m, 128), "float16"),)
     + (T((n, 2, k, 128), "float16"),) * 2, dict(window=100, alibi_slopes=(0.5,) * 8)),
    ("paged_attention_window_alibi", "paged_attention",
     (T((n, m, 8, 64), "float16"),) + (T((k, 16, 2, 64), "float16"),) * 2
     + (T((n, 4), "int32"), T((n,), "int32")), dict(window=32, alibi_slopes=(0.25,) * 8)),
    ("attention_varlen_window_alibi", "attention_varlen", (T((n, 8, 64), "float16"),)
     + (T((k, 2, 64), "float16"),) * 2 + (T((m,), "int32"),) * 2,
     dict(causal=True, window=16, alibi_slopes=(0.5,) * 8)),
    ("kv_cache_write_int64_slots", "kv_cache_write", (T((n, 2, 64), "float16"),) * 2
     + (T((k, 16, 2, 64), "float16"),) * 2 + (T((n,), "int64"),), {}),
]
TARGETS = ["cuda", "opencl"]


def implementations(op, types, target, attrs) -> list[str]:
    sel = gpucg.explain(op, *types, target=target, **attrs)
    return [c.name.rsplit(".", 1)[0] for c in sel.candidates if c.verdict != "excluded"]


@pytest.fixture(scope="session")
def compiled_ops():
    """(case id, target) -> [(implementation, CompiledOp)] of every implementation of the
    call, built when a test first asks (not at import: collection stays fast)."""
    memo: dict = {}

    def get(cid, target):
        if (cid, target) not in memo:
            _, op, types, attrs = next(c for c in CALLS if c[0] == cid)
            impls = implementations(op, types, target, attrs)
            assert impls, (cid, target)
            built = [(impl, gpucg.compile(op, *types, target=target, impl=impl, **attrs))
                     for impl in impls]
            memo[cid, target] = [(i, f) for i, f in built if f.sources]  # views: no kernel
        return memo[cid, target]
    return get


#: calls whose sm_90a kernels (wgmma, TMA: gemm_wgmma and what is built on it) are dumped too
HOPPER = "cuda -arch=sm_90a"
HOPPER_CALLS = ["matmul_float16", "dense_bfloat16_residual", "batch_matmul_tf32_transposed",
                "dense_fp8_per_token", "attention_gqa_causal"]
CASES = [(c[0], target) for c in CALLS for target in TARGETS] + [(c, HOPPER) for c in HOPPER_CALLS]
IDS = [f"{cid}-{target}" for cid, target in CASES]


# -- reading C ------------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')
  | (?P<number>0[xX][0-9a-fA-F]+[uUlL]*|\d+\.\d*(?:[eE][-+]?\d+)?[fF]?|\d+[eE][-+]?\d+[fF]?
              |\d+[uUlL]*)
  | (?P<name>[A-Za-z_]\w*)
  | (?P<op><<=|>>=|<<|>>|<=|>=|==|!=|&&|\|\||\+\+|--|[-+*/%&|^]=|->|[-+*/%<>=!&|^~?:;,.(){}\[\]#])
  | (?P<space>\s+)
""", re.S | re.X)

_TYPES = {"int", "long", "short", "char", "float", "double", "unsigned", "signed", "uint", "ulong",
          "ushort", "uchar", "half", "const", "void"}


def tokens(src: str) -> list[tuple[str, str]]:
    """(kind, text) of the C source's tokens, comments and strings left out."""
    out, pos = [], 0
    while pos < len(src):
        mt = _TOKEN.match(src, pos)
        assert mt, f"cannot read C at {src[pos:pos + 40]!r}"
        pos = mt.end()
        if mt.lastgroup not in ("comment", "string", "space"):
            out.append((mt.lastgroup, mt.group()))
    return out


def code_only(src: str) -> str:
    """The source with comments and string literals blanked out (line structure kept)."""
    def blank(mt):
        text = mt.group()
        return re.sub(r"[^\n]", " ", text) if mt.lastgroup in ("comment", "string") else text
    return _TOKEN.sub(blank, src)


def _is_int(tok) -> bool:
    return tok[0] == "number" and re.fullmatch(r"\d+", tok[1]) is not None


def noise(src: str) -> list[str]:
    """What a person would not write: arithmetic with 0 or 1, numbers left as products or
    sums, a cast of a number to an index type, a lone name in parentheses."""
    toks = tokens(re.sub(r"\basm\s*(volatile\s*)?\(.*?\);", "", src, flags=re.S)) + [("", "")] * 4
    found = []
    for i in range(len(toks) - 4):
        (kind, tok), (_, nxt), (_, after) = toks[i], toks[i + 1], toks[i + 2]
        prev = toks[i - 1] if i else ("", "")
        here = " ".join(t for _, t in toks[max(i - 3, 0):i + 4])
        operand_before = prev[0] in ("name", "number") or prev[1] in (")", "]")
        if kind == "op" and (tok in ("*", "/", "%") and nxt == "1"
                             or tok in ("*", "<<", ">>") and nxt == "0"
                             or tok in ("+", "-") and nxt == "0" and operand_before):
            found.append(f"'{tok} {nxt}' in: {here}")
        if kind == "number" and (tok in ("0", "1") and nxt == "*"
                                 or tok == "0" and nxt == "+" and not operand_before):
            found.append(f"'{tok} {nxt}' in: {here}")
        # numbers a template should have computed: 16 * 3, (x +) 2 + 1
        if _is_int(toks[i]) and nxt == "*" and _is_int(toks[i + 2]) \
                and prev[1] not in ("*", "/", "%"):
            found.append(f"a product of numbers in: {here}")
        if _is_int(toks[i]) and nxt in ("+", "-") and _is_int(toks[i + 2]) \
                and toks[i + 3][1] not in ("*", "/", "%") \
                and (prev[1] in ("+", "-")
                     or not operand_before and prev[1] not in ("*", "/", "%")):
            found.append(f"a sum of numbers in: {here}")
        # numbers a template should have folded: 1.0f / 0.0f, 0.5f * 2.0f, 16 < 32
        if kind == "number" and toks[i + 2][0] == "number" and nxt in _FOLD \
                and (not _is_int(toks[i]) or not _is_int(toks[i + 2]) or nxt in _RELATIONS) \
                and prev[1] not in _ARITH + (".",) \
                and toks[i + 3][1] not in (_ARITH if nxt in _RELATIONS else ("*", "/", "%")):
            found.append(f"numbers left unfolded in: {here}")
        # (int)0, (long long)16
        if tok == "(" and nxt in ("int", "long"):
            j = i + 1
            while toks[j][1] in ("int", "long"):
                j += 1
            if toks[j][1] == ")" and _is_int(toks[j + 1]):
                found.append(f"a number cast to an index type in: {here}")
        # (j) * inner; not a call f(x), a control (if (x)) or a cast (int)x
        if tok == "(" and toks[i + 1][0] == "name" and nxt not in _TYPES and after == ")" \
                and prev[0] != "name" and prev[1] not in (")", "]") \
                and toks[i + 3][0] not in ("name", "number") and toks[i + 3][1] != "(":
            found.append(f"a name in parentheses in: {here}")
    return found


_RELATIONS = ("<", ">", "<=", ">=", "==", "!=")
_ARITH = ("+", "-", "*", "/", "%", "<<", ">>")
_FOLD = ("+", "-", "*", "/") + _RELATIONS


def branches(src: str) -> list[str]:
    """Branches a person would not write: an empty body (``if (c) { } else``, ``else { }``,
    ``if (c);``; a spin-wait ``while (c);`` is a loop, not a branch), and a condition
    without a name in it (``if (1)``, ``if (16 < 32)``)."""
    code = code_only(src)
    found = [f"an empty branch: {mt.group().strip()}" for mt in re.finditer(
        r"\b(?:if|for)\s*\((?:[^(){}]|\([^()]*\))*\)\s*(?:\{\s*\}|;)|\belse\s*\{\s*\}",
        code)]
    for mt in re.finditer(r"\bif\s*\(", code):
        depth, j = 1, mt.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(code[j], 0)
            j += 1
        cond = code[mt.end():j - 1]
        if not [t for k, t in tokens(cond) if k == "name" and t not in _TYPES]:
            found.append(f"a branch on a constant: if ({cond})")
    return found


def unused(src: str) -> list[str]:
    """Helper functions and variables that are defined and never used."""
    code = code_only(src)
    out = []
    for name in re.findall(r"^(?:static inline|__device__ __forceinline__) [\w ]+?\b(\w+)\(",
                           code, re.M):
        if len(re.findall(rf"\b{name}\b", code)) < 2:
            out.append(f"helper {name}")
    decl = re.compile(r"^\s*(?:const\s+)?(?:unsigned\s+)?(?:int|long long|long|short|char|float|"
                      r"double|uint|ulong|ushort|uchar)\s+(\w+)\s*(?:\[[^\]]*\])?\s*=", re.M)
    for name in decl.findall(code):
        if len(re.findall(rf"\b{name}\b", code)) < 2:
            out.append(f"variable {name}")
    return out


def layout(src: str) -> list[str]:
    """4 spaces a brace level, and one more for each control line without braces or
    continued line above (a line that ends in none of ; { }); no blank line after an opening
    brace, parenthesis or comma, or before a closing brace. Comment lines are skipped."""
    bad = []
    lines, code = src.split("\n"), code_only(src).split("\n")
    depth, hang, prev = 0, 0, ";"
    for no, (line, text) in enumerate(zip(lines, code), 1):
        stripped = text.strip()
        if not line.strip():
            nxt = next((c.strip() for c in code[no:] if c.strip()), "")
            if prev.endswith(("{", "(", ",")) or nxt.startswith("}"):
                bad.append(f"line {no}: a blank line inside a block or a parameter list")
            continue
        if not stripped:
            continue  # a comment
        hang = 0 if prev.endswith((";", "{", "}")) else hang + 1
        indent = len(text) - len(text.lstrip(" "))
        want = 4 * (depth - 1 if stripped.startswith("}") else depth)
        if "\t" in text[:indent + 1] or indent % 4 or not want <= indent <= want + 4 * hang:
            bad.append(f"line {no}: indented {indent}, expected {want}"
                       f"{f' to {want + 4 * hang}' if hang else ''}: {stripped}")
        depth += stripped.count("{") - stripped.count("}")
        prev = stripped
    return bad


# -- the checks -----------------------------------------------------------------------------

_KERNEL = re.compile(r'^(?:__kernel void|extern "C" __global__ void)'
                     r'(?: __launch_bounds__\(\d+, \d+\))? (\w+)\(', re.M)


@pytest.mark.parametrize("cid,target", CASES, ids=IDS)
def test_entries_and_headers(cid, target, compiled_ops):
    for impl, f in compiled_ops(cid, target):
        _entries_and_headers(target, impl, f)


def _entries_and_headers(target, impl, f):
    sources = f.sources
    assert any(key.endswith("@i64") for key in sources) and any("@" not in key for key in sources)
    for wide in (False, True):
        entries = []
        for key, src in sources.items():
            if key.endswith("@i64") != wide:
                continue
            name, kernel = key.removesuffix("@i64").split("/")
            # a second choice of one implementation (another config) names its config
            assert name.split("[")[0] == f"{impl}.{target.split()[0]}"
            entry = f"gpucg_{f.op.name}_{impl}_{kernel}"
            kernels = [mt for mt in _KERNEL.finditer(src) if code_only(src)[mt.start()] != " "]
            assert [mt.group(1) for mt in kernels] == [entry], key
            entries.append((name, entry))
            # the header gpucg writes: entry, operator, implementation, kernel, config, width
            header = src[:src.index("*/")]
            assert src.startswith(f"/*\n * {entry}: {f.op.name}("), key
            assert f"implementation {impl}.{target.split()[0]}, kernel {kernel}" in header, key
            assert f"{'64' if wide else '32'}-bit indexing" in header, key
            # the template's algorithm comment right before the kernel, parameters filled in,
            # down to the launch geometry
            before = src[:kernels[0].start()].rstrip()
            assert before.endswith("*/") and before.count("/*") >= 2, key
            note = before[before.rindex("/*"):]
            assert "grid" in note and re.search(r"\d", note), key
        assert len(entries) == len(set(entries))


@pytest.mark.parametrize("cid,target", CASES, ids=IDS)
def test_no_noise(cid, target, compiled_ops):
    for impl, f in compiled_ops(cid, target):
        for key, src in f.sources.items():
            assert "#define" not in src and "#undef" not in src, key
            assert not re.search(r"\{\{|\{%|\{#|#\}|%\}", src), key
            assert noise(src) == [], key
            assert branches(src) == [], key
            assert unused(src) == [], key
            assert layout(src) == [], key


def dispatcher_artifacts(src: str) -> list[str]:
    """Rendering artifacts in a dispatcher: max/min with 0, parentheses Python does not need
    (every condition and size expression reads as ast.unparse prints it), a trailing comma
    after several items, format() with nothing to format."""
    bad = []
    for no, line in enumerate(src.splitlines(), 1):
        text = line.strip()
        if re.search(r"\b(?:max|min)\(0,", text):
            bad.append(f"line {no}: max/min with 0: {text}")
        expr = re.fullmatch(r"(?:if (.*):|_wide = (.*)|_outs = (.*))", text)
        if expr:
            expr = next(e for e in expr.groups() if e is not None)
            if ast.unparse(ast.parse(expr, mode="eval")) != expr:
                bad.append(f"line {no}: parentheses Python does not need: {text}")
        if re.search(r"\([^()]*,[^()]*,\s*\)", text):
            bad.append(f"line {no}: a trailing comma after several items: {text}")
        if ".format()" in text:
            bad.append(f"line {no}: format() with no arguments: {text}")
    return bad


@pytest.mark.parametrize("cid,op,types,attrs", CALLS, ids=[c[0] for c in CALLS])
@pytest.mark.parametrize("target", TARGETS)
def test_dispatcher_reads_as_written(cid, op, types, attrs, target, compiled_ops):
    sources = [gpucg.compile(op, *types, target=target, **attrs).dispatcher_source]
    sources += [f.dispatcher_source for _, f in compiled_ops(cid, target)]
    for src in sources:
        assert dispatcher_artifacts(src) == [], src
        compile(src, "<dispatcher>", "exec")


def test_dispatcher_checks_are_plain_python():
    f = gpucg.compile("topk", T((n, m), "float32"), k=300, target="cuda")
    assert "if m < 300:" in f.dispatcher_source
    assert "if m >= 2048 and (m >= 8192 or n <= 32):" in f.dispatcher_source
    f = gpucg.compile("conv2d", T((n, 16, h, w)), T((32, 16, 3, 3)), target="cuda",
                      impl="winograd_4x4", padding=1)
    assert "if not (h >= 14 and w >= 14):" in f.dispatcher_source
    assert "_outs = ((n, 32, h, w),)" in f.dispatcher_source


def test_the_checks_see_noise():
    """The scanners flag what they are for and pass real code."""
    assert noise("y[i] = x[1] * 1.0f + 0x7FFFFFFF - 0.5f;") == []
    assert noise("v = (int)t; w = f(x); if (live) a = (b + c) * 2; q = 32 - 8 * p;") == []
    for bad in ("a = bid % 1;", "a = x * 1;", "a = ((n + 0) * W + 0);", "a = (int)0 * 64;",
                "a = (int)1 * 16;", "a = th * 2 + 0;", "a = off % 1 == 0;", "a = off / 1;",
                "a = 16 * 3;", "a = pass_ - 2 + 1;", "a = d[b + (j) * n];", "a = 0 + x;",
                "a = g * 0;"):
        assert noise(bad), bad
    for bad in ("x = -(1.0f / 0.0f);", "x = 0.5f * 2.0f;", "b = 16 < 32;", "x = 1.5 + 2;"):
        assert noise(bad), bad
    assert noise("x = -INFINITY; y = a * 2.0f / 3.0f; z = 0.5f * x;") == []
    for bad in ("if (key < skv && i < sq) { } else { x = 0; }", "if (1) { a(); }",
                "if (16 < 32) a();", "if (n) {\n} else {\n    a();\n}", "if ((int)0) a();",
                "for (i = 0; i < n; ++i);", "if (a) a(); else { }"):
        assert branches(bad), bad
    assert branches("if (KT > 0) { a(); } else if (live) { b(); }\nwhile (1) { c(); }") == []
    assert unused("__device__ __forceinline__ int gpucg_key(int u)\n{\n    return u;\n}\n")
    assert unused("{\n    const int m0 = 0;\n}\n") == ["variable m0"]
    assert layout("{\n     int x;\n}\n") and layout("{\n    int x;\n\n}\n")
    assert layout("void f()\n{\n    for (;;)\n        x();\n    if (a &&\n        b) y();\n}\n") \
        == []
    assert dispatcher_artifacts("    if not ((n >= 300)):\n") and \
        dispatcher_artifacts("    _wide = max(0, (m * n)) > 1\n") and \
        dispatcher_artifacts("    f((data, weight,))\n")
    assert dispatcher_artifacts("    (data,), _host = _inputs(data)\n    _outs = ((n, m),)\n") == []


def test_cli_dump_prints_the_same(capsys):
    code = cli_main(["dump", "conv2d", "--input", "n,16,h,w:float32",
                     "--input", "32,16,3,3:float32", "--attr", "padding=1", "--target", "opencl"])
    assert code == 0
    out = capsys.readouterr().out
    f = gpucg.compile("conv2d", T((n, 16, h, w)), T((32, 16, 3, 3)), target="opencl", padding=1)
    parts = re.split(r"^// ===== (\S+) =====\n", out.split("# ===== dispatcher =====\n")[0],
                     flags=re.M)[1:]
    printed = dict(zip(parts[::2], parts[1::2]))
    assert printed.keys() == f.sources.keys() and len(printed) > 4
    for key, src in printed.items():
        assert src.rstrip("\n") == f.sources[key].rstrip("\n"), key
        assert noise(src) == [] and unused(src) == [] and layout(src) == [], key
    dispatcher = out.split("# ===== dispatcher =====\n")[1]
    assert dispatcher.rstrip("\n") == f.dispatcher_source.rstrip("\n")
    assert dispatcher_artifacts(dispatcher) == []
