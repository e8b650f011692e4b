"""The operators. Each module registers its operators and defines their eager functions."""

from .conv2d import conv2d, conv2d_winograd_without_weight_transform, winograd_weight_transform
from .elementwise import add, relu, sum  # noqa: A004
from .scan import cumprod, cumsum
from .topk import argsort, sort, topk
from .. import strategies  # noqa: F401,E402  (registers the strategies)

__all__ = ["add", "argsort", "conv2d", "conv2d_winograd_without_weight_transform", "cumprod",
           "cumsum", "relu", "sort", "sum", "topk", "winograd_weight_transform"]
