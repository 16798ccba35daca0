// Float32 products of activations with a constant weight on CPU, as an XLA FFI handler:
// out[m, n] = sum_k x[m, k] w[n, k], the weight handed over already cut into slivers.
//
// Why a kernel: a transformer's time at real sizes is mostly these products, and XLA:CPU's
// (its YNNPACK fusion, the default in jaxlib 0.10) are slow on thin ones: T5-small's
// 32 x 512 x 512 products ran at 32 GF/s on one core, its 128 x 512 x 512 at 46
// (the profile in docs/guide/benchmarks.md). This loop runs 32 x 512 x 512 at 61 GF/s where XLA's run at
// 40 (benchmarks/bench_products.py).
//
// How: the blocking of Goto and van de Geijn with the weight packed ahead of time. The weight
// arrives as [ceil(n / 16), k, 16]: slivers of 16 output columns, each k steps of 16 floats,
// zeros past n. jaxport computes that layout from a constant weight once, when a frozen model
// is traced, so no call repacks it. All of x is packed once per call, in blocks of kKc steps,
// into slivers of 6 rows; a 6 x 16 tile of the output is then 12 vector accumulators updated
// by one broadcast and two loads per step, with the weight's block of the sliver (kKc x 16,
// 16 KB) in L1 and kMc rows of packed x in L2. A last sliver of fewer than 6 rows gets a tile of
// its own height; columns past n are computed on zero padding and not stored. While the tiles
// of a block run from cache they prefetch the weight's next block, a share each, so no tile
// waits on memory. Tall products
// (at least as many 256-row panels as threads) are split over XLA's intra-op thread pool by
// panel, the others by slivers of columns.
//
// Numerics: each output is summed over k in order within blocks of kKc, the blocks added in
// order, in float32 with fused multiply-adds where the CPU has them. Padding only ever meets
// padding or lands outside the stored part, so NaN and infinities propagate as in the sum.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "parallel.h"
#include "tile.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using jaxport::kMr;
using jaxport::kNr;
using jaxport::Tile;

constexpr int64_t kKc = 256;  // depth of a packed block: a sliver of w is 16 KB, in L1
constexpr int64_t kMc = 132;  // rows of x per pass over a sliver: 132 KB of packed x, in L2
constexpr int64_t kChunk = 32;  // slivers of output columns summed through every depth at a time
// Packed rows up to this size go sliver by sliver (a chunk of one): see ComputeColumns.
constexpr int64_t kSliverMajorBytes = int64_t{4} << 20;
constexpr int64_t kPanel = 256;  // rows of x per pass over the whole weight (their packing: 1 MB at k = 1024)

struct Operands {
  const float* x;  // [m, k]
  const float* w;  // [ceil(n / 16), k, 16]: slivers of 16 columns, zeros past n
  float* out;      // [m, n]
  int64_t m, n, k;
};

// Slivers of 16 columns that hold n columns.
int64_t Slivers(int64_t n) { return (n + kNr - 1) / kNr; }

// Rows m rounded up to whole slivers of kMr rows: the rows PackX lays out.
int64_t PaddedRows(int64_t m) { return (m + kMr - 1) / kMr * kMr; }

// All of x as the tiles read it: for each block of kKc depths (from p0, PaddedRows(m) rows each,
// at packed + p0 * PaddedRows(m)), slivers of kMr rows, each kc steps of kMr floats; rows past m
// are zeros.
void PackX(const Operands& o, float* packed) {
  for (int64_t p0 = 0; p0 < o.k; p0 += kKc) {
    jaxport::PackRows(o.x + p0, o.k, o.m, std::min(kKc, o.k - p0), packed + p0 * PaddedRows(o.m));
  }
}

// Output columns of slivers [s_begin, s_end), every row, from x packed by PackX. Columns go a
// chunk of slivers at a time through every depth, so that block of the output stays in cache
// while it is summed, rather than being reread from memory once per block of depths (a language
// model's head is [128, 50257]: 26 MB). Where the packed rows take at most kSliverMajorBytes the
// chunk is one sliver: each sliver's weight (k x 16, contiguous) then streams from memory in
// order, which the hardware prefetcher follows, while the packed rows are reread from cache.
// With the weights out of cache, as in a model, that took thin products from 38 to 50 GF/s
// (50 x 768 x 3072) and tall ones from 60 to 70 (1024 x 1024 x 1024) on one core, and the
// [128, 768] x [768, 50257] head from 53 to 64; past it (k = 11008 at 256 rows: 11 MB of
// packed rows) rereading them per sliver fell from 65 to 48, so larger ones keep kChunk.
__attribute__((target_clones("arch=x86-64-v3", "default")))
void ComputeColumns(const Operands& o, const float* packed_x, int64_t s_begin, int64_t s_end) {
  const int64_t padded_m = PaddedRows(o.m);
  const int64_t chunk = padded_m * o.k * static_cast<int64_t>(sizeof(float)) <= kSliverMajorBytes ? 1 : kChunk;
  const float* end = o.w + Slivers(o.n) * o.k * kNr;  // past the packed weight
  for (int64_t c0 = s_begin; c0 < s_end; c0 += chunk) {
    const int64_t c1 = std::min(s_end, c0 + chunk);
    for (int64_t p0 = 0; p0 < o.k; p0 += kKc) {
      const int64_t kc = std::min(kKc, o.k - p0);
      const float* block = packed_x + p0 * padded_m;
      for (int64_t i0 = 0; i0 < o.m; i0 += kMc) {
        const int64_t mc = std::min(kMc, o.m - i0);
        for (int64_t sliver = c0; sliver < c1; ++sliver) {
          const float* w = o.w + (sliver * o.k + p0) * kNr;
          const int64_t j = sliver * kNr, cols = std::min(kNr, o.n - j);
          // The block of the weight read next, fetched a share per tile while the tiles run
          // from cache. The first tile on a block would otherwise wait on memory: a 6-row tile
          // takes a 64-byte line every 6 cycles, more than one core's share of memory bandwidth,
          // and on a thin product that tile is a sixth of the work. With the weights out of cache,
          // one core, that took 32 x 512 x 512 from 79 to 93 GF/s, 50 x 768 x 768 from 88 to 97,
          // 77 x 512 x 2048 from 97 to 108 and 128 x 768 x 3072 from 101 to 107. Slivers one at
          // a time read the next depths (or the next sliver) after the last rows; a chunk reads
          // its next sliver at these depths.
          const float* next = sliver + 1 < c1 ? w + o.k * kNr : i0 + kMc >= o.m ? w + kc * kNr : end;
          const int64_t next_lines = std::min(kc, static_cast<int64_t>(end - next) / kNr);
          const int64_t tiles = (mc + kMr - 1) / kMr, per_tile = (next_lines + tiles - 1) / tiles;
          for (int64_t is = 0, ahead = 0; is < mc; is += kMr, ahead += per_tile) {
            Tile(block + (i0 + is) * kc, w, kc, o.out + (i0 + is) * o.n + j, o.n, std::min(kMr, mc - is), cols,
                 p0 > 0, next + ahead * kNr, std::max<int64_t>(0, std::min(per_tile, next_lines - ahead)));
          }
        }
      }
    }
  }
}

// out = x w over every row, the panels split over the pool as described at the top.
void Multiply(ffi::ThreadPool& pool, const Operands& o) {
  if (o.m == 0 || o.n == 0) return;
  if (o.k == 0) {
    std::fill(o.out, o.out + o.m * o.n, 0.0f);
    return;
  }
  const int64_t slivers = Slivers(o.n);
  const int64_t panels = (o.m + kPanel - 1) / kPanel;
  const size_t packed_size = static_cast<size_t>(PaddedRows(std::min(o.m, kPanel)) * o.k);
  auto panel_at = [&](int64_t p) {
    const int64_t i = p * kPanel;
    return Operands{o.x + i * o.k, o.w, o.out + i * o.n, std::min(kPanel, o.m - i), o.n, o.k};
  };
  if (panels >= pool.num_threads() && panels > 1) {
    // Tall products (a CNN's or Swin's thousands of tokens, often few output columns): threads
    // take whole panels, each packing its own rows, rather than meeting at every panel to split
    // its few slivers, which kept about 1.7 of two cores busy and made Swin's frozen form the
    // slower (0.87x eager against 0.79x called; 0.81x split by panel).
    jaxport::ParallelFor(pool, panels, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> packed_x(packed_size);
      for (int64_t p = begin; p < end; ++p) {
        const Operands panel = panel_at(p);
        PackX(panel, packed_x.data());
        ComputeColumns(panel, packed_x.data(), 0, slivers);
      }
    });
    return;
  }
  std::vector<float> packed_x(packed_size);
  for (int64_t p = 0; p < panels; ++p) {
    const Operands panel = panel_at(p);
    PackX(panel, packed_x.data());
    jaxport::ParallelFor(pool, slivers, 1, [&](int64_t begin, int64_t end) {
      ComputeColumns(panel, packed_x.data(), begin, end);
    });
  }
}

ffi::Error MatmulImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                      ffi::ResultBuffer<ffi::F32> out) {
  const auto xd = x.dimensions();
  const auto wd = w.dimensions();
  const auto od = out->dimensions();
  if (xd.size() != 2 || wd.size() != 3 || od.size() != 2) {
    return ffi::Error::InvalidArgument("jaxport_matmul: operands are not a matrix and packed slivers");
  }
  Operands o{x.typed_data(), w.typed_data(), out->typed_data(), xd[0], od[1], xd[1]};
  if (od[0] != o.m || wd[0] != Slivers(o.n) || wd[1] != o.k || wd[2] != kNr) {
    return ffi::Error::InvalidArgument("jaxport_matmul: operand shapes do not multiply");
  }
  Multiply(pool, o);
  return ffi::Error::Success();
}

// A mixture of experts' product: consecutive groups of x's rows, group g `sizes[g]` rows long,
// each times its own packed weight w[g]; rows past the last group are zeros. Each group is a
// product of its own rows, so the work is that of the rows present and an expert no row chose
// is never read.
ffi::Error GroupedMatmulImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                             ffi::Buffer<ffi::S32> sizes, ffi::ResultBuffer<ffi::F32> out) {
  const auto xd = x.dimensions();
  const auto wd = w.dimensions();
  const auto sd = sizes.dimensions();
  const auto od = out->dimensions();
  if (xd.size() != 2 || wd.size() != 4 || sd.size() != 1 || od.size() != 2) {
    return ffi::Error::InvalidArgument("jaxport_grouped_matmul: operands are not rows, groups of packed slivers "
                                       "and group sizes");
  }
  const int64_t m = xd[0], k = xd[1], n = od[1], groups = wd[0], slivers = Slivers(n);
  if (od[0] != m || sd[0] != groups || wd[1] != slivers || wd[2] != k || wd[3] != kNr) {
    return ffi::Error::InvalidArgument("jaxport_grouped_matmul: operand shapes do not multiply");
  }
  float* result = out->typed_data();
  int64_t start = 0;
  for (int64_t g = 0; g < groups && start < m; ++g) {
    const int64_t rows = std::min<int64_t>(std::max<int32_t>(sizes.typed_data()[g], 0), m - start);
    Multiply(pool, Operands{x.typed_data() + start * k, w.typed_data() + g * slivers * k * kNr, result + start * n,
                            rows, n, k});
    start += rows;
  }
  std::fill(result + start * n, result + m * n, 0.0f);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxportMatmulF32, MatmulImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxportGroupedMatmulF32, GroupedMatmulImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
