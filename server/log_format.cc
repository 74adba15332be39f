#include "server/log_format.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/spdlog.h"

namespace entrokv::server {
namespace {

thread_local const ScopedLogFields* current_fields = nullptr;

// Length of the valid UTF-8 sequence at `s[i]`, or 0.
size_t Utf8Length(absl::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t n = 0;
  uint32_t min = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  uint32_t code = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  if (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
    return 0;
  }
  return n;
}

}  // namespace

std::string JsonQuote(absl::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t n = Utf8Length(text, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(text.data() + i, n);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
  return out;
}

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    std::string line = absl::StrCat(
        "{\"ts\":\"",
        absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::FromChrono(msg.time),
                         absl::UTCTimeZone()),
        "\",\"level\":",
        JsonQuote(
            absl::string_view(spdlog::level::to_string_view(msg.level).data(),
                              spdlog::level::to_string_view(msg.level).size())),
        ",\"msg\":",
        JsonQuote(absl::string_view(msg.payload.data(), msg.payload.size())));
    bool have_session = false;
    bool have_step = false;
    for (const ScopedLogFields* f = current_fields; f != nullptr;
         f = f->outer_) {
      if (!have_session && !f->session_.empty()) {
        absl::StrAppend(&line, ",\"session\":", JsonQuote(f->session_));
        have_session = true;
      }
      if (!have_step && f->step_.has_value()) {
        absl::StrAppend(&line, ",\"step\":", *f->step_);
        have_step = true;
      }
    }
    line += "}\n";
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

ScopedLogFields::ScopedLogFields(absl::string_view session,
                                 std::optional<uint64_t> step)
    : outer_(current_fields), session_(session), step_(step) {
  current_fields = this;
}

ScopedLogFields::~ScopedLogFields() { current_fields = outer_; }

absl::Status SetLogFormat(absl::string_view format) {
  if (format == "text") {
    spdlog::set_formatter(std::make_unique<spdlog::pattern_formatter>());
    return absl::OkStatus();
  }
  if (format == "json") {
    spdlog::set_formatter(std::make_unique<JsonFormatter>());
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "log_format: \"", format, "\" is neither \"text\" nor \"json\""));
}

}  // namespace entrokv::server
