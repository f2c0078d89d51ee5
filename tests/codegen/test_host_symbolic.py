"""The host side of dynamic shapes: a main with symbolic dimensions gets a host that
takes the sizes, a workspace laid out once and placed at every call, metadata that
encodes symbolic shapes, and a runtime that binds the sizes from the inputs."""

from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from passinfra import tir
from passinfra.codegen.artifacts import collect_link_products
from passinfra.codegen.cc_driver import CompilerSettings, compile_c, link_shared
from passinfra.codegen.host import (
    _SYMBOLIC_PRELUDE,
    HostProgram,
    KernelCall,
    analyze_main,
    c_dim,
    plan_memory,
    representative_binding,
    runtime_metadata,
    symbolic_layout,
    tensor_lifetimes,
    workspace_tensors,
)
from passinfra.codegen.passes import CodegenC, CompileC, HostCodegen, LinkLibrary, PlanMemory
from passinfra.errors import DimError, IRError
from passinfra.ir.dims import DimVar, dim_from_json, dim_to_json, evaluate, floordiv, floormod
from passinfra.ir.expr import Call, Function, GlobalVar, Tuple, var
from passinfra.ir.module import IRModule
from passinfra.ir.types import TensorType
from passinfra.runtime.module import Module, load_module
from passinfra.runtime.shape_binding import DimBindingError
from passinfra.transform import PassContext, Sequential

F32 = "float32"
ROWS = DimVar("rows", 0, 128)
COLS = DimVar("cols", 1, 50)
WIDTH = 4


@pytest.fixture
def ctx(tmp_path):
    with PassContext(config={"codegen.cache_dir": str(tmp_path / "cache")}) as context:
        yield context


# ----- dimensions as JSON ----------------------------------------------------------------
def _dims() -> list:
    r, c = ROWS, COLS
    return [0, 7, -3, r, c, r * 64 + 1, r * c * 4, (r + c) // 4 * 3 - c % 5 + r * r * c, (r * 3 + 1) // 2,
            ((r + 1) // 2) % 3, 2**40 * r - 2**33]


@pytest.mark.parametrize("dim", _dims(), ids=str)
def test_dim_json_round_trips_exactly(dim) -> None:
    encoded = json.loads(json.dumps(dim_to_json(dim)))
    assert dim_from_json(encoded, {"rows": ROWS, "cols": COLS}) == dim
    if isinstance(dim, int):
        assert encoded == dim


def test_dim_json_names_what_it_cannot_read() -> None:
    with pytest.raises(DimError, match="'rows' in JSON is not declared"):
        dim_from_json({"var": "rows"}, {"cols": COLS})
    with pytest.raises(DimError, match="malformed"):
        dim_from_json({"poly": [[[["cols", 1]], 1.5]]}, {"cols": COLS})


# ----- planning with symbolic sizes -------------------------------------------------------
_SIZES = [ROWS * WIDTH, ROWS * COLS, COLS * 16 + 3, 256, floordiv(ROWS + 1, 2) * COLS, ROWS * ROWS,
          0 * ROWS + 1, floormod(ROWS, 3) * 8 + COLS]


@st.composite
def _programs(draw) -> HostProgram:
    """A random dataflow of kernel calls over tensors of symbolic (and a few static) sizes."""
    program = HostProgram()
    program.dim_vars = [COLS, ROWS]
    live = [program.add_tensor("input", (ROWS, COLS), F32, 0)]
    program.input_ids.append(live[0])
    program.input_names.append("x")
    intermediates = 0
    for _ in range(draw(st.integers(1, 14))):
        args = tuple(draw(st.lists(st.sampled_from(live), min_size=1, max_size=3)))
        outputs = []
        for _ in range(draw(st.integers(1, 2))):
            shape = (draw(st.sampled_from(_SIZES)),)
            outputs.append(program.add_tensor("intermediate", shape, F32, intermediates))
            intermediates += 1
        program.calls.append(KernelCall("k", args, tuple(outputs)))
        live.extend(outputs)
    program.result = live[-1]
    return program


@settings(max_examples=60, deadline=None)
@given(_programs(), st.lists(st.tuples(st.integers(0, 128), st.integers(1, 50)), min_size=3, max_size=3))
def test_symbolic_plan_never_overlaps_tensors_live_together(program, bindings) -> None:
    plan = plan_memory(program)
    tensors = workspace_tensors(program)
    first, last = tensor_lifetimes(program)
    symbolic = any(not isinstance(program.tensors[t].nbytes, int) for t in tensors)
    assert plan.is_symbolic == symbolic
    if not symbolic:  # the static planner's (tested with the static host)
        return
    assert sorted(plan.order) == sorted(tensors)
    representative = representative_binding(program.dim_vars)
    for rows, cols in [*bindings, (representative["rows"], representative["cols"])]:
        binding = {"rows": rows, "cols": cols}
        offsets, total = symbolic_layout(plan, binding)
        size = {t: evaluate(program.tensors[t].nbytes, binding) for t in tensors}
        for t in tensors:
            assert offsets[t] % 64 == 0 and offsets[t] + size[t] <= total
        for a in tensors:
            for b in tensors:
                if a < b and first[a] <= last[b] and first[b] <= last[a] and size[a] and size[b]:
                    assert offsets[a] + size[a] <= offsets[b] or offsets[b] + size[b] <= offsets[a]
        assert total <= sum(-(-s // 64) * 64 for s in size.values())
    # at the representative binding the layout is the greedy's own (sizes there are nonzero)
    offsets, _ = symbolic_layout(plan, representative)
    assert offsets == plan.offsets


def test_a_chain_reuses_memory_at_every_size() -> None:
    program = HostProgram()
    program.dim_vars = [ROWS]
    x = program.add_tensor("input", (ROWS, WIDTH), F32, 0)
    previous = x
    for i in range(6):
        out = program.add_tensor("intermediate", (ROWS, WIDTH), F32, i)
        program.calls.append(KernelCall("k", (previous,), (out,), (ROWS,)))
        previous = out
    program.result = previous
    plan = plan_memory(program)
    for rows in (0, 1, 5, 100):
        _, total = symbolic_layout(plan, {"rows": rows})
        assert total <= 2 * (-(-rows * 16 // 64) * 64)  # two slots, as the static planner finds


# ----- the C the host is written in ---------------------------------------------------------
def test_c_floor_division_and_dimension_expressions(tmp_path) -> None:
    """rp_floordiv/rp_floormod floor for negative numerators too, and c_dim renders a
    dimension that C evaluates as :func:`evaluate` does."""
    dims = [ROWS * COLS * 4 + 3, floordiv(ROWS * 3 + 1, 4) - COLS, floormod(ROWS + 2 * COLS, 7) * 2**35,
            (ROWS - COLS) * (ROWS + 2)]
    names = {"rows": "d[0]", "cols": "d[1]"}
    source = "\n".join(["#include <stdint.h>", *_SYMBOLIC_PRELUDE,
                        "int64_t fdiv(int64_t a, int64_t b) { return rp_floordiv(a, b); }",
                        "int64_t fmod_(int64_t a, int64_t b) { return rp_floormod(a, b); }",
                        *[f"int64_t e{i}(const int64_t* d) {{ return {c_dim(dim, names)}; }}"
                          for i, dim in enumerate(dims)], ""])
    settings_ = CompilerSettings(cache_dir=str(tmp_path / "cache"))
    path = tmp_path / "dims.so"
    path.write_bytes(link_shared([("dims", compile_c(source, settings_, name="dims"))], settings_))
    lib = ctypes.CDLL(str(path))
    for fn in ("fdiv", "fmod_"):
        getattr(lib, fn).restype = ctypes.c_int64
        getattr(lib, fn).argtypes = [ctypes.c_int64, ctypes.c_int64]
    for a in (-9, -8, -1, 0, 1, 7, 8):
        for b in (1, 2, 3, 8):
            assert (lib.fdiv(a, b), lib.fmod_(a, b)) == (a // b, a % b)
    for i, dim in enumerate(dims):
        fn = getattr(lib, f"e{i}")
        fn.restype, fn.argtypes = ctypes.c_int64, [ctypes.POINTER(ctypes.c_int64)]
        for rows, cols in ((0, 1), (5, 3), (128, 50), (7, 49)):
            values = (ctypes.c_int64 * 2)(rows, cols)
            assert fn(values) == evaluate(dim, {"rows": rows, "cols": cols}), dim


# ----- a hand-made main with symbolic sizes, compiled ------------------------------------------
def _unary(symbol: str, fn, source: tuple[int, int]) -> tir.PrimFunc:
    n = tir.TVar("n", "int64")
    x, out = tir.Buffer("x", (n * WIDTH,), F32), tir.Buffer("out", (n * WIDTH,), F32)
    i = tir.TVar("i")
    body = tir.For(i, tir.IntImm(0), n * WIDTH, tir.ForKind.SERIAL, tir.BufferStore(out, fn(x.load(i)), (i,)))
    attrs = {"num_inputs": 1, "global_symbol": symbol, "size_names": ("rows",), "size_sources": (source,)}
    return tir.PrimFunc([x, out], body, attrs, dims=(n,))


def _binary(symbol: str, fn) -> tir.PrimFunc:
    n = tir.TVar("m", "int64")
    a, b, out = (tir.Buffer(name, (n * WIDTH,), F32) for name in ("a", "b", "out"))
    i = tir.TVar("i")
    store = tir.BufferStore(out, fn(a.load(i), b.load(i)), (i,))
    attrs = {"num_inputs": 2, "global_symbol": symbol, "size_names": ("rows",), "size_sources": ((-1, -1),)}
    return tir.PrimFunc([a, b, out], tir.For(i, tir.IntImm(0), n * WIDTH, tir.ForKind.SERIAL, store), attrs,
                        dims=(n,))


def _typed(call: Call, ty: TensorType | None) -> Call:
    object.__setattr__(call, "_checked_type", ty)
    return call


def _symbolic_module(typed: bool) -> IRModule:
    """main(x: [rows, 4]) = (v4, x, v4) with v1 = 2x, v2 = 2 v1, v3 = v2 + v1, v4 = 2 v3.
    Untyped, the later calls' sizes are solved from the flattened buffers' element counts
    (as in a lowered main); ``add`` takes its size by name (source (-1, -1))."""
    ty = TensorType((ROWS, WIDTH), F32) if typed else None
    x = var("x", (ROWS, WIDTH))
    scale, add = GlobalVar("scale"), GlobalVar("add")
    v1 = _typed(Call(scale, [x]), ty)
    v2 = _typed(Call(scale, [v1]), ty)
    v3 = _typed(Call(add, [v2, v1]), ty)
    v4 = _typed(Call(scale, [v3]), ty)
    kernels = {scale: _unary("scale", lambda v: v * 2.0, (0, 0)), add: _binary("add", lambda a, b: a + b)}
    return IRModule({"main": Function([x], Tuple([v4, x, v4])), **kernels})


def _compile(mod: IRModule) -> tuple[Module, str]:
    ret = TensorType((ROWS, WIDTH), F32)
    from passinfra.ir.types import TupleType

    with collect_link_products(TupleType([ret, ret, ret])) as products:
        Sequential([CodegenC(), CompileC(), PlanMemory(), HostCodegen(), LinkLibrary()])(mod)
    artifact = products.build_artifact()
    return Module(artifact.library, artifact.metadata, artifact.weights), products.host.c_source


@pytest.mark.parametrize("typed", [True, False], ids=["typed", "lowered"])
def test_host_analysis_gives_each_call_its_sizes(typed: bool) -> None:
    program = analyze_main(_symbolic_module(typed))
    assert program.dim_vars == [ROWS] and program.is_symbolic
    assert [call.sizes for call in program.calls] == [(ROWS,)] * 4
    assert all(program.tensors[t].nbytes == ROWS * 16 for call in program.calls for t in call.outputs)


def test_a_size_no_input_gives_is_an_error_naming_kernel_and_size() -> None:
    """A kernel broadcasting a static input to ``seq`` rows: nothing at the call says seq."""
    n, i = tir.TVar("n", "int64"), tir.TVar("i")
    x, out = tir.Buffer("x", (WIDTH,), F32), tir.Buffer("out", (n * WIDTH,), F32)
    store = tir.BufferStore(out, x.load(tir.FloorMod(i, tir.IntImm(WIDTH))), (i,))
    attrs = {"num_inputs": 1, "global_symbol": "fill", "size_names": ("seq",), "size_sources": ((-1, -1),)}
    fill = GlobalVar("fill")
    kernel = tir.PrimFunc([x, out], tir.For(i, tir.IntImm(0), n * WIDTH, tir.ForKind.SERIAL, store), attrs,
                          dims=(n,))
    param = var("x", (WIDTH,))
    with pytest.raises(IRError, match=r"size 'seq' \(n\) of @fill.*main's dimensions \(none\)"):
        analyze_main(IRModule({"main": Function([param], Call(fill, [param])), fill: kernel}))


def test_symbolic_library_runs_at_every_size_and_checks_before_running(ctx, tmp_path) -> None:
    lib, source = _compile(_symbolic_module(typed=False))
    assert "const int64_t* dims" in source and "raypass_workspace_bytes" in source
    meta = lib.metadata
    assert meta["dims"] == [{"name": "rows", "lo": 0, "hi": 128}]
    assert meta["inputs"][0]["shape"] == [{"var": "rows"}, WIDTH] and meta["workspace_bytes"] is None
    assert lib.dim_vars == [ROWS] and lib.input_shapes({"rows": 3}) == [(3, WIDTH)]
    for path_lib in (lib, None):
        if path_lib is None:  # the same through export and load (metadata through JSON)
            lib.export_library(tmp_path / "lib.so")
            path_lib = load_module(tmp_path / "lib.so")
        for rows in (0, 1, 5, 64, 100, 3):
            x = np.random.default_rng(rows).standard_normal((rows, WIDTH)).astype(F32)
            v1 = x * np.float32(2)
            expected = (v1 * np.float32(2) + v1) * np.float32(2)
            got = path_lib(x)
            assert len(got) == 3 and all(g.shape == (rows, WIDTH) for g in got)
            np.testing.assert_array_equal(got[0], expected)
            np.testing.assert_array_equal(got[1], x)
            np.testing.assert_array_equal(got[2], expected)
    # workspace: as large as the largest call asked for, never shrunk
    assert lib._scratch.workspace.nbytes >= 2 * 100 * 16


def test_a_symbolic_library_profiles_its_calls_at_the_given_sizes(ctx) -> None:
    lib, source = _compile(_symbolic_module(typed=False))
    x = np.ones((50, WIDTH), F32)
    profile = lib.profile(x, runs=3)
    assert profile.kernels == ("scale", "scale", "add", "scale") and profile.call_ns.shape == (3, 4)
    assert profile.call_ns.sum() > 0
    for calls, seconds in zip(profile.call_ns, profile.run_seconds):
        assert calls.sum() <= seconds * 1e9 + 1000
    np.testing.assert_array_equal(lib(x)[0], x * np.float32(12))


def test_wrong_sizes_raise_one_binding_error_before_anything_runs(ctx) -> None:
    lib, _ = _compile(_symbolic_module(typed=True))
    with pytest.raises(DimBindingError, match=r"input 'x' axis 0: dimension rows = 129 is outside its bound"):
        lib(np.zeros((129, WIDTH), F32))
    with pytest.raises(DimBindingError, match=r"input 'x' axis 1: expected 4, got 5"):
        lib(np.zeros((3, 5), F32))
    assert getattr(lib._scratch, "workspace", None) is None  # nothing ran
    np.testing.assert_array_equal(lib(np.ones((2, WIDTH), F32))[1], np.ones((2, WIDTH), F32))


def test_static_metadata_has_no_symbolic_keys() -> None:
    program = HostProgram()
    x = program.add_tensor("input", (4,), F32, 0)
    program.input_ids.append(x)
    program.input_names.append("x")
    program.result = x
    meta = runtime_metadata(program, plan_memory(program), 0)
    assert "dims" not in meta and meta["inputs"][0]["shape"] == [4] and meta["workspace_bytes"] == 0


# ----- the dynamic MLP of the model zoo, end to end ---------------------------------------------
def _dynamic_mlp():
    from passinfra.frontend.onnx import from_onnx
    from passinfra.frontend.zoo.dynamic_models import mlp

    return from_onnx(mlp())


def _check_mlp(lib: Module, mod: IRModule) -> None:
    from passinfra import evaluate

    for rows in (0, 1, 5, 64, 100):
        x = np.random.default_rng(rows).standard_normal((rows, 64)).astype(F32)
        got, expected = np.asarray(lib(x)), np.asarray(evaluate(mod, x))
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(DimBindingError, match="input 'input' axis 1"):
        lib(np.zeros((3, 65), F32))


def test_dynamic_mlp_links_and_matches_the_interpreter(ctx) -> None:
    """The compile pipeline and the link step, run as build runs them."""
    from passinfra.build import compile_pipeline, run_link
    from passinfra.ir.type_infer import infer_type

    mod = _dynamic_mlp()
    with PassContext(opt_level=3, config=dict(ctx.config)):
        ret_type = infer_type(mod["main"], mod).ret_type
        artifact = run_link(compile_pipeline()(mod), ret_type).build_artifact()
    _check_mlp(Module(artifact.library, artifact.metadata, artifact.weights), mod)


def test_dynamic_mlp_builds_and_matches_the_interpreter(ctx) -> None:
    import passinfra

    mod = _dynamic_mlp()
    _check_mlp(passinfra.build(mod), mod)
