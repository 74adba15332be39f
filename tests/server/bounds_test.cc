// Every numeric bound of the configuration and of a step, as the proto's
// comments state it ("Bound: [lo, hi]." after the field, see the comment
// above `message Shape`): this test reads those lines from
// proto/entrokv/v1/entrokv.proto, then sends each bound (expects OK) and the
// value just past it (expects INVALID_ARGUMENT whose message names the
// field). The expected values come from the docs, not from the code. It also
// requires that every numeric field of the configuration and step messages
// states a bound (or "Any value"), and probes the shape's product bound
// ("Product bound: [1, 2^24] elements." above `message Shape`) the same way.

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::Message;
using ::google::protobuf::Reflection;
using ::testing::HasSubstr;

// One documented bound: [lo, hi] with each end included or not, and "0 or"
// when 0 is allowed besides.
struct Bound {
  std::string field;  // "Shape.layers"
  std::string lo, hi;
  bool lo_included = true, hi_included = true;
  bool zero_too = false;
};

// Every field of the proto with its comment (the comment lines just above
// it and the trailing comment on its line), keyed "Message.field".
std::map<std::string, std::string> FieldComments(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  const std::regex message_line(R"(^\s*message\s+(\w+)\s*\{)");
  const std::regex field_line(
      R"(^\s*(?:optional\s+|repeated\s+)?[\w.]+\s+(\w+)\s*=\s*\d+\s*;(.*)$)");
  const std::regex comment_line(R"(^\s*//(.*)$)");
  std::map<std::string, std::string> comments;
  std::string message, pending, line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, message_line)) {
      message = m[1];
      pending.clear();
    } else if (std::regex_match(line, m, comment_line)) {
      pending += " " + m[1].str();
    } else if (!message.empty() && std::regex_match(line, m, field_line)) {
      comments[absl::StrCat(message, ".", m[1].str())] = pending + m[2].str();
      pending.clear();
    } else {
      pending.clear();
    }
  }
  return comments;
}

std::optional<Bound> ParseBound(const std::string& field,
                                const std::string& comment) {
  const std::regex bound(
      R"(Bound:\s*(0 or\s+)?([\[(])\s*([^,\s]+)\s*,\s*([^\])\s]+)\s*([\])]))");
  std::smatch m;
  if (!std::regex_search(comment, m, bound)) return std::nullopt;
  Bound b;
  b.field = field;
  b.zero_too = m[1].matched;
  b.lo_included = m[2] == "[";
  b.lo = m[3];
  b.hi = m[4];
  b.hi_included = m[5] == "]";
  return b;
}

// The messages whose fields are bounded, and where each sits in a request.
const std::map<std::string, std::string>& ConfigPaths() {
  static const auto* paths = new std::map<std::string, std::string>{
      {"Shape", "shape"},
      {"AffinityParams", "affinity"},
      {"EntropyBudgetParams", "entropy_budget"},
      {"H2oParams", "h2o"},
      {"Protection", "protection"},
      {"TierParams", "tier"},
      {"SessionConfig", ""}};
  return *paths;
}

// The valid configuration every probe starts from.
constexpr int64_t kBudget = 100;
constexpr int32_t kHeadDim = 64;

v1::SessionConfig BaseConfig() {
  v1::SessionConfig c;
  c.mutable_shape()->set_layers(1);
  c.mutable_shape()->set_kv_heads(1);
  c.mutable_shape()->set_q_heads(1);
  c.mutable_shape()->set_head_dim(kHeadDim);
  c.mutable_shape()->set_element_type(v1::ELEMENT_TYPE_F32);
  c.set_budget(kBudget);
  c.set_policy("entropy");
  c.set_placement(v1::PLACEMENT_CPU);
  return c;
}

// A bound's end as a number: a literal (1e6, -1e8, 2^40, 2^64-2) or the
// base config's value of the field it names.
long double EndValue(const std::string& end) {
  if (end == "budget") return kBudget;
  if (end == "head_dim") return kHeadDim;
  std::smatch m;
  const std::regex power(R"(^2\^(\d+)(?:-(\d+))?$)");
  if (std::regex_match(end, m, power)) {
    long double v = std::ldexp(1.0L, std::stoi(m[1]));
    if (m[2].matched) v -= std::stoi(m[2]);
    return v;
  }
  double v = 0;
  EXPECT_TRUE(absl::SimpleAtod(end, &v)) << "a bound's end: " << end;
  return v;
}

// A probe: a value and whether the docs say it is accepted.
struct Probe {
  long double value;
  bool ok;
};

// The value next to `v` towards `direction` (+1/-1) for the field's type:
// one for integers, the next representable value for floating point.
long double Next(long double v, int direction, bool integer, bool is_float) {
  if (integer) return v + direction;
  if (is_float) {
    return std::nextafter(static_cast<float>(v),
                          direction * std::numeric_limits<float>::infinity());
  }
  return std::nextafter(static_cast<double>(v),
                        direction * std::numeric_limits<double>::infinity());
}

std::vector<Probe> ProbesOf(const Bound& b, bool integer, bool is_float,
                            bool is_unsigned) {
  const long double lo = EndValue(b.lo);
  const long double hi = EndValue(b.hi);
  std::vector<Probe> probes;
  auto add = [&](long double v, bool ok) {
    if (is_unsigned && v < 0) return;  // Not sendable.
    probes.push_back({v, ok});
  };
  // Each end and its neighbour across it: the one inside is accepted.
  add(lo, b.lo_included);
  add(Next(lo, b.lo_included ? -1 : +1, integer, is_float), !b.lo_included);
  add(hi, b.hi_included);
  add(Next(hi, b.hi_included ? +1 : -1, integer, is_float), !b.hi_included);
  if (b.zero_too) {
    for (Probe& p : probes) {
      if (p.value == 0) p.ok = true;
    }
    add(0, true);
  }
  return probes;
}

// Sets `field` (its proto name) of `message` to `value`.
void SetNumber(Message* message, const std::string& field, long double value) {
  const FieldDescriptor* f = message->GetDescriptor()->FindFieldByName(field);
  ASSERT_NE(f, nullptr) << field;
  const Reflection* r = message->GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      if (f->is_repeated()) {
        r->ClearField(message, f);
        r->AddInt32(message, f, static_cast<int32_t>(value));
      } else {
        r->SetInt32(message, f, static_cast<int32_t>(value));
      }
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      r->SetInt64(message, f, static_cast<int64_t>(value));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      r->SetUInt64(message, f, static_cast<uint64_t>(value));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      r->SetDouble(message, f, static_cast<double>(value));
      break;
    default:
      FAIL() << field << ": not a number";
  }
}

bool IsNumeric(const FieldDescriptor* f) {
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return true;
    default:
      return false;
  }
}

std::string Show(long double v) {
  std::ostringstream out;
  out.precision(21);
  out << v;
  return out.str();
}

class BoundsTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerOptions options = TestServerOptions();
    options.max_live_entries = 0;  // The config's own bound on budget.
    StartServer(options);
    comments_ = FieldComments(ENTROKV_PROTO_FILE);
    ASSERT_FALSE(comments_.empty());
  }

  std::vector<Bound> BoundsOf(const std::vector<std::string>& messages) {
    std::vector<Bound> bounds;
    for (const auto& [field, comment] : comments_) {
      const std::string message = field.substr(0, field.find('.'));
      if (std::find(messages.begin(), messages.end(), message) ==
          messages.end()) {
        continue;
      }
      if (std::optional<Bound> b = ParseBound(field, comment)) {
        bounds.push_back(*b);
      }
    }
    return bounds;
  }

  // A session of `config`, attached; one step appending slot 1 (key and
  // query all 0.5, entropy 1.0) after `spoil` changed it.
  absl::Status StepOnce(const std::function<void(v1::SessionStep*)>& spoil) {
    const absl::StatusOr<v1::CreateSessionResponse> created =
        CreateSession(stub_.get(), BaseConfig());
    if (!created.ok()) return created.status();
    DecodeStream stream(stub_.get());
    if (absl::Status s = stream.Attach(created->session_id()); !s.ok()) {
      return s;
    }
    v1::SessionStep step;
    step.set_session_id(created->session_id());
    step.set_step(0);
    step.mutable_append()->add_slot_ids(1);
    const std::vector<float> half(kHeadDim, 0.5f);
    step.mutable_append()->set_keys(
        std::string(reinterpret_cast<const char*>(half.data()),
                    half.size() * sizeof(float)));
    step.set_queries(step.append().keys());
    step.set_entropy(1.0);
    spoil(&step);
    return stream.Step(step).status();
  }

  std::map<std::string, std::string> comments_;
};

TEST_F(BoundsTest, EveryNumericConfigAndStepFieldStatesItsBound) {
  const google::protobuf::Descriptor* messages[] = {
      v1::Shape::descriptor(),        v1::AffinityParams::descriptor(),
      v1::EntropyBudgetParams::descriptor(), v1::H2oParams::descriptor(),
      v1::Protection::descriptor(),   v1::TierParams::descriptor(),
      v1::SessionConfig::descriptor(),
      v1::SessionStep::descriptor(),  v1::Append::descriptor(),
      v1::Logits::descriptor()};
  for (const google::protobuf::Descriptor* d : messages) {
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      if (!IsNumeric(f)) continue;
      const std::string key = absl::StrCat(d->name(), ".", f->name());
      ASSERT_TRUE(comments_.contains(key)) << key << " not found in the proto";
      const std::string& comment = comments_[key];
      EXPECT_TRUE(ParseBound(key, comment).has_value() ||
                  comment.find("Any value") != std::string::npos ||
                  comment.find("Any finite value") != std::string::npos)
          << key << " states no bound: \"" << comment << "\"";
    }
  }
}

TEST_F(BoundsTest, ConfigFieldsAcceptTheirBoundAndRejectThePastValue) {
  std::vector<std::string> names;
  for (const auto& [message, path] : ConfigPaths()) names.push_back(message);
  const std::vector<Bound> bounds = BoundsOf(names);
  ASSERT_GE(bounds.size(), 20u);  // Every bounded field, as listed above.
  for (const Bound& b : bounds) {
    const std::string message = b.field.substr(0, b.field.find('.'));
    const std::string name = b.field.substr(b.field.find('.') + 1);
    const std::string path = ConfigPaths().at(message);
    const std::string wire_name =
        path.empty() ? absl::StrCat("config.", name)
                     : absl::StrCat("config.", path, ".", name);
    v1::SessionConfig probe_base = BaseConfig();
    Message* target = &probe_base;
    if (!path.empty()) {
      const FieldDescriptor* sub =
          v1::SessionConfig::descriptor()->FindFieldByName(path);
      target = probe_base.GetReflection()->MutableMessage(&probe_base, sub);
    }
    const FieldDescriptor* f = target->GetDescriptor()->FindFieldByName(name);
    ASSERT_NE(f, nullptr) << b.field;
    const bool integer = f->cpp_type() != FieldDescriptor::CPPTYPE_DOUBLE;
    for (const Probe& p : ProbesOf(b, integer, /*is_float=*/false,
                                   f->cpp_type() ==
                                       FieldDescriptor::CPPTYPE_UINT64)) {
      v1::SessionConfig config = BaseConfig();
      Message* into = &config;
      if (!path.empty()) {
        into = config.GetReflection()->MutableMessage(
            &config, v1::SessionConfig::descriptor()->FindFieldByName(path));
      }
      SetNumber(into, name, p.value);
      // q_heads must stay a multiple of kv_heads.
      if (b.field == "Shape.kv_heads") {
        config.mutable_shape()->set_q_heads(config.shape().kv_heads());
      }
      const absl::StatusOr<v1::CreateSessionResponse> created =
          CreateSession(stub_.get(), config);
      SCOPED_TRACE(absl::StrCat(wire_name, " = ", Show(p.value)));
      if (p.ok) {
        EXPECT_OK(created);
      } else {
        EXPECT_STATUS_CODE(created, absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(std::string(created.status().message()),
                    HasSubstr(wire_name + ":"));
      }
    }
  }
}

TEST_F(BoundsTest, StepFieldsAcceptTheirBoundAndRejectThePastValue) {
  const std::vector<Bound> bounds = BoundsOf({"SessionStep", "Append"});
  ASSERT_EQ(bounds.size(), 4u);  // step, entropy, keys, queries.
  for (const Bound& b : bounds) {
    const std::string name = b.field.substr(b.field.find('.') + 1);
    const bool elements = name == "keys" || name == "queries";
    const bool integer = name == "step";
    const std::string wire_name =
        absl::StrCat("steps[0].", name == "keys" ? "append.keys" : name);
    for (const Probe& p : ProbesOf(b, integer, /*is_float=*/elements,
                                   /*is_unsigned=*/integer)) {
      SCOPED_TRACE(absl::StrCat(wire_name, " = ", Show(p.value)));
      const absl::Status status = StepOnce([&](v1::SessionStep* step) {
        if (name == "step") {
          // 2^64-1 does not fit a long double's 64-bit mantissa exactly on
          // every platform: set it from the integer form.
          step->set_step(p.value >= 18446744073709551615.0L
                             ? std::numeric_limits<uint64_t>::max()
                             : static_cast<uint64_t>(p.value));
        } else if (name == "entropy") {
          step->set_entropy(static_cast<double>(p.value));
        } else {
          std::string* bytes = name == "keys"
                                   ? step->mutable_append()->mutable_keys()
                                   : step->mutable_queries();
          const float v = static_cast<float>(p.value);
          std::memcpy(bytes->data() + 3 * sizeof(float), &v, sizeof(float));
        }
      });
      if (p.ok) {
        EXPECT_OK(status);
      } else {
        EXPECT_STATUS_CODE(status, absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(std::string(status.message()), HasSubstr(wire_name));
      }
    }
  }
}

// The shape's product bound (the comment above `message Shape`): a key has
// layers · kv_heads · dim elements, the queries layers · q_heads · dim
// (kv_heads for group_sum), dim = sketch_dim when set, and each is at most
// the documented limit. Shapes on both sides of it, each field within its
// own bound; the expected answer comes from that formula.
TEST_F(BoundsTest, ShapeProductsAcceptTheirBoundAndRejectThePastValue) {
  std::ifstream in(ENTROKV_PROTO_FILE);
  std::stringstream text;
  text << in.rdbuf();
  std::smatch m;
  const std::string proto = text.str();
  ASSERT_TRUE(std::regex_search(
      proto, m, std::regex(R"(Product bound:\s*\[1,\s*2\^(\d+)\])")))
      << "no product bound in the proto";
  const int64_t limit = int64_t{1} << std::stoi(m[1]);
  constexpr int64_t kMaxField = 65536;  // Shape's own bounds.
  // limit + 1 as a product of two factors that each fit a field.
  int64_t a = 0;
  for (int64_t f = 2; f <= kMaxField && a == 0; ++f) {
    if ((limit + 1) % f == 0 && (limit + 1) / f <= kMaxField) a = f;
  }
  ASSERT_NE(a, 0) << "limit + 1 has no factors within the field bounds";
  const int64_t b = (limit + 1) / a;

  struct ShapeCase {
    int64_t layers, kv_heads, q_heads, head_dim, sketch_dim;
    bool group_sum;
  };
  const ShapeCase cases[] = {
      {limit / kMaxField, 1, 1, kMaxField, 0, false},  // A key of the limit.
      {a, 1, 1, b, 0, false},                          // One element past.
      {1, 1, a, b, 0, false},  // Queries one past, the key well within.
      {1, 1, a, b, 0, true},   // The same as group sums: kv heads count.
      {2 * limit / kMaxField, 1, 1, kMaxField, kMaxField / 2, false},
      {2 * limit / kMaxField, 1, 1, kMaxField, kMaxField / 2 + 1, false},
  };
  int accepted = 0, rejected = 0;
  for (const ShapeCase& c : cases) {
    const int64_t dim = c.sketch_dim > 0 ? c.sketch_dim : c.head_dim;
    const int64_t key = c.layers * c.kv_heads * dim;
    const int64_t queries =
        c.layers * (c.group_sum ? c.kv_heads : c.q_heads) * dim;
    const bool ok = key <= limit && queries <= limit;
    v1::SessionConfig config = BaseConfig();
    v1::Shape* shape = config.mutable_shape();
    shape->set_layers(static_cast<int32_t>(c.layers));
    shape->set_kv_heads(static_cast<int32_t>(c.kv_heads));
    shape->set_q_heads(static_cast<int32_t>(c.q_heads));
    shape->set_head_dim(static_cast<int32_t>(c.head_dim));
    shape->set_sketch_dim(static_cast<int32_t>(c.sketch_dim));
    if (c.group_sum) shape->set_query_form(v1::QUERY_FORM_GROUP_SUM);
    SCOPED_TRACE(absl::StrCat("shape ", shape->ShortDebugString(), ": key ",
                              key, ", queries ", queries, " elements"));
    const absl::StatusOr<v1::CreateSessionResponse> created =
        CreateSession(stub_.get(), config);
    if (ok) {
      ++accepted;
      EXPECT_OK(created);
    } else {
      ++rejected;
      EXPECT_STATUS_CODE(created, absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(created.status().message()),
                  HasSubstr("config.shape:"));
    }
  }
  EXPECT_EQ(accepted, 3);
  EXPECT_EQ(rejected, 3);
}

}  // namespace
}  // namespace entrokv::server::testing
