// A small, independent reader of the Prometheus text exposition format
// (version 0.0.4), for tests: it checks the lines' syntax (HELP and TYPE
// comments, `name{label="value",...} value` samples, escapes in label
// values), that each sample's family was declared with a TYPE before it, and
// keeps every sample by name and label set (label order does not matter).
// Histogram checks (buckets non-decreasing, +Inf bucket equal to _count)
// are helpers here, so that each test states them in one line.
//
// Not thread-safe.

#ifndef ENTROKV_TESTS_TESTING_PROMETHEUS_TEXT_H_
#define ENTROKV_TESTS_TESTING_PROMETHEUS_TEXT_H_

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace entrokv::prometheus_testing {

using Labels = std::map<std::string, std::string>;

class PrometheusText {
 public:
  static absl::StatusOr<PrometheusText> Parse(absl::string_view text) {
    PrometheusText out;
    if (!text.empty() && text.back() != '\n') {
      return absl::InvalidArgumentError("text does not end with a newline");
    }
    int number = 0;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      ++number;
      if (line.empty()) continue;
      const absl::Status status = out.ParseLine(line);
      if (!status.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", number, " \"", line, "\": ", status.message()));
      }
    }
    return out;
  }

  // The family's TYPE ("" when undeclared).
  std::string Type(const std::string& family) const {
    auto it = types_.find(family);
    return it == types_.end() ? "" : it->second;
  }
  bool HasHelp(const std::string& family) const {
    return helps_.contains(family);
  }

  // The sample's value; nullopt when there is no such sample.
  std::optional<double> Value(const std::string& name,
                              const Labels& labels = {}) const {
    auto it = samples_.find({name, labels});
    if (it == samples_.end()) return std::nullopt;
    return it->second;
  }

  // Every sample of `name` whose labels include `labels`, with its labels.
  std::vector<std::pair<Labels, double>> Samples(
      const std::string& name, const Labels& labels = {}) const {
    std::vector<std::pair<Labels, double>> out;
    for (const auto& [key, value] : samples_) {
      if (key.first != name) continue;
      bool match = true;
      for (const auto& [k, v] : labels) {
        auto it = key.second.find(k);
        match = match && it != key.second.end() && it->second == v;
      }
      if (match) out.emplace_back(key.second, value);
    }
    return out;
  }

  // Checks histogram `name` with `labels`: a bucket per le, in increasing le
  // with non-decreasing counts, a +Inf bucket equal to _count, a _sum.
  // Returns _count.
  absl::StatusOr<double> HistogramCount(const std::string& name,
                                        const Labels& labels = {}) const {
    if (Type(name) != "histogram") {
      return absl::NotFoundError(absl::StrCat(name, " is not a histogram"));
    }
    std::vector<std::pair<double, double>> buckets;  // (le, count)
    for (const auto& [sample_labels, value] :
         Samples(name + "_bucket", labels)) {
      if (sample_labels.size() != labels.size() + 1) continue;
      auto le = sample_labels.find("le");
      if (le == sample_labels.end()) {
        return absl::InvalidArgumentError("a bucket without le");
      }
      buckets.emplace_back(le->second == "+Inf"
                               ? std::numeric_limits<double>::infinity()
                               : std::strtod(le->second.c_str(), nullptr),
                           value);
    }
    std::sort(buckets.begin(), buckets.end());
    if (buckets.empty() ||
        buckets.back().first != std::numeric_limits<double>::infinity()) {
      return absl::InvalidArgumentError(name + ": no +Inf bucket");
    }
    for (size_t i = 1; i < buckets.size(); ++i) {
      if (buckets[i].second < buckets[i - 1].second) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": bucket le=", buckets[i].first, " holds ",
                         buckets[i].second, " < ", buckets[i - 1].second));
      }
    }
    const std::optional<double> count = Value(name + "_count", labels);
    const std::optional<double> sum = Value(name + "_sum", labels);
    if (!count.has_value() || !sum.has_value()) {
      return absl::InvalidArgumentError(name + ": no _count or _sum");
    }
    if (*count != buckets.back().second) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": _count ", *count,
                                                     " != +Inf bucket ",
                                                     buckets.back().second));
    }
    return *count;
  }

 private:
  static bool IsName(absl::string_view name) {
    if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) {
      return false;
    }
    for (const char c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' &&
          c != ':') {
        return false;
      }
    }
    return true;
  }

  // The family a sample belongs to (histogram suffixes removed when the
  // base name is a declared histogram).
  std::string Family(const std::string& name) const {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (absl::EndsWith(name, suffix)) {
        const std::string base =
            name.substr(0, name.size() - std::string(suffix).size());
        if (Type(base) == "histogram") return base;
      }
    }
    return name;
  }

  absl::Status ParseLine(absl::string_view line) {
    if (line[0] == '#') {
      const std::vector<std::string> parts =
          absl::StrSplit(line, absl::MaxSplits(' ', 3));
      if (parts.size() >= 3 && parts[1] == "HELP") {
        if (!IsName(parts[2])) return absl::InvalidArgumentError("bad name");
        if (!helps_.insert(parts[2]).second) {
          return absl::InvalidArgumentError("a second HELP");
        }
        return absl::OkStatus();
      }
      if (parts.size() == 4 && parts[1] == "TYPE") {
        static const std::set<std::string> kTypes = {
            "counter", "gauge", "histogram", "summary", "untyped"};
        if (!IsName(parts[2]) || !kTypes.contains(parts[3])) {
          return absl::InvalidArgumentError("bad TYPE");
        }
        if (families_seen_.contains(parts[2])) {
          return absl::InvalidArgumentError("TYPE after the family's samples");
        }
        if (!types_.emplace(parts[2], parts[3]).second) {
          return absl::InvalidArgumentError("a second TYPE");
        }
        return absl::OkStatus();
      }
      return absl::OkStatus();  // Other comments are allowed.
    }
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    const std::string name(line.substr(0, i));
    if (!IsName(name)) return absl::InvalidArgumentError("bad metric name");
    Labels labels;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        if (eq == absl::string_view::npos) {
          return absl::InvalidArgumentError("label without =");
        }
        const std::string label(line.substr(i, eq - i));
        if (!IsName(label) || label.find(':') != std::string::npos) {
          return absl::InvalidArgumentError("bad label name");
        }
        i = eq + 1;
        if (i >= line.size() || line[i] != '"') {
          return absl::InvalidArgumentError("label value not quoted");
        }
        ++i;
        std::string value;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\') {
            if (i + 1 >= line.size()) {
              return absl::InvalidArgumentError("dangling escape");
            }
            const char next = line[i + 1];
            if (next == 'n') {
              value += '\n';
            } else if (next == '\\' || next == '"') {
              value += next;
            } else {
              return absl::InvalidArgumentError("bad escape");
            }
            i += 2;
          } else {
            value += line[i++];
          }
        }
        if (i >= line.size()) {
          return absl::InvalidArgumentError("unterminated label value");
        }
        ++i;  // The closing quote.
        if (!labels.emplace(label, value).second) {
          return absl::InvalidArgumentError("a label twice");
        }
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return absl::InvalidArgumentError("no '}'");
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') {
      return absl::InvalidArgumentError("no space before the value");
    }
    const std::string text(line.substr(i + 1));
    double value = 0;
    if (text == "+Inf") {
      value = std::numeric_limits<double>::infinity();
    } else if (text == "-Inf") {
      value = -std::numeric_limits<double>::infinity();
    } else {
      char* end = nullptr;
      value = std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size()) {
        return absl::InvalidArgumentError("bad value (or a timestamp)");
      }
    }
    const std::string family = Family(name);
    if (Type(family).empty()) {
      return absl::InvalidArgumentError("a sample before its family's TYPE");
    }
    families_seen_.insert(family);
    if (!samples_.emplace(std::make_pair(name, labels), value).second) {
      return absl::InvalidArgumentError("a duplicate sample");
    }
    return absl::OkStatus();
  }

  std::map<std::string, std::string> types_;
  std::set<std::string> helps_;
  std::set<std::string> families_seen_;
  std::map<std::pair<std::string, Labels>, double> samples_;
};

}  // namespace entrokv::prometheus_testing

#endif  // ENTROKV_TESTS_TESTING_PROMETHEUS_TEXT_H_
