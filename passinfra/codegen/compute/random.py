"""Random ops have no compute rule.

``random.uniform`` is stateful: its values come from the NumPy generator of the process
that runs it, and no loop nest can reproduce those draws, so compiled code could never
agree with the interpreter. Rather than a silent stand-in, lowering a primitive function
that calls it fails with an error naming the op and this reason (see
:func:`missing_rule_reason`). A deterministic generator (a counter-based hash keyed by
a seed attr) could be registered as its rule later with ``Op.set_attr("compute", ...)``.
"""

from __future__ import annotations

# op name -> why the op is deliberately left without a compute rule
NO_COMPUTE_RULE: dict[str, str] = {
    "random.uniform": "it is stateful: its draws come from the interpreter's NumPy generator, "
                      "which no compiled loop nest can reproduce",
}


def missing_rule_reason(op_name: str) -> str | None:
    """Why ``op_name`` has no compute rule on purpose, or None if nobody said."""
    return NO_COMPUTE_RULE.get(op_name)
