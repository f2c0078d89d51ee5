"""Registry, `required` resolution and the seed's Sequential example."""

from __future__ import annotations

import networkx as nx
import pytest
from pass_testlib import fingerprint, make_add_to_mul, make_module, make_tracer, op_names

from passinfra import ir
from passinfra.instrument import pass_instrument
from passinfra.transform import (
    PassContext,
    PassCycleError,
    PassDependencyError,
    PassNotFoundError,
    PassRegistrationError,
    Sequential,
    get_pass,
    list_passes,
    register_pass,
    required_graph,
    resolve_required,
    unregister_pass,
)

RAN: list[str] = []


@pytest.fixture(autouse=True)
def _clear_log():
    RAN.clear()


def _register_tracer(name: str, required=(), opt_level: int = 0) -> None:
    register_pass(name, override=True)(lambda: make_tracer(RAN, name, opt_level, list(required)))


# a small dependency web: dep.D requires dep.B and dep.C, both require dep.A
_register_tracer("dep.A")
_register_tracer("dep.B", ["dep.A"])
_register_tracer("dep.C", ["dep.A"])
_register_tracer("dep.D", ["dep.B", "dep.C"])
_register_tracer("cyc.X", ["cyc.Y"])
_register_tracer("cyc.Y", ["cyc.Z"])
_register_tracer("cyc.Z", ["cyc.X"])
_register_tracer("bad.Requirer", ["bad.Missing"])


# ----- registry ---------------------------------------------------------------------------


def test_register_get_list():
    assert {"dep.A", "dep.D", "PrintIR"} <= set(list_passes())
    assert list_passes() == sorted(list_passes())
    first, second = get_pass("dep.A"), get_pass("dep.A")
    assert first.info.name == "dep.A" and first is not second  # a fresh instance each time


def test_duplicate_registration_raises_unless_override():
    register_pass("reg.Dup")(lambda: make_tracer(RAN, "reg.Dup"))
    try:
        with pytest.raises(PassRegistrationError, match="'reg.Dup' is already registered"):
            register_pass("reg.Dup")(lambda: make_tracer(RAN, "other"))
        register_pass("reg.Dup", override=True)(lambda: make_tracer(RAN, "replacement"))
        get_pass("reg.Dup")(make_module())
        assert RAN == ["replacement"]
    finally:
        unregister_pass("reg.Dup")
    assert "reg.Dup" not in list_passes()


def test_registry_errors():
    with pytest.raises(PassNotFoundError, match="unknown pass 'reg.Nope'; registered passes: .*dep.A"):
        get_pass("reg.Nope")
    with pytest.raises(PassRegistrationError, match="must be callable with no arguments"):
        register_pass("reg.NeedsArgs")(lambda level: None)
    register_pass("reg.NotAPass", override=True)(lambda: 42)
    with pytest.raises(TypeError, match="factory of pass 'reg.NotAPass' returned int"):
        get_pass("reg.NotAPass")
    unregister_pass("reg.NotAPass")


# ----- resolution ---------------------------------------------------------------------------


def test_resolve_required_is_transitive_and_topological():
    assert resolve_required("dep.D") == ["dep.A", "dep.B", "dep.C"]
    assert resolve_required("dep.A") == []
    # an unregistered pass resolves from its own info
    assert resolve_required(make_tracer(RAN, "local", required=["dep.C"])) == ["dep.A", "dep.C"]


def test_required_graph():
    graph = required_graph("dep.D")
    assert isinstance(graph, nx.DiGraph)
    expected_edges = {("dep.A", "dep.B"), ("dep.A", "dep.C"), ("dep.B", "dep.D"), ("dep.C", "dep.D")}
    assert set(graph.edges) == expected_edges
    assert graph.nodes["dep.D"]["required"] == ("dep.B", "dep.C")
    assert nx.is_directed_acyclic_graph(graph)


def test_cycle_error_names_every_pass_on_the_cycle():
    with pytest.raises(PassCycleError, match="cycle") as info:
        resolve_required("cyc.X")
    message = str(info.value)
    for name in ("cyc.X", "cyc.Y", "cyc.Z"):
        assert f"'{name}'" in message
    assert sorted(info.value.cycle) == ["cyc.X", "cyc.Y", "cyc.Z"]
    for required_by, required in [("cyc.X", "cyc.Y"), ("cyc.Y", "cyc.Z"), ("cyc.Z", "cyc.X")]:
        assert f"'{required_by}' requires '{required}'" in message


def test_unknown_required_names_it_and_the_requirer():
    with pytest.raises(PassDependencyError, match="pass 'bad.Requirer' requires unknown pass 'bad.Missing'"):
        Sequential([get_pass("bad.Requirer")])(make_module())


# ----- running dependencies ------------------------------------------------------------------


def test_dependencies_run_right_before_each_dependent_every_time():
    seq = Sequential([get_pass("dep.B"), make_tracer(RAN, "plain"), get_pass("dep.D")])
    seq(make_module())
    assert RAN == ["dep.A", "dep.B", "plain", "dep.A", "dep.B", "dep.C", "dep.D"]


def test_dependencies_bypass_enabling_but_not_instruments():
    names: list[str] = []

    @pass_instrument
    class Names:
        def run_before_pass(self, mod, info):
            names.append(info.name)

    high = make_tracer(RAN, "needs_A", opt_level=0, required=["dep.A"])
    with PassContext(disabled_pass=["dep.A"], instruments=[Names()]):
        Sequential([get_pass("dep.A"), high], name="seq")(make_module())
    assert RAN == ["dep.A", "needs_A"]  # the disabled dep.A still runs as a dependency
    assert names == ["seq", "dep.A", "needs_A"]


def test_enabled_steps_exposes_the_plan():
    seq = Sequential([get_pass("dep.C"), make_tracer(RAN, "o3", opt_level=3)])
    with PassContext(opt_level=2) as ctx:
        steps = [[p.info.name for p in step] for step in seq.enabled_steps(ctx)]
    assert steps == [["dep.A", "dep.C"]]


# ----- the seed's Sequential example ----------------------------------------------------------


def _seed_pipeline_passes():
    """InferType-, FoldConstant- and CSE-like stand-ins, registered by name."""
    register_pass("seed.InferType", override=True)(lambda: make_tracer(RAN, "seed.InferType", 0))
    register_pass("seed.FoldConstant", override=True)(
        lambda: make_add_to_mul(2, name="seed.FoldConstant", required=["seed.InferType"])
    )
    register_pass("seed.CSE", override=True)(
        lambda: make_tracer(RAN, "seed.CSE", 3, required=["seed.InferType"])
    )
    register_pass("seed.Dropped", override=True)(lambda: make_tracer(RAN, "seed.Dropped", 1))


def test_seed_sequential_example():
    _seed_pipeline_passes()
    mod = make_module()
    before, before_hash = fingerprint(mod), ir.structural_hash(mod)
    seq = Sequential([get_pass("seed.FoldConstant"), get_pass("seed.Dropped"), get_pass("seed.CSE")])
    with PassContext(opt_level=3, disabled_pass=["seed.Dropped"]):
        result = seq(mod)
    assert RAN == ["seed.InferType", "seed.InferType", "seed.CSE"]
    assert op_names(result["myAdd"]) == ["test_pass.multiply"]
    assert fingerprint(mod) == before and ir.structural_hash(mod) == before_hash
