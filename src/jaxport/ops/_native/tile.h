// The register tile of jaxport's product loops (matmul.cc, attention.cc): a block of up to
// 6 x 16 of an output summed from packed operands, in GCC's vector extensions, and the packing of rows
// it reads. Callers inline it into
// functions cloned per instruction set (`target_clones`), so each clone compiles it for its
// own (AVX2 and FMA, or the baseline).

#ifndef JAXPORT_NATIVE_TILE_H_
#define JAXPORT_NATIVE_TILE_H_

#include <cstdint>
#include <cstring>

namespace jaxport {

typedef float Vec __attribute__((vector_size(32)));  // eight floats: one AVX register

#define JAXPORT_INLINE inline __attribute__((always_inline))
constexpr int64_t kMr = 6;   // rows of a register tile
constexpr int64_t kNr = 16;  // columns of a register tile: two vectors

JAXPORT_INLINE Vec Load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

JAXPORT_INLINE void Store(float* p, Vec v) { std::memcpy(p, &v, sizeof(v)); }

JAXPORT_INLINE Vec Broadcast(float s) { return Vec{s, s, s, s, s, s, s, s}; }

// The R x 16 tile sum_p a[p] b[p] over kc steps, where a holds kMr floats a step (one per row,
// the first R read) and b kNr (one per column), added to `out` (pitch ldo) when `accumulate`;
// only R x `cols` of it stored. Each output is summed over p in order, with fused multiply-adds
// where the CPU has them. Meanwhile the first `ahead_lines` steps of `ahead` (kNr floats, a cache
// line, each) are prefetched, one a step: what the caller reads next, fetched while this tile
// computes from cache.
template <int64_t R>
JAXPORT_INLINE void TileRows(const float* a, const float* b, int64_t kc, float* out, int64_t ldo, int64_t cols,
                             bool accumulate, const float* ahead, int64_t ahead_lines) {
  Vec acc[R][2] = {};
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    if (p < ahead_lines) __builtin_prefetch(ahead + p * kNr, 0, 3);
    const Vec b0 = Load(b + p * kNr), b1 = Load(b + p * kNr + 8);
    for (int64_t r = 0; r < R; ++r) {
      // Written out, not through Broadcast: GCC then loads it with one vbroadcastss, where
      // otherwise it gathered a's six floats into a vector and shuffled them out (half the speed).
      const float s = a[p * kMr + r];
      const Vec ar = {s, s, s, s, s, s, s, s};
      acc[r][0] += ar * b0;
      acc[r][1] += ar * b1;
    }
  }
  if (cols == kNr) {
    for (int64_t r = 0; r < R; ++r) {
      float* row = out + r * ldo;
      if (accumulate) {
        Store(row, Load(row) + acc[r][0]);
        Store(row + 8, Load(row + 8) + acc[r][1]);
      } else {
        Store(row, acc[r][0]);
        Store(row + 8, acc[r][1]);
      }
    }
    return;
  }
  float tile[R][kNr];
  for (int64_t r = 0; r < R; ++r) {
    Store(tile[r], acc[r][0]);
    Store(tile[r] + 8, acc[r][1]);
  }
  for (int64_t r = 0; r < R; ++r) {
    float* row = out + r * ldo;
    for (int64_t c = 0; c < cols; ++c) row[c] = accumulate ? row[c] + tile[r][c] : tile[r][c];
  }
}

// The tile of `rows` (1 to kMr) x 16, prefetching `ahead` as it goes (see TileRows). A last
// sliver of fewer than kMr rows gets a tile of its own height rather than the full one on zero
// padding: a 32-row product is then 32 rows of work, not 36, and a 50-row one 50, not 54.
JAXPORT_INLINE void Tile(const float* a, const float* b, int64_t kc, float* out, int64_t ldo, int64_t rows,
                         int64_t cols, bool accumulate, const float* ahead = nullptr, int64_t ahead_lines = 0) {
  static_assert(kMr == 6, "one case per height");
  switch (rows) {
    case 6: return TileRows<6>(a, b, kc, out, ldo, cols, accumulate, ahead, ahead_lines);
    case 5: return TileRows<5>(a, b, kc, out, ldo, cols, accumulate, ahead, ahead_lines);
    case 4: return TileRows<4>(a, b, kc, out, ldo, cols, accumulate, ahead, ahead_lines);
    case 3: return TileRows<3>(a, b, kc, out, ldo, cols, accumulate, ahead, ahead_lines);
    case 2: return TileRows<2>(a, b, kc, out, ldo, cols, accumulate, ahead, ahead_lines);
    default: return TileRows<1>(a, b, kc, out, ldo, cols, accumulate, ahead, ahead_lines);
  }
}

// Rows of x (`pitch` floats apart) as Tile reads its `a`: slivers of kMr rows, `depth` steps of
// kMr floats each, zeros for rows past `rows` up to a multiple of kMr.
inline void PackRows(const float* x, int64_t pitch, int64_t rows, int64_t depth, float* packed) {
  for (int64_t i = 0; i < rows; i += kMr) {
    float* sliver = packed + i * depth;
    for (int64_t r = 0; r < kMr; ++r) {
      const bool valid = i + r < rows;
      for (int64_t p = 0; p < depth; ++p) sliver[p * kMr + r] = valid ? x[(i + r) * pitch + p] : 0.0f;
    }
  }
}

}  // namespace jaxport

#endif  // JAXPORT_NATIVE_TILE_H_
