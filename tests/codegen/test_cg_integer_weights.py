"""IntegerWeights: float32 weights whose values are small integers are stored as int8,
uint8 or int16 and widened back in the kernel; the library computes the same bits."""

from __future__ import annotations

import numpy as np
import pytest

import passinfra
from passinfra import ir
from passinfra.build import COMPILE_PIPELINE
from passinfra.codegen.passes.integer_weights import INTEGER_WEIGHTS_CONFIG, storage_dtype
from passinfra.ir import op
from passinfra.ir.expr import Constant
from passinfra.ir.functor import iter_post_order
from passinfra.transform import PassContext, get_pass

_F32 = np.float32


@pytest.mark.parametrize(("values", "dtype"), [
    ([-128, 0, 127], "int8"),
    ([0, 128, 255], "uint8"),
    ([-255, 3, 255], "int16"),
    ([-40000, 1], None),  # too large for 16 bits
    ([0.5, 1], None),  # a fraction
    ([1, np.inf], None),
    ([1, np.nan], None),
    ([-0.0, 1], None),  # an integer has no negative zero
    ([0] * 100 + [0.5], None),  # a fraction past the first values, which are read first
])
def test_a_weight_is_stored_in_the_narrowest_type_that_holds_it_exactly(values, dtype):
    assert storage_dtype(np.array(values, _F32)) == dtype


def _depthwise(weight: np.ndarray) -> ir.IRModule:
    channels = weight.shape[0]
    x = ir.var("x", shape=(1, channels, 9, 9), dtype="float32")
    y = op.nn.conv2d(x, ir.const(weight), padding=(1, 1), groups=channels)
    return ir.IRModule.from_expr(ir.Function([x], op.nn.relu(y)))


def _stored_weights(mod: ir.IRModule, enabled: bool) -> list[str]:
    """The dtypes of the constants the weights file would hold, largest first."""
    with PassContext(opt_level=3, config={INTEGER_WEIGHTS_CONFIG: enabled}):
        for name in COMPILE_PIPELINE[:COMPILE_PIPELINE.index("IntegerWeights") + 1]:
            mod = get_pass(name)(mod)
    constants = {id(n): n.data for f in mod.functions.values() for n in iter_post_order(f)
                 if isinstance(n, Constant) and n.data.size > 1}
    return [str(data.dtype) for data in sorted(constants.values(), key=lambda d: -d.size)]


@pytest.mark.parametrize(("low", "high", "dtype"), [(-128, 128, "int8"), (-255, 256, "int16")])
def test_an_integer_valued_depthwise_filter_is_stored_as_integers_and_computes_the_same_bits(
        low, high, dtype, tmp_path):
    weight = np.random.default_rng(0).integers(low, high, (48, 1, 3, 3)).astype(_F32)
    mod = _depthwise(weight)
    assert _stored_weights(mod, True)[0] == dtype and _stored_weights(mod, False)[0] == "float32"
    x = np.random.default_rng(1).integers(-255, 256, (1, 48, 9, 9)).astype(_F32)
    sizes, outputs = {}, {}
    for enabled in (True, False):
        with PassContext(opt_level=3, config={INTEGER_WEIGHTS_CONFIG: enabled,
                                              "codegen.cache_dir": str(tmp_path / "cache")}):
            lib = passinfra.build(mod)
        outputs[enabled] = lib(x)
        lib.export_library(str(tmp_path / f"{enabled}.so"))
        sizes[enabled] = (tmp_path / f"{enabled}.so.weights.bin").stat().st_size
    # every product and partial sum is an integer below 2^24: exact in any order
    assert np.array_equal(outputs[True], outputs[False])
    assert np.array_equal(outputs[True], np.asarray(passinfra.evaluate(mod, x)))
    saved = weight.size * (4 - np.dtype(dtype).itemsize)
    assert sizes[False] - sizes[True] >= saved, sizes


def test_a_weight_of_fractions_stays_float32():
    weight = np.random.default_rng(0).standard_normal((48, 1, 3, 3)).astype(_F32)
    assert _stored_weights(_depthwise(weight), True)[0] == "float32"
