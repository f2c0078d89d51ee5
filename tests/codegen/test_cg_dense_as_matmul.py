"""DenseAsMatmul: microkernel-sized linear layers with a constant weight become matmuls
over the transposed weight; the rest stay dense."""

from __future__ import annotations

import numpy as np
import pytest

import passinfra
from passinfra.build import COMPILE_PIPELINE, _passes
from passinfra.frontend import from_onnx
from passinfra.frontend.zoo.dynamic_models import mlp
from passinfra.ir.expr import Call
from passinfra.ir.functor import iter_post_order
from passinfra.transform import PassContext, Sequential


def _ops_before_fusion(mod, config=None):
    names = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("FuseOps")]
    with PassContext(opt_level=3, config=config or {}):
        out = Sequential(_passes(names), opt_level=0)(mod)
    return [node.op.name for node in iter_post_order(out["main"].body)
            if isinstance(node, Call) and hasattr(node.op, "name")]


@pytest.mark.parametrize(("rows", "config", "dense"), [
    (64, {}, 0),  # both 128-wide Gemm layers run on the microkernels
    (1, {}, 2),  # one row: BLAS's matrix-vector path, as a dense
    (64, {"codegen.matmul_microkernel": False}, 2),
    (64, {"codegen.blas": False}, 2),
])
def test_dense_layers_become_matmuls_where_the_microkernels_run_them(rows, config, dense):
    model = mlp(in_features=128, hidden=128, layers=3)  # Gemm, MatMul + Add, Gemm, then MatMul + Add
    ops = _ops_before_fusion(from_onnx(model, shapes={"input": (rows, 128)}), config)
    assert ops.count("nn.dense") == dense
    assert ops.count("matmul") == 4 - dense


def test_the_library_computes_what_the_interpreter_does(tmp_path):
    mod = from_onnx(mlp(in_features=128, hidden=128, layers=3), shapes={"input": (32, 128)})
    x = np.random.default_rng(0).standard_normal((32, 128)).astype("float32")
    with PassContext(opt_level=3, config={"codegen.cache_dir": str(tmp_path)}):
        lib = passinfra.build(mod)
    np.testing.assert_allclose(lib(x), passinfra.evaluate(mod, x), rtol=1e-4, atol=1e-4)
