#include "server/step_pool.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/proc_stat.h"

namespace entrokv::server {

StepPool::StepPool(int size) {
  for (int i = 1; i < size; ++i) workers_.emplace_back([this] { Work(); });
}

StepPool::~StepPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

int StepPool::Claim(Job* job) {
  if (job->next >= job->count) return -1;
  const int task = job->next++;
  if (job->next == job->count) {
    queue_.erase(std::find(queue_.begin(), queue_.end(), job));
  }
  return task;
}

void StepPool::Run(int count, absl::FunctionRef<void(int)> fn) {
  if (count <= 0) return;
  if (count == 1 || workers_.empty()) {
    for (int task = 0; task < count; ++task) fn(task);
    return;
  }
  Job job{.fn = fn, .count = count};
  absl::MutexLock lock(&mu_);
  queue_.push_back(&job);
  // The caller works on its own job until every task is handed out, then
  // waits for the workers' last ones.
  for (int task = Claim(&job); task >= 0; task = Claim(&job)) {
    mu_.Unlock();
    job.fn(task);
    mu_.Lock();
    ++job.done;
  }
  mu_.Await(absl::Condition(
      +[](Job* j) { return j->done == j->count; }, &job));
}

void StepPool::Work() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(
        +[](StepPool* p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return p->stop_ || !p->queue_.empty();
        },
        this));
    if (queue_.empty()) return;  // stop_, and nothing left to do.
    Job* job = queue_.front();
    const int task = Claim(job);
    mu_.Unlock();
    job->fn(task);
    mu_.Lock();
    ++job->done;  // The job's owner waits for this under mu_.
  }
}

int CpuQuotaLimit(const std::string& cpu_max, long long v1_quota,
                  long long v1_period) {
  long long quota = -1, period = 0;
  if (!cpu_max.empty()) {
    std::vector<std::string> parts =
        absl::StrSplit(cpu_max, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
    if (parts.size() >= 1 && parts[0] != "max" &&
        !absl::SimpleAtoi(parts[0], &quota)) {
      quota = -1;
    }
    period = 100000;  // cgroup v2's default when the second field is absent.
    if (parts.size() >= 2 && !absl::SimpleAtoi(parts[1], &period)) quota = -1;
  } else {
    quota = v1_quota;
    period = v1_period;
  }
  if (quota <= 0 || period <= 0) return 0;
  return static_cast<int>((quota + period - 1) / period);
}

namespace {

std::string ReadFile(const char* path) {
  return ReadProcFile(path).value_or("");
}

long long ReadNumber(const char* path, long long fallback) {
  long long v = fallback;
  const std::string text = ReadFile(path);
  if (text.empty() ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v)) {
    return fallback;
  }
  return v;
}

}  // namespace

int DefaultStepWorkers() {
  int cpus = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus <= 0) {
    cpus = static_cast<int>(std::thread::hardware_concurrency());
  }
  const int quota = CpuQuotaLimit(
      ReadFile("/sys/fs/cgroup/cpu.max"),
      ReadNumber("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", -1),
      ReadNumber("/sys/fs/cgroup/cpu/cpu.cfs_period_us", 0));
  if (quota > 0) cpus = std::min(cpus, quota);
  return std::max(cpus, 1);
}

}  // namespace entrokv::server
