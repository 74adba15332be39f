// entrokv-eval's progress line (eval/tinyllama/progress.h), with a
// fake clock: what it counts, its ETA, and how often it writes.

#include "tinyllama/progress.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace entrokv::tinyllama {
namespace {

using ::testing::HasSubstr;

struct Fake {
  absl::Time now = absl::FromUnixSeconds(1000);
  std::vector<std::string> written;
};

TEST(EvalProgressTest, CountsRunsAndStoriesAndEstimatesTheRunsUnderWay) {
  Fake fake;
  EvalProgress p([&](const std::string& s) { fake.written.push_back(s); },
                 [&] { return fake.now; }, /*terminal=*/false);
  p.RunStarted(10);
  p.RunStarted(10);
  for (int i = 0; i < 5; ++i) {
    fake.now += absl::Seconds(6);
    p.StoryDone();
  }
  // 5 of 20 stories in 30 s: 15 left at 6 s each, 90 s.
  EXPECT_EQ(p.Line(),
            "entrokv-eval: 0 runs done, 2 running; stories 5/20; 0m30s "
            "elapsed; ETA 1m30s for the runs under way");
  for (int i = 0; i < 15; ++i) p.StoryDone();
  p.RunDone();
  p.RunDone();
  EXPECT_THAT(p.Line(), HasSubstr("2 runs done, 0 running; stories 20/20"));
  EXPECT_THAT(p.Line(), HasSubstr("runs under way: none"));
}

TEST(EvalProgressTest, WritesALineEveryTenSecondsOffATerminal) {
  Fake fake;
  EvalProgress p([&](const std::string& s) { fake.written.push_back(s); },
                 [&] { return fake.now; }, /*terminal=*/false);
  p.RunStarted(100);  // Written: the first event.
  for (int i = 0; i < 100; ++i) {
    fake.now += absl::Seconds(1);
    p.StoryDone();
  }
  // At 0 s, then at 10, 20, ..., 100 s.
  EXPECT_EQ(fake.written.size(), 11u);
  for (const std::string& line : fake.written) {
    EXPECT_EQ(line.back(), '\n');
    EXPECT_NE(line.front(), '\r');
  }
  p.Finish();
  EXPECT_EQ(fake.written.size(), 12u);
}

TEST(EvalProgressTest, RedrawsOneLineOnATerminal) {
  Fake fake;
  EvalProgress p([&](const std::string& s) { fake.written.push_back(s); },
                 [&] { return fake.now; }, /*terminal=*/true);
  p.RunStarted(4);
  fake.now += absl::Milliseconds(100);
  p.StoryDone();  // Within 200 ms of the last: not written.
  fake.now += absl::Milliseconds(150);
  p.StoryDone();
  ASSERT_EQ(fake.written.size(), 2u);
  EXPECT_EQ(fake.written[1].front(), '\r');
  EXPECT_THAT(fake.written[1], HasSubstr("stories 2/4"));
  p.Finish();
  EXPECT_EQ(fake.written.back().back(), '\n');
}

}  // namespace
}  // namespace entrokv::tinyllama
