#include "tinyllama/eval_output.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "entrokv/core/status_macros.h"

namespace entrokv::tinyllama {

std::string Num(double v, int precision) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.*f", precision, v);
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out.push_back('\\');
    out.push_back(ch);
  }
  return out + "\"";
}

std::string TargetColumns(const std::vector<int64_t>& targets,
                          const char* rule) {
  std::string text;
  for (int64_t t : targets) absl::StrAppend(&text, " live ", t, " |");
  absl::StrAppend(&text, "\n|---|");
  for (size_t t = 0; t < targets.size(); ++t) absl::StrAppend(&text, rule);
  absl::StrAppend(&text, "\n");
  return text;
}

absl::Status CreateOutputDir(const std::filesystem::path& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot create '", dir.string(), "': ", error.message()));
  }
  return absl::OkStatus();
}

absl::Status WriteFile(const std::filesystem::path& path,
                       const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat("cannot write '", path.string(), "'"));
  }
  return absl::OkStatus();
}

absl::Status WritePlot(const std::filesystem::path& out_dir,
                       const std::string& data, const std::string& script) {
  ENTROKV_RETURN_IF_ERROR(
      WriteFile(out_dir / "tinystories_ppl_vs_live.dat", data));
  const std::string gp = (out_dir / "tinystories_ppl_vs_live.gp").string();
  ENTROKV_RETURN_IF_ERROR(WriteFile(gp, script));
  const std::string command = absl::StrCat("gnuplot '", gp, "'");
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "gnuplot failed; the data and script are in %s\n",
                 out_dir.string().c_str());
  }
  return absl::OkStatus();
}

}  // namespace entrokv::tinyllama
