/* raypass runtime: the thread pool of the kernels' parallel loops */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#if !defined(RP_DEFAULT_NUM_THREADS) || !defined(RP_MAX_THREADS) || !defined(RP_MIN_WORK) || \
    !defined(RP_SPIN_NS) || !defined(RP_PURE_SPIN_NS) || !defined(RP_CALLER_PURE_SPIN_NS) || !defined(RP_STATS) || \
    !defined(RP_CHUNKS_PER_THREAD) || !defined(RP_MIN_CHUNK_WORK)
#error "the tunables come from passinfra/codegen/thread_pool.py (pool_defines), or -D on the command line"
#endif

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

/* The job word: sequence number (bits 32-63), chunk count (bits 16-31) and thread count
   (bits 0-15). Each thread t of the job (the caller is 0, worker i is i) owns a
   contiguous range of the chunks, t*C/T .. (t+1)*C/T, in a range word of its own:
   sequence number, first unclaimed chunk (bits 16-31), end (bits 0-15). A thread claims
   from the front of its own range, and when that is empty from the back of another's,
   each by a compare-exchange under the job's sequence number: nobody ever runs a chunk of
   a job other than the one whose function it loaded, a thread's chunks are contiguous
   work as long as nobody is late (what one chunk a thread gave), and the chunks of a
   thread that is asleep, preempted or slowed by another process are taken by the others
   (one chunk a thread left the loop waiting for it). */
#define RP_SEQUENCE(word) ((word) >> 32)
#define RP_CHUNKS(word) ((unsigned)((word) >> 16) & 0xffffu)
#define RP_JOB_THREADS(word) ((int)((word) & 0xffffu))
#define RP_FRONT(word) ((unsigned)((word) >> 16) & 0xffffu)
#define RP_BACK(word) ((unsigned)(word) & 0xffffu)

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
/* each thread's range of the current job's chunks (see the job word) */
static struct { RP_LINE _Atomic uint64_t word; } rp_ranges[RP_MAX_THREADS];

/* A chunk of job ``sequence`` for thread ``own`` of ``threads``: the first of its own
   range, else the last of another's (``*stolen`` set); -1 when none is left */
static int64_t rp_claim(uint64_t sequence, int own, int threads, int* stolen) {
  for (int k = 0; k < threads; k++) {
    const int t = (own + k) % threads;
    uint64_t word = atomic_load_explicit(&rp_ranges[t].word, RP_ACQUIRE);
    while (RP_SEQUENCE(word) == sequence && RP_FRONT(word) < RP_BACK(word)) {
      /* the owner takes the front, the others the back (word is reloaded on failure) */
      const uint64_t claimed = k == 0 ? word + (1u << 16) : word - 1;
      if (atomic_compare_exchange_weak_explicit(&rp_ranges[t].word, &word, claimed, RP_ACQUIRE, RP_ACQUIRE)) {
        *stolen = k != 0;
        return k == 0 ? RP_FRONT(word) : RP_BACK(word) - 1;
      }
    }
  }
  return -1;
}

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
      /* threads beyond the caller and this worker: wake the next sleeper */
      if (RP_JOB_THREADS(word) > 2 && atomic_load(&rp_pool.sleepers) > 0) rp_wake_one();
    }
    seen = RP_SEQUENCE(word);
    const int threads = RP_JOB_THREADS(word);
    if ((int)index >= threads) {
      /* not one of this job's threads (the count was lowered after this worker started):
         hand the wake-up on to every sleeper, one of which is */
      if (atomic_load(&rp_pool.sleepers) > 0) {
        pthread_mutex_lock(&rp_pool.lock);
        pthread_cond_broadcast(&rp_pool.wake);
        pthread_mutex_unlock(&rp_pool.lock);
      }
      continue;
    }
    /* this job's (the word was read with acquire: they are its, and they stay its while
       one of its chunks is unclaimed) */
    const rp_chunk_fn fn = atomic_load_explicit(&rp_pool.fn, RP_RELAXED);
    void* const ctx = atomic_load_explicit(&rp_pool.ctx, RP_RELAXED);
    const int64_t extent = atomic_load_explicit(&rp_pool.extent, RP_RELAXED);
    const int64_t chunks = RP_CHUNKS(word);
    /* the chunks this worker ran, reported once none is left to claim: the caller waits
       for them, so the job cannot end before */
    uint64_t done = 0;
    int stolen;
    for (int64_t chunk; (chunk = rp_claim(seen, (int)index, threads, &stolen)) >= 0; ++done)
      if (fn(ctx, extent * chunk / chunks, extent * (chunk + 1) / chunks) != 0) atomic_store(&rp_pool.status, -1);
    if (done) {
      atomic_fetch_add_explicit(&rp_worker_stats[index].chunks, (int64_t)done, RP_RELAXED);
      atomic_fetch_add(&rp_pool.finished, done);
      if (atomic_load(&rp_pool.caller_waiting)) {
        pthread_mutex_lock(&rp_pool.lock);
        pthread_cond_signal(&rp_pool.done);
        pthread_mutex_unlock(&rp_pool.lock);
      }
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

/* Chunks of a loop of ``extent`` iterations of ``work`` units each on ``threads`` threads:
   RP_CHUNKS_PER_THREAD a thread, each of at least RP_MIN_CHUNK_WORK units and one
   iteration, never fewer than the threads (see the job word for who runs which) */
static int64_t rp_chunk_count(int64_t threads, int64_t extent, int64_t work) {
  const int64_t by_work = extent > INT64_MAX / work ? INT64_MAX : extent * work / RP_MIN_CHUNK_WORK;
  int64_t chunks = threads * RP_CHUNKS_PER_THREAD;
  if (chunks > extent) chunks = extent;
  if (chunks > by_work) chunks = by_work;
  if (chunks < threads) chunks = threads;
  return chunks > 0xffff ? 0xffff : chunks;
}

int raypass_chunk_count(int threads, int64_t extent, int64_t work_per_iteration) {
  return (int)rp_chunk_count(threads, extent, work_per_iteration > 0 ? work_per_iteration : 1);
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
  const int64_t chunks = rp_chunk_count(threads, extent, work);
  rp_count(RP_PARALLEL);
  atomic_store_explicit(&rp_pool.fn, fn, RP_RELAXED);
  atomic_store_explicit(&rp_pool.ctx, ctx, RP_RELAXED);
  atomic_store_explicit(&rp_pool.extent, extent, RP_RELAXED);
  atomic_store_explicit(&rp_pool.finished, 0, RP_RELAXED);
  atomic_store_explicit(&rp_pool.status, 0, RP_RELAXED);
  const uint64_t sequence = RP_SEQUENCE(atomic_load_explicit(&rp_pool.job, RP_RELAXED)) + 1;
  for (int64_t t = 0; t < threads; t++)
    atomic_store_explicit(&rp_ranges[t].word, (sequence << 32) | ((uint64_t)(t * chunks / threads) << 16) |
                                                  (uint64_t)((t + 1) * chunks / threads), RP_RELAXED);
  const uint64_t word = (sequence << 32) | ((uint64_t)chunks << 16) | (uint64_t)threads;
  atomic_store(&rp_pool.job, word);  /* sequentially consistent: against sleepers below */
  if (atomic_load(&rp_pool.sleepers) > 0) rp_wake_one();
  /* the caller's own range, then what is left of the others' */
  int status = 0, stolen;
  uint64_t mine = 0;
  for (int64_t chunk; (chunk = rp_claim(sequence, 0, (int)threads, &stolen)) >= 0; ++mine) {
    if (fn(ctx, extent * chunk / chunks, extent * (chunk + 1) / chunks) != 0) status = -1;
    if (stolen) rp_count(RP_STOLEN);
  }
  rp_wait_finished((uint64_t)chunks - mine);
  if (atomic_load_explicit(&rp_pool.status, RP_RELAXED) != 0) status = -1;
  atomic_store_explicit(&rp_pool.busy, 0, RP_RELEASE);
  return status;
}
