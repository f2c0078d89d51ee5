"""The work queue of functions no worker holds (scheduler.chunking.WorkQueue): chunks
that shrink as it empties, sized by measured cost, every function handed out once."""

from __future__ import annotations

from scheduler.chunking import MIN_CALL_FUNCTIONS, MIN_CALL_SECONDS, WorkQueue


def _drain(queue: WorkQueue, seconds_per_function: float | None = None) -> list[list[str]]:
    chunks = []
    while queue:
        chunk = queue.next_chunk()
        chunks.append(chunk)
        if seconds_per_function is not None:
            queue.learn(seconds_per_function * len(chunk), len(chunk))
    return chunks


def test_every_function_once_in_queue_order_in_shrinking_chunks():
    names = [f"k{i}" for i in range(197)]
    chunks = _drain(WorkQueue(names, slots=15), seconds_per_function=0.04)  # kernels: 40 ms each
    assert [name for chunk in chunks for name in chunk] == names
    sizes = [len(chunk) for chunk in chunks]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 1  # the last calls are small
    # the first round hands out a fraction of the stage, not all of it: the rest balances
    assert sum(sizes[:15]) < len(names) // 2


def test_cheap_functions_are_batched_once_measured():
    """Sub-millisecond graph functions: once measured, a call carries at least
    MIN_CALL_SECONDS of work (or what is left), so round trips do not dominate."""
    sizes = [len(chunk) for chunk in _drain(WorkQueue([f"f{i}" for i in range(1000)], slots=2), 0.0001)]
    floor = min(MIN_CALL_FUNCTIONS, round(MIN_CALL_SECONDS / 0.0001))
    assert sum(sizes) == 1000 and len(sizes) < 25 and min(sizes[:-1]) >= floor
    # a small stage: the first round (two calls per slot, before any answer) measures
    # it in small chunks; the rest goes in one
    queue = WorkQueue([f"f{i}" for i in range(24)], slots=2)
    first_round = [queue.next_chunk() for _ in range(2 * 2)]
    for chunk in first_round:
        queue.learn(0.0001 * len(chunk), len(chunk))
    assert [len(chunk) for chunk in first_round + _drain(queue)] == [3, 3, 3, 2, 13]


def test_a_batch_size_fixes_the_chunks():
    sizes = [len(chunk) for chunk in _drain(WorkQueue([f"f{i}" for i in range(60)], slots=4, batch_size=25))]
    assert sizes == [25, 25, 10]
