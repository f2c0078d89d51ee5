"""The convolution rule's target (config ``codegen.target_isa``,
passinfra/codegen/compute/conv_plan.py): the AVX2 target runs on the microkernels the
convolutions the AVX-512 rule leaves to BLAS where AVX2's tiles are faster; a build fixes
the target once, in the process that starts it; every target's library computes the
same convolution.
"""

from __future__ import annotations

import numpy as np
import pytest

import passinfra
from passinfra import tir
from passinfra.build import COMPILE_PIPELINE, _build_context
from passinfra.codegen.compute.conv_direct import ConvGeometry
from passinfra.codegen.compute.conv_plan import TARGET_ISA_CONFIG, choose_kernel, target_isa
from passinfra.codegen.lower import uses_blas
from passinfra.frontend import from_onnx
from passinfra.runtime.interpreter import evaluate
from passinfra.runtime.module import MAX_ISA_ENV, host_isa
from passinfra.transform import PassContext, Sequential, get_pass
from passinfra.transform.errors import PassConfigError
from tests.codegen.test_cg_conv_kernels import assert_close, conv_model
from tests.graph_sums import graph_sums


def _geometry(channels: int, out_channels: int, kernel: int = 3, size: int = 14, groups: int = 1,
              stride: int = 1) -> ConvGeometry:
    out = (size + 2 * (kernel // 2) - kernel) // stride + 1
    attrs = {"strides": (stride, stride), "dilation": (1, 1), "padding": (kernel // 2,) * 4, "groups": groups}
    weight = (kernel, kernel, channels // groups, out_channels)
    return ConvGeometry.of(attrs, (1, size, size, channels), weight, (1, out, out, out_channels))


def test_the_avx2_target_runs_every_convolution_but_a_channel_multiplier_on_the_microkernels():
    regnet = _geometry(64, 64, size=28, groups=4)  # groups of 16 channels
    regnet_strided = _geometry(32, 32, size=112, groups=2, stride=2)
    shufflenet = _geometry(24, 112, kernel=1, size=56, groups=4)  # groups of 6 channels
    few_per_group = _geometry(64, 64, size=28, groups=8)
    short_1x1 = _geometry(40, 240, kernel=1)  # a small weight: the blocked per-row GEMM
    short_1x1_large = _geometry(96, 576, kernel=1, size=7)  # im2col + BLAS
    narrow_1x1 = _geometry(8, 64, kernel=1)
    stem = _geometry(3, 64, size=112)  # a short sum into more than one row tile's channels
    for g in (regnet, regnet_strided, shufflenet, few_per_group, short_1x1, short_1x1_large, narrow_1x1,
              stem):
        avx512 = choose_kernel(g, use_blas=True, isa="avx512")
        assert avx512 in ("group_gemm", "none") and choose_kernel(g, use_blas=True, isa="portable") == avx512
        assert choose_kernel(g, use_blas=True, isa="avx2") == "microkernel"
    # what stays: a channel multiplier (one input channel a group into several outputs)
    multiplier = _geometry(8, 24, groups=8)
    assert choose_kernel(multiplier, use_blas=True, isa="avx2") == "direct"
    assert choose_kernel(multiplier, use_blas=True, isa="avx512") == "direct"


def test_target_isa_config(monkeypatch):
    with PassContext(config={TARGET_ISA_CONFIG: "avx2"}):
        assert target_isa() == "avx2"
    with PassContext(config={TARGET_ISA_CONFIG: "sse4"}):
        with pytest.raises(PassConfigError, match="codegen.target_isa"):
            target_isa()
    monkeypatch.setenv(MAX_ISA_ENV, "portable")  # the cap is this machine's target too
    with PassContext():
        assert host_isa() == "portable" and target_isa() == "portable"


def test_a_build_fixes_the_target_in_the_process_that_starts_it(monkeypatch):
    """Workers compile under the build's context: the target is in its config, set once
    from this machine unless the caller named one."""
    with PassContext(config={}), _build_context(3) as ctx:
        assert ctx.config[TARGET_ISA_CONFIG] == host_isa()
    with PassContext(config={TARGET_ISA_CONFIG: "avx512"}), _build_context(3) as ctx:
        assert ctx.config[TARGET_ISA_CONFIG] == "avx512"
    monkeypatch.setenv(MAX_ISA_ENV, "avx2")
    with PassContext(config={}), _build_context(3) as ctx:
        assert ctx.config[TARGET_ISA_CONFIG] in ("avx2", "portable")  # capped (portable: a CPU without AVX2)


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_each_target_lowers_its_kernel_and_computes_the_convolution(tmp_path, isa):
    model = conv_model((1, 64, 28, 28), 64, (3, 3), group=4, pads=[1, 1, 1, 1])  # RegNet's groups of 16
    mod = from_onnx(model)
    config = {"codegen.cache_dir": str(tmp_path), TARGET_ISA_CONFIG: isa}
    names = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("CodegenC")]
    with PassContext(opt_level=3, config=config):
        lowered = Sequential([get_pass(n) for n in names])(mod)
        lib = passinfra.build(mod)
        blas = uses_blas()
    (conv,) = [f for f in lowered.functions.values()
               if isinstance(f, tir.PrimFunc) and "nn.conv2d" in f.attrs["op_names"]]
    on_microkernels = isa == "avx2" or not blas  # without BLAS both rules take the microkernels
    assert bool(conv.attrs.get("uses_conv_runtime", False)) == on_microkernels
    assert bool(conv.attrs.get("uses_blas", False)) == (not on_microkernels)
    x = np.random.default_rng(3).standard_normal((1, 64, 28, 28)).astype(np.float32)
    assert_close(lib(x), evaluate(mod, x), *graph_sums(mod, x))
