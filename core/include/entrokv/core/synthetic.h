// A seeded generator of synthetic reasoning streams.
//
// The stream has a structure a reader can name:
//  - Topics. The stream dwells on one of `topics` topics for a geometric number
//    of steps (mean `topic_length`), then switches to another. Each topic has a
//    key centre per (layer, kv head); a new entry's key is its topic's centre
//    plus Gaussian noise (`key_noise`), so keys cluster by topic. Topics recur.
//  - Anchors. With probability `anchor_rate` a new entry is an anchor: its key
//    is a direction of its own (norm `anchor_scale` times a topic key's). On a
//    `revisit_rate` share of steps the query returns to an earlier anchor of
//    the current topic (or any anchor when the topic has none): these are the
//    reasoning states worth keeping.
//  - Queries. Otherwise the query points at the current topic's centre. Each q
//    head adds its own noise (`query_noise`); `query_scale` sets logit sizes.
//  - Values, for the memory-error metric: the topic's value centre plus noise.
//  - Entropy. H_t = entropy_base + entropy_burst·exp(−(t − t_switch) /
//    burst_decay) + (revisit ? revisit_entropy : 0) + entropy_noise·|N(0,1)|:
//    the model is unsure right after a topic switch and when it reaches back.
//
// The same params (seed included) give the same stream, bit for bit, on every
// platform that implements IEEE float (the generator uses its own PRNG and
// Box-Muller, not <random>'s distributions). Not thread-safe.

#ifndef ENTROKV_CORE_SYNTHETIC_H_
#define ENTROKV_CORE_SYNTHETIC_H_

#include <cstdint>
#include <vector>

#include "entrokv/core/config.h"

namespace entrokv {

struct SyntheticParams {
  // element_type is ignored: the generator produces floats. sketch_dim and
  // query_form are too: it produces what an engine holds (full head_dim,
  // one query per q head), which a Sketcher turns into a sketched session's
  // wire form.
  Shape shape;
  uint64_t seed = 1;
  int32_t topics = 6;
  double topic_length = 80.0;  // Mean steps per topic visit.
  double key_noise = 0.6;  // Per element, relative to a unit-variance centre.
  double anchor_rate = 0.03;
  double anchor_scale = 1.0;
  double revisit_rate = 0.25;
  double query_scale = 0.6;
  double query_noise = 0.3;
  double value_noise = 0.7;
  double entropy_base = 1.0;
  double entropy_burst = 2.0;
  double burst_decay = 12.0;  // Steps.
  double revisit_entropy = 0.8;
  double entropy_noise = 0.25;
};

// One step of the stream: the new entry and the step's query.
struct SyntheticStep {
  int64_t index = 0;         // 0, 1, 2, ...
  std::vector<float> key;    // shape.key_elements()
  std::vector<float> value;  // shape.key_elements()
  std::vector<float> query;  // shape.query_elements()
  double entropy = 0.0;      // nats, >= 0
  int32_t topic = 0;
  bool anchor = false;        // The new entry is an anchor.
  bool revisit = false;       // The query returns to an earlier anchor.
  bool topic_switch = false;  // The topic changed at this step.
};

class SyntheticStream {
 public:
  explicit SyntheticStream(const SyntheticParams& params);

  const SyntheticParams& params() const { return params_; }

  // Fills `out` with the next step (reusing its vectors' capacity).
  void Next(SyntheticStep* out);

 private:
  double Uniform();   // [0, 1)
  double Gaussian();  // N(0, 1)

  SyntheticParams params_;
  uint64_t rng_state_;
  bool has_spare_ = false;
  double spare_ = 0.0;
  int64_t t_ = 0;
  int32_t topic_ = 0;
  int64_t last_switch_ = 0;
  std::vector<float> key_centres_;    // [topic][layer][kv][d]
  std::vector<float> value_centres_;  // [topic][layer][kv][d]
  struct Anchor {
    int32_t topic;
    std::vector<float> key;
  };
  std::vector<Anchor> anchors_;
};

}  // namespace entrokv

#endif  // ENTROKV_CORE_SYNTHETIC_H_
