// ThreadPool: a persistent pool of n_threads - 1 workers plus the calling thread, for the CPU
// kernels. run(n_tasks, fn) hands out task indices dynamically and returns when every task is
// done; the caller runs tasks too, so a job finishes even when workers are descheduled (the
// machine may be oversubscribed). Workers spin briefly between jobs (a forward issues jobs
// microseconds apart), then sleep on a futex. One thread calls run() at a time; no nesting.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace duet {

class ThreadPool {
 public:
  // n_threads <= 0: hardware concurrency.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }
  // fn(task, thread) for task in [0, n_tasks); thread in [0, n_threads) identifies the runner
  // (for per-thread scratch). Runs inline when n_tasks <= 1 or the pool has one thread.
  // n_tasks must be below 2^20.
  void run(int n_tasks, const std::function<void(int task, int thread)>& fn);

 private:
  void worker(int index);
  void run_tasks(uint32_t job, int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  // One word per job state: job id (24 bits) | n_tasks (20 bits) | next task (20 bits). A task is
  // claimed by a CAS that also checks the job id, so a worker waking late cannot claim a task of
  // a newer job under an old one, and the caller never waits for idle workers.
  std::atomic<uint64_t> state_{0};
  std::atomic<uint32_t> wake_{0};  // bumped per job; workers wait on it
  std::atomic<int> sleepers_{0};
  std::atomic<int> done_{0};
  uint32_t job_ = 0;
  const std::function<void(int, int)>* fn_ = nullptr;
  std::atomic<bool> stop_{false};
};

}  // namespace duet
