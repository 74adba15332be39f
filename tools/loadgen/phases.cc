#include "phases.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server_process.h"

namespace entrokv::loadgen {
namespace {

// The progress bar: the share of the planned steps done, or with a
// --duration, of the time passed; and the phase now running.
struct ProgressPlan {
  int64_t total_steps = 0;  // Without a duration.
  absl::Duration duration;  // Zero: none.
  std::vector<std::string> modes;
  int rounds = 0;  // Without a duration.
};

void ProgressLoop(Shared* shared, const ProgressPlan* plan,
                  std::atomic<bool>* stop, std::atomic<int>* phase) {
  const absl::Time start = absl::Now();
  const size_t modes = plan->modes.size();
  while (!stop->load()) {
    const int64_t done = shared->done.load();
    const absl::Duration elapsed = absl::Now() - start;
    double fraction =
        plan->duration > absl::ZeroDuration()
            ? absl::FDivDuration(elapsed, plan->duration)
            : (plan->total_steps > 0 ? double(done) / plan->total_steps : 1.0);
    fraction = std::min(fraction, 1.0);
    const int width = 40;
    const int filled = static_cast<int>(fraction * width);
    const int p = phase->load();
    const std::string of_rounds =
        plan->rounds > 0 ? absl::StrCat("/", plan->rounds) : "";
    const std::string label =
        plan->rounds > 0 && p >= plan->rounds * static_cast<int>(modes)
            ? "done"
            : absl::StrFormat("round %d%s %s", p / modes + 1, of_rounds,
                              plan->modes[p % modes]);
    std::fprintf(stderr, "\r[%s%s] %5.1f%%  %lld%s steps  %.1fs  %s   ",
                 std::string(filled, '=').c_str(),
                 std::string(width - filled, ' ').c_str(), 100 * fraction,
                 static_cast<long long>(done),
                 plan->total_steps > 0
                     ? absl::StrCat("/", plan->total_steps).c_str()
                     : "",
                 absl::ToDoubleSeconds(elapsed), label.c_str());
    std::fflush(stderr);
    absl::SleepFor(absl::Milliseconds(200));
  }
  std::fprintf(stderr, "\n");
}

// The state of the lock step. OnPhaseEnd() is the barrier's completion
// step: it runs once per phase, before any thread goes on, so that every
// thread sees the same phase_start and last_phase_done.
class LockStep {
 public:
  LockStep(Shared* shared, const std::vector<std::unique_ptr<Runner>>& runners)
      : shared_(shared),
        runners_(runners),
        modes_per_round_(shared->modes.size()),
        planned_phases_(shared->options.duration > absl::ZeroDuration()
                            ? std::numeric_limits<size_t>::max()
                            : static_cast<size_t>(shared->options.rounds) *
                                  modes_per_round_),
        last_phase_done_(planned_phases_ == 0),
        barrier_(static_cast<std::ptrdiff_t>(runners.size()),
                 Completion{this}) {
    log_.setup_status.resize(runners.size());
  }

  // Runner i's thread.
  void RunThread(size_t i) {
    log_.setup_status[i] = runners_[i]->SetUp();
    barrier_.arrive_and_wait();
    for (size_t p = 0; !last_phase_done_.load(); ++p) {
      const std::string& mode = shared_->modes[p % modes_per_round_];
      if (log_.setup_status[i].ok()) {
        runners_[i]->RunPhase(mode, phase_start_);
      } else {
        CountNotStarted(log_.setup_status[i], mode);
      }
      barrier_.arrive_and_wait();
    }
    // Closes whatever was opened, a failed start included.
    runners_[i]->TearDown();
  }

  ProgressPlan Plan() const {
    ProgressPlan plan;
    plan.duration = shared_->options.duration;
    plan.modes = shared_->modes;
    if (plan.duration <= absl::ZeroDuration()) {
      plan.rounds = shared_->options.rounds;
      plan.total_steps = int64_t{shared_->options.sessions} *
                         shared_->options.steps_per_round *
                         static_cast<int64_t>(planned_phases_);
    }
    return plan;
  }
  std::atomic<int>* phase() { return &phase_; }
  PhaseLog TakeLog() { return std::move(log_); }

 private:
  struct Completion {
    LockStep* lock_step;
    void operator()() noexcept { lock_step->OnPhaseEnd(); }
  };

  void OnPhaseEnd() {
    const absl::Time now = absl::Now();
    if (!setup_done_) {
      setup_done_ = true;
      log_.setup_end = now;
    } else {
      log_.starts.push_back(phase_start_);
      log_.ends.push_back(now);
      log_.modes.push_back(
          shared_->modes[log_.modes.size() % modes_per_round_]);
      phase_.fetch_add(1);
    }
    SampleServer();
    SampleSelf();
    const size_t done = log_.modes.size();
    const absl::Duration duration = shared_->options.duration;
    if (done >= planned_phases_ ||
        (duration > absl::ZeroDuration() && done % modes_per_round_ == 0 &&
         done > 0 && now - log_.setup_end >= duration)) {
      last_phase_done_.store(true);
    }
    // After the sample: reading /proc is in no phase's time.
    phase_start_ = absl::Now();
  }

  // Reads the server's counters at a phase's end and credits what they grew
  // by since the last end (the setup's included) to the mode that just ran.
  void SampleServer() {
    if (!shared_->server_pid.has_value()) return;
    const std::optional<ProcessSample> now =
        SampleProcess(*shared_->server_pid);
    if (!log_.modes.empty()) {
      ModeStats stats;
      if (now && last_sample_ &&
          now->start_ticks == last_sample_->start_ticks) {
        stats.server_sampled = true;
        stats.server_cpu_seconds =
            std::max(0.0, now->cpu_seconds - last_sample_->cpu_seconds);
        stats.server_context_switches = SwitchesSince(*last_sample_, *now);
      } else {
        // Unreadable, or another process under the pid: this mode's figures
        // would cover only some of its steps, so it reports none.
        stats.server_unsampled_phases = 1;
      }
      shared_->Merge(log_.modes.back(), stats);
    }
    last_sample_ = now;
  }

  // Credits the load generator's own CPU time since the last phase's end
  // (or the setup's) to the mode that just ran.
  void SampleSelf() {
    timespec now{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    const double seconds = double(now.tv_sec) + 1e-9 * double(now.tv_nsec);
    if (!log_.modes.empty()) {
      ModeStats stats;
      stats.loadgen_cpu_seconds = std::max(0.0, seconds - last_self_seconds_);
      shared_->Merge(log_.modes.back(), stats);
    }
    last_self_seconds_ = seconds;
  }

  // The steps of sessions that never started are not sent: counted under
  // the status their start failed with.
  void CountNotStarted(const absl::Status& setup, const std::string& mode) {
    const std::string code = CodeName(setup.code());
    ModeStats stats;
    stats.not_sent[code] =
        int64_t{shared_->options.batch} * shared_->options.steps_per_round;
    shared_->done.fetch_add(stats.not_sent[code]);
    shared_->Merge(mode, stats);
  }

  Shared* const shared_;
  const std::vector<std::unique_ptr<Runner>>& runners_;
  const size_t modes_per_round_;
  const size_t planned_phases_;
  PhaseLog log_;
  std::atomic<bool> last_phase_done_;
  std::atomic<int> phase_{0};
  absl::Time phase_start_ = absl::Now();
  bool setup_done_ = false;
  std::optional<ProcessSample> last_sample_;  // At the last phase's end.
  double last_self_seconds_ = 0.0;            // This process's CPU then.
  std::barrier<Completion> barrier_;
};

}  // namespace

PhaseLog RunPhases(Shared* shared,
                   const std::vector<std::unique_ptr<Runner>>& runners) {
  LockStep lock_step(shared, runners);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < runners.size(); ++i) {
    threads.emplace_back([&lock_step, i] { lock_step.RunThread(i); });
  }
  const ProgressPlan plan = lock_step.Plan();
  std::atomic<bool> stop_progress{false};
  std::thread progress;
  if (shared->options.progress) {
    progress = std::thread(ProgressLoop, shared, &plan, &stop_progress,
                           lock_step.phase());
  }
  for (std::thread& t : threads) t.join();
  stop_progress = true;
  if (progress.joinable()) progress.join();
  return lock_step.TakeLog();
}

}  // namespace entrokv::loadgen
