// Prints C++'s sketches for tests/python/test_conformance.py to compare with the
// Python client's, bit for bit: DefaultProjection's doubles and the floats
// Sketcher::Keys / Sketcher::Queries produce for fixed inputs.
//
// Usage: projection_dump SEED LAYERS KV_HEADS Q_HEADS HEAD_DIM R GROUP_SUM
//   SCORED_LAYER... ; reads N, then N*layers*kv*head_dim key floats, then
//   layers*q_heads*head_dim query floats (as hex bit patterns) on stdin.
// Prints: "P" lines of hex doubles per (layer, kv head); "K" and "Q" lines of
// hex floats.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "entrokv/core/config.h"
#include "entrokv/core/sketch.h"

int main(int argc, char** argv) {
  if (argc < 8) return 2;
  entrokv::SessionConfig config;
  config.projection_seed = std::strtoull(argv[1], nullptr, 10);
  config.shape.layers = std::atoi(argv[2]);
  config.shape.kv_heads = std::atoi(argv[3]);
  config.shape.q_heads = std::atoi(argv[4]);
  config.shape.head_dim = std::atoi(argv[5]);
  config.shape.sketch_dim = std::atoi(argv[6]);
  config.shape.query_form = std::atoi(argv[7]) ? entrokv::QueryForm::kGroupSum
                                               : entrokv::QueryForm::kPerHead;
  config.ranking = entrokv::Ranking::kWindow;
  for (int i = 8; i < argc; ++i) config.scored_layers.push_back(std::atoi(argv[i]));
  const auto& s = config.shape;
  for (int l = 0; l < s.layers; ++l) {
    const int layer = config.scored_layers.empty() ? l : config.scored_layers[l];
    for (int g = 0; g < s.kv_heads; ++g) {
      std::vector<double> p = entrokv::DefaultProjection(
          config.projection_seed, layer, g, s.head_dim, s.sketch_dim);
      std::printf("P");
      for (double v : p) {
        uint64_t bits;
        std::memcpy(&bits, &v, 8);
        std::printf(" %016" PRIx64, bits);
      }
      std::printf("\n");
    }
  }
  auto sketcher = entrokv::Sketcher::Create(config);
  if (!sketcher.ok()) {
    std::fprintf(stderr, "%s\n", sketcher.status().ToString().c_str());
    return 1;
  }
  auto read_floats = [](int64_t count) {
    std::vector<float> v(count);
    for (auto& x : v) {
      uint32_t bits = 0;
      if (std::scanf("%" SCNx32, &bits) != 1) std::exit(3);
      std::memcpy(&x, &bits, 4);
    }
    return v;
  };
  auto print = [](const char* tag, const std::vector<float>& v) {
    std::printf("%s", tag);
    for (float x : v) {
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      std::printf(" %08" PRIx32, bits);
    }
    std::printf("\n");
  };
  int64_t n = 0;
  if (std::scanf("%" SCNd64, &n) != 1) return 3;
  std::vector<float> keys = read_floats(n * sketcher->full_key_elements());
  std::vector<float> queries = read_floats(sketcher->full_query_elements());
  std::vector<float> out;
  sketcher->Keys(keys, n, &out);
  print("K", out);
  sketcher->Queries(queries, &out);
  print("Q", out);
  return 0;
}
