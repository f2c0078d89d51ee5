"""Specializations (issue 31): a dynamic library that also holds static kernels for chosen
sizes, and calls one where a call has its sizes (SpecializeKernels, the host's dispatch)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from passinfra.build import build, compile_pass_names, compile_pipeline, run_link
from passinfra.codegen.passes.specialize_kernels import specializations, specialize_kernels
from passinfra.frontend import from_onnx
from passinfra.frontend.zoo.dynamic_models import gpt_decoder, mlp
from passinfra.ir import op
from passinfra.ir.dims import DimVar
from passinfra.ir.expr import Function, var
from passinfra.ir.op.extra import arange
from passinfra.ir.type_infer import infer_type
from passinfra.ir.types import TensorType
from passinfra.runtime.module import Module
from passinfra.transform import PassContext
from passinfra.transform.builtin.bind_dims import bind_function_dims, function_dim_vars
from passinfra.transform.errors import PassConfigError

F32 = "float32"
ROWS = DimVar("rows", 0, 128)


@pytest.fixture
def config(tmp_path):
    return {"codegen.cache_dir": str(tmp_path / "cache"), "codegen.build_cache": False}


def _build(mod, config, *specs):
    with PassContext(opt_level=3, config={**config, "codegen.specialize": tuple(specs)}):
        return build(mod)


# ----- binding dimensions of one function -------------------------------------------------
def test_binding_rewrites_parameter_types_and_attrs_and_keeps_the_rest_symbolic() -> None:
    batch, seq = DimVar("batch", 1, 8), DimVar("seq", 0, 64)
    x = var("x", TensorType((batch, seq, 4), F32))
    positions = arange(seq)  # an attr holding a dimension
    func = Function([x], op.add(op.sum(x, axis=2), op.cast(positions, F32)))
    assert set(function_dim_vars(func)) == {"batch", "seq"}
    bound = bind_function_dims(func, {"seq": 3, "other": 5})
    assert bound.params[0].type_annotation == TensorType((batch, 3, 4), F32)
    assert set(function_dim_vars(bound)) == {"batch"}
    assert infer_type(bound).ret_type == TensorType((batch, 3), F32)
    assert "stop=3" in str(bound)
    assert bind_function_dims(func, {"other": 1}) is func


# ----- the pass ----------------------------------------------------------------------------
def _fused(mod):
    with PassContext(opt_level=3):
        names = compile_pass_names()
        passes = names[: names.index("LowerToPrimFunc")]
        from passinfra.build import _passes
        from passinfra.transform import Sequential

        return Sequential(_passes(passes), opt_level=0)(mod)


def test_copies_are_made_per_function_once_and_named_after_their_sizes() -> None:
    fused = _fused(from_onnx(gpt_decoder(layers=1, hidden=32, heads=2, vocab=20, max_positions=32)))
    dims = {name: DimVar(name) for name in ("batch", "past", "seq")}
    with PassContext(config={"codegen.specialize": ({"seq": 1}, {"past": 0, "seq": 1}, {"seq": 1})}):
        bindings = specializations(PassContext.current(), dims)
    assert bindings == [(("seq", 1),), (("past", 0), ("seq", 1))]
    out = specialize_kernels(fused, bindings)
    names = {gv.name_hint for gv in out.get_global_vars()}
    # a layer norm has no past: both specializations bind it alike, one copy
    layer_norm = out["fused_nn_layer_norm"].attrs["Specializations"]
    assert layer_norm == (("fused_nn_layer_norm__seq1", (("seq", 1),)),)
    assert "fused_nn_layer_norm__past0_seq1" not in names
    softmax = dict(out["fused_nn_softmax"].attrs["Specializations"])
    assert softmax == {"fused_nn_softmax__seq1": (("seq", 1),),
                       "fused_nn_softmax__past0_seq1": (("past", 0), ("seq", 1))}
    assert infer_type(out["fused_nn_softmax__past0_seq1"]).ret_type.shape[1:] == (2, 1, 1)
    # data movement alone (positions, reshapes, transposes, the cache's concatenation)
    # gets no copy: its loops are the same at a static size
    for name in ("fused_arange", "fused_split", "fused_transpose", "fused_reshape_transpose_concatenate"):
        assert "Specializations" not in out[name].attrs
    assert str(out["main"]) == str(fused["main"])  # main still calls the symbolic kernels
    assert specialize_kernels(fused, []) is fused


@pytest.mark.parametrize(("spec", "message"), [
    ({"rws": 1}, r"entry 0: 'rws' is not a dimension of main \(its dimensions: rows\)"),
    ({"rows": 129}, r"rows = 129 is outside its bounds"),
    ({"rows": 1.5}, r"the size of 'rows' must be an int"),
    ({}, r"expected a non-empty mapping"),
])
def test_a_wrong_specialization_is_one_config_error_before_any_work(config, spec, message) -> None:
    x = var("x", TensorType((ROWS, 4), F32))
    from passinfra.ir.module import IRModule

    mod = IRModule.from_expr(Function([x], op.nn.relu(x)))
    with pytest.raises(PassConfigError, match=message):
        _build(mod, config, spec)


def test_no_specialization_leaves_the_pipeline_as_it_was() -> None:
    with PassContext():
        plain = compile_pass_names()
    with PassContext(config={"codegen.specialize": ({"seq": 1},)}):
        special = compile_pass_names()
    assert "SpecializeKernels" not in plain
    assert [name for name in special if name != "SpecializeKernels"] == list(plain)
    assert special.index("SpecializeKernels") == special.index("StreamWeights") + 1


# ----- the library --------------------------------------------------------------------------
def _link(mod, config, *specs):
    with PassContext(opt_level=3, config={**config, "codegen.specialize": tuple(specs)}):
        ret_type = infer_type(mod["main"], mod).ret_type
        compiled = compile_pipeline()(mod)
        products = run_link(compiled, ret_type)
    artifact = products.build_artifact()
    return compiled, products.host.c_source, Module(artifact.library, artifact.metadata, artifact.weights)


def test_the_library_calls_a_copy_at_its_sizes_and_the_symbolic_kernel_elsewhere(config) -> None:
    mod = from_onnx(mlp())
    compiled, host, lib = _link(mod, config, {"rows": 1}, {"rows": 7})
    generic = _build(mod, config)
    kernels = set(lib.metadata["kernels"])
    special = lib.metadata["specialized_kernels"]
    assert {entry["of"] for entry in special} == kernels
    assert {json.dumps(entry["when"]) for entry in special} == {'{"rows": 1}', '{"rows": 7}'}
    for entry in special:  # every call dispatches on its sizes, copies first
        assert f"({entry['kernel']}_packed(a)" in host
    calls = len(lib.metadata["kernels"])  # one dispatch per call
    assert host.count("if (d0 == 1) {") == calls
    assert host.count("} else if (d0 == 7) {") == calls
    for rows in (0, 1, 2, 7, 8, 100):
        x = np.random.default_rng(rows).standard_normal((rows, 64)).astype(F32)
        np.testing.assert_allclose(lib(x), generic(x), rtol=1e-5, atol=1e-5)


def test_a_fully_bound_copy_is_the_kernel_a_static_build_compiles(config) -> None:
    """At 64 rows a static build reads the weights in panels too: the copies are its kernels."""
    model = mlp()
    compiled, _, _ = _link(from_onnx(model), config, {"rows": 64})
    with PassContext(opt_level=3, config=config):
        static = compile_pipeline()(from_onnx(model, shapes={"input": (64, 64)}))
    copies = [gv.name_hint for gv in compiled.get_global_vars() if gv.name_hint.endswith("__rows64")]
    assert len(copies) == len(static.get_global_vars()) - 1
    for name in copies:
        base = name.removesuffix("__rows64")
        assert not compiled[name].dims
        assert compiled[name].attrs["c_source"].replace(name, base) == static[base].attrs["c_source"]


def test_a_one_row_copy_reads_the_shared_panels_in_place(config) -> None:
    """A static build of one row would hand BLAS the weight as it is; the copy shares the
    symbolic kernel's weights, stored in panels, and reads them on the microkernels
    rather than unpacking them at every call."""
    model = mlp(in_features=128, hidden=128)
    compiled, _, lib = _link(from_onnx(model), config, {"rows": 1})
    copies = [gv.name_hint for gv in compiled.get_global_vars() if gv.name_hint.endswith("__rows1")]
    sources = [compiled[name].attrs["c_source"] for name in copies]
    # the MatMul layers (the Gemm layer is a dense kernel, whose weight is never in panels)
    assert sum("rp_conv2d_f32(" in source for source in sources) == 1
    assert not any("weight_panels_unpack" in source for source in sources)
    x = np.random.default_rng(1).standard_normal((1, 128)).astype(F32)
    np.testing.assert_allclose(lib(x), _build(from_onnx(model), config)(x), rtol=1e-5, atol=1e-5)


def test_specializations_at_several_sizes_match_the_symbolic_library(config) -> None:
    """A decoder specialized for decode (seq 1) and a prompt (batch 1, seq 16): every
    output at those sizes and others equals the unspecialized library's, up to the
    summation order the static kernels may change."""
    model = gpt_decoder(layers=1, hidden=32, heads=2, vocab=20, max_positions=64)
    mod = from_onnx(model)
    special = _build(mod, config, {"seq": 1}, {"batch": 1, "seq": 16})
    generic = _build(mod, config)
    rng = np.random.default_rng(0)
    for batch, seq, past in [(1, 1, 0), (2, 1, 5), (1, 16, 0), (1, 16, 3), (2, 16, 1), (1, 4, 2)]:
        feed = {"input_ids": rng.integers(0, 20, (batch, seq)),
                "attention_mask": np.ones((batch, past + seq))}
        for kind in ("key", "value"):
            feed[f"past_key_values.0.{kind}"] = rng.standard_normal((batch, 2, past, 16)).astype(F32)
        args = [np.asarray(feed[name], np.int64 if "mask" in name or "ids" in name else F32)
                for name in special.input_names]
        for got, expected in zip(special(*args), generic(*args)):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


# ----- the CLI ------------------------------------------------------------------------------
def test_cli_specialize_option(tmp_path, capsys):
    import onnx

    from raypass_cli import main as cli

    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    base = ["compile", str(path), "-o", str(tmp_path / "m.so"), "--backend", "local",
            "--cache-dir", str(tmp_path / "cache")]
    assert cli.main([*base, "--specialize", "rows=1", "--specialize", "rows=8"]) == 0
    metadata = json.loads((tmp_path / "m.so.raypass.json").read_text())
    kernels = len(set(metadata["kernels"]))
    assert f"{kernels} kernels (+{2 * kernels} specialized)" in capsys.readouterr().out
    assert {json.dumps(k["when"]) for k in metadata["specialized_kernels"]} == {'{"rows": 1}', '{"rows": 8}'}
    for bad, message in (("rows=x", "bad --specialize value 'rows=x'"), ("rows=1,rows=2", "rows given twice"),
                         ("seq=1", "'seq' is not a dimension of main (its dimensions: rows)")):
        assert cli.main([*base, "--specialize", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("raypass: error: ") and message in err


def test_a_copy_s_static_outer_loops_over_a_symbolic_inner_size_run_on_threads(config) -> None:
    """Bound at batch 1 and seq 64, a softmax's rows are a static 2 x 64, each as long as
    the symbolic past + 64: the rows' loop is split between threads, as in the symbolic
    kernel, proved independent over the past."""
    model = gpt_decoder(layers=1, hidden=32, heads=2, vocab=20, max_positions=256)
    compiled, _, _ = _link(from_onnx(model), config, {"batch": 1, "seq": 64})
    copy = compiled["fused_nn_softmax__batch1_seq64"]
    assert [var.name for var in copy.dims] == ["past"]
    assert "rp_parallel_for(" in copy.attrs["c_source"]
    assert "rp_parallel_for(" in compiled["fused_nn_softmax"].attrs["c_source"]
