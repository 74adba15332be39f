// Sketched keys and queries (project:r, group-sum queries, scored layers):
// the projection against a naive reference, scores of sketched sessions by
// hand, and the configuration rules.

#include "entrokv/core/sketch.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core_test_util.h"
#include "entrokv/core/backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sketch_project.h"

namespace entrokv::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(DefaultProjectionTest, HasOrthonormalColumnsAndDependsOnItsInputs) {
  const int d = 128, r = 16;
  const std::vector<double> p = DefaultProjection(42, 3, 5, d, r);
  ASSERT_EQ(p.size(), size_t{d * r});
  for (int a = 0; a < r; ++a) {
    for (int b = 0; b < r; ++b) {
      double dot = 0.0;
      for (int j = 0; j < d; ++j) dot += p[j * r + a] * p[j * r + b];
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-12) << a << "," << b;
    }
  }
  EXPECT_EQ(p, DefaultProjection(42, 3, 5, d, r));
  EXPECT_NE(p, DefaultProjection(43, 3, 5, d, r));
  EXPECT_NE(p, DefaultProjection(42, 4, 5, d, r));
  EXPECT_NE(p, DefaultProjection(42, 3, 6, d, r));
}

TEST(DefaultProjectionTest, FirstColumnFollowsTheDocumentedConstruction) {
  // Rebuilds column 0 from the construction in sketch.h with its own
  // SplitMix64, for d = 4, r = 1: the normalised Irwin-Hall draws.
  auto mix = [](uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  const uint64_t base = mix(9 ^ ((uint64_t{2} << 32) | 1));
  std::vector<double> g(4);
  uint64_t t = 0;
  for (double& v : g) {
    for (int m = 0; m < 12; ++m)
      v += static_cast<double>(mix(base + t++) >> 11) * 0x1.0p-53;
    v -= 6.0;
  }
  double norm = 0.0;
  for (double v : g) norm += v * v;
  norm = std::sqrt(norm);
  const std::vector<double> p = DefaultProjection(9, 2, 1, 4, 1);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(p[j], g[j] / norm) << j;
}

SessionConfig SketchConfig(int32_t r) {
  SessionConfig config;
  config.shape.layers = 2;
  config.shape.kv_heads = 2;
  config.shape.q_heads = 4;
  config.shape.head_dim = 8;
  config.shape.sketch_dim = r;
  config.shape.element_type = ElementType::kF32;
  config.ranking = Ranking::kAffinity;
  config.projection_seed = 3;
  return config;
}

TEST(SketcherTest, ProjectsKeysAndQueriesLikeANaiveProduct) {
  SessionConfig config = SketchConfig(3);
  config.scored_layers = {5, 9};
  auto sketcher = Sketcher::Create(config);
  ASSERT_TRUE(sketcher.ok()) << sketcher.status();
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> keys(2 * sketcher->full_key_elements());
  for (float& v : keys) v = normal(rng);
  std::vector<float> queries(sketcher->full_query_elements());
  for (float& v : queries) v = normal(rng);
  std::vector<float> sk, sq;
  sketcher->Keys(keys, 2, &sk);
  sketcher->Queries(queries, &sq);
  ASSERT_EQ(sk.size(), size_t{2 * 2 * 2 * 3});
  ASSERT_EQ(sq.size(), size_t{2 * 4 * 3});
  for (int l = 0; l < 2; ++l) {
    for (int g = 0; g < 2; ++g) {
      // The matrix of sent layer l is the one of model layer 5 or 9.
      const std::vector<double> p =
          DefaultProjection(3, l == 0 ? 5 : 9, g, 8, 3);
      for (int c = 0; c < 3; ++c) {
        for (int e = 0; e < 2; ++e) {
          double want = 0.0;
          for (int j = 0; j < 8; ++j)
            want += p[j * 3 + c] * keys[((e * 2 + l) * 2 + g) * 8 + j];
          EXPECT_NEAR(sk[((e * 2 + l) * 2 + g) * 3 + c], want, 1e-5);
        }
        for (int h = 2 * g; h < 2 * g + 2; ++h) {
          double want = 0.0;
          for (int j = 0; j < 8; ++j)
            want += p[j * 3 + c] * queries[(l * 4 + h) * 8 + j];
          EXPECT_NEAR(sq[(l * 4 + h) * 3 + c], want, 1e-5);
        }
      }
    }
  }
}

// The vector projections are bit-identical to the scalar one, and the scalar
// one to a naive double product rounded to float, for column counts that are
// and are not multiples of the vector width (and of the four vectors a block
// holds), and token counts that are and are not multiples of the four tokens
// sharing a matrix; with float vectors (keys) and double ones (the
// sketcher's query sums).
template <typename V>
void ExpectVectorProjectionsAreBitIdenticalToTheScalarOne() {
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  for (int64_t tokens : {1, 2, 3, 5, 7, 8}) {
    for (int64_t planes : {1, 3, 4, 9}) {
      for (int64_t d : {1, 8, 128}) {
        for (int64_t r : {1, 3, 4, 8, 15, 16, 17, 33, 64, 100}) {
          std::vector<double> p(static_cast<size_t>(planes * d * r));
          std::vector<V> v(static_cast<size_t>(tokens * planes * d));
          for (double& x : p) x = normal(rng);
          for (V& x : v) x = static_cast<V>(normal(rng) * 3.0);
          const std::string where = absl::StrCat(
              sizeof(V) == 4 ? "float" : "double", " vectors, ", tokens,
              " tokens, ", planes, " planes, d ", d, ", r ", r);
          std::vector<float> scalar(static_cast<size_t>(tokens * planes * r));
          internal::ProjectScalar(p.data(), v.data(), tokens, planes, d, r,
                                  scalar.data());
          for (int64_t e = 0; e < tokens; ++e) {
            for (int64_t t = 0; t < planes; ++t) {
              const V* vt = v.data() + (e * planes + t) * d;
              for (int64_t c = 0; c < r; ++c) {
                double naive = 0.0;
                for (int64_t j = 0; j < d; ++j) {
                  const double term =
                      p[(t * d + j) * r + c] * static_cast<double>(vt[j]);
                  naive = naive + term;
                }
                ASSERT_EQ(scalar[(e * planes + t) * r + c],
                          static_cast<float>(naive))
                    << where;
              }
            }
          }
#if defined(__x86_64__)
          // NaN before each call: an output left unwritten cannot pass.
          std::vector<float> got(scalar.size());
          if (__builtin_cpu_supports("avx2")) {
            std::fill(got.begin(), got.end(), std::nanf(""));
            internal::ProjectAvx2(p.data(), v.data(), tokens, planes, d, r,
                                  got.data());
            ASSERT_EQ(got, scalar) << "avx2, " << where;
          }
          if (__builtin_cpu_supports("avx512f")) {
            std::fill(got.begin(), got.end(), std::nanf(""));
            internal::ProjectAvx512(p.data(), v.data(), tokens, planes, d, r,
                                    got.data());
            ASSERT_EQ(got, scalar) << "avx512, " << where;
          }
#endif
        }
      }
    }
  }
}

TEST(SketcherTest, VectorProjectionsAreBitIdenticalToTheScalarOne) {
  ExpectVectorProjectionsAreBitIdenticalToTheScalarOne<float>();
  ExpectVectorProjectionsAreBitIdenticalToTheScalarOne<double>();
  EXPECT_NE(std::string(internal::BestProjectName()), "");
}

// Sketcher::Queries bit for bit against the reference arithmetic written out
// here: per head, acc = 0; acc = acc + P[j][c]·double(q[j]) for j ascending,
// rounded to float; group sums, Σ_h double(q_h[j]) from 0.0 in h order, then
// the same product. Head dims that are and are not multiples of the vector
// widths, groups of 1 to 5; queries with float subnormals (and -0, which a
// sketched output cannot show: the group sums' test below checks it).
TEST(SketcherTest, QueriesAreTheReferenceArithmeticBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (QueryForm form : {QueryForm::kPerHead, QueryForm::kGroupSum}) {
    for (int32_t d : {6, 16, 128}) {
      for (int32_t group : {1, 3, 4, 5}) {
        SessionConfig config = SketchConfig(d > 8 ? 16 : 3);
        config.shape.head_dim = d;
        config.shape.q_heads = 2 * group;
        config.shape.query_form = form;
        auto sketcher = Sketcher::Create(config);
        ASSERT_TRUE(sketcher.ok()) << sketcher.status();
        const int32_t r = config.shape.sketch_dim;
        std::vector<float> q(sketcher->full_query_elements());
        for (size_t i = 0; i < q.size(); ++i) {
          q[i] = i % 11 == 0  ? -0.0f
                 : i % 7 == 0 ? 1e-40f * float(i % 5 + 1)
                              : normal(rng);
        }
        std::vector<float> got;
        sketcher->Queries(q, &got);
        const int rows = form == QueryForm::kPerHead ? group : 1;
        ASSERT_EQ(got.size(), size_t(2 * 2 * rows * r));
        const std::string where = absl::StrCat(
            form == QueryForm::kPerHead ? "per head" : "group sums", ", d ", d,
            ", group ", group);
        for (int l = 0; l < 2; ++l) {
          for (int g = 0; g < 2; ++g) {
            const std::vector<double> p = DefaultProjection(3, l, g, d, r);
            for (int row = 0; row < rows; ++row) {
              std::vector<double> v(d, 0.0);
              for (int h = 0; h < group; ++h) {
                if (form == QueryForm::kPerHead && h != row) continue;
                const float* qh = q.data() + ((l * 2 + g) * group + h) * d;
                for (int j = 0; j < d; ++j) v[j] = v[j] + double(qh[j]);
              }
              for (int c = 0; c < r; ++c) {
                double acc = 0.0;
                for (int j = 0; j < d; ++j) {
                  const double term = p[j * r + c] * v[j];
                  acc = acc + term;
                }
                ASSERT_EQ(got[(((l * 2 + g) * rows) + row) * r + c], float(acc))
                    << where << ", plane " << l * 2 + g << ", row " << row
                    << ", column " << c;
              }
            }
          }
        }
      }
    }
  }
}

// The group sums' versions against the reference written out, bit for bit:
// random heads, -0 (0.0 + -0.0 is +0, so a sum must start from 0.0), and
// heads (1e20, -1e20, 1) in one element of every vector, which sum to 1 only
// in h order (reversed: 0).
TEST(SketcherTest, GroupSumVersionsAreBitIdenticalToTheReference) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  for (int64_t d : {1, 3, 4, 8, 13, 128}) {
    for (int64_t group : {1, 2, 4, 5}) {
      const int64_t vectors = 3;
      std::vector<float> q(static_cast<size_t>(vectors * group * d));
      for (size_t i = 0; i < q.size(); ++i) {
        q[i] = i % 3 == 0 ? -0.0f : normal(rng) * 1e3f;
      }
      if (group >= 3) {  // Elements 0 and d - 1 (a vector's and the tail's).
        for (int64_t i = 0; i < vectors; ++i) {
          for (int64_t j : {int64_t{0}, d - 1}) {
            for (int64_t h = 0; h < group; ++h) {
              q[(i * group + h) * d + j] = h == 0   ? 1e20f
                                           : h == 1 ? -1e20f
                                           : h == 2 ? 1.0f
                                                    : 0.0f;
            }
          }
        }
      }
      std::vector<double> want(static_cast<size_t>(vectors * d));
      for (int64_t i = 0; i < vectors; ++i) {
        for (int64_t j = 0; j < d; ++j) {
          double acc = 0.0;
          for (int64_t h = 0; h < group; ++h) {
            acc = acc + double(q[(i * group + h) * d + j]);
          }
          want[i * d + j] = acc;
        }
      }
      const auto same_bits = [](const std::vector<double>& a,
                                const std::vector<double>& b) {
        return a.size() == b.size() &&
               std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
      };
      std::vector<double> got(want.size(), 7.0);
      internal::SumGroupsScalar(q.data(), vectors, group, d, got.data());
      EXPECT_TRUE(same_bits(got, want))
          << "scalar, d " << d << ", group " << group;
#if defined(__x86_64__)
      if (__builtin_cpu_supports("avx2")) {
        std::fill(got.begin(), got.end(), 7.0);
        internal::SumGroupsAvx2(q.data(), vectors, group, d, got.data());
        EXPECT_TRUE(same_bits(got, want))
            << "avx2, d " << d << ", group " << group;
      }
#endif
    }
  }
}

TEST(SketcherTest, GroupSumAddsEachGroupsQueries) {
  SessionConfig config = SketchConfig(0);
  config.shape.query_form = QueryForm::kGroupSum;
  auto sketcher = Sketcher::Create(config);
  ASSERT_TRUE(sketcher.ok());
  std::vector<float> queries(2 * 4 * 8);
  for (size_t i = 0; i < queries.size(); ++i) queries[i] = float(i % 7);
  std::vector<float> out;
  sketcher->Queries(queries, &out);
  ASSERT_EQ(out.size(), size_t{2 * 2 * 8});
  for (int l = 0; l < 2; ++l)
    for (int g = 0; g < 2; ++g)
      for (int j = 0; j < 8; ++j)
        EXPECT_EQ(out[(l * 2 + g) * 8 + j],
                  queries[(l * 4 + 2 * g) * 8 + j] +
                      queries[(l * 4 + 2 * g + 1) * 8 + j]);
}

// The order of the sum over j, which random inputs cannot show (another
// order moves a double's last bits, which the rounding to float hides): with
// a matrix of ones, a vector (1e20, -1e20, 1, 0, ...) sums to 1 in the
// documented order (j ascending, from 0.0) and to 0 in reverse or pairwise.
// Keys of 5 tokens (a block of four and one more), per-head queries (a
// plane's 3 heads sharing its matrix) and group sums (2 · the vector).
TEST(SketcherTest, SumsEachColumnInTheOrderOfItsRows) {
  for (QueryForm form : {QueryForm::kPerHead, QueryForm::kGroupSum}) {
    SessionConfig config = SketchConfig(16);
    config.shape.q_heads = 2 * (form == QueryForm::kPerHead ? 3 : 2);
    config.shape.head_dim = 16;
    config.shape.query_form = form;
    const int64_t planes = 2 * 2, d = 16, r = 16;
    auto sketcher =
        Sketcher::Create(config, std::vector<float>(planes * d * r, 1.0f));
    ASSERT_TRUE(sketcher.ok()) << sketcher.status();
    const auto fill = [&](int64_t vectors) {
      std::vector<float> v(static_cast<size_t>(vectors * d), 0.0f);
      for (int64_t i = 0; i < vectors; ++i) {
        v[i * d] = 1e20f;
        v[i * d + 1] = -1e20f;
        v[i * d + 2] = 1.0f;
      }
      return v;
    };
    std::vector<float> out;
    sketcher->Keys(fill(5 * planes), 5, &out);
    EXPECT_THAT(out, ::testing::Each(1.0f));
    EXPECT_EQ(out.size(), size_t(5 * planes * r));
    sketcher->Queries(fill(int64_t{2} * config.shape.q_heads), &out);
    EXPECT_THAT(out,
                ::testing::Each(form == QueryForm::kPerHead ? 1.0f : 2.0f));
    EXPECT_EQ(out.size(),
              size_t(planes * (form == QueryForm::kPerHead ? 3 : 1) * r));
  }
}

// The same order in every version this CPU runs, called directly (the test
// above reaches only the fastest): float and double vectors, 1 to 9 tokens,
// r = 3 (the columns past the vectors), 16 and 20.
TEST(SketcherTest, EveryVersionSumsInTheOrderOfTheRows) {
  struct Version {
    const char* name;
    internal::ProjectFn keys;
    internal::ProjectSumsFn sums;
    bool runs;
  };
  std::vector<Version> versions = {
      {"scalar", &internal::ProjectScalar, &internal::ProjectScalar, true}};
#if defined(__x86_64__)
  versions.push_back({"avx2", &internal::ProjectAvx2, &internal::ProjectAvx2,
                      __builtin_cpu_supports("avx2") != 0});
  versions.push_back({"avx512", &internal::ProjectAvx512,
                      &internal::ProjectAvx512,
                      __builtin_cpu_supports("avx512f") != 0});
#endif
  const int64_t planes = 2, d = 5;
  for (const Version& version : versions) {
    if (!version.runs) continue;
    for (int64_t r : {3, 16, 20}) {
      for (int64_t tokens = 1; tokens <= 9; ++tokens) {
        const std::vector<double> p(static_cast<size_t>(planes * d * r), 1.0);
        std::vector<float> vf(static_cast<size_t>(tokens * planes * d), 0.0f);
        for (int64_t i = 0; i < tokens * planes; ++i) {
          vf[i * d] = 1e20f;
          vf[i * d + 1] = -1e20f;
          vf[i * d + 2] = 1.0f;
        }
        const std::vector<double> vd(vf.begin(), vf.end());
        std::vector<float> out(static_cast<size_t>(tokens * planes * r));
        version.keys(p.data(), vf.data(), tokens, planes, d, r, out.data());
        ASSERT_THAT(out, ::testing::Each(1.0f))
            << version.name << ", floats, r " << r << ", tokens " << tokens;
        std::fill(out.begin(), out.end(), 0.0f);
        version.sums(p.data(), vd.data(), tokens, planes, d, r, out.data());
        ASSERT_THAT(out, ::testing::Each(1.0f))
            << version.name << ", doubles, r " << r << ", tokens " << tokens;
      }
    }
  }
}

TEST(SketcherTest, RejectsEngineMatricesOfTheWrongSize) {
  auto sketcher = Sketcher::Create(SketchConfig(3), std::vector<float>(5));
  EXPECT_THAT(std::string(sketcher.status().message()),
              HasSubstr("projection"));
}

// A sketched session scores with the r sent numbers but scales by the
// model's head_dim: d = 8, r = 2, z = (q0 k0 + q1 k1) / sqrt(8).
TEST(SketchedSessionTest, ScalesByTheModelsHeadDim) {
  SessionConfig config;
  config.shape = TinyShape();
  config.shape.head_dim = 8;
  config.shape.sketch_dim = 2;
  config.ranking = Ranking::kTova;
  config.budget_control = BudgetControl::kFixed;
  config.budget = 4;
  TinySession s(config);
  s.Append(1, 1.0f, 2.0f).Append(2, 0.0f, 0.0f);
  s.StepWithQuery({2.0f, 1.0f});
  const float z = 4.0f / std::sqrt(8.0f);
  EXPECT_NEAR(s.trace().mean_logit.at(s.TraceIndex(1)), z, 1e-6);
  // Attention over the two entries: softmax(z, 0).
  EXPECT_NEAR(s.trace().attention.at(s.TraceIndex(1)),
              1.0 / (1.0 + std::exp(-z)), 1e-6);
}

// A group-sum session's mean logit equals the per-head session's: with
// q heads 2 and kv heads 1, s = (q_0·k + q_1·k) / (2 sqrt(d)).
TEST(SketchedSessionTest, GroupSumQueriesGiveThePerHeadMeanLogit) {
  SessionConfig config;
  config.shape = TinyShape();
  config.shape.q_heads = 2;
  config.ranking = Ranking::kAffinity;
  config.budget_control = BudgetControl::kFixed;
  config.budget = 4;
  SessionConfig summed = config;
  summed.shape.query_form = QueryForm::kGroupSum;
  TinySession per_head(config), grouped(summed);
  per_head.Append(1, 1.0f, -2.0f);
  grouped.Append(1, 1.0f, -2.0f);
  per_head.StepWithQuery({1.0f, 2.0f, 3.0f, -1.0f}, 1.0);
  grouped.StepWithQuery({4.0f, 1.0f}, 1.0);
  // (1·1 + 2·-2 + 3·1 + -1·-2) / (2·sqrt 2) = 2 / (2 sqrt 2).
  const float want = 1.0f / std::sqrt(2.0f);
  EXPECT_NEAR(per_head.trace().mean_logit.at(0), want, 1e-6);
  EXPECT_NEAR(grouped.trace().mean_logit.at(0), want, 1e-6);
}

TEST(SketchConfigTest, ValidatesSketchQueryFormAndLayers) {
  SessionConfig config = SketchConfig(9);
  EXPECT_THAT(std::string(ValidateSessionConfig(config).message()),
              HasSubstr("shape.sketch_dim"));
  config = SketchConfig(4);
  config.shape.query_form = QueryForm::kGroupSum;
  config.ranking = Ranking::kTova;
  EXPECT_THAT(std::string(ValidateSessionConfig(config).message()),
              HasSubstr("shape.query_form"));
  config.ranking = Ranking::kAffinity;
  EXPECT_TRUE(ValidateSessionConfig(config).ok());
  config.scored_layers = {3};
  EXPECT_THAT(std::string(ValidateSessionConfig(config).message()),
              HasSubstr("scored_layers"));
  config.scored_layers = {3, 3};
  EXPECT_THAT(std::string(ValidateSessionConfig(config).message()),
              HasSubstr("scored_layers"));
  config.scored_layers = {3, 4};
  EXPECT_TRUE(ValidateSessionConfig(config).ok());
}

TEST(SketchConfigTest, NamesAndDefaultLayers) {
  Shape shape;
  ASSERT_TRUE(ApplySketchName("project:16", &shape).ok());
  EXPECT_EQ(shape.sketch_dim, 16);
  EXPECT_EQ(SketchName(shape), "project:16");
  ASSERT_TRUE(ApplySketchName("exact", &shape).ok());
  EXPECT_EQ(shape.sketch_dim, 0);
  EXPECT_FALSE(ApplySketchName("project:0", &shape).ok());
  EXPECT_FALSE(ApplySketchName("pca:4", &shape).ok());
  EXPECT_THAT(DefaultScoredLayers(32), ElementsAre(4, 12, 20, 28));
  EXPECT_THAT(DefaultScoredLayers(5), ElementsAre(0, 1, 3, 4));
  EXPECT_THAT(DefaultScoredLayers(3), ElementsAre(0, 1, 2));
}

}  // namespace
}  // namespace entrokv::testing
