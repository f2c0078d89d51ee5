"""PanelWeights: store the weights that the convolution microkernels read in panels of
output channels.

A microkernel tile computes 32 output channels (:data:`~passinfra.codegen.compute.
conv_microkernel.PANEL_WIDTH`) and reads, for each of the ``R = KH*KW*C`` rows of the
reduction, those 32 channels of the weight (a grouped convolution's tile: a group's
outputs, in panels of that width when fewer than 32:
:func:`~passinfra.codegen.compute.conv_plan.panel_width`). In HWIO (or a matmul's ``[k, n]``) they are
``R`` runs of 128 bytes ``OC`` floats apart: from memory, where a large model's weights
are when a kernel starts, the hardware prefetcher does not stream them. In panels
(``[ceil(OC/32), R, 32]``, :mod:`passinfra.ir.op.weight_panels`) they are one contiguous
run. Measured on one Zen 4 core, weight cold, GFLOP/s HWIO -> panels: 3x3 512->512 at
7x7 72 -> 93, 1x1 2048->512 at 7x7 69 -> 100, 3x3 512->512 at 14x14 79 -> 107, 1x1
1024->256 on 64 rows (a transformer's projection) 70 -> 100; with the weight in cache
the two are within a few percent (``bench/vs_onnxruntime.py``; onnxruntime reorders its
filters in the same spirit, at load time).

Which weights: a float32 constant that a primitive function passes, as the weight
operand, to an ``nn.conv2d`` or ``matmul`` whose kernel (the lowering's own
:func:`~passinfra.codegen.lower.plan_kernel`) reads panels: the microkernels, but for a
depthwise convolution. Every use of the constant must be such (the rewrite machinery of
:mod:`passinfra.transform.builtin.weight_parameters`, shared with ToMixedPrecision, which runs
just before: a weight it stored in 16 bits is not float32 any more and stays as it is).
The primitive function's parameter becomes the panels, read through
``weight_panels.unpack``, which the lowering hands to the microkernels as it is.

Symbolic shapes: the kernel is planned as the lowering plans it: a matmul of symbolic rows
and a static ``[k, n]`` weight, or a convolution of a symbolic batch, reads panels like a
static one; a call whose plan needs a size the symbolic shape leaves open gets none.

Where: after ToMixedPrecision and before StreamWeights, so the weights file holds the
panels. Config ``codegen.weight_panels`` (bool, default True) turns it off.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from passinfra.codegen.compute.conv_microkernel import PANEL_WIDTH
from passinfra.codegen.compute.conv_winograd import TILES as WINOGRAD_TILES
from passinfra.codegen.compute.quantize import integer_gemm_steps
from passinfra.codegen.compute.quantized_conv import MIN_GEMM_GROUP_CHANNELS
from passinfra.codegen.lower import complete_attrs, plan_kernel, uses_blas
from passinfra.errors import DimError
from passinfra.ir.expr import Call, Constant, Expr, Function, Var
from passinfra.ir.functor import expr_children, iter_post_order
from passinfra.ir.module import IRModule
from passinfra.ir.op import qgemm_panels, winograd_weights
from passinfra.ir.op.registry import Op
from passinfra.ir.op.requantized import CONTRACTIONS
from passinfra.ir.op.weight_panels import panel_count, to_panels, unpack
from passinfra.ir.type_infer import infer_type
from passinfra.ir.types import TensorType
from passinfra.transform.builtin.weight_parameters import rewrite_weight_parameters
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass
from passinfra.transform.schedule import function_context

PANELS_CONFIG = "codegen.weight_panels"
register_config(PANELS_CONFIG, bool)

_QGEMM_DTYPES = ("int8", "uint8")
# a contraction with its requantize (RequantizeInKernels) reads its weight as the plain one
_BASE_OPS = {fused: base for base, fused in CONTRACTIONS.items()}
# ops whose operand 1 is a weight some of their kernels read in panels
_PANEL_OPS = frozenset({"nn.conv2d", "matmul"})
_FLOAT32 = "float32"


def _planned(call: Call, use_blas: bool) -> Any:
    """The kernel plan of ``call``, as the lowering will make it (None: the loop nest)."""
    arg_types = [arg.checked_type for arg in call.args]
    out_type = call.checked_type
    if not (all(isinstance(t, TensorType) for t in arg_types) and isinstance(out_type, TensorType)):
        return None
    shapes = [tuple(t.shape) for t in arg_types]
    attrs = complete_attrs(call.op, call.attrs)
    try:
        return plan_kernel(call.op.name, attrs, shapes, out_type.dtype, tuple(out_type.shape), use_blas)
    except (TypeError, DimError):
        # symbolic sizes where a kernel choice needs static ones (a convolution over a
        # symbolic image): the lowering keeps such a call on its loop nest, weight as it is
        return None


def _planned_panels(call: Call, use_blas: bool) -> int:
    """The panel width the kernel of ``call`` reads its weight in (0: none)."""
    return getattr(_planned(call, use_blas), "panels", 0)


def _planned_winograd_tile(call: Call, use_blas: bool) -> int:
    """The tile of the Winograd kernel that computes ``call`` (0: another kernel)."""
    return getattr(_planned(call, use_blas), "winograd_tile", 0)


def _weights_of(func: Function, accepts: Callable[[TensorType], bool],
                reads_panels: Callable[[Call], bool]) -> tuple[int, ...]:
    """Positions of the parameters of primitive ``func`` whose type ``accepts`` and whose
    every use is as operand 1 (the weight) of a call that ``reads_panels``."""
    candidates = {param: index for index, param in enumerate(func.params)
                  if isinstance(param.type_annotation, TensorType) and accepts(param.type_annotation)}
    if not candidates:
        return ()
    infer_type(func)
    uses: dict[Var, int] = dict.fromkeys(candidates, 0)
    panel_uses: dict[Var, int] = dict.fromkeys(candidates, 0)
    if func.body in candidates:
        uses[func.body] += 1  # returned as it is
    for node in iter_post_order(func.body):
        if isinstance(node, Function):
            return ()
        children: Sequence[Expr] = node.args if isinstance(node, Call) else expr_children(node)
        for position, child in enumerate(children):
            if child not in candidates:
                continue
            uses[child] += 1
            if position == 1 and isinstance(node, Call) and isinstance(node.op, Op) and reads_panels(node):
                panel_uses[child] += 1
    return tuple(index for param, index in candidates.items()
                 if uses[param] and uses[param] == panel_uses[param])


def panel_parameters(func: Function, use_blas: bool, width: int = PANEL_WIDTH) -> tuple[int, ...]:
    """Positions of the float32 parameters of primitive ``func`` used only as the weight
    of calls whose kernels read it in panels of ``width`` channels."""
    def reads_panels(call: Call) -> bool:
        return call.op.name in _PANEL_OPS and _planned_panels(call, use_blas) == width

    return _weights_of(func, lambda ty: ty.dtype == _FLOAT32, reads_panels)


def integer_gemm_groups(call: Call) -> int | None:
    """How many GEMMs' weights ``call``'s operand 1 is, when ``call`` runs on the integer
    GEMM reading its weight in panels: 1 for a qnn.matmul of :func:`integer_gemm_steps` and
    a qnn.conv2d of one group in NHWC/HWIO, the groups of a grouped one with groups of at
    least MIN_GEMM_GROUP_CHANNELS (:mod:`passinfra.codegen.compute.quantized_conv`); None
    for any other call."""
    types = [arg.checked_type for arg in call.args]
    if not all(isinstance(t, TensorType) and t.is_static for t in types):
        return None
    shapes = [tuple(t.shape) for t in types]
    name = _BASE_OPS.get(call.op.name, call.op.name)
    if name == "qnn.matmul":
        return 1 if integer_gemm_steps(*shapes[:4]) is not None else None
    if name != "qnn.conv2d":
        return None
    if (call.attrs["data_layout"], call.attrs["kernel_layout"]) != ("NHWC", "HWIO"):
        return None
    groups, out_channels = call.attrs["groups"], shapes[1][-1]
    if groups > 1 and shapes[1][2] < MIN_GEMM_GROUP_CHANNELS:
        return None  # the direct kernel: HWIO as it is
    weight_zero = (1,) * (4 - len(shapes[3])) + shapes[3]
    per_tensor_or_channel = math.prod(weight_zero) == 1 or weight_zero == (1, 1, 1, out_channels)
    return groups if math.prod(shapes[2]) == 1 and per_tensor_or_channel else None


def qgemm_parameters(func: Function, groups: int = 1) -> tuple[int, ...]:
    """Positions of the int8/uint8 parameters of primitive ``func`` (a ``[k, n]`` matrix or
    an HWIO filter) used only as the weight of calls that run on the integer GEMM, as
    ``groups`` GEMMs' weights (:func:`integer_gemm_groups`)."""
    def accepts(ty: TensorType) -> bool:
        static = all(isinstance(d, int) for d in ty.shape)
        return ty.dtype in _QGEMM_DTYPES and len(ty.shape) in (2, 4) and static

    return _weights_of(func, accepts, lambda call: integer_gemm_groups(call) == groups)


@dataclass(frozen=True)
class _Rule:
    """The weight rule (:class:`~passinfra.transform.builtin.weight_parameters.WeightRule`) of
    panels: a parameter of panels, read through one ``weight_panels.unpack``."""

    use_blas: bool
    width: int = PANEL_WIDTH
    suffix: str = "panels"

    def parameters(self, func: Function) -> tuple[int, ...]:
        # planned as the lowering will plan it: under the function's own schedule
        with function_context(PassContext.current(), func):
            return panel_parameters(func, self.use_blas, self.width)

    def accepts(self, constant: Constant) -> bool:
        return constant.dtype == _FLOAT32 and len(constant.shape) >= 2

    def parameter(self, old: Var) -> tuple[Var, Expr]:
        ty = old.type_annotation
        assert isinstance(ty, TensorType)
        shape = tuple(int(n) for n in ty.shape)
        panels = (panel_count(shape[-1], self.width), math.prod(shape[:-1]), self.width)
        new = Var(old.name_hint, TensorType(panels, ty.dtype))
        return new, unpack(new, shape)

    def constant(self, constant: Constant) -> Constant:
        return Constant.owning(to_panels(constant.data, self.width))


def winograd_parameters(func: Function, use_blas: bool, tile: int) -> tuple[int, ...]:
    """Positions of the float32 parameters of primitive ``func`` used only as the weight
    of convolutions the Winograd kernel computes with tiles of ``tile``."""
    def reads_transform(call: Call) -> bool:
        return call.op.name == "nn.conv2d" and _planned_winograd_tile(call, use_blas) == tile

    def accepts(ty: TensorType) -> bool:
        return ty.dtype == _FLOAT32 and len(ty.shape) == 4 and tuple(ty.shape[:2]) == (3, 3)

    return _weights_of(func, accepts, reads_transform)


@dataclass(frozen=True)
class _WinogradRule:
    """The weight rule of Winograd transforms (:mod:`passinfra.ir.op.winograd_weights`): a
    parameter of the transform, read through one ``winograd_weights.unpack``."""

    use_blas: bool
    tile: int
    suffix: str = "winograd"

    def parameters(self, func: Function) -> tuple[int, ...]:
        with function_context(PassContext.current(), func):
            return winograd_parameters(func, self.use_blas, self.tile)

    def accepts(self, constant: Constant) -> bool:
        return constant.dtype == _FLOAT32 and len(constant.shape) == 4 and tuple(constant.shape[:2]) == (3, 3)

    def parameter(self, old: Var) -> tuple[Var, Expr]:
        ty = old.type_annotation
        assert isinstance(ty, TensorType)
        shape = tuple(int(n) for n in ty.shape)
        stored = winograd_weights.winograd_shape(shape[2], shape[3], self.tile)
        new = Var(old.name_hint, TensorType(stored, ty.dtype))
        return new, winograd_weights.unpack(new, shape, self.tile)

    def constant(self, constant: Constant) -> Constant:
        return Constant.owning(winograd_weights.to_winograd(constant.data, self.tile))


@dataclass(frozen=True)
class _QgemmRule:
    """The weight rule of the integer GEMM's panels (:mod:`passinfra.ir.op.qgemm_panels`):
    a parameter of panels, read through one ``qgemm_panels.unpack``; ``groups``: the
    weights of that many GEMMs (a grouped convolution's), in panels of their own."""

    groups: int = 1
    suffix: str = "qgemm_panels"

    def parameters(self, func: Function) -> tuple[int, ...]:
        return qgemm_parameters(func, self.groups)

    def accepts(self, constant: Constant) -> bool:
        return constant.dtype in _QGEMM_DTYPES and len(constant.shape) in (2, 4)

    def parameter(self, old: Var) -> tuple[Var, Expr]:
        ty = old.type_annotation
        assert isinstance(ty, TensorType)
        shape = tuple(int(d) for d in ty.shape)
        panels = qgemm_panels.panels_shape(*qgemm_panels.flat_shape(shape), self.groups)
        new = Var(old.name_hint, TensorType(panels, "int8"))
        return new, qgemm_panels.unpack(new, shape, ty.dtype, self.groups)

    def constant(self, constant: Constant) -> Constant:
        return Constant.owning(qgemm_panels.to_panels(constant.data, self.groups))


def _grouped_convolutions(mod: IRModule, ops: tuple[str, ...]) -> list[Call]:
    """The module's calls of ``ops`` with more than one group (read from their attributes:
    no kernel is planned here)."""
    found = []
    for _, func in mod.items():
        if isinstance(func, Function):
            calls = (node for node in iter_post_order(func.body) if isinstance(node, Call))
            found += [c for c in calls if isinstance(c.op, Op) and c.op.name in ops and c.attrs["groups"] > 1]
    return found


def _group_panel_widths(mod: IRModule) -> set[int]:
    """The panel widths below :data:`PANEL_WIDTH` that float grouped convolutions may read
    (a group's outputs, :func:`~passinfra.codegen.compute.conv_plan.panel_width`): only
    these get a rewrite of their own, so a model without them plans nothing more."""
    widths = set()
    for call in _grouped_convolutions(mod, ("nn.conv2d",)):
        weight = call.args[1]
        ty = weight.type_annotation if isinstance(weight, Var) else None
        if isinstance(ty, TensorType) and ty.shape and isinstance(ty.shape[-1], int):
            outputs = ty.shape[-1] // call.attrs["groups"] if call.attrs["kernel_layout"] == "HWIO" else 0
            if 1 < outputs < PANEL_WIDTH:
                widths.add(outputs)
    return widths


def panel_weights(mod: IRModule, use_blas: bool) -> IRModule:
    """``mod`` (after FuseOps) with the weights the microkernels and the integer GEMM read
    stored in panels (module docstring)."""
    for tile in WINOGRAD_TILES:
        mod = rewrite_weight_parameters(mod, _WinogradRule(use_blas, tile, f"winograd{tile}"))
    mod = rewrite_weight_parameters(rewrite_weight_parameters(mod, _Rule(use_blas)), _QgemmRule())
    for width in sorted(_group_panel_widths(mod)):
        mod = rewrite_weight_parameters(mod, _Rule(use_blas, width, f"panels{width}"))
    integer = _grouped_convolutions(mod, ("qnn.conv2d", "qnn.requantized_conv2d"))
    for groups in sorted({call.attrs["groups"] for call in integer}):
        mod = rewrite_weight_parameters(mod, _QgemmRule(groups))
    return mod


def _panel_weights(mod: IRModule, ctx: PassContext) -> IRModule:
    if not ctx.get_config(PANELS_CONFIG, True):
        return mod
    return panel_weights(mod, uses_blas(ctx))


@register_pass("PanelWeights")
def PanelWeights() -> ModulePass:  # noqa: N802 - pass factories are named like classes
    """Store the weights the convolution microkernels and the integer GEMM read in panels
    of output channels (opt_level 0; config ``codegen.weight_panels``)."""
    return ModulePass(_panel_weights, PassInfo(0, "PanelWeights"))


__all__ = ["PANELS_CONFIG", "PanelWeights", "integer_gemm_groups", "panel_parameters", "panel_weights",
           "qgemm_parameters", "winograd_parameters"]
