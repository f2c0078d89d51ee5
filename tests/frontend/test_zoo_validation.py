"""Every parameter of every model builder is checked (type, range, unknown names) with one
error naming it: the ONNX zoo through ``zoo:`` specs, the command line and Python, and the
Python-builder models. The cases are generated from the builders' own parameter tables, so
a parameter added to a builder is covered here without editing this file."""

from __future__ import annotations

import inspect
import re

import pytest

from passinfra.errors import IRError
from passinfra.frontend import zoo
from passinfra.frontend.zoo import ir_models
from passinfra.frontend.zoo.params import INTS, Param, checked_builder

# (model name, Param) for every parameter of every zoo builder
ZOO_PARAMS = [(name, param) for name, builder in zoo.MODELS.items() for param in builder.params]
MODEL_BUILDERS = [
    ir_models.demo_cnn, ir_models.demo_cnn_weights, ir_models.mlp, ir_models.mlp_weights,
    ir_models.transformer_block, ir_models.transformer_block_weights,
]
MODEL_PARAMS = [(builder, param) for builder in MODEL_BUILDERS for param in builder.params]


def _id(case: tuple) -> str:
    owner, param = case
    return f"{owner if isinstance(owner, str) else owner.__name__}.{param.name}"


def out_of_range(param: Param) -> list[int]:
    return [param.minimum - 1] + ([param.maximum + 1] if param.maximum is not None else [])


# ------------------------------------------------------------------------------ the zoo


def test_every_zoo_builder_declares_its_parameters():
    # the tables cover exactly the signatures (checked_builder refuses a mismatch at import)
    for name, builder in zoo.MODELS.items():
        assert [p.name for p in builder.params] == list(inspect.signature(builder).parameters), name
    assert {param.name for _, param in ZOO_PARAMS} >= {"layers", "hidden", "depth", "seed", "batch"}


@pytest.mark.parametrize("case", ZOO_PARAMS, ids=[_id(c) for c in ZOO_PARAMS])
def test_zoo_parameter_out_of_range_is_named(case):
    model, param = case
    for value in out_of_range(param):
        spec = f"zoo:{model}?{param.name}={value}"
        with pytest.raises(zoo.ZooSpecError, match=f"parameter '{param.name}' must be .*got {value}") as info:
            zoo.zoo_spec(spec)
        assert spec in str(info.value)
        with pytest.raises(zoo.ZooSpecError, match=f"parameter '{param.name}'"):
            zoo.MODELS[model](**{param.name: value})


@pytest.mark.parametrize("case", ZOO_PARAMS, ids=[_id(c) for c in ZOO_PARAMS])
def test_zoo_parameter_of_the_wrong_type_is_named(case):
    model, param = case
    for text in ("two", "1.5", ""):
        with pytest.raises(zoo.ZooSpecError, match=f"parameter {param.name}={text!r} .* is not an integer"):
            zoo.zoo_spec(f"zoo:{model}?{param.name}={text}")
    for value in (1.5, "3", True, None, [2]):
        shown = re.escape(repr(value))
        with pytest.raises(zoo.ZooSpecError, match=f"parameter '{param.name}' must be .*got {shown}$"):
            zoo.MODELS[model](**{param.name: value})


@pytest.mark.parametrize("model", sorted(zoo.MODELS))
def test_unknown_zoo_parameter_is_named_with_the_known_ones(model):
    with pytest.raises(zoo.ZooSpecError, match="unknown parameter 'colour'; it takes ") as info:
        zoo.zoo_spec(f"zoo:{model}?colour=3")
    assert all(param.name in str(info.value) for param in zoo.MODELS[model].params)
    with pytest.raises(zoo.ZooSpecError, match="unknown parameter 'colour'"):
        zoo.MODELS[model](colour=3)
    with pytest.raises(zoo.ZooSpecError, match="too many positional arguments"):
        zoo.MODELS[model](*range(1, len(zoo.MODELS[model].params) + 2))


@pytest.mark.parametrize("spec, message", [
    ("zoo:mlp?layers=1&layers=2", "parameter 'layers' is given twice"),
    ("zoo:mlp?layers", "bad parameters in 'zoo:mlp?layers'; write zoo:mlp?name=value&name=value"),
    ("zoo:mlp?&", "bad parameters in 'zoo:mlp?&'"),
    ("zoo:transformer?hidden=30&heads=4", "hidden (30) must be a multiple of heads (4)"),
    ("zoo:resnet?depth=9", "depth must be 6n + 2"),
])
def test_malformed_specs_and_cross_parameter_rules(spec, message):
    with pytest.raises(zoo.ZooSpecError, match=re.escape(message)):
        zoo.zoo_spec(spec)


def test_sizes_whose_weights_no_onnx_file_holds_fail_before_allocating():
    # 10^6 x 10^6 float32 weights would be 4 TB; the check runs before any is drawn
    with pytest.raises(zoo.ZooSpecError, match="weights would exceed .* choose smaller sizes"):
        zoo.zoo_spec("zoo:mlp?in_features=1000000&hidden=1000000")


def test_the_smallest_accepted_values_build():
    for name, builder in zoo.MODELS.items():
        model = builder(**{param.name: param.minimum for param in builder.params})
        assert model.graph.node, name


# ------------------------------------------------------------------ the Python builders


@pytest.mark.parametrize("case", MODEL_PARAMS, ids=[_id(c) for c in MODEL_PARAMS])
def test_model_parameter_out_of_range_or_of_the_wrong_type_is_named(case):
    builder, param = case
    bad_values = [*out_of_range(param), 2.5, "3", True] if param.kind != INTS else [5, "32", (8, 0), (8, 1.5)]
    for value in bad_values:
        with pytest.raises(IRError, match=f"{builder.__name__}\\(\\): .*must be .*got ") as info:
            builder(**{param.name: value})
        shown = param.name if param.kind != INTS or not isinstance(value, tuple) else "layer 2 width"
        assert shown in str(info.value)


@pytest.mark.parametrize("builder", MODEL_BUILDERS, ids=[b.__name__ for b in MODEL_BUILDERS])
def test_unknown_model_parameter_is_named(builder):
    with pytest.raises(IRError, match=f"{builder.__name__}\\(\\): unknown parameter 'colour'; it takes "):
        builder(colour=3)


def test_optional_sizes_accept_none_and_positional_arguments_are_checked_too():
    assert "main" in ir_models.transformer_block(4, 8, 2, None)
    with pytest.raises(IRError, match="model size seq must be a positive int, got 0"):
        ir_models.transformer_block(0)
    with pytest.raises(IRError, match="multiple values for argument 'seq'"):
        ir_models.transformer_block(4, seq=4)


def test_a_table_that_disagrees_with_the_signature_is_refused():
    with pytest.raises(TypeError, match="do not match"):
        @checked_builder([Param("a", 1)], ValueError)
        def builder(a: int = 1, b: int = 2) -> None:
            pass
