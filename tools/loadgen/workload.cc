#include "workload.h"

#include <cstddef>

#include "absl/time/clock.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/synthetic.h"

namespace entrokv::loadgen {
namespace {

std::string EncodeBytes(ElementType type, const std::vector<float>& values) {
  std::string out(values.size() * ElementSize(type), '\0');
  EncodeElements(type, values.data(), values.size(),
                 reinterpret_cast<std::byte*>(out.data()));
  return out;
}

// `bytes` (elements of `type`, as MakeData encodes them) as a VectorView.
VectorView ViewOf(ElementType type, const std::string& bytes) {
  if (type == ElementType::kF32) {
    return VectorView::F32(
        {reinterpret_cast<const float*>(bytes.data()), bytes.size() / 4});
  }
  const auto* bits = reinterpret_cast<const uint16_t*>(bytes.data());
  return type == ElementType::kF16 ? VectorView::F16({bits, bytes.size() / 2})
                                   : VectorView::Bf16({bits, bytes.size() / 2});
}

}  // namespace

SessionData MakeData(const SessionConfig& config, int prefill, int chunk,
                     int pool, uint64_t seed) {
  SyntheticParams params;
  params.shape = config.shape;
  params.seed = seed;
  SyntheticStream stream(params);
  SyntheticStep step;
  SessionData data;
  const ElementType type = config.shape.element_type;
  for (int i = 0; i < prefill; ++i) {
    if (i % chunk == 0) {
      data.prefill_keys.emplace_back();
      data.prefill_counts.push_back(0);
    }
    stream.Next(&step);
    data.prefill_keys.back() += EncodeBytes(type, step.key);
    ++data.prefill_counts.back();
    data.prefill_query = EncodeBytes(type, step.query);
    data.prefill_entropy = step.entropy;
  }
  for (int i = 0; i < pool; ++i) {
    stream.Next(&step);
    data.pool.push_back(PoolStep{EncodeBytes(type, step.key),
                                 EncodeBytes(type, step.query), step.entropy});
  }
  return data;
}

void FillStep(const std::string& id, uint64_t step, uint64_t first_slot,
              int count, const std::string& keys, const std::string& query,
              double entropy, v1::SessionStep* out) {
  out->set_session_id(id);
  out->set_step(step);
  for (int i = 0; i < count; ++i) {
    out->mutable_append()->add_slot_ids(first_slot + i);
  }
  out->mutable_append()->set_keys(keys);
  out->set_queries(query);
  out->set_entropy(entropy);
}

StepRequest MakeStepRequest(ElementType type, absl::Span<const uint64_t> slots,
                            const std::string& keys, const std::string& query,
                            double entropy) {
  StepRequest request;
  request.slot_ids = slots;
  request.keys = ViewOf(type, keys);
  request.queries = ViewOf(type, query);
  request.entropy = entropy;
  return request;
}

int64_t DecodeRequestBytes(const SessionConfig& config) {
  const SessionData sample = MakeData(config, 0, 1, 1, 1);
  v1::DecodeRequest request;
  FillStep("s-0000000000000000", 1000, kSlotBase + 1000, 1, sample.pool[0].key,
           sample.pool[0].query, sample.pool[0].entropy, request.add_steps());
  return static_cast<int64_t>(request.ByteSizeLong());
}

int64_t TypicalResultBytes(const SessionConfig& config) {
  v1::DecodeResponse typical;
  v1::SessionStepResult* r = typical.add_results();
  r->set_session_id("s-0000000000000000");
  r->set_step(1000);
  r->add_evicted(kSlotBase + 1000);
  r->set_live(config.budget);
  r->set_budget(config.budget);
  r->set_entropy(1.2345);
  r->set_compute_ns(12345);
  return static_cast<int64_t>(typical.ByteSizeLong());
}

absl::Time PaceStep(double rate, absl::Time phase_start, int k) {
  absl::Time start = absl::Now();
  if (rate > 0) {
    const absl::Time scheduled = phase_start + absl::Seconds(k / rate);
    if (scheduled > start) absl::SleepFor(scheduled - start);
    start = scheduled;
  }
  return start;
}

}  // namespace entrokv::loadgen
