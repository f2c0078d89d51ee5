"""In-model kernel profiles: how long each kernel call takes inside a run of the model.

A kernel timed alone runs on warm caches: its weights and inputs are where its previous
repeat left them. Inside the model it reads what the calls before it wrote and weights
nothing has touched since the last run, so a model's time is not the sum of its kernels
timed alone (a RegNetX-like model here: its kernels alone 4.8 ms, the model 5.9 ms).
Every library's host can time its calls where they run (``raypass_profile`` in
:mod:`passinfra.codegen.host`); :meth:`passinfra.runtime.module.Module.profile` runs the
model with it and returns a :class:`KernelProfile`, the figure to set beside
onnxruntime's per-node profile.

The clock is read twice a call (a few tens of nanoseconds), nothing else changes: the same
kernels, threads and workspace as an ordinary call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# the host's hook, ``void raypass_profile(int64_t* ns)``: while ``ns`` is set, the calling
# thread's runs add each kernel call's nanoseconds to ``ns[step]``
PROFILE_SYMBOL = "raypass_profile"


@dataclass(frozen=True)
class CallTime:
    """One call of main's: its position, the kernel it runs, its median seconds a run and
    that median's share of the run."""

    step: int
    kernel: str
    seconds: float
    share: float


@dataclass(frozen=True)
class KernelProfile:
    """``call_ns[r, s]``: nanoseconds of call ``s`` in run ``r``; ``run_seconds[r]``: that
    whole run as the caller saw it (the host's loop and the runtime's checks included)."""

    kernels: tuple[str, ...]
    call_ns: np.ndarray
    run_seconds: tuple[float, ...]

    @property
    def runs(self) -> int:
        return len(self.run_seconds)

    @property
    def run_median(self) -> float:
        return float(np.median(self.run_seconds))

    @property
    def kernel_median(self) -> float:
        """The median over runs of the calls' summed time: the run less the host's loop,
        the argument checks and the outputs' allocation."""
        return float(np.median(self.call_ns.sum(axis=1))) * 1e-9

    def calls(self) -> list[CallTime]:
        """Every call, in the order main makes them."""
        medians = np.median(self.call_ns, axis=0) * 1e-9
        total = self.run_median or 1.0
        return [CallTime(step, kernel, float(seconds), float(seconds) / total)
                for step, (kernel, seconds) in enumerate(zip(self.kernels, medians))]

    def slowest(self, count: int) -> list[CallTime]:
        """The ``count`` slowest calls, slowest first (ties in call order)."""
        return sorted(self.calls(), key=lambda call: (-call.seconds, call.step))[:count]

    def by_kernel(self) -> dict[str, float]:
        """Median seconds a run of each kernel, summed over the calls that run it."""
        totals: dict[str, float] = {}
        for call in self.calls():
            totals[call.kernel] = totals.get(call.kernel, 0.0) + call.seconds
        return totals


__all__ = ["PROFILE_SYMBOL", "CallTime", "KernelProfile"]
