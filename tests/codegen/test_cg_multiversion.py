"""AVX2 clones of the kernels that call vector math (passinfra.codegen.multiversion): the
rule that picks the functions, the config keys, the C and object they give, and what the
clones compute: the portable code's results to a few ulps (libmvec's AVX2 and SSE
variants round differently), and bit for bit the same results for any thread count.

The numeric tests build a program twice, with ``codegen.multiversion`` on and off. On a
CPU with AVX2 the first library runs its AVX2 clones and the second the portable (SSE2)
code; on a CPU without, both run the portable code. Each holds on any machine.
"""

from __future__ import annotations

import platform
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import passinfra
from passinfra import ir, tir
from passinfra.build import compile_pipeline
from passinfra.codegen import multiversion
from passinfra.codegen.artifacts import kernel_c_source, kernel_object_code
from passinfra.codegen.c_renderer import RenderOptions, render_prim_func
from passinfra.codegen.cc_driver import CompilerSettings, compile_c
from passinfra.codegen.compute.conv_epilogue import FUSE_CONFIG
from passinfra.frontend import from_onnx, zoo
from passinfra.runtime.module import Module
from passinfra.transform import PassContext
from passinfra.transform.errors import PassConfigTypeError
from tests.strategies import program_inputs, programs

F32 = "float32"
CLONED = f"{multiversion.CLONE_MACRO} static int "
X86_64 = platform.machine().lower() in ("x86_64", "amd64")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("codegen_cache_multiversion"))


def build(mod: ir.IRModule, cache_dir: str, **config: object) -> Module:
    with PassContext(config={"codegen.cache_dir": cache_dir, **config}):
        return passinfra.build(mod)


def flat(result: object) -> list[np.ndarray]:
    if isinstance(result, tuple):
        return [leaf for item in result for leaf in flat(item)]
    return [np.asarray(result)]


def assert_clones_match_default(mod: ir.IRModule, args: list[np.ndarray], cache_dir: str,
                                rtol: float = 1e-5, atol: float = 1e-6, **config: object) -> list[np.ndarray]:
    """Outputs with clones and without agree (to the vector math's few ulps, scaled by the
    program's conditioning); NaNs in the same places. Returns the outputs with clones."""
    with_clones = flat(build(mod, cache_dir, **config)(*args))
    portable = flat(build(mod, cache_dir, **{**config, "codegen.multiversion": False})(*args))
    assert len(with_clones) == len(portable)
    for got, want in zip(with_clones, portable):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return with_clones


def kernel_sources(mod: ir.IRModule, **config: object) -> dict[str, str]:
    with PassContext(opt_level=3, config={"codegen.no_cache": True, **config}):
        compiled = compile_pipeline()(mod)
    sources = {}
    for gv, func in compiled.functions.items():
        source = kernel_c_source(func)
        if source is not None:
            sources[gv.name_hint] = source
    return sources


def function_calling(name: str, source: str) -> str:
    """The header line of the C function whose body first mentions ``name``."""
    lines = source.splitlines()
    at = next(i for i, line in enumerate(lines) if name in line and line.startswith(" "))
    return next(line for line in reversed(lines[:at]) if line and not line[0].isspace() and "(" in line)


# --------------------------------------------------------------------------- the rule


def loop(var: tir.TVar, extent: int, body: tir.Stmt, kind: tir.ForKind = tir.ForKind.SERIAL) -> tir.For:
    return tir.For(var, tir.IntImm(0), tir.IntImm(extent), kind, body)


def elementwise(extent: int, value: str = "exp") -> tir.PrimFunc:
    """out[i] = exp(a[i]) * 2 (exp), a[i] * 2 (scale) or a[i] (copy)."""
    a = tir.Buffer("a", (extent,), F32)
    out = tir.Buffer("out", (extent,), F32)
    i = tir.TVar("i", "int64")
    load = tir.BufferLoad(a, (i,))
    if value == "copy":
        body: tir.Stmt = tir.BufferStore(out, load, (i,))
    else:
        operand = tir.Intrinsic("exp", (load,), F32) if value == "exp" else load
        body = tir.BufferStore(out, tir.Mul(operand, tir.FloatImm(2.0, F32)), (i,))
    return tir.PrimFunc([a, out], loop(i, extent, body), attrs={"global_symbol": f"k_{value}_{extent}",
                                                               "num_inputs": 1})


def reduction(rows: int, columns: int) -> tir.PrimFunc:
    """out[r] = out[r] + exp(a[r, c]) over a long inner loop: a store GCC's -O2 leaves scalar."""
    a = tir.Buffer("a", (rows * columns,), F32)
    out = tir.Buffer("out", (rows,), F32)
    r, c = tir.TVar("r", "int64"), tir.TVar("c", "int64")
    index = tir.Add(tir.Mul(r, tir.IntImm(columns)), c)
    term = tir.Intrinsic("exp", (tir.BufferLoad(a, (index,)),), F32)
    store = tir.BufferStore(out, tir.Add(tir.BufferLoad(out, (r,)), term), (r,))
    body = loop(r, rows, loop(c, columns, store))
    return tir.PrimFunc([a, out], body, attrs={"global_symbol": "k_reduce", "num_inputs": 1})


def test_a_large_vector_math_loop_gets_clones_and_a_small_one_does_not():
    big = render_prim_func(elementwise(1 << 16))
    small = render_prim_func(elementwise(64))
    assert CLONED + "k_exp_65536(" in big
    assert multiversion.CLONE_MACRO not in small  # not even the macro's definition
    # the threshold is the rule's: exactly at it clones, one below does not
    work = multiversion.MIN_CLONE_WORK
    stmt = elementwise(1 << 16).body
    estimate = multiversion._work(stmt, skip_parallel=False)
    assert multiversion.wants_clone(stmt, False, min_work=estimate)
    assert not multiversion.wants_clone(stmt, False, min_work=estimate + 1)
    assert work > 64 * 2  # the small kernel's work is far below the default threshold


def test_arithmetic_copies_and_long_reductions_get_no_clones():
    assert multiversion.CLONE_MACRO not in render_prim_func(elementwise(1 << 16, "scale"))
    assert not multiversion.wants_clone(elementwise(1 << 16, "scale").body, False, min_work=1)
    assert multiversion.CLONE_MACRO not in render_prim_func(elementwise(1 << 16, "copy"))
    assert multiversion.CLONE_MACRO not in render_prim_func(reduction(256, 1024))
    assert not multiversion.wants_clone(reduction(256, 1024).body, False, min_work=1)


def test_the_config_key_turns_clones_off():
    assert "codegen.multiversion" in PassContext.list_configs()
    assert "codegen.multiversion_min_work" in PassContext.list_configs()
    off = render_prim_func(elementwise(1 << 16), RenderOptions(multiversion=False))
    assert multiversion.CLONE_MACRO not in off
    with pytest.raises(PassConfigTypeError):
        PassContext(config={"codegen.multiversion": "yes"})


def test_gemm_kernels_get_clones_for_a_vector_math_or_arithmetic_epilogue():
    mod = ZOO_MODELS["onnx:transformer"]()
    sources = kernel_sources(mod, **{"codegen.multiversion_min_work": 1})
    cloned = [source for source in sources.values() if CLONED in source]
    assert cloned, "a transformer has softmax (expf) and GELU (erff) loops"
    assert all("expf(" in source or "erff(" in source or "tanhf(" in source or "rp_gemm(&" in source
               or "rp_conv2d_f32(&" in source for source in cloned)
    gemm_functions = [function_calling("rp_gemm(", source) for source in sources.values()
                      if "rp_gemm(&" in source]
    assert gemm_functions, "a transformer has GEMMs"
    off = kernel_sources(mod, **{"codegen.multiversion": False})
    assert not any(multiversion.CLONE_MACRO in source for source in off.values())
    assert set(off) == set(sources)


def conv_kernel_body(epilogue: str) -> tir.Stmt:
    """The lowered body of a microkernel convolution (8x8x32 -> 64 channels) whose
    epilogue is ``epilogue``: "relu" (bias + ReLU) or "none"."""
    x = ir.var("x", (1, 8, 8, 32))
    weight = ir.const(np.random.default_rng(0).standard_normal((3, 3, 32, 64)).astype(np.float32))
    y = ir.op.nn.conv2d(x, weight, padding=(1, 1), data_layout="NHWC", kernel_layout="HWIO")
    if epilogue == "relu":
        bias = ir.const(np.random.default_rng(1).standard_normal(64).astype(np.float32))
        y = ir.op.nn.relu(ir.op.add(y, bias))
    mod = ir.IRModule.from_expr(ir.Function([x], y))
    # the epilogue a loop after the call, as one the microkernels cannot apply stays
    config = {"codegen.no_cache": True, "codegen.conv_kernel": "microkernel", "codegen.num_threads": 1,
              FUSE_CONFIG: False}
    with PassContext(opt_level=3, config=config):
        compiled = compile_pipeline()(mod)
    (func,) = [f for f in compiled.functions.values()
               if isinstance(f, tir.PrimFunc) and "nn.conv2d" in f.attrs.get("op_names", ())]
    return func.body


def test_a_kernel_calls_epilogue_alone_counts_towards_the_threshold():
    """A function calling a GEMM or the convolution microkernels is cloned for its
    epilogue's arithmetic (a bias and ReLU read from the L1/L2 cache gain from AVX2's
    wider vectors), judged by the epilogue's work: the call's own work, however large,
    runs the same code in both clones and does not count."""
    body = conv_kernel_body("relu")
    epilogue = multiversion._epilogue_work(body, skip_parallel=False)
    assert 0 < epilogue < multiversion._work(body, skip_parallel=False) // 10
    assert multiversion.wants_clone(body, False, min_work=epilogue)
    assert not multiversion.wants_clone(body, False, min_work=epilogue + 1)
    # a call with no epilogue has nothing to gain
    assert not multiversion.wants_clone(conv_kernel_body("none"), False, min_work=1)


def pool_module(pool: str) -> ir.IRModule:
    """3x3 stride-2 pooling of a 1x33x33x64 NHWC tensor ("max" or "avg"), or a ReLU ("relu")."""
    x = ir.var("x", (1, 33, 33, 64))
    if pool == "relu":
        return ir.IRModule.from_expr(ir.Function([x], ir.op.nn.relu(x)))
    make = ir.op.nn.max_pool2d if pool == "max" else ir.op.nn.avg_pool2d
    return ir.IRModule.from_expr(ir.Function([x], make(x, (3, 3), strides=(2, 2), padding=(1, 1),
                                                      layout="NHWC")))


def test_max_pooling_is_cloned_and_a_relu_is_not():
    """A max over a window is a chain of NaN-propagating selects, which AVX2 does in half
    the operations and twice the lanes; a ReLU's one max per element reads memory and
    gains little."""
    (pool,) = kernel_sources(pool_module("max"), **{"codegen.multiversion_min_work": 1}).values()
    assert CLONED in pool
    (relu,) = kernel_sources(pool_module("relu"), **{"codegen.multiversion_min_work": 1}).values()
    assert CLONED not in relu


def test_cloned_max_pooling_gives_the_portable_codes_bits_nans_included(cache_dir: str):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 33, 33, 64)).astype(np.float32)
    x[0, rng.integers(0, 33, 40), rng.integers(0, 33, 40), rng.integers(0, 64, 40)] = np.nan
    x[0, 5, 5, :] = -0.0
    x[0, 5, 6, :] = 0.0
    mod = pool_module("max")
    config = {"codegen.multiversion_min_work": 1}
    with_clones = build(mod, cache_dir, **config)(x)
    portable = build(mod, cache_dir, **config, **{"codegen.multiversion": False})(x)
    assert np.isnan(with_clones).any()
    bits = [np.asarray(result).view(np.uint32) for result in (with_clones, portable)]
    np.testing.assert_array_equal(*bits)


def quantize_module() -> ir.IRModule:
    x = ir.var("x", (4, 1000))
    scale, zero = ir.const(np.float32(0.05)), ir.const(np.uint8(7))
    return ir.IRModule.from_expr(ir.Function([x], ir.op.qnn.quantize(x, scale, zero)))


def test_a_quantizing_kernel_is_cloned_and_gives_the_portable_codes_bits(cache_dir: str):
    """rne(x / scale) is one ROUNDSS in the AVX2 clone (a libm call in the portable code),
    exact in both: the same codes, ties and saturation included."""
    (source,) = kernel_sources(quantize_module(), **{"codegen.multiversion_min_work": 1}).values()
    assert CLONED in source
    x = (np.random.default_rng(4).standard_normal((4, 1000)) * 8).astype(np.float32)
    x[0, :200] = (np.arange(200, dtype=np.float32) - 100) * np.float32(0.025)  # halves: ties to even
    x[1, :4] = [np.nan, np.inf, -np.inf, 1e9]
    config = {"codegen.multiversion_min_work": 1}
    with_clones = np.asarray(build(quantize_module(), cache_dir, **config)(x))
    portable = np.asarray(build(quantize_module(), cache_dir, **config, **{"codegen.multiversion": False})(x))
    assert with_clones.dtype == np.uint8 and np.array_equal(with_clones, portable)
    assert np.array_equal(with_clones, np.asarray(passinfra.evaluate(quantize_module(), x)))


def test_a_dynamic_quantization_s_range_pass_runs_on_threads_cloned_with_the_portable_bits(cache_dir: str):
    """Its min and max accumulate in lanes, a set a row, one NaN-propagating select each:
    the rows' loop runs on the threads (no loop of the kernel is serial), its function gets
    the clones, and the scale, zero point and codes are the portable code's, a NaN's
    included."""
    x = ir.var("x", (64, 4096))
    mod = ir.IRModule.from_expr(ir.Function([x], ir.op.qnn.dynamic_quantize(x)))
    config = {"codegen.multiversion_min_work": 1}
    (source,) = kernel_sources(mod, **config).values()
    assert CLONED in function_calling("range_lows", source)
    data = (np.random.default_rng(5).standard_normal((64, 4096)) * 3).astype(np.float32)
    with_nan = data.copy()
    with_nan[40, 77] = np.nan
    libs = [build(mod, cache_dir, **config, **{"codegen.multiversion": on}) for on in (True, False)]
    libs[0].set_num_threads(2)
    before = libs[0].thread_stats()
    for values in (data, with_nan):
        outputs = [flat(lib(values)) for lib in libs]
        for got, want in zip(*outputs, strict=True):
            np.testing.assert_array_equal(got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8))
    after = libs[0].thread_stats()
    ran = {key: after[key] - before[key] for key in ("serial_loops", "parallel_loops")}
    assert ran["serial_loops"] == 0 and ran["parallel_loops"] >= 4, ran  # two calls, two loops each


@pytest.mark.parametrize("kernel", ["microkernel", "group_gemm"])
def test_a_convolution_with_a_swish_epilogue_is_cloned(kernel):
    """EfficientNet's 1x1 convolutions end in x * sigmoid(x): the function that calls the
    convolution (the microkernels or a GEMM) runs that epilogue, and gets the clones."""
    x = ir.var("x", (1, 16, 16, 32))
    weight = ir.const(np.random.default_rng(0).standard_normal((1, 1, 32, 64)).astype(np.float32))
    bias = ir.const(np.random.default_rng(1).standard_normal(64).astype(np.float32))
    y = ir.op.add(ir.op.nn.conv2d(x, weight, data_layout="NHWC", kernel_layout="HWIO"), bias)
    mod = ir.IRModule.from_expr(ir.Function([x], ir.op.multiply(y, ir.op.sigmoid(y))))
    sources = kernel_sources(mod, **{"codegen.multiversion_min_work": 1, "codegen.conv_kernel": kernel})
    call = "rp_conv2d_f32(&" if kernel == "microkernel" else "rp_gemm(&"
    (source,) = [source for source in sources.values() if call in source]
    # the swish runs in place right after the call, in the same (cloned) function
    assert function_calling(call, source) == function_calling("expf(", source)
    assert function_calling("expf(", source).startswith(multiversion.CLONE_MACRO)


def test_parallel_chunk_functions_get_the_clones():
    mod = ZOO_MODELS["onnx:transformer"]()
    sources = kernel_sources(mod, **{"codegen.multiversion_min_work": 1, "codegen.min_parallel_work": 1})
    assert any(f"{CLONED}" in source and "_parallel_body(" in source.split(CLONED, 1)[1].split("\n", 1)[0]
               for source in sources.values() if CLONED in source)


def test_the_same_program_renders_the_same_c_whatever_the_machine():
    """The clones are chosen from the PrimFunc alone: two renders are the same bytes, and
    the C names no CPU feature of this machine outside the clone targets."""
    func = elementwise(1 << 16)
    assert render_prim_func(func) == render_prim_func(func)
    source = render_prim_func(func)
    assert "target_clones(\"avx2\", \"default\")" in source
    assert "fma" not in source.replace("fmaxf", "").replace("fmax", "")


# --------------------------------------------------------------------------- compiler flags


def test_the_compiler_never_contracts_multiply_adds():
    assert multiversion.CONTRACT_FLAG in CompilerSettings().effective_cflags.split()
    own = CompilerSettings(cflags="-O2 -fPIC -ffp-contract=fast")
    assert multiversion.CONTRACT_FLAG not in own.effective_cflags.split()  # the user's choice stands
    assert CompilerSettings().cflags == "-O2 -fPIC -fno-math-errno -std=c11"  # config unchanged


@pytest.mark.skipif(not X86_64, reason="target_clones(\"avx2\") exists on x86-64 only")
def test_the_object_holds_both_clones_and_a_resolver(tmp_path):
    data = compile_c(render_prim_func(elementwise(1 << 16)), CompilerSettings(use_cache=False))
    path = tmp_path / "kernel.o"
    path.write_bytes(data)
    symbols = subprocess.run(["nm", str(path)], capture_output=True, text=True, check=True).stdout
    assert "k_exp_65536.avx2" in symbols and "k_exp_65536.default" in symbols
    assert "k_exp_65536.resolver" in symbols


# --------------------------------------------------------------------------- bit identity


def test_the_library_loads_runs_and_matches_the_interpreter(cache_dir: str):
    x = ir.var("x", (64, 1024))
    y = ir.var("y", (64, 1024))
    body = ir.op.multiply(ir.op.sigmoid(x), ir.op.add(ir.op.multiply(x, y), ir.op.maximum(x, ir.const(0.5))))
    mod = ir.IRModule.from_expr(ir.Function([x, y], body))
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((64, 1024)).astype(np.float32) for _ in range(2)]
    args[0][0, :7] = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45]
    sources = kernel_sources(mod)
    assert any(CLONED in source for source in sources.values())
    (got,) = assert_clones_match_default(mod, args, cache_dir)
    want = np.asarray(passinfra.evaluate(mod, *args))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))  # NaN propagates as NumPy's
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_vector_math_in_a_clone_stays_within_a_few_ulps_of_the_portable_code(cache_dir: str):
    """exp, log, tanh, erf (GELU), sigmoid and power vectorize through libmvec: the AVX2
    clone calls its 8-lane variants, the portable code the 4-lane ones."""
    x = ir.var("x", (32, 2048))
    positive = ir.op.add(ir.op.abs(x), ir.const(0.25))
    outputs = [ir.op.exp(x), ir.op.log(positive), ir.op.tanh(x), ir.op.nn.gelu(x), ir.op.sigmoid(x),
               ir.op.power(positive, x)]
    mod = ir.IRModule.from_expr(ir.Function([x], ir.Tuple(outputs)))
    assert sum(CLONED in source for source in kernel_sources(mod).values()) >= 1
    args = [(np.random.default_rng(1).standard_normal((32, 2048)) * 6).astype(np.float32)]
    got = build(mod, cache_dir)(*args)
    portable = build(mod, cache_dir, **{"codegen.multiversion": False})(*args)
    for name, value, base in zip(("exp", "log", "tanh", "gelu", "sigmoid", "power"), got, portable):
        if name == "gelu":  # x * (1 + erf(x / sqrt 2)) / 2 cancels for x << 0: an absolute bound
            np.testing.assert_allclose(value, base, rtol=1e-6, atol=1e-6)
        else:
            # each libmvec variant is within a few ulps of the true value (glibc's
            # libm-test-ulps: 1-3 for these float functions), so two are within twice that
            np.testing.assert_array_max_ulp(value, base, maxulp=8)
    for value, want in zip(got, flat(passinfra.evaluate(mod, *args))):
        np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)


ZOO_MODELS = {
    "onnx:resnet": lambda: from_onnx(zoo.resnet(depth=8, batch=2, image=32, width=16, classes=10)),
    "onnx:transformer": lambda: from_onnx(zoo.transformer(layers=2, hidden=128, heads=4, seq=64, vocab=128)),
    "onnx:mlp": lambda: from_onnx(zoo.mlp(batch=128, in_features=256, hidden=1024, layers=2, classes=10)),
    "ir:demo_cnn": lambda: zoo.IR_MODELS["demo_cnn"](batch=4, size=32, conv_channels=32),
    "ir:mlp": lambda: zoo.IR_MODELS["mlp"](batch=64, in_features=256, hidden=(512, 512)),
    "ir:transformer_block": lambda: zoo.IR_MODELS["transformer_block"](seq=128, hidden=128, heads=4),
}


def test_every_zoo_builder_is_covered():
    assert {name.split(":", 1)[1] for name in ZOO_MODELS if name.startswith("onnx:")} == set(zoo.MODELS)
    assert {name.split(":", 1)[1] for name in ZOO_MODELS if name.startswith("ir:")} == set(zoo.IR_MODELS)


def random_args(lib: Module) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    args = []
    for spec in lib.metadata["inputs"]:
        dtype = np.dtype(spec["dtype"])
        if dtype.kind == "f":
            args.append(rng.standard_normal(spec["shape"]).astype(dtype))
        else:
            args.append(rng.integers(0, 8, spec["shape"]).astype(dtype))
    return args


@pytest.mark.parametrize("name", list(ZOO_MODELS))
def test_zoo_model_clones_match_the_portable_code_and_every_thread_count_gives_the_same_bits(
        name: str, cache_dir: str):
    mod = ZOO_MODELS[name]()
    config = {"codegen.multiversion_min_work": 1, "codegen.min_parallel_work": 1}
    lib = build(mod, cache_dir, **config)
    args = random_args(lib)
    # outputs of order one, through layer norms: a few ulps of exp/erf become ~1e-6 absolute
    assert_clones_match_default(mod, args, cache_dir, rtol=1e-5, atol=1e-5, **config)
    results = []
    for threads in (1, 2, 3):  # the clone a CPU runs is chosen once per process
        lib.set_num_threads(threads)
        results.append(flat(lib(*args)))
    for other in results[1:]:
        assert all(a.tobytes() == b.tobytes() for a, b in zip(results[0], other))


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mod=programs(max_nodes=30, max_functions=1, allow_control_flow=False, allow_closures=False),
       seed=st.integers(0, 2**16))
def test_random_program_clones_match_the_portable_code(cache_dir: str, mod: ir.IRModule, seed: int):
    """The tolerance of the built-library property test (test_cg_build_properties.py): the
    same few-ulp differences of vector math, through the same programs."""
    inputs = program_inputs(mod, seed)
    assert_clones_match_default(mod, inputs, cache_dir, rtol=1e-4, atol=1e-5,
                                **{"codegen.multiversion_min_work": 1})


def test_an_object_with_clones_differs_from_one_without(cache_dir: str):
    """The cache keys the object by its C: turning clones off never reuses a cloned object."""
    mod = ZOO_MODELS["onnx:transformer"]()
    with PassContext(opt_level=3, config={"codegen.cache_dir": cache_dir}):
        on = compile_pipeline()(mod)
    with PassContext(opt_level=3, config={"codegen.cache_dir": cache_dir, "codegen.multiversion": False}):
        off = compile_pipeline()(mod)
    cloned = [gv.name_hint for gv, func in on.functions.items()
              if kernel_c_source(func) is not None and CLONED in kernel_c_source(func)]
    assert cloned
    assert all(kernel_object_code(on[name]) != kernel_object_code(off[name]) for name in cloned)
