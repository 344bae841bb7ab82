// `kvwise::parallel_for`, the decode step's fork-join: chunks of the range are claimed, not handed out, so a
// worker the OS has descheduled delays a region only by the chunk it already took, never by one it was given.
//
// ATen's OpenMP `parallel_for` gives each team thread a fixed share and joins at a barrier every thread must
// reach. A decode step runs a few hundred such regions, tens of microseconds each; on a laptop doing other
// work the scheduler parks one of the two threads for a slice (milliseconds) now and then, and every region
// in that slice waits for it: one niced-0 CPU-bound process beside the server cut batch-1 decode on SmolLM2's
// Q4_1 file from about 95 to 3-15 tokens/s (llama-server, whose threads also meet at barriers, fell to 0.9).
// Here the calling thread and a small pool of workers take chunks from one counter until none is left; the
// caller then waits only for chunks in flight, keeping its core (`WAIT_BEFORE_ANY_YIELD`). A worker that wakes late
// finds nothing left and goes back to waiting; if every worker is parked the caller does the whole range itself,
// at one thread's speed.
//
// Workers spin a short while between regions (`SPIN`), which the back-to-back regions of a step need, then
// sleep on a futex (`std::atomic::wait`). Chunk bounds depend only on the range, the grain and the thread count,
// never on which thread runs them, so results are the same run to run. A region started while another runs
// (a second engine thread) or from inside a chunk runs on the calling thread alone.
//
// Prefill's regions (layers.cpp, prefill attention, quant_mm's dequantizing, the sampler's passes) stay on
// OpenMP: they alternate with torch's GEMMs, which run on OpenMP, and two pools spinning in turn on two cores cost
// cold prefill more than the claimed chunks saved (docs/benchmarks.md, by_hand, "prefill's regions on the pool").
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace kvwise {

namespace detail {

inline void relax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");  // the core's spin hint, not the OS's: the core stays this thread's
#else
  std::this_thread::yield();
#endif
}

// Chunks per thread: enough that a chunk parked with its worker is a small part of the region.
constexpr int64_t CHUNKS_PER_THREAD = 4;
// How long an idle worker spins for the next region before it sleeps (a step's regions come microseconds
// apart; the next step's, after the sampler and the server's Python, a millisecond or more later).
constexpr auto SPIN = std::chrono::microseconds(200);
// Pauses the caller spins, waiting for chunks in flight, between looks at whether to yield its core.
constexpr int WAIT_PAUSES_PER_YIELD = 256;
// The caller yields its core while it waits only to a worker whose chunk in hand runs on the same core, or after
// this long.
// A yield gives the core to whatever else is runnable there: on a busy CPU, a niced process beside the server,
// which then runs its whole slice (milliseconds) while the chunk the caller waited for is long done. Yielding at
// every look cut batch-1 decode on SmolLM2's Q4_1 file to 0.74x with one niced CPU-bound process on the caller's
// core (its fair share would cost 0.9x; 0.92x now), and a worker on another core gains nothing from it.
constexpr auto WAIT_BEFORE_ANY_YIELD = std::chrono::milliseconds(1);
// Workers whose core the pool records (`cpu_`); the caller yields to any further one as to one on its own core.
constexpr int RECORDED_WORKERS = 256;

// The core this thread runs on, or -1 where the OS does not say.
inline int current_cpu() {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

class WorkerPool {
 public:
  // The process's pool, its workers started on first use (never destroyed: detached workers sleep at exit).
  static WorkerPool& instance() {
    static WorkerPool* pool = new WorkerPool();
    return *pool;
  }

  // f(begin, end) over [0, chunks × size) ∩ [0, n), a chunk at a time, on this thread and `threads - 1` workers;
  // the first exception a chunk throws is rethrown here once every claimed chunk is done.
  template <typename F>
  void run(int64_t n, int64_t size, int64_t chunks, int64_t threads, const F& f) {
    if (in_chunk()) {
      f(0, n);
      return;
    }
    std::unique_lock<std::mutex> owner(busy_, std::try_to_lock);
    if (!owner.owns_lock()) {
      f(0, n);
      return;
    }
    ensure_workers(static_cast<int>(threads) - 1);
    const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
    Job& job = jobs_[generation & 1];
    job.call = [](const void* fn, int64_t begin, int64_t end) { (*static_cast<const F*>(fn))(begin, end); };
    job.fn = &f;
    job.n = n;
    job.size = size;
    job.chunks.store(chunks, std::memory_order_relaxed);
    job.done.store(0, std::memory_order_relaxed);
    job.helpers.store(static_cast<int>(threads) - 1, std::memory_order_relaxed);
    job.error = nullptr;
    claims_.store(uint64_t(generation) << 32, std::memory_order_release);
    generation_.store(generation, std::memory_order_release);
    if (sleepers_.load() > 0) generation_.notify_all();
    work(generation, -1);
    const auto since = std::chrono::steady_clock::now();
    for (int spins = 0; job.done.load(std::memory_order_acquire) < chunks; ++spins) {
      if (spins % WAIT_PAUSES_PER_YIELD == WAIT_PAUSES_PER_YIELD - 1 && should_yield(threads - 1, since)) {
        std::this_thread::yield();
      } else {
        relax();
      }
    }
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  struct Job {
    void (*call)(const void*, int64_t, int64_t) = nullptr;
    const void* fn = nullptr;
    int64_t n = 0, size = 0;
    std::atomic<int64_t> chunks{0}, done{0};
    std::atomic<int> helpers{0};  // the workers that take part: those of a lower index (the thread count, less one)
    std::exception_ptr error;  // the first chunk's to throw (written under `error_lock`)
    std::mutex error_lock;
  };

  // Whether the caller, waiting since `since` for chunks of `helpers` workers, should let its core go: a worker
  // whose chunk in hand runs on it may be waiting for it; one elsewhere is not helped, and the core would go to
  // another process. Past `WAIT_BEFORE_ANY_YIELD` it yields anyway (a worker the OS moved onto this core since).
  bool should_yield(int64_t helpers, std::chrono::steady_clock::time_point since) const {
    const int here = current_cpu();
    if (here < 0 || helpers > RECORDED_WORKERS) return true;
    for (int64_t i = 0; i < helpers; ++i) {
      if (cpu_[i].load(std::memory_order_relaxed) == here + 1) return true;
    }
    return std::chrono::steady_clock::now() - since > WAIT_BEFORE_ANY_YIELD;
  }

  static bool& in_chunk() {
    static thread_local bool inside = false;
    return inside;
  }

  // Claim and run the chunks of `generation` until none is left (or a newer region replaced it); worker `index`
  // (the caller: -1) records the core it runs them on.
  void work(uint32_t generation, int index) {
    Job& job = jobs_[generation & 1];
    uint64_t seen = claims_.load(std::memory_order_acquire);
    while (static_cast<uint32_t>(seen >> 32) == generation) {
      const int64_t chunk = static_cast<int64_t>(seen & 0xffffffffu);
      if (chunk >= job.chunks.load(std::memory_order_relaxed)) return;
      if (!claims_.compare_exchange_weak(seen, seen + 1, std::memory_order_acq_rel)) continue;
      const int64_t begin = chunk * job.size, end = std::min(job.n, begin + job.size);
      const bool recorded = index >= 0 && index < RECORDED_WORKERS;
      if (recorded) cpu_[index].store(current_cpu() + 1, std::memory_order_relaxed);
      in_chunk() = true;
      try {
        job.call(job.fn, begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> hold(job.error_lock);
        if (!job.error) job.error = std::current_exception();
      }
      in_chunk() = false;
      if (recorded) cpu_[index].store(0, std::memory_order_relaxed);  // it holds no chunk: nothing to yield to
      job.done.fetch_add(1, std::memory_order_release);
      seen = claims_.load(std::memory_order_acquire);
    }
  }

  void ensure_workers(int wanted) {
    for (; started_ < wanted; ++started_) std::thread([this, index = started_] { serve(index); }).detach();
  }

  [[noreturn]] void serve(int index) {
    uint32_t last = generation_.load(std::memory_order_acquire);
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + SPIN;
      uint32_t now = generation_.load(std::memory_order_acquire);
      for (int spins = 0; now == last; ++spins) {
        if (spins % 64 == 63 && std::chrono::steady_clock::now() > until) break;
        relax();
        now = generation_.load(std::memory_order_acquire);
      }
      if (now == last) {
        sleepers_.fetch_add(1);
        generation_.wait(last);
        sleepers_.fetch_sub(1);
        now = generation_.load(std::memory_order_acquire);
      }
      last = now;
      if (index < jobs_[now & 1].helpers.load(std::memory_order_relaxed)) work(now, index);
    }
  }

  std::mutex busy_;
  int started_ = 0;
  Job jobs_[2];
  std::atomic<uint64_t> claims_{0};  // the running region's generation (high half) and next chunk (low half)
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> sleepers_{0};
  // 1 + the core each worker runs its chunk in hand on; 0: none in hand. Off the line the spinning threads poll.
  alignas(64) std::atomic<int> cpu_[RECORDED_WORKERS] = {};
};

}  // namespace detail

// `at::parallel_for`'s contract (f(begin, end) over sub-ranges of [begin, end), each at least `grain` long
// but the last), on `detail::WorkerPool`: at most `at::get_num_threads()` threads, `CHUNKS_PER_THREAD` chunks each.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  const int64_t n = end - begin, threads = at::get_num_threads();
  if (n <= 0) return;
  const int64_t chunks = std::min((n + grain - 1) / std::max<int64_t>(grain, 1), threads * detail::CHUNKS_PER_THREAD);
  if (chunks <= 1 || threads <= 1) {
    f(begin, end);
    return;
  }
  const int64_t size = (n + chunks - 1) / chunks;
  const auto shifted = [&](int64_t b, int64_t e) { f(begin + b, begin + e); };
  detail::WorkerPool::instance().run(n, size, (n + size - 1) / size, threads, shifted);
}

}  // namespace kvwise
