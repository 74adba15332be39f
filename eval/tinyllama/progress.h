// EvalProgress: entrokv-eval's sign of life on stderr: runs done and under
// way, stories done of those the started runs hold, elapsed time and the
// ETA of the runs under way (a budget search decides later runs as it goes,
// so no total is known in advance). On a terminal one line is redrawn at
// most every 200 ms; elsewhere (a log, CI) a line is written at most every
// 10 s. entrokv-eval --progress=false turns it off.
//
// Thread-safety: thread-safe (runs are evaluated on --threads threads).

#ifndef ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_PROGRESS_H_
#define ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace entrokv::tinyllama {

class EvalProgress {
 public:
  // `out` receives each line (with "\r" or "\n" as the mode wants);
  // `now` is the clock. `terminal`: redraw one line, else append lines.
  EvalProgress(std::function<void(const std::string&)> out,
               std::function<absl::Time()> now, bool terminal);
  // On stderr, redrawn when stderr is a terminal.
  static std::unique_ptr<EvalProgress> OnStderr();

  void RunStarted(int64_t stories);
  void StoryDone();
  void RunDone();
  // Ends a redrawn line.
  void Finish();

  // The line as it would be written now (for tests).
  std::string Line();

 private:
  void MaybeWrite() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string LineLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::function<void(const std::string&)> out_;
  const std::function<absl::Time()> now_;
  const bool terminal_;
  absl::Mutex mu_;
  absl::Time start_ ABSL_GUARDED_BY(mu_);
  absl::Time last_written_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t runs_started_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t runs_done_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t stories_planned_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t stories_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool wrote_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_PROGRESS_H_
