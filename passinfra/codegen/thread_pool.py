"""The library's thread pool: the C runtime that runs the kernels' parallel loops.

Every library links one object made from :func:`pool_source` (the C of ``c/thread_pool.c``
after the macros of :func:`pool_defines`). A kernel outlines each
``ForKind.PARALLEL`` loop into a chunk function ``int fn(void* ctx, int64_t begin,
int64_t end)`` (see :mod:`passinfra.codegen.c_renderer`) and calls::

    int rp_parallel_for(rp_chunk_fn fn, void* ctx, int64_t extent, int64_t work_per_iteration);

which splits ``[0, extent)`` into contiguous ranges (chunks), a few per thread, and returns
0, or -1 when a chunk failed (a heap allocation). Only independent iterations are ever
split (:mod:`passinfra.codegen.transform.parallelize` proves it), so the result never
depends on the number of threads, nor on which thread runs which chunk.

Why a pool of our own rather than OpenMP (measured in ``bench/results_threads.md``):
the thread count is one value per library that ``lib.set_num_threads`` changes at any
time, from any Python thread (OpenMP's is a setting of each calling thread); a forked
child (Python's multiprocessing, a Ray worker) starts a fresh pool instead of hanging in
libgomp's inherited one; workers block after a short spin instead of libgomp's long one,
so idle threads do not take cores from other processes; and no OpenMP runtime is loaded
into the caller's process, where it could meet another one.

How a loop runs (the fork-join is what a small model pays per loop, dozens of times a
call): the caller publishes the job in one word (sequence number, chunk count, next
unclaimed chunk) next to the function, context and extent, on one cache line; it keeps
chunk 0 for itself, and a worker claims a chunk by a compare-exchange of that word.
Workers spin on the word (pausing only, then yielding, then blocking on a condition
variable; the lock is taken only by a thread that blocks and by a caller that finds
one blocked). When its own chunk is done the caller runs every chunk no worker has
claimed yet, so a worker that is asleep, or preempted by another process on a shared
machine before it claimed a chunk, never holds a loop up (one preempted in the middle of
its chunk still does). A loop has :data:`CHUNKS_PER_THREAD` chunks a thread (each of at
least half of :data:`MIN_WORK_PER_THREAD`), and each thread owns a contiguous range of
them (its own cache line): it claims from the front of its range, then from the back of
the others'. On time, every thread runs its range, contiguous work as one chunk a thread
was; a worker that starts late (woken from its block: 5-20 us here, more on a loaded
machine) or runs slowly (preempted, or sharing its core) has the end of its range taken
by the others instead of the loop waiting for it. Then the caller spins on a
finished-chunk counter of its own cache line (blocking after the spin, for chunks of long
work). The counters each writer updates sit on cache lines of their own.
A forked child gets a fresh pool from a ``pthread_atfork`` handler (the loop itself no
longer asks for the process id, a system call per loop).

How many threads a loop gets is decided at run time: at most the configured count,
at most one per iteration, and at most one per :data:`MIN_WORK_PER_THREAD` units of
work (``extent * work_per_iteration``, the estimate the parallelize pass made), so a
small loop runs in the calling thread without waking anyone. A loop entered while the
pool runs another one (a second Python thread calling the library, or a parallel loop
inside a chunk) runs serially in its own thread rather than waiting.

Exported for the runtime (:mod:`passinfra.runtime.module`):
``raypass_set_num_threads(int)``, ``raypass_get_num_threads()``,
``raypass_default_num_threads()`` (config ``codegen.num_threads``; 0 means "every CPU
the process may use", which the runtime works out) and ``raypass_thread_stats(int64_t*
out)``: the counters of :data:`~passinfra.runtime.threads.STATS_FIELDS` (loops run on
the pool, loops run serially (too little work, one thread) or because the pool was busy,
chunks run by worker threads, chunks the caller took from the workers' ranges, and how
often a worker blocked).
"""

from __future__ import annotations

from passinfra.codegen.c import read_c_file
from passinfra.runtime.threads import MAX_THREADS, STATS_FIELDS
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.errors import PassConfigError

# codegen.num_threads (int): threads of the library's parallel loops by default; 0 (the
# default) means every CPU the process may use (affinity mask and cgroup CPU quota,
# see passinfra.runtime.cpus). lib.set_num_threads(n) changes it at run time.
register_config("codegen.num_threads", int)
# codegen.min_parallel_work (int): work units (about a nanosecond of one core each) a
# thread must get for a loop to be split (default MIN_WORK_PER_THREAD); read by the
# Parallelize pass and built into the pool. Tests set 1 to split every independent loop.
register_config("codegen.min_parallel_work", int)

DEFAULT_NUM_THREADS = 0
# work units (about a nanosecond of one core each, see parallelize.py) a thread must get
# for a loop to be split: handing a loop to an awake worker costs ~0.3 us (harness of
# bench/threads.py, 2 cores; it was 6 us before the lock-free fork-join), to a blocked one
# the caller's futex wake, ~7 us on this VM (its chunk then usually runs on the caller).
# 16_000 left the zoo transformer at 1.5x on two cores, 8_000 and 4_000 gave 1.8x. With
# the cheaper fork-join, interleaved on 2 cores: 4_000 against 8_000 gave the zoo
# transformer 1.90x against 1.83x, MobileNetV3-like and resnet20 the same (1.76x, 1.0x);
# within the noise of a shared machine, and the copy loops that a lower threshold splits
# are estimated well above their cost, so it stays at 8_000
MIN_WORK_PER_THREAD = 8_000
# microseconds a worker spins for the next loop (and the caller for the workers' chunks)
# before blocking: the parallel loops of one inference come close together, so the
# workers are found awake (a blocked worker takes 5-20 us to wake, far more on a loaded
# machine; the caller runs its chunk meanwhile), while an idle pool gives its cores back
# soon (libgomp spins for milliseconds by default)
SPIN_MICROSECONDS = 100
# of which the first PAUSE_ONLY_MICROSECONDS only pause between looks (a loop that comes
# right after another finds the worker within ~0.1 us); after that the spinning worker
# yields its core between looks (~1 us to notice a job), so that on a machine shared with
# other processes they get the core, and above all the caller does when the worker was
# placed on the caller's core: a worker pausing there for 20 us at every gap between
# loops takes that time from the caller (the likely cause of the zoo transformer running
# 1.5x slower on 2 threads than on 1 when another process held the other core, with 20
# us). Interleaved on free cores, 5 against 20: the transformer
# 1.85x against 1.79x its one-thread speed, MobileNetV3-like 1.85x against 1.78x
PAUSE_ONLY_MICROSECONDS = 5
# the caller waiting for the workers' chunks yields sooner: a worker preempted onto the
# caller's core while it runs a chunk can only finish when the caller lets it
CALLER_PAUSE_ONLY_MICROSECONDS = 5

# chunks a loop is cut into per thread (its range). With one chunk a thread, loops of small
# models on two threads waited for a worker woken late or slowed: a 3x3 convolution
# 32->128 at 27x27 ran 1.26x faster on two threads than on one in one run, 2x in another
# (the worker had blocked between runs in the first). Whole models on two threads, this
# pool against one chunk a thread, two builds each, interleaved, in bench.vs_onnxruntime's
# regime (blocks of 50 ms of calls after a 50 ms idle gap, medians of 12 block medians):
# SqueezeNet 0.90-0.93, RegNetX-like 0.91-0.97, MobileNetV3-like 0.95-0.98,
# EfficientNet-B0-like 0.97, U-Net-like 0.94-1.02, CRNN-like 0.98-1.00; back to back
# (no idle gap): MobileNetV3-like 0.85-0.86, CRNN-like 0.88-0.98, RegNetX-like,
# SqueezeNet, ResNet-50 and the zoo transformer 0.98-1.04. Chunks claimed in order from
# one counter instead (no ranges) cost RegNetX-like 1.07-1.13 back to back: every thread
# then ran every other part of each convolution
CHUNKS_PER_THREAD = 4

POOL_SYMBOL = "raypass_thread_pool"
PARALLEL_FOR = "rp_parallel_for"

# what a kernel with parallel loops declares (the pool is another object of the library)
KERNEL_DECLARATIONS = f"""\
typedef int (*rp_chunk_fn)(void* ctx, int64_t begin, int64_t end);
extern int {PARALLEL_FOR}(rp_chunk_fn fn, void* ctx, int64_t extent, int64_t work_per_iteration);"""

_POOL_SOURCE = read_c_file("thread_pool.c")  # after pool_defines()


def min_parallel_work(ctx: PassContext | None = None) -> int:
    """Config ``codegen.min_parallel_work``, checked (at least 1)."""
    ctx = PassContext.current() if ctx is None else ctx
    work = ctx.get_config("codegen.min_parallel_work", MIN_WORK_PER_THREAD)
    if work < 1:
        raise PassConfigError(f"config 'codegen.min_parallel_work' must be at least 1, got {work}")
    return work


def pool_source(default_threads: int = DEFAULT_NUM_THREADS, spin_microseconds: int = SPIN_MICROSECONDS,
                min_work: int = MIN_WORK_PER_THREAD,
                pause_only_microseconds: int = PAUSE_ONLY_MICROSECONDS) -> str:
    """The C source of the pool object; ``default_threads`` is what
    ``raypass_default_num_threads()`` returns (0: every CPU the process may use),
    ``min_work`` the work a thread must get (config ``codegen.min_parallel_work``);
    spinning threads block after ``spin_microseconds`` and yield their core between
    looks after ``pause_only_microseconds``."""
    defines = pool_defines(default_threads, spin_microseconds, min_work, pause_only_microseconds)
    return "".join(f"#define {name} {value}\n" for name, value in defines.items()) + _POOL_SOURCE


def pool_defines(default_threads: int = DEFAULT_NUM_THREADS, spin_microseconds: int = SPIN_MICROSECONDS,
                 min_work: int = MIN_WORK_PER_THREAD,
                 pause_only_microseconds: int = PAUSE_ONLY_MICROSECONDS) -> dict[str, int]:
    """The macros ``c/thread_pool.c`` needs (see :func:`pool_source`)."""
    return {
        "RP_DEFAULT_NUM_THREADS": int(default_threads),
        "RP_MAX_THREADS": MAX_THREADS,
        "RP_MIN_WORK": int(min_work),
        "RP_SPIN_NS": int(spin_microseconds) * 1000,
        "RP_PURE_SPIN_NS": min(int(pause_only_microseconds), int(spin_microseconds)) * 1000,
        "RP_CALLER_PURE_SPIN_NS": CALLER_PAUSE_ONLY_MICROSECONDS * 1000,
        "RP_STATS": len(STATS_FIELDS),
        "RP_CHUNKS_PER_THREAD": CHUNKS_PER_THREAD,
        "RP_MIN_CHUNK_WORK": max(1, int(min_work) // 2),
    }


__all__ = [
    "CHUNKS_PER_THREAD", "DEFAULT_NUM_THREADS", "KERNEL_DECLARATIONS", "MAX_THREADS", "MIN_WORK_PER_THREAD",
    "PARALLEL_FOR", "PAUSE_ONLY_MICROSECONDS",
    "POOL_SYMBOL", "SPIN_MICROSECONDS", "STATS_FIELDS", "min_parallel_work", "pool_defines", "pool_source",
]
