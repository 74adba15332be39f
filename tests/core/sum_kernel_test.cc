// The summed-query kernel (ScoreKeys with one query per kv head and `sum`
// set): a key's sum depends on its values only, never on where it sits, and
// with AVX-512 it is bit for bit the order cpu_kernels_simd.h states (each of
// 16 lanes accumulates its products by FMA, then GCC's reduce tree), whether
// the key is reduced alone or in a block of 16.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "entrokv/core/element_type.h"
#include "gtest/gtest.h"

namespace entrokv {
namespace {

struct Case {
  ElementType type;
  int32_t layers, kv_heads, head_dim;
  int64_t live;
};

// The inputs of one call, keys stored in `type`.
struct Inputs {
  std::vector<std::byte> keys;  // [layer][kv][capacity][d]
  std::vector<float> queries;   // [layer][kv][d]
  std::vector<double> sum;      // Its starting values.
  int64_t capacity = 0;
};

Inputs MakeInputs(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs in;
  in.capacity = c.live + 3;
  const size_t elements =
      size_t(c.layers) * c.kv_heads * in.capacity * c.head_dim;
  std::vector<float> keys(elements);
  for (float& k : keys) k = normal(rng);
  in.keys.resize(elements * ElementSize(c.type));
  EncodeElements(c.type, keys.data(), elements, in.keys.data());
  in.queries.resize(size_t(c.layers) * c.kv_heads * c.head_dim);
  for (float& q : in.queries) q = normal(rng) * 0.1f;
  in.sum.resize(c.live);
  for (int64_t p = 0; p < c.live; ++p) in.sum[p] = 0.125 * double(p % 7);
  return in;
}

std::vector<double> RunKernel(const Case& c, const Inputs& in) {
  std::vector<double> sum = in.sum;
  internal::ScoreArgs args;
  args.type = c.type;
  args.keys = in.keys.data();
  args.capacity = in.capacity;
  args.layers = c.layers;
  args.kv_heads = c.kv_heads;
  args.group = 1;
  args.head_dim = c.head_dim;
  args.live = c.live;
  args.queries = in.queries.data();
  args.z = nullptr;
  args.z_stride = 0;
  args.sum = sum.data();
  internal::ScoreKeys(args);
  return sum;
}

// The AVX-512 order, written out in scalar code.
std::vector<double> AvxOrder(const Case& c, const Inputs& in) {
  std::vector<double> sum = in.sum;
  const size_t esize = ElementSize(c.type);
  std::vector<float> key(c.head_dim);
  for (int32_t l = 0; l < c.layers; ++l) {
    for (int32_t kv = 0; kv < c.kv_heads; ++kv) {
      const int64_t plane = int64_t{l} * c.kv_heads + kv;
      const float* q = in.queries.data() + plane * c.head_dim;
      for (int64_t p = 0; p < c.live; ++p) {
        DecodeElements(
            c.type,
            in.keys.data() + ((plane * in.capacity + p) * c.head_dim) * esize,
            c.head_dim, key.data());
        float lane[16] = {};
        for (int32_t j = 0; j < c.head_dim; ++j) {
          lane[j % 16] = std::fma(q[j], key[j], lane[j % 16]);
        }
        float t3[8], t6[4];
        for (int i = 0; i < 8; ++i) t3[i] = lane[i + 8] + lane[i];
        for (int i = 0; i < 4; ++i) t6[i] = t3[i + 4] + t3[i];
        const float total = (t6[0] + t6[2]) + (t6[1] + t6[3]);
        sum[p] += double(total);
      }
    }
  }
  return sum;
}

std::string Describe(const Case& c) {
  return std::string(ElementTypeName(c.type)) + " d=" +
         std::to_string(c.head_dim) + " live=" + std::to_string(c.live);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (ElementType type :
       {ElementType::kF32, ElementType::kF16, ElementType::kBf16}) {
    for (int32_t d : {16, 64, 128}) {
      for (int64_t live : {1, 2, 15, 16, 17, 32, 33, 47, 100}) {
        cases.push_back({type, 2, 3, d, live});
      }
    }
  }
  return cases;
}

TEST(SumKernelTest, WithAvx512EverySumIsTheStatedOrderBitForBit) {
  if (std::string(internal::ScoreKernelName()) != "avx512") {
    GTEST_SKIP() << "kernel " << internal::ScoreKernelName();
  }
  uint32_t seed = 1;
  for (const Case& c : Cases()) {
    const Inputs in = MakeInputs(c, seed++);
    const std::vector<double> got = RunKernel(c, in);
    const std::vector<double> want = AvxOrder(c, in);
    for (int64_t p = 0; p < c.live; ++p) {
      ASSERT_EQ(std::memcmp(&got[p], &want[p], sizeof(double)), 0)
          << Describe(c) << " position " << p << ": " << got[p] << " vs "
          << want[p];
    }
  }
}

TEST(SumKernelTest, AKeysSumDoesNotDependOnItsPosition) {
  // Every position holds the same key (and starts from the same sum): in a
  // block of 16, in a pair and alone, all sums must be identical.
  for (Case c : Cases()) {
    c.live = 37;  // Two blocks of 16, two pairs and one alone.
    Inputs in = MakeInputs(c, 99);
    const size_t row = size_t(c.head_dim) * ElementSize(c.type);
    for (int64_t plane = 0; plane < int64_t{c.layers} * c.kv_heads; ++plane) {
      std::byte* first = in.keys.data() + plane * in.capacity * row;
      for (int64_t p = 1; p < c.live; ++p) {
        std::memcpy(first + p * row, first, row);
      }
    }
    for (double& s : in.sum) s = 0.5;
    const std::vector<double> got = RunKernel(c, in);
    for (int64_t p = 1; p < c.live; ++p) {
      ASSERT_EQ(std::memcmp(&got[p], &got[0], sizeof(double)), 0)
          << Describe(c) << " (" << internal::ScoreKernelName()
          << ") position " << p << ": " << got[p] << " vs " << got[0];
    }
  }
}

}  // namespace
}  // namespace entrokv
