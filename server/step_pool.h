// StepPool: a bounded set of threads, shared by every Decode stream, on which
// the steps of one DecodeRequest run in parallel over distinct sessions
// (docs/design.md "Batches"). A stream's message becomes one job of tasks (a
// task: the steps of one session, in order); the stream's own thread takes
// part, so a pool of size 1 runs everything inline and a job of one task
// never waits for a worker.
//
// Thread-safety: Run() may be called from any number of threads at once;
// their jobs share the workers, first come first served.

#ifndef ENTROKV_SERVER_STEP_POOL_H_
#define ENTROKV_SERVER_STEP_POOL_H_

#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace entrokv::server {

class StepPool {
 public:
  // `size` threads work on a job at most: the caller and size − 1 workers.
  // REQUIRES: size >= 1.
  explicit StepPool(int size);
  ~StepPool();  // Joins the workers. REQUIRES: no Run() in progress.

  StepPool(const StepPool&) = delete;
  StepPool& operator=(const StepPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(0) … fn(count − 1), each once, on the calling thread and any
  // idle workers; returns when every call has returned. The calls of one job
  // may run in any order and at once: fn must be safe for that.
  void Run(int count, absl::FunctionRef<void(int)> fn);

 private:
  struct Job {
    absl::FunctionRef<void(int)> fn;
    int count = 0;
    int next = 0;  // The next task to hand out.
    int done = 0;  // Tasks that have returned.
  };

  // The next task of `job`, or -1 when all are handed out; removes the job
  // from the queue when it hands out its last one.
  int Claim(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Work();

  absl::Mutex mu_;
  std::deque<Job*> queue_ ABSL_GUARDED_BY(mu_);  // Jobs with tasks left.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

// The pool size a server uses when --step_workers is 0: the CPUs this
// process may run on (its affinity mask), lowered to the cgroup's CPU quota
// when one is set (cgroup v2 cpu.max, else v1 cpu.cfs_quota_us /
// cpu.cfs_period_us), rounded up; at least 1.
int DefaultStepWorkers();

// The CPU limit a cgroup quota gives: quota / period rounded up, or 0 for
// none. `cpu_max` is the text of cgroup v2's cpu.max ("max 100000" or
// "150000 100000"); used when non-empty, else the v1 pair (quota -1: none).
// Exposed for tests.
int CpuQuotaLimit(const std::string& cpu_max, long long v1_quota,
                  long long v1_period);

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_STEP_POOL_H_
