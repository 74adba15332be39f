// StepPool runs each task of a job once, on the caller and its workers, with
// jobs from several threads at once; the CPU quota is read as the kernel
// writes it.

#include "server/step_pool.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace entrokv::server {
namespace {

TEST(StepPoolTest, EveryTaskRunsOnceAndRunWaitsForAll) {
  StepPool pool(4);
  EXPECT_EQ(pool.size(), 4);
  for (int count : {0, 1, 2, 7, 100}) {
    std::vector<std::atomic<int>> runs(count);
    pool.Run(count, [&](int task) { runs[task].fetch_add(1); });
    for (int t = 0; t < count; ++t) EXPECT_EQ(runs[t].load(), 1) << count;
  }
}

TEST(StepPoolTest, TasksRunInParallel) {
  // Two tasks that each wait for the other to start finish only when two
  // threads run them at once.
  StepPool pool(2);
  std::atomic<int> started{0};
  pool.Run(2, [&](int) {
    started.fetch_add(1);
    while (started.load() < 2) std::this_thread::yield();
  });
  EXPECT_EQ(started.load(), 2);
}

TEST(StepPoolTest, ASizeOfOneRunsOnTheCaller) {
  StepPool pool(1);
  std::set<std::thread::id> threads;
  pool.Run(5, [&](int) { threads.insert(std::this_thread::get_id()); });
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(StepPoolTest, JobsFromManyThreadsShareTheWorkers) {
  StepPool pool(3);
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 6; ++c) {
    callers.emplace_back([&] {
      for (int job = 0; job < 50; ++job) {
        pool.Run(9, [&](int task) { sum.fetch_add(task + 1); });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(sum.load(), int64_t{6} * 50 * (9 * 10 / 2));
}

TEST(StepPoolTest, TheCgroupQuotaIsRoundedUp) {
  EXPECT_EQ(CpuQuotaLimit("max 100000\n", -1, 0), 0);
  EXPECT_EQ(CpuQuotaLimit("150000 100000\n", -1, 0), 2);
  EXPECT_EQ(CpuQuotaLimit("50000 100000", -1, 0), 1);
  EXPECT_EQ(CpuQuotaLimit("400000", -1, 0), 4);  // The default period.
  EXPECT_EQ(CpuQuotaLimit("garbage", -1, 0), 0);
  EXPECT_EQ(CpuQuotaLimit("", -1, 100000), 0);  // v1: no quota.
  EXPECT_EQ(CpuQuotaLimit("", 250000, 100000), 3);
  EXPECT_GE(DefaultStepWorkers(), 1);
}

}  // namespace
}  // namespace entrokv::server
