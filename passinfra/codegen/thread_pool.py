"""The library's thread pool: the C runtime that runs the kernels' parallel loops.

Every library links one object made from :func:`pool_source`. A kernel outlines each
``ForKind.PARALLEL`` loop into a chunk function ``int fn(void* ctx, int64_t begin,
int64_t end)`` (see :mod:`passinfra.codegen.c_renderer`) and calls::

    int rp_parallel_for(rp_chunk_fn fn, void* ctx, int64_t extent, int64_t work_per_iteration);

which splits ``[0, extent)`` into one contiguous range (chunk) per thread and returns 0,
or -1 when a chunk failed (a heap allocation). Only independent iterations are ever
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
machine before it claimed a chunk, never holds a loop up: the loop then costs what it
costs on one thread (a worker preempted in the middle of its chunk still does). Then
it spins on a finished-chunk counter of its own cache line (blocking after the spin, for
chunks of long work). The counters each writer updates sit on cache lines of their own.
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
chunks run by worker threads, chunks the caller ran because no worker had claimed them,
and how often a worker blocked).
"""

from __future__ import annotations

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

POOL_SYMBOL = "raypass_thread_pool"
PARALLEL_FOR = "rp_parallel_for"

# what a kernel with parallel loops declares (the pool is another object of the library)
KERNEL_DECLARATIONS = f"""\
typedef int (*rp_chunk_fn)(void* ctx, int64_t begin, int64_t end);
extern int {PARALLEL_FOR}(rp_chunk_fn fn, void* ctx, int64_t extent, int64_t work_per_iteration);"""

_POOL_SOURCE = r"""/* raypass runtime: the thread pool of the kernels' parallel loops */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

typedef int (*rp_chunk_fn)(void* ctx, int64_t begin, int64_t end);

#if defined(__x86_64__) || defined(__i386__)
#define RP_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define RP_PAUSE() __asm__ __volatile__("yield")
#else
#define RP_PAUSE() ((void)0)
#endif

/* hot words that different threads write live on lines of their own (128 bytes: x86's
   adjacent-line prefetcher pairs 64-byte lines) */
#define RP_LINE __attribute__((aligned(128)))
#define RP_RELAXED memory_order_relaxed
#define RP_ACQUIRE memory_order_acquire
#define RP_RELEASE memory_order_release

static int64_t rp_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The job word: sequence number (bits 32-63), chunk count (bits 16-31) and the next
   chunk nobody has claimed (bits 0-15). A thread claims chunk i by a compare-exchange
   from i to i + 1 under the sequence number it read, so nobody ever runs a chunk of a
   job other than the one whose function it loaded, and the caller can run the chunks no
   worker has started (a worker that is asleep or preempted never holds a loop up). */
#define RP_SEQUENCE(word) ((word) >> 32)
#define RP_CHUNKS(word) ((unsigned)((word) >> 16) & 0xffffu)
#define RP_NEXT(word) ((unsigned)(word) & 0xffffu)

static struct {
  /* written by the caller per job, read by the workers: one line, one transfer */
  RP_LINE _Atomic uint64_t job;
  _Atomic(rp_chunk_fn) fn;
  void* _Atomic ctx;
  _Atomic int64_t extent;
  /* written by the workers as chunks finish, read by the caller */
  RP_LINE _Atomic uint64_t finished;
  atomic_int status;
  /* only when a thread blocks: the fast path never takes the lock */
  RP_LINE atomic_int sleepers;    /* workers blocked on wake (or about to) */
  atomic_int caller_waiting;      /* the caller blocked on done (or about to) */
  pthread_mutex_t lock;
  pthread_cond_t wake;
  pthread_cond_t done;
  /* the caller's: taken by the thread running a job on the pool */
  RP_LINE atomic_int busy;
  int workers;       /* worker threads started */
  int initialized;
} rp_pool;

static RP_LINE atomic_int rp_threads = 1;
/* counters: each writer has its own line (callers share one; every worker its own) */
enum { RP_PARALLEL, RP_SERIAL, RP_BUSY, RP_STOLEN };
static RP_LINE _Atomic int64_t rp_caller_stats[4];
static struct { RP_LINE _Atomic int64_t chunks; _Atomic int64_t sleeps; } rp_worker_stats[RP_MAX_THREADS];
static uint64_t rp_worker_start[RP_MAX_THREADS];

int raypass_default_num_threads(void) { return RP_DEFAULT_NUM_THREADS; }

void raypass_set_num_threads(int n) {
  atomic_store(&rp_threads, n < 1 ? 1 : (n > RP_MAX_THREADS ? RP_MAX_THREADS : n));
}

int raypass_get_num_threads(void) { return atomic_load(&rp_threads); }

void raypass_thread_stats(int64_t* out) {
  int64_t chunks = 0, sleeps = 0;
  for (int i = 0; i < RP_MAX_THREADS; ++i) {
    chunks += atomic_load_explicit(&rp_worker_stats[i].chunks, RP_RELAXED);
    sleeps += atomic_load_explicit(&rp_worker_stats[i].sleeps, RP_RELAXED);
  }
  _Static_assert(RP_STATS == 6, "the counters of passinfra.runtime.threads.STATS_FIELDS");
  out[0] = atomic_load(&rp_caller_stats[RP_PARALLEL]);
  out[1] = atomic_load(&rp_caller_stats[RP_SERIAL]);
  out[2] = atomic_load(&rp_caller_stats[RP_BUSY]);
  out[3] = chunks;
  out[4] = atomic_load(&rp_caller_stats[RP_STOLEN]);
  out[5] = sleeps;
}

static void rp_count(int field) { atomic_fetch_add_explicit(&rp_caller_stats[field], 1, RP_RELAXED); }

/* Spin until the job word's sequence number differs from ``seen``: pausing between
   looks for RP_PURE_SPIN_NS, then yielding the core between them until RP_SPIN_NS. The
   last word read (still of sequence ``seen`` when the time ran out) */
static uint64_t rp_spin_for_job(uint64_t seen) {
  const int64_t start = rp_now_ns();
  for (unsigned spins = 1;; ++spins) {
    const uint64_t word = atomic_load_explicit(&rp_pool.job, RP_ACQUIRE);
    if (RP_SEQUENCE(word) != seen) return word;
    RP_PAUSE();
    if ((spins & 15) == 0) {
      const int64_t spent = rp_now_ns() - start;
      if (spent > RP_SPIN_NS) return word;
      if (spent > RP_PURE_SPIN_NS) sched_yield();
    }
  }
}

/* a forked child has no workers (only the forking thread survives a fork): it starts
   its own pool on its first parallel loop, whatever state the parent's was in */
static void rp_after_fork_in_child(void) {
  pthread_mutex_init(&rp_pool.lock, NULL);
  pthread_cond_init(&rp_pool.wake, NULL);
  pthread_cond_init(&rp_pool.done, NULL);
  atomic_store(&rp_pool.sleepers, 0);
  atomic_store(&rp_pool.caller_waiting, 0);
  rp_pool.workers = 0;
  atomic_store(&rp_pool.busy, 0);
}

/* wake one blocked worker (the job word was stored before): it wakes the next one if
   the job has chunks left, so the caller pays for one wake-up, not one per worker */
static void rp_wake_one(void) {
  pthread_mutex_lock(&rp_pool.lock);
  pthread_cond_signal(&rp_pool.wake);
  pthread_mutex_unlock(&rp_pool.lock);
}

static void* rp_worker(void* arg) {
  const unsigned index = (unsigned)(uintptr_t)arg;
  uint64_t seen = rp_worker_start[index];
  for (;;) {
    uint64_t word = rp_spin_for_job(seen);
    if (RP_SEQUENCE(word) == seen) {
      pthread_mutex_lock(&rp_pool.lock);
      atomic_fetch_add(&rp_pool.sleepers, 1);
      while (RP_SEQUENCE(word = atomic_load(&rp_pool.job)) == seen) {
        atomic_fetch_add_explicit(&rp_worker_stats[index].sleeps, 1, RP_RELAXED);
        pthread_cond_wait(&rp_pool.wake, &rp_pool.lock);
      }
      atomic_fetch_sub(&rp_pool.sleepers, 1);
      pthread_mutex_unlock(&rp_pool.lock);
      /* chunks for more than this worker: wake the next sleeper */
      if (RP_NEXT(word) + 1 < RP_CHUNKS(word) && atomic_load(&rp_pool.sleepers) > 0) rp_wake_one();
    }
    seen = RP_SEQUENCE(word);
    while (RP_SEQUENCE(word) == seen && RP_NEXT(word) < RP_CHUNKS(word)) {
      const rp_chunk_fn fn = atomic_load_explicit(&rp_pool.fn, RP_RELAXED);
      void* const ctx = atomic_load_explicit(&rp_pool.ctx, RP_RELAXED);
      const int64_t extent = atomic_load_explicit(&rp_pool.extent, RP_RELAXED);
      if (!atomic_compare_exchange_weak(&rp_pool.job, &word, word + 1)) continue;  /* word reloaded */
      const int64_t chunks = RP_CHUNKS(word), chunk = RP_NEXT(word);
      if (fn(ctx, extent * chunk / chunks, extent * (chunk + 1) / chunks) != 0)
        atomic_store(&rp_pool.status, -1);
      atomic_fetch_add_explicit(&rp_worker_stats[index].chunks, 1, RP_RELAXED);
      atomic_fetch_add(&rp_pool.finished, 1);
      if (atomic_load(&rp_pool.caller_waiting)) {
        pthread_mutex_lock(&rp_pool.lock);
        pthread_cond_signal(&rp_pool.done);
        pthread_mutex_unlock(&rp_pool.lock);
      }
      word = atomic_load_explicit(&rp_pool.job, RP_ACQUIRE);
    }
  }
  return NULL;
}

/* start workers up to ``wanted`` threads in all (the caller holds busy: no job is
   running); how many threads a job can use */
static int rp_start_workers(int wanted) {
  if (!rp_pool.initialized) {
    pthread_mutex_init(&rp_pool.lock, NULL);
    pthread_cond_init(&rp_pool.wake, NULL);
    pthread_cond_init(&rp_pool.done, NULL);
    if (pthread_atfork(NULL, NULL, rp_after_fork_in_child) != 0) return 1;
    rp_pool.initialized = 1;
  }
  while (rp_pool.workers < wanted - 1) {
    const int index = rp_pool.workers + 1;
    rp_worker_start[index] = RP_SEQUENCE(atomic_load(&rp_pool.job));
    pthread_attr_t attr;
    pthread_t thread;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const int failed = pthread_create(&thread, &attr, rp_worker, (void*)(uintptr_t)index);
    pthread_attr_destroy(&attr);
    if (failed) break;
    rp_pool.workers = index;
  }
  return rp_pool.workers + 1;
}

/* wait until the workers finished ``target`` chunks: spin, yield, then block */
static void rp_wait_finished(uint64_t target) {
  if (atomic_load_explicit(&rp_pool.finished, RP_ACQUIRE) == target) return;
  /* the workers it waits for are running chunks: if one was preempted onto the caller's
     core, only a yield lets it finish there, so the caller yields early */
  const int64_t start = rp_now_ns();
  for (unsigned spins = 1; atomic_load_explicit(&rp_pool.finished, RP_ACQUIRE) != target; ++spins) {
    RP_PAUSE();
    if ((spins & 15) == 0) {
      const int64_t spent = rp_now_ns() - start;
      if (spent > RP_SPIN_NS) break;
      if (spent > RP_CALLER_PURE_SPIN_NS) sched_yield();
    }
  }
  if (atomic_load(&rp_pool.finished) == target) return;
  pthread_mutex_lock(&rp_pool.lock);
  atomic_store(&rp_pool.caller_waiting, 1);
  while (atomic_load(&rp_pool.finished) != target) pthread_cond_wait(&rp_pool.done, &rp_pool.lock);
  atomic_store(&rp_pool.caller_waiting, 0);
  pthread_mutex_unlock(&rp_pool.lock);
}

int rp_parallel_for(rp_chunk_fn fn, void* ctx, int64_t extent, int64_t work_per_iteration) {
  int64_t threads = atomic_load_explicit(&rp_threads, RP_RELAXED);
  const int64_t work = work_per_iteration > 0 ? work_per_iteration : 1;
  const int64_t by_work = extent > INT64_MAX / work ? INT64_MAX : extent * work / RP_MIN_WORK;
  if (threads > extent) threads = extent;
  if (threads > by_work) threads = by_work;
  if (threads <= 1) {
    rp_count(RP_SERIAL);
    return extent > 0 ? fn(ctx, 0, extent) : 0;
  }
  if (atomic_exchange_explicit(&rp_pool.busy, 1, RP_ACQUIRE) != 0) {
    rp_count(RP_BUSY);
    return fn(ctx, 0, extent);
  }
  const int available = rp_start_workers((int)threads);
  if (threads > available) threads = available;
  if (threads <= 1) {
    atomic_store_explicit(&rp_pool.busy, 0, RP_RELEASE);
    rp_count(RP_SERIAL);
    return fn(ctx, 0, extent);
  }
  rp_count(RP_PARALLEL);
  atomic_store_explicit(&rp_pool.fn, fn, RP_RELAXED);
  atomic_store_explicit(&rp_pool.ctx, ctx, RP_RELAXED);
  atomic_store_explicit(&rp_pool.extent, extent, RP_RELAXED);
  atomic_store_explicit(&rp_pool.finished, 0, RP_RELAXED);
  atomic_store_explicit(&rp_pool.status, 0, RP_RELAXED);
  const uint64_t sequence = RP_SEQUENCE(atomic_load_explicit(&rp_pool.job, RP_RELAXED)) + 1;
  /* chunk 0 is the caller's from the start */
  uint64_t word = (sequence << 32) | ((uint64_t)threads << 16) | 1u;
  atomic_store(&rp_pool.job, word);  /* sequentially consistent: against sleepers below */
  if (atomic_load(&rp_pool.sleepers) > 0) rp_wake_one();
  int status = fn(ctx, 0, extent / threads);
  /* run here the chunks no worker has claimed yet */
  uint64_t mine = 1;
  word = atomic_load_explicit(&rp_pool.job, RP_RELAXED);
  while (RP_NEXT(word) < (unsigned)threads) {
    if (!atomic_compare_exchange_weak(&rp_pool.job, &word, word + 1)) continue;
    const int64_t chunk = RP_NEXT(word);
    if (fn(ctx, extent * chunk / threads, extent * (chunk + 1) / threads) != 0) status = -1;
    ++mine;
    rp_count(RP_STOLEN);
    word = atomic_load_explicit(&rp_pool.job, RP_RELAXED);
  }
  rp_wait_finished((uint64_t)threads - mine);
  if (atomic_load_explicit(&rp_pool.status, RP_RELAXED) != 0) status = -1;
  atomic_store_explicit(&rp_pool.busy, 0, RP_RELEASE);
  return status;
}
"""


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
    defines = [
        f"#define RP_DEFAULT_NUM_THREADS {int(default_threads)}",
        f"#define RP_MAX_THREADS {MAX_THREADS}",
        f"#define RP_MIN_WORK {int(min_work)}",
        f"#define RP_SPIN_NS {int(spin_microseconds) * 1000}",
        f"#define RP_PURE_SPIN_NS {min(int(pause_only_microseconds), int(spin_microseconds)) * 1000}",
        f"#define RP_CALLER_PURE_SPIN_NS {CALLER_PAUSE_ONLY_MICROSECONDS * 1000}",
        f"#define RP_STATS {len(STATS_FIELDS)}",
    ]
    return "\n".join(defines) + "\n" + _POOL_SOURCE


__all__ = [
    "DEFAULT_NUM_THREADS", "KERNEL_DECLARATIONS", "MAX_THREADS", "MIN_WORK_PER_THREAD", "PARALLEL_FOR",
    "PAUSE_ONLY_MICROSECONDS",
    "POOL_SYMBOL", "SPIN_MICROSECONDS", "STATS_FIELDS", "min_parallel_work", "pool_source",
]
