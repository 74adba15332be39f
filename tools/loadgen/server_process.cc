#include "server_process.h"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/proc_stat.h"

namespace entrokv::loadgen {

std::optional<int64_t> ParseContextSwitches(absl::string_view status) {
  std::optional<int64_t> voluntary;
  std::optional<int64_t> involuntary;
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    std::optional<int64_t>* into = nullptr;
    if (absl::ConsumePrefix(&line, "voluntary_ctxt_switches:")) {
      into = &voluntary;
    } else if (absl::ConsumePrefix(&line, "nonvoluntary_ctxt_switches:")) {
      into = &involuntary;
    } else {
      continue;
    }
    int64_t value = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &value)) {
      return std::nullopt;
    }
    *into = value;
  }
  if (!voluntary || !involuntary) return std::nullopt;
  return *voluntary + *involuntary;
}

int64_t SwitchesSince(const ProcessSample& before,
                      const ProcessSample& after) {
  int64_t switches = 0;
  for (const auto& [tid, count] : after.switches_by_thread) {
    const auto it = before.switches_by_thread.find(tid);
    const int64_t base = it == before.switches_by_thread.end() ? 0 : it->second;
    // A count below the base is a new thread under a reused id: all of
    // its count is new, as for any thread new in `after`.
    switches += count >= base ? count - base : count;
  }
  return switches;
}

std::optional<int> PeerPidOfTarget(const std::string& target) {
  absl::string_view path = target;
  if (!absl::ConsumePrefix(&path, "unix:")) return std::nullopt;
  absl::ConsumePrefix(&path, "//");
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return std::nullopt;
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  std::optional<int> pid;
  ucred peer{};
  socklen_t size = sizeof(peer);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address),
              sizeof(address)) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) == 0 &&
      peer.pid > 0) {
    pid = peer.pid;
  }
  close(fd);
  return pid;
}

std::optional<ProcessSample> SampleProcess(int pid) {
  const std::string root = "/proc/" + std::to_string(pid);
  const std::optional<std::string> text = ReadProcFile(root + "/stat");
  const std::optional<ProcStat> stat =
      text ? ParseProcStat(*text) : std::nullopt;
  if (!stat) return std::nullopt;
  ProcessSample sample;
  sample.cpu_seconds = static_cast<double>(stat->utime_ticks +
                                           stat->stime_ticks) /
                       static_cast<double>(sysconf(_SC_CLK_TCK));
  sample.start_ticks = stat->start_ticks;
  DIR* tasks = opendir((root + "/task").c_str());
  if (tasks == nullptr) return std::nullopt;
  while (const dirent* task = readdir(tasks)) {
    if (task->d_name[0] == '.') continue;
    int64_t tid = 0;
    if (!absl::SimpleAtoi(task->d_name, &tid)) continue;
    const std::optional<std::string> status =
        ReadProcFile(root + "/task/" + task->d_name + "/status");
    if (!status) continue;  // Exited since the listing.
    if (const std::optional<int64_t> n = ParseContextSwitches(*status)) {
      sample.switches_by_thread[tid] = *n;
    }
  }
  closedir(tasks);
  return sample;
}

}  // namespace entrokv::loadgen
