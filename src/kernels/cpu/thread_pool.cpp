// ThreadPool (see thread_pool.h).
#include "kernels/cpu/thread_pool.h"

#include <sched.h>

#include "base/check.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace duet {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

constexpr int kSpinIterations = 20000;  // ~100 us of pause loops before a worker sleeps
constexpr uint64_t kFieldMask = (1u << 20) - 1;

inline uint64_t pack(uint32_t job, uint32_t n, uint32_t next) {
  return (static_cast<uint64_t>(job & 0xffffff) << 40) | (static_cast<uint64_t>(n) << 20) | next;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) {
    unsigned hc = std::thread::hardware_concurrency();
    n_threads = hc ? static_cast<int>(hc) : 1;
  }
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  wake_.fetch_add(1);
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_tasks(uint32_t job, int thread) {
  uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if ((s >> 40) != (job & 0xffffff)) return;
    const uint32_t n = static_cast<uint32_t>((s >> 20) & kFieldMask);
    const uint32_t next = static_cast<uint32_t>(s & kFieldMask);
    if (next >= n) return;
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    // The claimed task keeps this job open, so fn_ is still this job's function.
    (*fn_)(static_cast<int>(next), thread);
    done_.fetch_add(1, std::memory_order_acq_rel);
    s = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker(int index) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t w;
    int spins = 0;
    while ((w = wake_.load(std::memory_order_acquire)) == seen) {
      if (++spins < kSpinIterations) {
        cpu_relax();
      } else {
        sleepers_.fetch_add(1);
        wake_.wait(seen);
        sleepers_.fetch_sub(1);
      }
    }
    seen = w;
    if (stop_.load()) return;
    run_tasks(static_cast<uint32_t>(state_.load(std::memory_order_acquire) >> 40), index);
  }
}

void ThreadPool::run(int n_tasks, const std::function<void(int, int)>& fn) {
  if (n_tasks <= 0) return;
  if (n_tasks == 1 || workers_.empty()) {
    for (int i = 0; i < n_tasks; ++i) fn(i, 0);
    return;
  }
  DUET_CHECK_MSG(static_cast<uint64_t>(n_tasks) <= kFieldMask, "ThreadPool::run: %d tasks", n_tasks);
  ++job_;
  fn_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  state_.store(pack(job_, static_cast<uint32_t>(n_tasks), 0), std::memory_order_release);
  wake_.fetch_add(1);
  // seq_cst pairs with the worker's sleepers_ increment: either we see it here and wake the
  // worker, or the worker's wait() sees the new wake_ value and returns at once.
  if (sleepers_.load() > 0) wake_.notify_all();
  run_tasks(job_, 0);
  int spins = 0;
  while (done_.load(std::memory_order_acquire) != n_tasks) {
    if (++spins < 4096) cpu_relax();
    else sched_yield();  // a worker holding a task was descheduled: let it run
  }
}

}  // namespace duet
