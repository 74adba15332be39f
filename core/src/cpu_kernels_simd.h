// The vector CPU kernels, each written once for every ISA: a template body
// over an ISA traits type, instantiated by cpu_kernels_avx2.cc and
// cpu_kernels_avx512.cc, each compiled with its own -m flags (so the code
// that dispatches, cpu_kernels.cc, is not). Thread-safe (pure functions).
//
// An ISA traits type `Isa` provides, all static:
//   Vec                      the float vector type;
//   kWidth                   floats per Vec;
//   kPrefetchBytes           how far ahead of the key rows it reads a
//                            kernel prefetches every cache line (at least
//                            one block of rows ahead; 0: none): the
//                            per-head kernel always, the summed-query
//                            kernel for blocks of at most 512 bytes only;
//   Zero()                   a Vec of zeros;
//   LoadQuery(const float*)  kWidth floats, unaligned;
//   LoadKey(type, p)         kWidth elements of `type` at p, as floats;
//   Fmadd(a, b, c)           a·b + c, fused, per lane;
//   Add(a, b)                a + b per lane;
//   ReduceAdd(v)             the sum of the lanes, as a float;
//   Prefetch(p)              a hint to bring p's cache line into L1;
//   kReduceBlock             16 when the ISA also provides, for 16 keys at
//                            once, ReduceAdd16(acc) (lane k: bit for bit
//                            ReduceAdd(acc[k])) and AddToSums(sum, v)
//                            (sum[k] += lane k in double) and Store(p, v)
//                            (16 floats, unaligned); 0 otherwise.
// Each lane accumulates its products by FMA in the order j, j + kWidth, ...;
// the lanes are then summed by the ISA's ReduceAdd. A key's results therefore
// depend only on the ISA, never on its position or on the other keys.
//
// These templates must only be instantiated in a translation unit compiled
// for the ISA, and with traits types of internal linkage, so that no
// instantiation can be shared with code compiled for another ISA.

#ifndef ENTROKV_CORE_SRC_CPU_KERNELS_SIMD_H_
#define ENTROKV_CORE_SRC_CPU_KERNELS_SIMD_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu_kernels.h"
#include "entrokv/core/element_type.h"

namespace entrokv::internal {

// The entry points of the per-ISA translation units (x86-64 only); each
// switches on args.type. ScoreKeys dispatches to them when the CPU has the
// ISA.
//
// Scores as ScoreKeys. REQUIRES: head_dim % 8 == 0 (AVX2), % 16 == 0
// (AVX-512).
void ScoreKeysAvx2(const ScoreArgs& args);
void ScoreKeysAvx512(const ScoreArgs& args);
// Sums only: one query per kv head (a group's summed query), no z. REQUIRES:
// as above, and group == 1, sum != nullptr, z == nullptr.
void SumKeysAvx2(const ScoreArgs& args);
void SumKeysAvx512(const ScoreArgs& args);
// AccumulateSoftmax with AVX-512.
void AccumulateSoftmaxAvx512(float* z, int64_t rows, int64_t n, double weight,
                             double* attention);

namespace simd {

// ScoreKeys' z for one (layer, kv head) plane, four keys at a time: four
// keys by four query heads make the 16 accumulators ReduceAdd16 reduces
// together, each the same products in the same order as one key at a time.
// Returns the first position it left (live rounded down to 4).
// REQUIRES: Isa::kReduceBlock == 16, group % 4 == 0.
template <class Isa, ElementType kType>
int64_t ScoreFourKeysAtATime(const ScoreArgs& a, const std::byte* base,
                             const float* q, float* z) {
  using Vec = typename Isa::Vec;
  constexpr int64_t esize = kType == ElementType::kF32 ? 4 : 2;
  const int32_t d = a.head_dim;
  const int64_t row = int64_t{d} * esize;
  int64_t p = 0;
  for (; p + 3 < a.live; p += 4) {
    const std::byte* k0 = base + p * row;
    if constexpr (Isa::kPrefetchBytes > 0) {
      const int64_t ahead =
          Isa::kPrefetchBytes > 4 * row ? Isa::kPrefetchBytes : 4 * row;
      for (int64_t c = 0; c < 4 * row; c += 64) {
        Isa::Prefetch(k0 + ahead + c);
      }
    }
    for (int32_t g0 = 0; g0 < a.group; g0 += 4) {
      const float* q0 = q + int64_t{g0} * d;
      // acc[4 g + k]: query head g0 + g, key p + k.
      Vec acc[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) acc[i] = Isa::Zero();
      for (int32_t j = 0; j < d; j += Isa::kWidth) {
        Vec qg[4];
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) qg[g] = Isa::LoadQuery(q0 + g * d + j);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const Vec kf = Isa::LoadKey(kType, k0 + k * row + j * esize);
#pragma GCC unroll 4
          for (int g = 0; g < 4; ++g) {
            acc[4 * g + k] = Isa::Fmadd(qg[g], kf, acc[4 * g + k]);
          }
        }
      }
      // Lanes 4 g .. 4 g + 3: head g0 + g's z of keys p .. p + 3.
      float lanes[16];
      Isa::Store(lanes, Isa::ReduceAdd16(acc));
      for (int g = 0; g < 4; ++g) {
        std::memcpy(z + int64_t{g0 + g} * a.z_stride + p, lanes + 4 * g,
                    4 * sizeof(float));
      }
    }
  }
  return p;
}

// Scaled dot products of every live key with the queries of its GQA group,
// reading each key once for the whole group: up to four query heads share
// each converted key chunk. REQUIRES: head_dim % Isa::kWidth == 0.
template <class Isa, ElementType kType>
void ScoreKeys(const ScoreArgs& a) {
  using Vec = typename Isa::Vec;
  constexpr int64_t esize = kType == ElementType::kF32 ? 4 : 2;
  const int32_t d = a.head_dim;
  for (int32_t l = 0; l < a.layers; ++l) {
    for (int32_t kv = 0; kv < a.kv_heads; ++kv) {
      const std::byte* base =
          a.keys + ((int64_t{l} * a.kv_heads + kv) * a.capacity) * d * esize;
      const int32_t h0 = kv * a.group;
      const float* q = a.queries + (int64_t{l} * a.kv_heads * a.group + h0) * d;
      float* z =
          a.z == nullptr
              ? nullptr
              : a.z + (int64_t{l} * a.kv_heads * a.group + h0) * a.z_stride;
      int64_t p = 0;
      if constexpr (Isa::kReduceBlock == 16) {
        if (z != nullptr && a.sum == nullptr && a.group % 4 == 0) {
          p = ScoreFourKeysAtATime<Isa, kType>(a, base, q, z);
        }
      }
      for (; p < a.live; ++p) {
        const std::byte* k = base + p * d * esize;
        if (p + 2 < a.live) Isa::Prefetch(k + 2 * d * esize);
        for (int32_t g0 = 0; g0 < a.group; g0 += 4) {
          const int32_t ng = a.group - g0 < 4 ? a.group - g0 : 4;
          const float* q0 = q + int64_t{g0} * d;
          Vec acc0 = Isa::Zero(), acc1 = Isa::Zero();
          Vec acc2 = Isa::Zero(), acc3 = Isa::Zero();
          for (int32_t j = 0; j < d; j += Isa::kWidth) {
            const Vec kf = Isa::LoadKey(kType, k + j * esize);
            acc0 = Isa::Fmadd(Isa::LoadQuery(q0 + j), kf, acc0);
            if (ng > 1) acc1 = Isa::Fmadd(Isa::LoadQuery(q0 + d + j), kf, acc1);
            if (ng > 2) {
              acc2 = Isa::Fmadd(Isa::LoadQuery(q0 + 2 * d + j), kf, acc2);
            }
            if (ng > 3) {
              acc3 = Isa::Fmadd(Isa::LoadQuery(q0 + 3 * d + j), kf, acc3);
            }
          }
          if (z != nullptr) {
            float* zg = z + int64_t{g0} * a.z_stride + p;
            zg[0] = Isa::ReduceAdd(acc0);
            if (ng > 1) zg[a.z_stride] = Isa::ReduceAdd(acc1);
            if (ng > 2) zg[2 * a.z_stride] = Isa::ReduceAdd(acc2);
            if (ng > 3) zg[3 * a.z_stride] = Isa::ReduceAdd(acc3);
          }
          if (a.sum != nullptr) {
            // Unused accumulators are zero, so one sum covers the group.
            a.sum[p] += Isa::ReduceAdd(
                Isa::Add(Isa::Add(acc0, acc1), Isa::Add(acc2, acc3)));
          }
        }
      }
    }
  }
}

// SumKeys' sums for keys p .. p + 15 of one plane, which start at k0:
// the block's rows are read in address order, each row's products
// accumulated before the next row is read. kVecs is head_dim / kWidth, with
// the query held in registers, or 0 for any head_dim (the query read from
// memory). The same products in the same order as one key at a time.
template <class Isa, ElementType kType, int kVecs>
[[gnu::always_inline]] inline void SumSixteenKeys(const std::byte* k0,
                                                  int64_t row, const float* q,
                                                  const typename Isa::Vec* qv,
                                                  int32_t d, double* sum) {
  using Vec = typename Isa::Vec;
  constexpr int64_t esize = kType == ElementType::kF32 ? 4 : 2;
  constexpr int64_t chunk = int64_t{Isa::kWidth} * esize;
  // With the head size fixed, so is the row: each key's address is then k0
  // plus a constant, not one of 16 run-time offsets held in registers.
  if constexpr (kVecs > 0) row = kVecs * chunk;
  // Unrolled, so that the 16 results stay in registers.
  Vec acc[16];
#pragma GCC unroll 16
  for (int k = 0; k < 16; ++k) {
    const std::byte* key = k0 + k * row;
    Vec s = Isa::Zero();
    if constexpr (kVecs > 0) {
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) {
        s = Isa::Fmadd(qv[v], Isa::LoadKey(kType, key + v * chunk), s);
      }
    } else {
      for (int32_t j = 0; j < d; j += Isa::kWidth) {
        s = Isa::Fmadd(Isa::LoadQuery(q + j),
                       Isa::LoadKey(kType, key + j * esize), s);
      }
    }
    acc[k] = s;
  }
  Isa::AddToSums(sum, Isa::ReduceAdd16(acc));
}

// SumKeys' loop over the blocks of 16 keys of kPlanes consecutive planes,
// the first of which starts at `base` (the next plane_bytes further on),
// with its query at `q` (the next d floats further on); returns the first
// position it left (live rounded down to 16). For each block, the planes'
// sums are added in plane order to a copy of sum[p .. p + 15] that stays in
// the cache, and written back once: the same additions in the same order as
// one plane at a time, with a 32k-entry sum array read and written once per
// kPlanes planes instead of once per plane.
//
// Each plane's rows are read in address order, without software prefetch
// but for the smallest rows: the hardware prefetcher follows a sequential
// read. On the machine of docs/performance.md this read 8B-shape keys about
// 1.5 times as fast as reading a block column by column (all 16 keys' first
// 64 bytes, then their next) with every line prefetched ahead, as this
// kernel used to.
template <class Isa, ElementType kType, int kVecs, int kPlanes>
int64_t SumKeysBySixteen(const ScoreArgs& a, const std::byte* base,
                         int64_t plane_bytes, const float* q) {
  using Vec = typename Isa::Vec;
  constexpr int64_t esize = kType == ElementType::kF32 ? 4 : 2;
  const int64_t row =
      kVecs > 0 ? kVecs * Isa::kWidth * esize : int64_t{a.head_dim} * esize;
  // Blocks of at most 512 bytes (a sketch's 16 f16 elements a row) are
  // prefetched kPrefetchBytes ahead all the same: there it read 5-10%
  // faster, and at 1 KB and more slower, than the hardware alone.
  constexpr bool kPrefetch = Isa::kPrefetchBytes > 0 && kVecs > 0 &&
                             16 * kVecs * Isa::kWidth * esize <= 512;
  Vec qv[kPlanes][kVecs > 0 ? kVecs : 1];
  if constexpr (kVecs > 0) {
#pragma GCC unroll 8
    for (int i = 0; i < kPlanes; ++i) {
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) {
        qv[i][v] = Isa::LoadQuery(q + i * a.head_dim + v * Isa::kWidth);
      }
    }
  }
  int64_t p = 0;
  for (; p + 15 < a.live; p += 16) {
    double sums[16];
    std::memcpy(sums, a.sum + p, sizeof(sums));
#pragma GCC unroll 8
    for (int i = 0; i < kPlanes; ++i) {
      const std::byte* block = base + i * plane_bytes + p * row;
      if constexpr (kPrefetch) {
        for (int64_t c = 0; c < 16 * row; c += 64) {
          Isa::Prefetch(block + Isa::kPrefetchBytes + c);
        }
      }
      SumSixteenKeys<Isa, kType, kVecs>(block, row, q + i * a.head_dim, qv[i],
                                        a.head_dim, sums);
    }
    std::memcpy(a.sum + p, sums, sizeof(sums));
  }
  return p;
}

// SumKeysBySixteen for kPlanes planes, the query held in registers for the
// common head sizes.
template <class Isa, ElementType kType, int kPlanes>
int64_t SumPlanesBySixteen(const ScoreArgs& a, const std::byte* base,
                           int64_t plane_bytes, const float* q) {
  switch (a.head_dim / Isa::kWidth) {
    case 1:
      return SumKeysBySixteen<Isa, kType, 1, kPlanes>(a, base, plane_bytes, q);
    case 2:
      return SumKeysBySixteen<Isa, kType, 2, kPlanes>(a, base, plane_bytes, q);
    case 4:
      return SumKeysBySixteen<Isa, kType, 4, kPlanes>(a, base, plane_bytes, q);
    case 8:
      return SumKeysBySixteen<Isa, kType, 8, kPlanes>(a, base, plane_bytes, q);
    default:
      return SumKeysBySixteen<Isa, kType, 0, kPlanes>(a, base, plane_bytes, q);
  }
}

// The planes SumKeys sums together. On the machine of docs/performance.md,
// 4 stepped the sketched 8B shape at 32k live 1.3 times as fast as 1 (2 was
// between them, 8 slower than 4), and the default shape 1.15-1.2 times.
inline constexpr int kSumPlanes = 4;

// One query per kv head (a group's summed query), accumulating only the sum:
// the kernel of the mean logit. Sixteen keys at a time where the ISA reduces
// 16 at once, kSumPlanes planes together while that many are left, then two
// keys per iteration for two FMA chains. For every position the planes add
// to its sum in plane order.
// REQUIRES: head_dim % Isa::kWidth == 0, group == 1, sum != nullptr,
// z == nullptr.
template <class Isa, ElementType kType>
void SumKeys(const ScoreArgs& a) {
  using Vec = typename Isa::Vec;
  constexpr int64_t esize = kType == ElementType::kF32 ? 4 : 2;
  const int32_t d = a.head_dim;
  const int64_t row = int64_t{d} * esize;
  const int64_t planes = int64_t{a.layers} * a.kv_heads;
  const int64_t plane_bytes = a.capacity * row;
  for (int64_t first = 0; first < planes;) {
    const std::byte* first_base = a.keys + first * plane_bytes;
    const float* first_q = a.queries + first * d;
    int64_t take = 1;
    int64_t from = 0;  // The keys the planes' tails start at.
    if constexpr (Isa::kReduceBlock == 16) {
      if (planes - first >= kSumPlanes) {
        take = kSumPlanes;
        from = SumPlanesBySixteen<Isa, kType, kSumPlanes>(a, first_base,
                                                          plane_bytes, first_q);
      } else {
        from = SumPlanesBySixteen<Isa, kType, 1>(a, first_base, plane_bytes,
                                                 first_q);
      }
    }
    for (int64_t i = 0; i < take; ++i) {
      const std::byte* base = first_base + i * plane_bytes;
      const float* q = first_q + i * d;
      int64_t p = from;
      for (; p + 1 < a.live; p += 2) {
        const std::byte* k0 = base + p * row;
        const std::byte* k1 = k0 + row;
        Vec acc0 = Isa::Zero(), acc1 = Isa::Zero();
        for (int32_t j = 0; j < d; j += Isa::kWidth) {
          const Vec qj = Isa::LoadQuery(q + j);
          acc0 = Isa::Fmadd(qj, Isa::LoadKey(kType, k0 + j * esize), acc0);
          acc1 = Isa::Fmadd(qj, Isa::LoadKey(kType, k1 + j * esize), acc1);
        }
        a.sum[p] += Isa::ReduceAdd(acc0);
        a.sum[p + 1] += Isa::ReduceAdd(acc1);
      }
      for (; p < a.live; ++p) {
        const std::byte* k0 = base + p * row;
        Vec acc0 = Isa::Zero();
        for (int32_t j = 0; j < d; j += Isa::kWidth) {
          acc0 = Isa::Fmadd(Isa::LoadQuery(q + j),
                            Isa::LoadKey(kType, k0 + j * esize), acc0);
        }
        a.sum[p] += Isa::ReduceAdd(acc0);
      }
    }
    first += take;
  }
}

// ScoreKeys<Isa, args.type>.
template <class Isa>
void ScoreKeysForType(const ScoreArgs& a) {
  switch (a.type) {
    case ElementType::kF32:
      return ScoreKeys<Isa, ElementType::kF32>(a);
    case ElementType::kF16:
      return ScoreKeys<Isa, ElementType::kF16>(a);
    case ElementType::kBf16:
      return ScoreKeys<Isa, ElementType::kBf16>(a);
  }
}

// SumKeys<Isa, args.type>.
template <class Isa>
void SumKeysForType(const ScoreArgs& a) {
  switch (a.type) {
    case ElementType::kF32:
      return SumKeys<Isa, ElementType::kF32>(a);
    case ElementType::kF16:
      return SumKeys<Isa, ElementType::kF16>(a);
    case ElementType::kBf16:
      return SumKeys<Isa, ElementType::kBf16>(a);
  }
}

}  // namespace simd
}  // namespace entrokv::internal

#endif  // ENTROKV_CORE_SRC_CPU_KERNELS_SIMD_H_
