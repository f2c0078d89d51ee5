"""FoldScaleAxis: BackwardFoldScaleAxis then ForwardFoldScaleAxis, as in TVM.

Backward first: after SimplifyInference and FoldConstant a conv2d followed by batch
norm reads ``add(multiply(conv2d(x, W), scale), shift)``, and the backward pass moves
``scale`` into W. The forward pass then catches scales applied to a conv2d's input.
Both leave the scaled weights as ``multiply`` of constants; run FoldConstant after.
"""

from __future__ import annotations

from passinfra.transform.builtin.backward_fold_scale_axis import BackwardFoldScaleAxis
from passinfra.transform.builtin.forward_fold_scale_axis import ForwardFoldScaleAxis
from passinfra.transform.registry import register_pass
from passinfra.transform.sequential import Sequential


@register_pass("FoldScaleAxis")
def FoldScaleAxis() -> Sequential:
    """Fold per-channel constant scales into conv2d/dense weights (opt_level 3)."""
    return Sequential([BackwardFoldScaleAxis(), ForwardFoldScaleAxis()], name="FoldScaleAxis", opt_level=3)
