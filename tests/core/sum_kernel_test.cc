// The scoring kernels: the summed-query one (ScoreKeys with one query per kv
// head and `sum` set) and the per-head one (z, query heads in groups of 4
// and 8). A key's result depends on its values only, never on where it sits,
// and with AVX-512 it is bit for bit the order cpu_kernels_simd.h states
// (each of 16 lanes accumulates its products by FMA, then GCC's reduce
// tree), whether the key is reduced alone or in a block.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "cpu_kernels_simd.h"
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

// The kernel's arguments for `in`'s keys, `group` query heads per kv head
// reading `queries`; no z, no sum.
internal::ScoreArgs Args(const Case& c, const Inputs& in, int32_t group,
                         const float* queries) {
  internal::ScoreArgs args;
  args.type = c.type;
  args.keys = in.keys.data();
  args.capacity = in.capacity;
  args.layers = c.layers;
  args.kv_heads = c.kv_heads;
  args.group = group;
  args.head_dim = c.head_dim;
  args.live = c.live;
  args.queries = queries;
  args.z = nullptr;
  args.z_stride = 0;
  return args;
}

std::vector<double> RunKernel(const Case& c, const Inputs& in) {
  std::vector<double> sum = in.sum;
  internal::ScoreArgs args = Args(c, in, 1, in.queries.data());
  args.sum = sum.data();
  internal::ScoreKeys(args);
  return sum;
}

// GCC's _mm512_reduce_add_ps, in scalar code.
float ReduceTree(const float lane[16]) {
  float t3[8], t6[4];
  for (int i = 0; i < 8; ++i) t3[i] = lane[i + 8] + lane[i];
  for (int i = 0; i < 4; ++i) t6[i] = t3[i + 4] + t3[i];
  return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

// The AVX2 kernel's horizontal sum of 8 lanes (Avx2::ReduceAdd in
// cpu_kernels_avx2.cc): s[i] = lane i + lane i+4, then (s0 + s2) + (s1 + s3).
float ReduceTree8(const float lane[8]) {
  float s[4];
  for (int i = 0; i < 4; ++i) s[i] = lane[i] + lane[i + 4];
  return (s[0] + s[2]) + (s[1] + s[3]);
}

// The AVX-512 order (16 lanes) or the AVX2 one (8), written out in scalar
// code.
std::vector<double> AvxOrder(const Case& c, const Inputs& in,
                             int width = 16) {
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
          lane[j % width] = std::fma(q[j], key[j], lane[j % width]);
        }
        sum[p] += double(width == 16 ? ReduceTree(lane) : ReduceTree8(lane));
      }
    }
  }
  return sum;
}

// The per-head kernel's z ([layer][q head][live]) for `group` query heads
// per kv head; `queries` [layer][q head][d].
std::vector<float> RunZ(const Case& c, int32_t group, const Inputs& in,
                        const std::vector<float>& queries) {
  std::vector<float> z(size_t(c.layers) * c.kv_heads * group * c.live, -1.0f);
  internal::ScoreArgs args = Args(c, in, group, queries.data());
  args.z = z.data();
  args.z_stride = c.live;
  internal::ScoreKeys(args);
  return z;
}

std::vector<float> AvxOrderZ(const Case& c, int32_t group, const Inputs& in,
                             const std::vector<float>& queries) {
  std::vector<float> z(size_t(c.layers) * c.kv_heads * group * c.live);
  const size_t esize = ElementSize(c.type);
  std::vector<float> key(c.head_dim);
  for (int32_t l = 0; l < c.layers; ++l) {
    for (int32_t kv = 0; kv < c.kv_heads; ++kv) {
      const int64_t plane = int64_t{l} * c.kv_heads + kv;
      for (int64_t p = 0; p < c.live; ++p) {
        DecodeElements(
            c.type,
            in.keys.data() + ((plane * in.capacity + p) * c.head_dim) * esize,
            c.head_dim, key.data());
        for (int32_t g = 0; g < group; ++g) {
          const int64_t head = plane * group + g;
          const float* q = queries.data() + head * c.head_dim;
          float lane[16] = {};
          for (int32_t j = 0; j < c.head_dim; ++j) {
            lane[j % 16] = std::fma(q[j], key[j], lane[j % 16]);
          }
          z[head * c.live + p] = ReduceTree(lane);
        }
      }
    }
  }
  return z;
}

std::vector<float> GroupQueries(const Case& c, int32_t group, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::vector<float> queries(size_t(c.layers) * c.kv_heads * group *
                             c.head_dim);
  for (float& q : queries) q = normal(rng);
  return queries;
}

std::string Describe(const Case& c) {
  return std::string(ElementTypeName(c.type)) + " d=" +
         std::to_string(c.head_dim) + " live=" + std::to_string(c.live);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (ElementType type :
       {ElementType::kF32, ElementType::kF16, ElementType::kBf16}) {
    // 1, 2, 4 and 8 AVX-512 vectors a row (the query held in registers),
    // and 3 and 16 (read from memory).
    for (int32_t d : {16, 32, 48, 64, 128, 256}) {
      for (int64_t live : {1, 2, 15, 16, 17, 32, 33, 47, 100}) {
        // 6 planes: four summed together, then two alone; 3: alone only;
        // 8: two groups of four.
        cases.push_back({type, 2, 3, d, live});
        cases.push_back({type, 1, 3, d, live});
        cases.push_back({type, 4, 2, d, live});
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

bool HaveAvx2() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

// The AVX2 kernel, called directly (a CPU with AVX-512 dispatches to that
// one): keys in pairs, then one alone, each reduced by itself.
TEST(SumKernelTest, WithAvx2EverySumIsTheStatedOrderBitForBit) {
  if (!HaveAvx2()) GTEST_SKIP() << "no AVX2";
  uint32_t seed = 1000;
  std::vector<Case> cases = Cases();
  for (const Case& c : cases) {
    const Inputs in = MakeInputs(c, seed++);
    std::vector<double> got = in.sum;
    internal::ScoreArgs args = Args(c, in, 1, in.queries.data());
    args.sum = got.data();
    internal::SumKeysAvx2(args);
    const std::vector<double> want = AvxOrder(c, in, 8);
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

TEST(SumKernelTest, WithAvx512EveryZIsTheStatedOrderBitForBit) {
  if (std::string(internal::ScoreKernelName()) != "avx512") {
    GTEST_SKIP() << "kernel " << internal::ScoreKernelName();
  }
  uint32_t seed = 500;
  for (const Case& c : Cases()) {
    for (int32_t group : {1, 4, 8}) {
      const Inputs in = MakeInputs(c, seed);
      const std::vector<float> queries = GroupQueries(c, group, seed++);
      const std::vector<float> got = RunZ(c, group, in, queries);
      const std::vector<float> want = AvxOrderZ(c, group, in, queries);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
            << Describe(c) << " group " << group << " z[" << i
            << "]: " << got[i] << " vs " << want[i];
      }
    }
  }
}

TEST(SumKernelTest, AKeysZDoesNotDependOnItsPosition) {
  for (Case c : Cases()) {
    c.live = 23;  // Five blocks of 4 and three alone.
    for (int32_t group : {4, 8}) {
      Inputs in = MakeInputs(c, 7);
      const size_t row = size_t(c.head_dim) * ElementSize(c.type);
      for (int64_t plane = 0; plane < int64_t{c.layers} * c.kv_heads;
           ++plane) {
        std::byte* first = in.keys.data() + plane * in.capacity * row;
        for (int64_t p = 1; p < c.live; ++p) {
          std::memcpy(first + p * row, first, row);
        }
      }
      const std::vector<float> z =
          RunZ(c, group, in, GroupQueries(c, group, 8));
      for (size_t head = 0; head < z.size() / c.live; ++head) {
        const float* row_z = z.data() + head * c.live;
        for (int64_t p = 1; p < c.live; ++p) {
          ASSERT_EQ(std::memcmp(&row_z[p], &row_z[0], sizeof(float)), 0)
              << Describe(c) << " group " << group << " ("
              << internal::ScoreKernelName() << ") head " << head
              << " position " << p << ": " << row_z[p] << " vs " << row_z[0];
        }
      }
    }
  }
}

}  // namespace
}  // namespace entrokv
