"""The library's thread pool: the C runtime that runs the kernels' parallel loops.

Every library links one object made from :func:`pool_source`. A kernel outlines each
``ForKind.PARALLEL`` loop into a chunk function ``int fn(void* ctx, int64_t begin,
int64_t end)`` (see :mod:`passinfra.codegen.c_renderer`) and calls::

    int rp_parallel_for(rp_chunk_fn fn, void* ctx, int64_t extent, int64_t work_per_iteration);

which splits ``[0, extent)`` into one contiguous range per thread and returns 0, or -1
when a chunk failed (a heap allocation). Only independent iterations are ever split
(:mod:`passinfra.codegen.transform.parallelize` proves it), so the result never depends
on the number of threads.

Why a pool of our own rather than OpenMP (measured in ``bench/results_threads.md``):
the thread count is one value per library that ``lib.set_num_threads`` changes at any
time, from any Python thread (OpenMP's is a setting of each calling thread); a forked
child (Python's multiprocessing, a Ray worker) starts a fresh pool instead of hanging in
libgomp's inherited one; workers block after a short, yielding spin instead of libgomp's
long one, so idle threads do not take cores from other processes; and no OpenMP runtime
is loaded into the caller's process, where it could meet another one.

How many threads a loop gets is decided at run time: at most the configured count,
at most one per iteration, and at most one per :data:`MIN_WORK_PER_THREAD` units of
work (``extent * work_per_iteration``, the estimate the parallelize pass made), so a
small loop runs in the calling thread without waking anyone. A loop entered while the
pool runs another one (a second Python thread calling the library) runs serially in its
own thread rather than waiting.

Exported for the runtime (:mod:`passinfra.runtime.module`):
``raypass_set_num_threads(int)``, ``raypass_get_num_threads()``,
``raypass_default_num_threads()`` (config ``codegen.num_threads``; 0 means "every CPU
the process may use", which the runtime works out) and ``raypass_thread_stats(int64_t*
out)``: counters of parallel loops run on the pool, loops run serially (too little work,
one thread, or the pool busy) and chunks run by worker threads.
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
# for a loop to be split: handing a loop to an awake worker costs 1-3 us (the loops of an
# inference come back to back, so the workers are awake); 16_000 left the zoo
# transformer at 1.5x on two cores, 8_000 and 4_000 gave 1.8x
MIN_WORK_PER_THREAD = 8_000
# microseconds a worker spins for the next loop (and the caller for the workers) before
# blocking: the parallel loops of one inference come back to back, so the workers are
# found awake (a blocked worker takes 5-20 us to wake, far more on a loaded machine),
# while an idle pool gives its cores back soon (libgomp spins for milliseconds by
# default). The spin yields the core every few microseconds: on a machine shared with
# other processes a pure spin was preempted and cost ~100 us per loop, a yielding one ~8
SPIN_MICROSECONDS = 100

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
#include <unistd.h>

typedef int (*rp_chunk_fn)(void* ctx, int64_t begin, int64_t end);

#if defined(__x86_64__) || defined(__i386__)
#define RP_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define RP_PAUSE() __asm__ __volatile__("yield")
#else
#define RP_PAUSE() ((void)0)
#endif

static int64_t rp_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* spin (pausing) while *word == value, for at most RP_SPIN_NS; whether it changed */
static int rp_spin_while_equal(_Atomic uint64_t* word, uint64_t value) {
  const int64_t deadline = rp_now_ns() + RP_SPIN_NS;
  for (unsigned spins = 1; atomic_load(word) == value; ++spins) {
    RP_PAUSE();
    if ((spins & 63) == 0) {
      if (rp_now_ns() > deadline) return 0;
      sched_yield();
    }
  }
  return 1;
}

/* spin while *word != 0, for at most RP_SPIN_NS; whether it reached 0 */
static int rp_spin_while_not_zero(_Atomic uint64_t* word) {
  const int64_t deadline = rp_now_ns() + RP_SPIN_NS;
  for (unsigned spins = 1; atomic_load(word) != 0; ++spins) {
    RP_PAUSE();
    if ((spins & 63) == 0) {
      if (rp_now_ns() > deadline) return 0;
      sched_yield();
    }
  }
  return 1;
}

/* the job word: a sequence number (bits 16 and up) and the job's thread count (low 16
   bits), read in one load, so a worker never mixes one job's count with another's */
#define RP_THREADS_MASK 0xffffu

static struct {
  pthread_mutex_t lock;   /* guards waiting and waking */
  pthread_cond_t wake;    /* workers wait here for the next job */
  pthread_cond_t done;    /* the caller waits here for the workers */
  pthread_mutex_t busy;   /* held by the thread running a job on the pool */
  int workers;            /* worker threads started (workers 1..workers) */
  rp_chunk_fn fn;         /* the current job, written before the job word */
  void* ctx;
  int64_t extent;
  _Atomic uint64_t job;
  _Atomic uint64_t pending;  /* workers of the current job not finished yet */
  atomic_int status;
} rp_pool;

/* (pid << 1) | ready: the process the pool state belongs to. A forked child finds its
   parent's pid here: the workers did not survive the fork, so it starts a new pool */
static _Atomic int64_t rp_owner;
static atomic_int rp_threads = 1;
static _Atomic int64_t rp_stats[RP_STATS];
static uint64_t rp_worker_seen[RP_MAX_THREADS];

int raypass_default_num_threads(void) { return RP_DEFAULT_NUM_THREADS; }

void raypass_set_num_threads(int n) {
  atomic_store(&rp_threads, n < 1 ? 1 : (n > RP_MAX_THREADS ? RP_MAX_THREADS : n));
}

int raypass_get_num_threads(void) { return atomic_load(&rp_threads); }

void raypass_thread_stats(int64_t* out) {
  for (int i = 0; i < RP_STATS; ++i) out[i] = atomic_load(&rp_stats[i]);
}

static int rp_pool_usable(void) {
  const int64_t me = (int64_t)getpid();
  int64_t owner = atomic_load(&rp_owner);
  if ((owner >> 1) == me) return (int)(owner & 1);
  /* first use in this process: exactly one thread sets the pool up (others run serially) */
  if (!atomic_compare_exchange_strong(&rp_owner, &owner, me << 1)) return 0;
  pthread_mutex_init(&rp_pool.lock, NULL);
  pthread_mutex_init(&rp_pool.busy, NULL);
  pthread_cond_init(&rp_pool.wake, NULL);
  pthread_cond_init(&rp_pool.done, NULL);
  rp_pool.workers = 0;
  atomic_store(&rp_pool.job, 0);
  atomic_store(&rp_owner, (me << 1) | 1);
  return 1;
}

static void* rp_worker(void* arg) {
  const unsigned index = (unsigned)(uintptr_t)arg;
  uint64_t seen = rp_worker_seen[index];
  for (;;) {
    if (!rp_spin_while_equal(&rp_pool.job, seen)) {
      pthread_mutex_lock(&rp_pool.lock);
      while (atomic_load(&rp_pool.job) == seen) pthread_cond_wait(&rp_pool.wake, &rp_pool.lock);
      pthread_mutex_unlock(&rp_pool.lock);
    }
    const uint64_t job = atomic_load(&rp_pool.job);
    seen = job;
    const unsigned threads = (unsigned)(job & RP_THREADS_MASK);
    if (index >= threads) continue;
    const int64_t extent = rp_pool.extent;
    const int64_t begin = extent * index / threads, end = extent * (index + 1) / threads;
    if (begin < end && rp_pool.fn(rp_pool.ctx, begin, end) != 0) atomic_store(&rp_pool.status, -1);
    atomic_fetch_add(&rp_stats[3], 1);
    if (atomic_fetch_sub(&rp_pool.pending, 1) == 1) {
      pthread_mutex_lock(&rp_pool.lock);
      pthread_cond_signal(&rp_pool.done);
      pthread_mutex_unlock(&rp_pool.lock);
    }
  }
  return NULL;
}

/* start workers up to ``wanted`` (the caller holds busy: no job is running); the
   number of threads a job can use */
static int rp_start_workers(int wanted) {
  while (rp_pool.workers < wanted - 1) {
    const int index = rp_pool.workers + 1;
    rp_worker_seen[index] = atomic_load(&rp_pool.job);
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

int rp_parallel_for(rp_chunk_fn fn, void* ctx, int64_t extent, int64_t work_per_iteration) {
  int64_t threads = atomic_load(&rp_threads);
  const int64_t by_work = extent * (work_per_iteration > 0 ? work_per_iteration : 1) / RP_MIN_WORK;
  if (threads > extent) threads = extent;
  if (threads > by_work) threads = by_work;
  if (threads <= 1) {
    atomic_fetch_add(&rp_stats[1], 1);
    return extent > 0 ? fn(ctx, 0, extent) : 0;
  }
  if (!rp_pool_usable() || pthread_mutex_trylock(&rp_pool.busy) != 0) {
    atomic_fetch_add(&rp_stats[2], 1);
    return fn(ctx, 0, extent);
  }
  const int available = rp_start_workers((int)threads);
  if (threads > available) threads = available;
  if (threads <= 1) {
    pthread_mutex_unlock(&rp_pool.busy);
    atomic_fetch_add(&rp_stats[1], 1);
    return fn(ctx, 0, extent);
  }
  atomic_fetch_add(&rp_stats[0], 1);
  pthread_mutex_lock(&rp_pool.lock);
  rp_pool.fn = fn;
  rp_pool.ctx = ctx;
  rp_pool.extent = extent;
  atomic_store(&rp_pool.status, 0);
  atomic_store(&rp_pool.pending, (uint64_t)threads - 1);
  const uint64_t sequence = (atomic_load(&rp_pool.job) >> 16) + 1;
  atomic_store(&rp_pool.job, (sequence << 16) | (uint64_t)threads);
  pthread_cond_broadcast(&rp_pool.wake);
  pthread_mutex_unlock(&rp_pool.lock);
  int status = fn(ctx, 0, extent / threads);
  if (atomic_load(&rp_pool.pending) != 0 && !rp_spin_while_not_zero(&rp_pool.pending)) {
    pthread_mutex_lock(&rp_pool.lock);
    while (atomic_load(&rp_pool.pending) != 0) pthread_cond_wait(&rp_pool.done, &rp_pool.lock);
    pthread_mutex_unlock(&rp_pool.lock);
  }
  if (atomic_load(&rp_pool.status) != 0) status = -1;
  pthread_mutex_unlock(&rp_pool.busy);
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
                min_work: int = MIN_WORK_PER_THREAD) -> str:
    """The C source of the pool object; ``default_threads`` is what
    ``raypass_default_num_threads()`` returns (0: every CPU the process may use),
    ``min_work`` the work a thread must get (config ``codegen.min_parallel_work``)."""
    defines = [
        f"#define RP_DEFAULT_NUM_THREADS {int(default_threads)}",
        f"#define RP_MAX_THREADS {MAX_THREADS}",
        f"#define RP_MIN_WORK {int(min_work)}",
        f"#define RP_SPIN_NS {int(spin_microseconds) * 1000}",
        f"#define RP_STATS {len(STATS_FIELDS)}",
    ]
    return "\n".join(defines) + "\n" + _POOL_SOURCE


__all__ = [
    "DEFAULT_NUM_THREADS", "KERNEL_DECLARATIONS", "MAX_THREADS", "MIN_WORK_PER_THREAD", "PARALLEL_FOR",
    "POOL_SYMBOL", "SPIN_MICROSECONDS", "STATS_FIELDS", "min_parallel_work", "pool_source",
]
