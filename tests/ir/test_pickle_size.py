"""Constants travel once: a module holding a 1 MB array pickles to about 1 MB, and with
protocol 5 and a buffer_callback the array leaves the pickle stream altogether."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from passinfra import ir
from passinfra.ir import op

MB = 1 << 20
ELEMENTS = MB // 4  # float32


@pytest.fixture(scope="module")
def weights() -> np.ndarray:
    return np.random.default_rng(0).standard_normal(ELEMENTS).astype("float32")


@pytest.fixture(scope="module")
def module(weights) -> ir.IRModule:
    x = ir.var("x", (ELEMENTS,))
    return ir.IRModule({"main": ir.Function([x], op.add(x, ir.Constant(weights)))})


def _the_constant(mod: ir.IRModule) -> np.ndarray:
    (const,) = [n for n in ir.iter_post_order(mod["main"]) if isinstance(n, ir.Constant)]
    return const.data


@pytest.mark.parametrize("protocol", [None, pickle.DEFAULT_PROTOCOL, 5], ids=lambda p: f"protocol={p}")
def test_in_band_pickle_holds_the_array_once(module, weights, protocol):
    data = pickle.dumps(module) if protocol is None else pickle.dumps(module, protocol=protocol)
    assert MB <= len(data) <= 1.1 * MB, f"{len(data)} bytes for a {MB}-byte constant"
    np.testing.assert_array_equal(_the_constant(pickle.loads(data)), weights)


def test_out_of_band_buffers_carry_the_array(module, weights):
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(module, protocol=5, buffer_callback=buffers.append)
    assert len(data) < 16 * 1024, f"in-band part is {len(data)} bytes"
    assert sum(memoryview(b).nbytes for b in buffers) == MB
    restored = pickle.loads(data, buffers=buffers)
    np.testing.assert_array_equal(_the_constant(restored), weights)
    ir.assert_structural_equal(restored, module)


def test_a_constant_shared_by_two_functions_travels_once(weights):
    # two functions using the same Constant object: still one copy of its bytes
    const = ir.Constant(weights)
    y = ir.var("y", (ELEMENTS,))
    z = ir.var("z", (ELEMENTS,))
    mod = ir.IRModule({
        "main": ir.Function([y], op.multiply(y, const)),
        "other": ir.Function([z], op.subtract(z, const)),
    })
    assert len(pickle.dumps(mod)) <= 1.1 * MB
