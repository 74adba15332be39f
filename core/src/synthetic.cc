#include "entrokv/core/synthetic.h"

#include <algorithm>
#include <cmath>

#include "step_common.h"

namespace entrokv {
namespace {

// SplitMix64 as a generator: small, fast, and the same on every platform.
uint64_t NextRandom(uint64_t* state) {
  const uint64_t out = rule::SplitMix64(*state);
  *state += 0x9E3779B97F4A7C15ull;
  return out;
}

}  // namespace

SyntheticStream::SyntheticStream(const SyntheticParams& params)
    : params_(params), rng_state_(params.seed * 0xA0761D6478BD642Full + 1) {
  // An engine's own vectors: full head_dim, one query per q head.
  params_.shape.sketch_dim = 0;
  params_.shape.query_form = QueryForm::kPerHead;
  const int64_t per_topic = params_.shape.key_elements();
  const int32_t topics = std::max(params_.topics, 1);
  key_centres_.resize(static_cast<size_t>(topics * per_topic));
  value_centres_.resize(key_centres_.size());
  for (float& v : key_centres_) v = static_cast<float>(Gaussian());
  for (float& v : value_centres_) v = static_cast<float>(Gaussian());
  topic_ = 0;
}

double SyntheticStream::Uniform() {
  return static_cast<double>(NextRandom(&rng_state_) >> 11) * 0x1.0p-53;
}

double SyntheticStream::Gaussian() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // Box-Muller on (0, 1].
  const double u1 = 1.0 - Uniform();
  const double u2 = Uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * M_PI * u2;
  spare_ = r * std::sin(theta);
  has_spare_ = true;
  return r * std::cos(theta);
}

void SyntheticStream::Next(SyntheticStep* out) {
  const Shape& shape = params_.shape;
  const int64_t per_entry = shape.key_elements();
  const int32_t topics = std::max(params_.topics, 1);
  const int32_t d = shape.head_dim;
  const int32_t group = shape.group_size();

  out->index = t_;
  out->topic_switch = false;
  if (t_ > 0 && topics > 1 && Uniform() < 1.0 / params_.topic_length) {
    const int32_t next =
        static_cast<int32_t>(Uniform() * static_cast<double>(topics - 1));
    topic_ = next >= topic_ ? next + 1 : next;  // Any other topic.
    last_switch_ = t_;
    out->topic_switch = true;
  }
  out->topic = topic_;

  // The new entry: an anchor of its own direction, or a topic key.
  out->anchor = Uniform() < params_.anchor_rate;
  out->key.resize(static_cast<size_t>(per_entry));
  out->value.resize(static_cast<size_t>(per_entry));
  const float* centre = key_centres_.data() + int64_t{topic_} * per_entry;
  const float* vcentre = value_centres_.data() + int64_t{topic_} * per_entry;
  for (int64_t i = 0; i < per_entry; ++i) {
    out->key[i] =
        out->anchor
            ? static_cast<float>(params_.anchor_scale * Gaussian())
            : static_cast<float>(centre[i] + params_.key_noise * Gaussian());
    out->value[i] =
        static_cast<float>(vcentre[i] + params_.value_noise * Gaussian());
  }

  // The query: back to an earlier anchor, or at the topic centre.
  const float* target = centre;
  out->revisit = false;
  if (!anchors_.empty() && Uniform() < params_.revisit_rate) {
    std::vector<int32_t> same;
    for (int32_t a = 0; a < static_cast<int32_t>(anchors_.size()); ++a) {
      if (anchors_[a].topic == topic_) same.push_back(a);
    }
    const int32_t pick =
        same.empty() ? static_cast<int32_t>(
                           Uniform() * static_cast<double>(anchors_.size()))
                     : same[static_cast<size_t>(
                           Uniform() * static_cast<double>(same.size()))];
    target = anchors_[pick].key.data();
    out->revisit = true;
  }
  out->query.resize(static_cast<size_t>(shape.query_elements()));
  for (int32_t l = 0; l < shape.layers; ++l) {
    for (int32_t h = 0; h < shape.q_heads; ++h) {
      const int64_t koff = (int64_t{l} * shape.kv_heads + h / group) * d;
      float* q = out->query.data() + (int64_t{l} * shape.q_heads + h) * d;
      for (int32_t j = 0; j < d; ++j) {
        q[j] = static_cast<float>(
            params_.query_scale *
            (target[koff + j] + params_.query_noise * Gaussian()));
      }
    }
  }
  if (out->anchor) anchors_.push_back({topic_, out->key});

  const double since = static_cast<double>(t_ - last_switch_);
  double h =
      params_.entropy_base +
      (t_ >= last_switch_ && last_switch_ > 0
           ? params_.entropy_burst * std::exp(-since / params_.burst_decay)
           : 0.0) +
      (out->revisit ? params_.revisit_entropy : 0.0) +
      params_.entropy_noise * std::fabs(Gaussian());
  out->entropy = std::max(h, 0.0);
  ++t_;
}

}  // namespace entrokv
