// Depthwise 2-D convolution of NCHW float32 data on CPU, as an XLA FFI handler.
//
// Why a kernel: XLA:CPU runs `feature_group_count == channels` on a generic path (30-45x
// PyTorch's time), and the portable formulation (one strided slice per kernel tap, summed)
// is a cheap elementwise loop that XLA copies into every consumer: in ConvNeXt the 49-tap sum
// was computed three times, each time in the transposed order of the LayerNorm that follows.
// A custom call is computed once, in the order its data lies.
//
// How: each (image, input channel) plane is copied once into a zero-padded scratch split into
// `stride_w` column phases, so that every kernel tap reads a contiguous run of the scratch for
// a run of outputs (column `ow * stride + kw * dilation` is phase `(kw * dilation) % stride`,
// index `ow + (kw * dilation) / stride`). Outputs are accumulated in eight registers over all
// taps: four rows by two vectors of eight, or eight rows by one on narrow planes; the last
// block of a row or a plane overlaps the one before rather than running past the end. Planes
// are split over XLA's intra-op thread pool.
//
// Numerics: each output is its taps' products summed in row-major tap order, as PyTorch's
// and jaxport's portable formulation sum them, with fused multiply-adds where the CPU has them.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "parallel.h"
#include "xla/ffi/api/ffi.h"

// GCC would turn the short copy loops below back into calls to memcpy and memset.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#endif

namespace ffi = xla::ffi;

namespace {

typedef float Vec __attribute__((vector_size(32)));  // eight floats: one AVX register
typedef int32_t Lanes __attribute__((vector_size(32)));  // a shuffle's lane indices

// Everything the per-plane loop calls is inlined into it, so that each of its clones (AVX2 and
// FMA, or the baseline) compiles the whole loop for its instruction set.
#define JAXPORT_INLINE inline __attribute__((always_inline))
constexpr int64_t kLanes = 8;
constexpr int64_t kWidestBlock = 2 * kLanes;  // outputs per row in one register block, at most
constexpr int64_t kMaxKernelWidth = 64;     // wider kernels are left to the portable formulation

struct Geometry {
  int64_t height, width, out_height, out_width, kernel_h, kernel_w;
  int64_t stride_h, stride_w, pad_top, pad_left, dilation_h, dilation_w, multiplier;
  // The scratch: rows of the zero-padded input, each as `stride_w` phases of `phase_len`.
  int64_t padded_rows, phase_len;
  // Where tap column kw reads within a padded row of the scratch: its phase and shift.
  int64_t columns[kMaxKernelWidth];
};

JAXPORT_INLINE Vec LoadUnaligned(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

JAXPORT_INLINE void StoreUnaligned(float* p, Vec v) { std::memcpy(p, &v, sizeof(v)); }

// Short copies and fills inline: rows of 7-112 floats, where calls to memcpy and memset cost
// more than the copying.
JAXPORT_INLINE void CopyFloats(float* to, const float* from, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) StoreUnaligned(to + i, LoadUnaligned(from + i));
  for (; i < n; ++i) to[i] = from[i];
}

JAXPORT_INLINE void ZeroFloats(float* to, int64_t n) {
  const Vec zero = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) StoreUnaligned(to + i, zero);
  for (; i < n; ++i) to[i] = 0.0f;
}

// Copies one input plane into the phased, zero-padded scratch.
JAXPORT_INLINE void FillScratch(const float* plane, const Geometry& g, float* scratch) {
  const int64_t row_pitch = g.stride_w * g.phase_len;
  // Zero the padding rows above and below; each input row zeroes its own margins.
  ZeroFloats(scratch, g.pad_top * row_pitch);
  ZeroFloats(scratch + (g.pad_top + g.height) * row_pitch, (g.padded_rows - g.pad_top - g.height) * row_pitch);
  // A strided row is padded here first, then split into its phases without bounds checks.
  float* padded = g.stride_w == 1 ? nullptr : scratch + g.padded_rows * row_pitch;
  for (int64_t ih = 0; ih < g.height; ++ih) {
    float* row = scratch + (ih + g.pad_top) * row_pitch;
    float* target = g.stride_w == 1 ? row : padded;
    ZeroFloats(target, g.pad_left);
    CopyFloats(target + g.pad_left, plane + ih * g.width, g.width);
    ZeroFloats(target + g.pad_left + g.width, row_pitch - g.pad_left - g.width);
    if (g.stride_w == 2) {  // evens and odds of two vectors at a time (phase_len is whole vectors)
      for (int64_t q = 0; q < g.phase_len; q += kLanes) {
        const Vec a = LoadUnaligned(padded + 2 * q), b = LoadUnaligned(padded + 2 * q + kLanes);
        StoreUnaligned(row + q, __builtin_shuffle(a, b, Lanes{0, 2, 4, 6, 8, 10, 12, 14}));
        StoreUnaligned(row + g.phase_len + q, __builtin_shuffle(a, b, Lanes{1, 3, 5, 7, 9, 11, 13, 15}));
      }
    } else if (g.stride_w > 2) {  // phase p holds padded columns p, p + stride, ...
      for (int64_t p = 0; p < g.stride_w; ++p) {
        for (int64_t q = 0; q < g.phase_len; ++q) row[p * g.phase_len + q] = padded[q * g.stride_w + p];
      }
    }
  }
}

// Outputs of `rows` rows from `oh` and `vecs` vectors of columns from `ow` into `block` (row
// pitch vecs * kLanes), summed over every tap. `g.columns` places each tap column in the
// scratch, so the loop holds no division.
template <int64_t rows, int64_t vecs>
JAXPORT_INLINE void ComputeBlock(const float* scratch, const float* weights, const Geometry& g,
                                 int64_t oh, int64_t ow, float* block) {
  const int64_t row_pitch = g.stride_w * g.phase_len;  // one padded input row
  const float* base[rows];
  for (int64_t r = 0; r < rows; ++r) base[r] = scratch + (oh + r) * g.stride_h * row_pitch + ow;
  Vec acc[rows][vecs] = {};
  for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
    const int64_t tap_row = kh * g.dilation_h * row_pitch;
    for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
      const float w = weights[kh * g.kernel_w + kw];
      const Vec wv = {w, w, w, w, w, w, w, w};
      const int64_t at = tap_row + g.columns[kw];
#pragma GCC unroll 8
      for (int64_t r = 0; r < rows; ++r) {
#pragma GCC unroll 2
        for (int64_t v = 0; v < vecs; ++v) acc[r][v] += wv * LoadUnaligned(base[r] + at + v * kLanes);
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t v = 0; v < vecs; ++v) StoreUnaligned(block + (r * vecs + v) * kLanes, acc[r][v]);
  }
}

// Rows [oh, oh + rows) of one output channel. Where a row holds at least one block, the
// last block is moved left to end at the row's end (recomputing a few outputs) so every block
// is stored whole; narrower rows take the block's first columns.
template <int64_t rows, int64_t vecs>
JAXPORT_INLINE void ComputeRows(const float* scratch, const float* weights, const Geometry& g, int64_t oh,
                                float* out) {
  constexpr int64_t width = vecs * kLanes;
  float block[rows * width];
  for (int64_t ow = 0; ow < g.out_width; ow += width) {
    const int64_t start = g.out_width >= width ? std::min(ow, g.out_width - width) : ow;
    ComputeBlock<rows, vecs>(scratch, weights, g, oh, start, block);
    const int64_t cols = std::min(width, g.out_width - start);
    for (int64_t r = 0; r < rows; ++r) {
      float* target = out + (oh + r) * g.out_width + start;
      if (cols == width) {  // whole vectors, not a call to memcpy per row
        for (int64_t v = 0; v < vecs; ++v) {
          StoreUnaligned(target + v * kLanes, LoadUnaligned(block + r * width + v * kLanes));
        }
      } else {
        for (int64_t c = 0; c < cols; ++c) target[c] = block[r * width + c];
      }
    }
  }
}

// Every row of one output channel, `rows` at a time (the last group moved up to end at the
// last row, overlapping); channels of fewer rows take as many rows at a time as they have.
template <int64_t rows, int64_t vecs>
JAXPORT_INLINE void ComputeChannel(const float* scratch, const float* weights, const Geometry& g, float* out) {
  if constexpr (rows > 1) {
    if (g.out_height < rows) return ComputeChannel<rows - 1, vecs>(scratch, weights, g, out);
  }
  for (int64_t oh = 0; oh < g.out_height; oh += rows) {
    ComputeRows<rows, vecs>(scratch, weights, g, std::min(oh, g.out_height - rows), out);
  }
}

// The outputs of every channel that reads input plane `plane` (image * channels + channel).
// Compiled twice, for AVX2 with FMA (x86-64-v3) and for the baseline, picked when loaded.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
void ComputePlane(const float* input, const float* weights, float* output, const Geometry& g,
                  int64_t channels, int64_t plane, float* scratch) {
  FillScratch(input + plane * g.height * g.width, g, scratch);
  const int64_t image = plane / channels, channel = plane % channels;
  const int64_t taps = g.kernel_h * g.kernel_w;
  for (int64_t j = 0; j < g.multiplier; ++j) {
    const int64_t out_channel = channel * g.multiplier + j;
    const float* w = weights + out_channel * taps;
    float* out = output + (image * channels * g.multiplier + out_channel) * g.out_height * g.out_width;
    // Eight accumulators: four rows of two vectors, or eight rows of one for rows of at most
    // one vector (7 px planes), so that few of the computed outputs are thrown away.
    if (g.out_width <= kLanes) {
      ComputeChannel<8, 1>(scratch, w, g, out);
    } else {
      ComputeChannel<4, 2>(scratch, w, g, out);
    }
  }
}

ffi::Error DepthwiseConv2dImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> input,
                               ffi::Buffer<ffi::F32> weight, ffi::ResultBuffer<ffi::F32> output,
                               int64_t stride_h, int64_t stride_w, int64_t pad_top, int64_t pad_left,
                               int64_t dilation_h, int64_t dilation_w) {
  const auto in = input.dimensions();
  const auto w = weight.dimensions();
  const auto out = output->dimensions();
  if (in.size() != 4 || w.size() != 4 || out.size() != 4 || w[1] != 1 || in[1] == 0 ||
      w[0] % in[1] != 0 || out[1] != w[0] || out[0] != in[0] || stride_h < 1 || stride_w < 1 ||
      dilation_h < 1 || dilation_w < 1 || pad_top < 0 || pad_left < 0 || w[3] > kMaxKernelWidth) {
    return ffi::Error::InvalidArgument("jaxport_depthwise_conv2d: operands are not a depthwise convolution");
  }
  Geometry g;
  g.height = in[2];
  g.width = in[3];
  g.out_height = out[2];
  g.out_width = out[3];
  g.kernel_h = w[2];
  g.kernel_w = w[3];
  g.stride_h = stride_h;
  g.stride_w = stride_w;
  g.pad_top = pad_top;
  g.pad_left = pad_left;
  g.dilation_h = dilation_h;
  g.dilation_w = dilation_w;
  g.multiplier = w[0] / in[1];
  // Rows read by the last output row, and phase columns read by the last (rounded-up) block.
  g.padded_rows = std::max(g.height + pad_top, (g.out_height - 1) * stride_h + (g.kernel_h - 1) * dilation_h + 1);
  const int64_t rounded = (g.out_width + kWidestBlock - 1) / kWidestBlock * kWidestBlock;
  g.phase_len = std::max((g.width + pad_left + stride_w - 1) / stride_w,
                         rounded + ((g.kernel_w - 1) * dilation_w) / stride_w);
  g.phase_len = (g.phase_len + kLanes - 1) / kLanes * kLanes;
  for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
    const int64_t offset = kw * dilation_w;
    g.columns[kw] = (offset % stride_w) * g.phase_len + offset / stride_w;
  }
  const int64_t channels = in[1], planes = in[0] * in[1];
  if (planes == 0 || g.out_height == 0 || g.out_width == 0) return ffi::Error::Success();
  const float* x = input.typed_data();
  const float* k = weight.typed_data();
  float* y = output->typed_data();
  // The phased rows, then one padded input row (strided convolutions only).
  const size_t scratch_size = static_cast<size_t>((g.padded_rows + 1) * g.stride_w * g.phase_len);
  jaxport::ParallelFor(pool, planes, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(scratch_size);
    for (int64_t plane = begin; plane < end; ++plane) {
      ComputePlane(x, k, y, g, channels, plane, scratch.data());
    }
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxportDepthwiseConv2dF32, DepthwiseConv2dImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("stride_h")
                                  .Attr<int64_t>("stride_w")
                                  .Attr<int64_t>("pad_top")
                                  .Attr<int64_t>("pad_left")
                                  .Attr<int64_t>("dilation_h")
                                  .Attr<int64_t>("dilation_w"));
