"""Rewriting the weight parameters of primitive functions: the machinery that
ToMixedPrecision (16-bit storage) and PanelWeights (weights in panels of output
channels) share.

Both change how a constant weight is *stored* and put an expression in front of the
parameter that reads it, inside the primitive function, so the graph means what it
meant: the call sites pass the converted constant, and the primitive function gets a
parameter of the new type whose uses read ``rule.parameter(...)``'s expression. A
:class:`WeightRule` says which parameters of a function may convert, which constants
may, and how to convert each.

The plan (the same for every rule):

* a constant is converted only when every use of it in the module is an argument the
  rule accepts in a parameter it accepts (a constant also read elsewhere stays as it is
  everywhere: converting it would store it twice); it is converted once and shared;
* a primitive function shared by several call sites is rewritten in place when every
  site converts the same parameters; otherwise the sites that do call a converted copy
  named ``<name>_<rule.suffix>`` (added after the module's functions) and the others
  keep the original;
* functions with ``SkipOptimization`` are neither rewritten nor have their calls rewritten.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from passinfra.file_pages import release_file_pages
from passinfra.interrupts import ThreadPool, wait_for
from passinfra.ir import op
from passinfra.ir.expr import Call, Constant, Expr, Function, GlobalVar, Var
from passinfra.ir.functor import ExprMutator, expr_children, iter_post_order
from passinfra.ir.graph import is_primitive
from passinfra.ir.module import IRModule
from passinfra.ir.types import TensorType
from passinfra.runtime.cpus import available_cpus

__all__ = ["WeightRule", "rewrite_weight_parameters", "skipped", "widened_parameter"]

# the weights a rewrite converts on threads once they add up to this much (below it the
# threads cost more than they save), on at most this many
_PARALLEL_CONVERT_BYTES = 16 << 20
_CONVERT_THREADS = 8


class WeightRule(Protocol):
    """How one pass converts weight parameters."""

    suffix: str  # of a converted copy of a shared primitive function

    def parameters(self, func: Function) -> tuple[int, ...]:
        """Positions of the parameters of primitive ``func`` that may convert."""

    def accepts(self, constant: Constant) -> bool:
        """Whether ``constant``, passed in such a parameter, may convert."""

    def parameter(self, old: Var) -> tuple[Var, Expr]:
        """The converted parameter, and the expression of it that replaces ``old``."""

    def constant(self, constant: Constant) -> Constant:
        """The converted constant."""


def widened_parameter(old: Var, dtype: str) -> tuple[Var, Expr]:
    """A float32 weight parameter stored as ``dtype``: the new parameter, and the
    ``cast(new, "float32")`` that replaces ``old`` (a rule's :meth:`WeightRule.parameter`
    for a narrower storage type)."""
    ty = old.type_annotation
    assert isinstance(ty, TensorType)
    new = Var(old.name_hint, TensorType(ty.shape, dtype))
    return new, op.cast(new, "float32")


def skipped(func: Function) -> bool:
    return bool(func.attrs.get("SkipOptimization", False))


@dataclass
class _Site:
    """One call of a primitive function with the parameters whose arguments convert."""

    call: Call
    callee: GlobalVar
    positions: tuple[int, ...]


class _Plan:
    """What the rewrite will change: the call sites and their final conversions."""

    def __init__(self, mod: IRModule, rule: WeightRule) -> None:
        self.mod = mod
        self.rule = rule
        self.weights: dict[GlobalVar, tuple[int, ...]] = {}
        for gv, func in mod.functions.items():
            if isinstance(func, Function) and is_primitive(func) and not skipped(func):
                positions = rule.parameters(func)
                if positions:
                    self.weights[gv] = positions
        self.sites: list[_Site] = []
        self._accepted: dict[int, bool] = {}
        self.other_references: set[GlobalVar] = set()  # callees referenced outside rewritable calls
        self._find_sites()

    def callers(self) -> Iterable[tuple[GlobalVar, Function]]:
        for gv, func in self.mod.functions.items():
            if isinstance(func, Function) and not is_primitive(func):
                yield gv, func

    def _find_sites(self) -> None:
        constant_uses: Counter[int] = Counter()  # id(constant) -> every use in a caller
        candidate_uses: Counter[int] = Counter()  # ... as a convertible argument
        for _, func in self.callers():
            rewritable = not skipped(func)
            for node in iter_post_order(func):
                for child in expr_children(node):
                    if isinstance(child, Constant):
                        constant_uses[id(child)] += 1
                    elif isinstance(child, GlobalVar) and child in self.weights:
                        if not (rewritable and isinstance(node, Call) and node.op is child):
                            self.other_references.add(child)
                if not (rewritable and isinstance(node, Call) and node.op in self.weights):
                    continue
                positions = tuple(p for p in self.weights[node.op]
                                  if p < len(node.args) and self._convertible(node.args[p]))
                for p in positions:
                    candidate_uses[id(node.args[p])] += 1
                self.sites.append(_Site(node, node.op, positions))
        pinned = {key for key, count in constant_uses.items() if candidate_uses[key] != count}
        for site in self.sites:
            site.positions = tuple(p for p in site.positions if id(site.call.args[p]) not in pinned)

    def _convertible(self, arg: Expr) -> bool:
        if not isinstance(arg, Constant):
            return False
        known = self._accepted.get(id(arg))
        if known is None:  # a weight passed to many calls is checked once
            known = self._accepted[id(arg)] = self.rule.accepts(arg)
        return known


def _converted_function(func: Function, positions: tuple[int, ...], rule: WeightRule) -> Function:
    """``func`` with the parameters at ``positions`` converted, each read through one
    expression shared by its uses."""
    mutator = ExprMutator()
    params = list(func.params)
    for position in positions:
        old = func.params[position]
        params[position], mutator.memo[old] = rule.parameter(old)
    return Function(params, mutator.visit(func.body), func.ret_type, func.attrs)


def _fresh_name(base: str, taken: set[str]) -> str:
    name, counter = base, 0
    while name in taken:
        counter += 1
        name = f"{base}_{counter}"
    taken.add(name)
    return name


class _CallRewriter(ExprMutator):
    """Calls of converted primitive functions: the new callee, converted weights."""

    def __init__(self, targets: dict[int, tuple[GlobalVar, tuple[int, ...]]], rule: WeightRule) -> None:
        self.targets = targets
        self.rule = rule
        self.converted: dict[int, Constant] = {}  # id(constant) -> its conversion, shared

    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        target = self.targets.get(id(call))
        if target is None:
            return new
        callee, positions = target
        args = list(new.args)
        for position in positions:
            args[position] = self._convert(call.args[position])
        return Call(callee, args, new.attrs)

    def convert_all(self, constants: list[Constant]) -> None:
        """Convert ``constants`` ahead of the rewrite, on threads when they are large: a
        conversion is a pure copy of one weight, and numpy's copies run without the GIL,
        so a large model's weights (most of the bytes a compile moves) convert on every
        core the driver has while the workers wait for this module pass."""
        size = sum(constant.data.nbytes for constant in constants)
        threads = min(len(constants), available_cpus(), _CONVERT_THREADS)
        if threads < 2 or size < _PARALLEL_CONVERT_BYTES:
            for constant in constants:
                self._convert(constant)
            return
        with ThreadPool(threads, thread_name_prefix="raypass-weights") as pool:
            futures = [pool.submit(self._converted, constant) for constant in constants]
            converted = [wait_for(future) for future in futures]
        for constant, hit in zip(constants, converted):
            self.converted[id(constant)] = hit

    def _converted(self, constant: Constant) -> Constant:
        hit = self.rule.constant(constant)
        # The conversion read the whole weight; if it lies in the model file's map,
        # its pages would stay resident next to the converted copy (2x the weights
        # in RSS for a model whose weights all convert): the new module no longer
        # needs them, so let the page cache keep them instead of this process.
        release_file_pages(constant.data)
        return hit

    def _convert(self, constant: Constant) -> Constant:
        hit = self.converted.get(id(constant))
        if hit is None:
            hit = self.converted[id(constant)] = self._converted(constant)
        return hit


def rewrite_weight_parameters(mod: IRModule, rule: WeightRule) -> IRModule:
    """``mod`` (after FuseOps) with the weights ``rule`` converts converted (module
    docstring); the same module when none does."""
    plan = _Plan(mod, rule)
    by_callee: dict[GlobalVar, set[tuple[int, ...]]] = {}
    for site in plan.sites:
        by_callee.setdefault(site.callee, set()).add(site.positions)
    taken = {gv.name_hint for gv in mod.functions}
    replaced: dict[GlobalVar, Function] = {}
    added: list[tuple[GlobalVar, Function]] = []
    callee_for: dict[tuple[GlobalVar, tuple[int, ...]], GlobalVar] = {}
    targets: dict[int, tuple[GlobalVar, tuple[int, ...]]] = {}
    for site in plan.sites:  # module order of the callers, evaluation order within each
        if not site.positions:
            continue
        key = (site.callee, site.positions)
        callee = callee_for.get(key)
        if callee is None:
            converted = _converted_function(mod[site.callee], site.positions, rule)
            in_place = by_callee[site.callee] == {site.positions} and site.callee not in plan.other_references
            if in_place:
                callee = site.callee
                replaced[callee] = converted
            else:
                callee = GlobalVar(_fresh_name(f"{site.callee.name_hint}_{rule.suffix}", taken))
                added.append((callee, converted))
            callee_for[key] = callee
        targets[id(site.call)] = (callee, site.positions)
    if not targets:
        return mod
    rewriter = _CallRewriter(targets, rule)
    weights = {id(site.call.args[p]): site.call.args[p] for site in plan.sites for p in site.positions}
    rewriter.convert_all([w for w in weights.values() if isinstance(w, Constant)])
    result = IRModule(attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if gv in replaced:
            result[gv] = replaced[gv]
        elif isinstance(func, Function) and not is_primitive(func) and not skipped(func):
            result[gv] = rewriter.visit(func)
        else:
            result[gv] = func
    for gv, func in added:
        result[gv] = func
    return result
