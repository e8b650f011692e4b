"""The operators' eager functions: ``gpucg.ops.cumsum(x, axis=1)`` and the rest.

Each module is one operator family (attributes, type relation, NumPy reference, eager
functions); gpucg.builtin loads them with their strategies when gpucg is imported.
"""

from .attention import attention
from .attention_varlen import attention_varlen
from .batch_norm import batch_norm, fold_batch_norm
from .conv2d import conv2d
from .conv2d_winograd import (conv2d_winograd_without_weight_transform,
                              winograd_weight_transform)
from .dense import batch_matmul, dense, linear, matmul
from .dense_fp8 import dense_fp8
from .elementwise import (Fused, abs, add, broadcast_to, clip, divide, elu, equal, erf,  # noqa: A004
                          exp, flip, fused, gelu, greater, greater_equal, hardsigmoid,
                          hardswish, leaky_relu, less, less_equal, log, maximum, minimum, mish,
                          multiply, neg, negative, not_equal, pad, placeholders, power, relu,
                          reshape, rsqrt, selu, sigmoid, silu, softplus, sqrt, subtract, sum_to,
                          tanh, transpose, where)
from .gated import gelu_and_mul, silu_and_mul
from .norm import layer_norm, log_softmax, rms_norm, softmax
from .paged_attention import kv_cache_write, paged_attention
from .pool import avg_pool2d, global_avg_pool2d, global_max_pool2d, max_pool2d
from .quant_dense import dense_int4, dense_int8
from .rotary import rotary_embedding
from .reduce import (all, any, argmax, argmin, max, mean, min, prod,  # noqa: A004
                     sum)
from .scan import cumprod, cumsum
from .topk import argsort, sort, topk
from .transform import (cast, concatenate, expand_dims, flatten, split, squeeze,
                        strided_slice, take)

__all__ = ["Fused", "attention", "abs", "add", "argsort", "batch_matmul", "broadcast_to", "clip", "dense",
           "divide", "equal", "erf", "exp", "flip", "fused", "gelu", "greater", "greater_equal",
           "leaky_relu", "linear", "less", "less_equal", "log", "matmul", "maximum", "minimum",
           "multiply", "neg", "negative", "not_equal", "pad", "placeholders", "power",
           "reshape", "rsqrt", "sigmoid", "sqrt", "subtract", "sum_to", "tanh", "transpose",
           "where", "conv2d", "conv2d_winograd_without_weight_transform", "cumprod",
           "cumsum", "relu", "sort", "sum", "topk", "winograd_weight_transform",
           "all", "any", "argmax", "argmin", "max", "mean", "min", "prod",
           "layer_norm", "log_softmax", "rms_norm", "softmax",
           "avg_pool2d", "global_avg_pool2d", "global_max_pool2d", "max_pool2d",
           "cast", "concatenate", "expand_dims", "flatten", "split", "squeeze",
           "strided_slice", "take", "batch_norm", "fold_batch_norm",
           "silu_and_mul", "gelu_and_mul", "rotary_embedding", "dense_int4", "dense_int8",
           "dense_fp8", "silu", "hardswish", "hardsigmoid", "softplus", "mish", "elu", "selu",
           "paged_attention", "kv_cache_write", "attention_varlen"]
