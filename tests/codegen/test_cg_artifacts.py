"""Typed build artifacts (passinfra.codegen.artifacts): the link step's products are
typed values, not IR attrs; the kernels' C and object code are read through typed
accessors; the runtime metadata is made with main's own output shapes."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from cg_c_support import loop, prim_func

from passinfra import tir
from passinfra.build import build, compile_pipeline, link_pipeline, run_link
from passinfra.codegen.artifacts import (
    C_SOURCE_ATTR,
    ArtifactError,
    BuildArtifact,
    LinkProducts,
    collect_link_products,
    current_link_products,
    kernel_c_source,
    kernel_object_code,
)
from passinfra.codegen.host import graph_output_types
from passinfra.codegen.passes import LinkLibrary, PlanMemory
from passinfra.errors import IRError
from passinfra.ir import op
from passinfra.ir.expr import Function, Tuple, const, var
from passinfra.ir.module import IRModule
from passinfra.ir.type_infer import infer_type
from passinfra.ir.types import TensorType, TupleType
from passinfra.runtime.module import Module
from passinfra.runtime.weights import PackedWeights
from passinfra.tir import PrimFunc
from passinfra.transform import PassContext

F32 = "float32"


@pytest.fixture
def ctx(tmp_path):
    with PassContext(opt_level=3, config={"codegen.cache_dir": str(tmp_path / "cache")}) as context:
        yield context


def two_output_model() -> IRModule:
    """main(x) = (dense(x, w) as (2, 5), relu(x) as (2, 3)): a 2-d output whose kernel
    buffer is flattened, and a tuple result."""
    x = var("x", (2, 3))
    w = const(np.arange(15, dtype=F32).reshape(5, 3) / 10)
    return IRModule.from_expr(Function([x], Tuple([op.nn.dense(x, w), op.nn.relu(x)])))


def compiled_and_ret_type(mod: IRModule):
    ret_type = infer_type(mod["main"], mod).ret_type
    return compile_pipeline()(mod), ret_type


def test_the_link_passes_leave_the_ir_unchanged_and_fill_typed_products(ctx):
    compiled, ret_type = compiled_and_ret_type(two_output_model())
    with collect_link_products(ret_type) as products:
        linked = link_pipeline()(compiled)
    # no build product in the IR: the dump after a link pass prints what came in
    assert linked.astext() == compiled.astext()
    assert dict(linked.attrs) == dict(compiled.attrs)
    assert products.memory_plan is not None
    assert products.memory_plan.workspace_bytes <= products.memory_plan.naive_bytes
    assert products.host is not None and "raypass_main" in products.host.c_source
    assert products.host.object_code.startswith(b"\x7fELF")
    assert products.library is not None and products.library.startswith(b"\x7fELF")
    assert isinstance(products.weights, PackedWeights) and products.weights.nbytes >= 15 * 4
    metadata = products.metadata
    assert isinstance(metadata, dict)
    assert metadata["workspace_bytes"] == products.memory_plan.workspace_bytes
    assert metadata["naive_intermediate_bytes"] == products.memory_plan.naive_bytes
    assert metadata["weights_bytes"] == products.weights.nbytes


def test_the_metadata_gives_outputs_mains_own_shapes(ctx):
    compiled, ret_type = compiled_and_ret_type(two_output_model())
    shapes = [[int(d) for d in ty.shape] for ty in graph_output_types(ret_type)]
    assert shapes == [[2, 5], [2, 3]]
    typed = run_link(compiled, ret_type).metadata
    assert [spec["shape"] for spec in typed["outputs"]] == shapes
    assert typed["output_structure"] == [0, 1]
    # without main's graph-level type, the kernels' (flattened) buffers are all there is
    untyped = run_link(compiled).metadata
    assert [int(np.prod(spec["shape"])) for spec in untyped["outputs"]] == [10, 6]


def test_build_makes_the_module_from_the_link_products(ctx):
    mod = two_output_model()
    compiled, ret_type = compiled_and_ret_type(mod)
    artifact = run_link(compiled, ret_type).build_artifact()
    assert isinstance(artifact, BuildArtifact)
    lib = build(mod, opt_level=3)
    assert lib.metadata == artifact.metadata
    assert lib.library_bytes == artifact.library
    x = np.linspace(-1, 1, 6, dtype=F32).reshape(2, 3)
    dense, relu = Module(artifact.library, artifact.metadata, artifact.weights)(x)
    assert dense.shape == (2, 5) and relu.shape == (2, 3)
    np.testing.assert_allclose(dense, x @ (np.arange(15, dtype=F32).reshape(5, 3) / 10).T, rtol=1e-6)
    np.testing.assert_array_equal(relu, np.maximum(x, 0))


def test_the_link_step_is_deterministic(ctx):
    compiled, ret_type = compiled_and_ret_type(two_output_model())
    first, second = run_link(compiled, ret_type), run_link(compiled, ret_type)
    assert first.build_artifact() == second.build_artifact()
    assert first.host == second.host and first.memory_plan == second.memory_plan


def test_a_missing_product_names_the_pass_that_makes_it(ctx):
    compiled, ret_type = compiled_and_ret_type(two_output_model())
    with PassContext(opt_level=3, disabled_pass=["LinkLibrary"], config=dict(ctx.config)):
        products = run_link(compiled, ret_type)
    assert products.metadata is not None and products.library is None
    with pytest.raises(ArtifactError, match="LinkLibrary did not run"):
        products.build_artifact()
    with pytest.raises(ArtifactError, match="HostCodegen did not run"):
        LinkProducts().build_artifact()


def test_link_library_outside_a_link_step_asks_for_host_codegen(ctx):
    compiled, _ = compiled_and_ret_type(two_output_model())
    assert current_link_products() is None
    PlanMemory()(compiled)  # runs its checks; with no link step its plan is dropped
    with pytest.raises(IRError, match="run HostCodegen before LinkLibrary"):
        LinkLibrary()(compiled)


def test_link_steps_nest_and_stay_in_their_thread():
    seen: list[LinkProducts | None] = []
    with collect_link_products() as outer:
        with collect_link_products() as inner:
            assert current_link_products() is inner
        assert current_link_products() is outer
        thread = threading.Thread(target=lambda: seen.append(current_link_products()))
        thread.start()
        thread.join()
    assert seen == [None]
    assert current_link_products() is None


def test_kernel_products_are_read_through_typed_accessors(ctx):
    compiled, _ = compiled_and_ret_type(two_output_model())
    kernels = [func for _, func in compiled.items() if isinstance(func, PrimFunc)]
    assert kernels
    for func in kernels:
        source, obj = kernel_c_source(func), kernel_object_code(func)
        assert isinstance(source, str) and "_packed(void** args)" in source
        assert isinstance(obj, bytes) and obj.startswith(b"\x7fELF")
        # a value of the wrong type is no product
        assert kernel_c_source(func.with_attr(C_SOURCE_ATTR, b"not text")) is None
    # before CodegenC and CompileC there is none
    x, out = tir.Buffer("x", (4,), F32), tir.Buffer("out", (4,), F32)
    i = tir.TVar("i")
    fresh = prim_func([x, out], loop(i, 4, tir.BufferStore(out, x.load(i), (i,))), 1, "copy")
    assert kernel_c_source(fresh) is None and kernel_object_code(fresh) is None


def test_graph_output_types_flattens_nested_tuples_in_order():
    a, b, c = TensorType((1,), F32), TensorType((2, 2), F32), TensorType((3,), "int32")
    assert graph_output_types(TupleType([a, TupleType([b, c])])) == [a, b, c]
    assert graph_output_types(a) == [a]
