#include "tinyllama/progress.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace entrokv::tinyllama {
namespace {

std::string Clock(absl::Duration d) {
  const int64_t s = absl::ToInt64Seconds(d);
  return s >= 3600 ? absl::StrFormat("%dh%02dm%02ds", s / 3600, s / 60 % 60,
                                     s % 60)
                   : absl::StrFormat("%dm%02ds", s / 60, s % 60);
}

}  // namespace

EvalProgress::EvalProgress(std::function<void(const std::string&)> out,
                           std::function<absl::Time()> now, bool terminal)
    : out_(std::move(out)), now_(std::move(now)), terminal_(terminal) {
  start_ = now_();
}

std::unique_ptr<EvalProgress> EvalProgress::OnStderr() {
  return std::make_unique<EvalProgress>(
      [](const std::string& s) {
        std::fputs(s.c_str(), stderr);
        std::fflush(stderr);
      },
      [] { return absl::Now(); }, isatty(fileno(stderr)) == 1);
}

void EvalProgress::RunStarted(int64_t stories) {
  absl::MutexLock lock(&mu_);
  ++runs_started_;
  stories_planned_ += stories;
  MaybeWrite();
}

void EvalProgress::StoryDone() {
  absl::MutexLock lock(&mu_);
  ++stories_done_;
  MaybeWrite();
}

void EvalProgress::RunDone() {
  absl::MutexLock lock(&mu_);
  ++runs_done_;
  MaybeWrite();
}

void EvalProgress::Finish() {
  absl::MutexLock lock(&mu_);
  if (wrote_) {
    out_(terminal_ ? absl::StrCat("\r", LineLocked(), "\n")
                   : absl::StrCat(LineLocked(), "\n"));
  }
}

std::string EvalProgress::Line() {
  absl::MutexLock lock(&mu_);
  return LineLocked();
}

std::string EvalProgress::LineLocked() {
  const absl::Duration elapsed = now_() - start_;
  std::string eta = "ETA -";
  if (stories_done_ > 0 && stories_planned_ > stories_done_) {
    eta = absl::StrCat("ETA ", Clock(elapsed * (static_cast<double>(
                                                     stories_planned_ -
                                                     stories_done_) /
                                                 stories_done_)),
                       " for the runs under way");
  } else if (stories_planned_ > 0 && stories_planned_ == stories_done_) {
    eta = "runs under way: none";
  }
  return absl::StrCat("entrokv-eval: ", runs_done_, " runs done, ",
                      runs_started_ - runs_done_, " running; stories ",
                      stories_done_, "/", stories_planned_, "; ",
                      Clock(elapsed), " elapsed; ", eta);
}

void EvalProgress::MaybeWrite() {
  const absl::Time now = now_();
  const absl::Duration every =
      terminal_ ? absl::Milliseconds(200) : absl::Seconds(10);
  if (now - last_written_ < every) return;
  last_written_ = now;
  wrote_ = true;
  out_(terminal_ ? absl::StrCat("\r", LineLocked(), "  ")
                 : absl::StrCat(LineLocked(), "\n"));
}

}  // namespace entrokv::tinyllama
