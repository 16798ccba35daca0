// Float32 scaled dot-product attention without a mask on CPU, as an XLA FFI handler:
// out[b, h] = softmax(q[b, h] k[b, h / groups]^T * scale) v[b, h / groups], and each query
// row's logsumexp of its scaled scores (0 for a row whose scores are all -inf).
//
// Why a kernel: XLA:CPU computes attention as written, the whole [heads, queries, keys] score
// array at once, then softmax passes over it and a second product. At Whisper's 1,500 audio
// frames that array is 72 MB a layer, and the encoder's attention took 910 ms of a 1.86 s call
// on one core (scores 301 ms, weighted values 246 ms, the softmax and layout copies the rest),
// where PyTorch's own CPU kernel streams it block by block. This is that streaming ("flash")
// form: the scores of a block of query rows against a block of keys are made in L1, folded
// into a running softmax and multiplied into the output rows at once. One layer's attention
// there (8 heads of 64) takes 93 ms on one core, PyTorch's 92, XLA's 229; over 128 to 197
// tokens it is no faster than XLA's, and jaxport leaves those to XLA.
//
// How: keys are packed per head into slivers of 16 ([ceil(S / 16), D, 16]) and values into
// slivers of 16 head dims ([ceil(D / 16), S, 16]), so both products are the 6 x 16 register
// tile of the product kernel (tile.h), and a block of kQueryRows queries is packed in slivers of
// 6. For each block of kKeyBlock keys: the scores, scaled; each row's running maximum m and
// sum l updated (the output rows rescaled by exp(m_old - m_new)); the block's weights
// exp(score - m) packed and multiplied into the output rows. At the end the rows are divided
// by l. (Query block, head) pairs are split over XLA's intra-op thread pool.
//
// Numerics: as jaxport's portable formulation (`safe_softmax` in `ops/aten/softmax.py`):
// float32 throughout, a row's scores shifted by their maximum; a row whose scores are all -inf
// is shifted by 0, so its weights are 0 and it divides by 1 (zeros, or NaN where a value is
// not finite, as 0 * inf gives); a NaN score makes its row NaN, as does a +inf one (inf - inf).
// The logsumexp is 0 for a row whose scores are all -inf or NaN and NaN for one with a +inf
// score, as PyTorch's CPU flash kernel reports them (its maximum skips NaN too).
// exp is a degree-6 polynomial after reduction by ln 2 (Cephes' expf, about 1 ulp); weights
// below exp(-87) are 0. Sums run in a different order from one big softmax, so results differ
// from the portable formulation's in the last bits.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "parallel.h"
#include "tile.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using jaxport::Broadcast;
using jaxport::kMr;
using jaxport::kNr;
using jaxport::Load;
using jaxport::PackRows;
using jaxport::Store;
using jaxport::Tile;
using jaxport::Vec;
typedef int32_t IntVec __attribute__((vector_size(32)));
typedef uint32_t BitsVec __attribute__((vector_size(32)));

constexpr int64_t kLanes = 8;
constexpr int64_t kQueryRows = 48;  // query rows per block: 8 tiles of 6
constexpr int64_t kKeyBlock = 128;  // keys per block: its keys and values (D = 64) 64 KB, in L2
constexpr float kInf = std::numeric_limits<float>::infinity();

// exp(x) for x <= 0 (or NaN, which it returns): Cephes' expf. Below -87 (where exp leaves
// float32's normal range) it returns 0.
JAXPORT_INLINE Vec Exp(Vec x) {
  const Vec floor_value = Broadcast(-87.0f);
  const Vec t = x < floor_value ? floor_value : x;  // NaN compares false and stays
  const IntVec whole = __builtin_convertvector(t * Broadcast(1.44269504088896341f) - Broadcast(0.5f), IntVec);
  const Vec n = __builtin_convertvector(whole, Vec);
  Vec r = t - n * Broadcast(0.693359375f);
  r = r - n * Broadcast(-2.12194440e-4f);
  Vec p = Broadcast(1.9875691500e-4f);
  p = p * r + Broadcast(1.3981999507e-3f);
  p = p * r + Broadcast(8.3334519073e-3f);
  p = p * r + Broadcast(4.1665795894e-2f);
  p = p * r + Broadcast(1.6666665459e-1f);
  p = p * r + Broadcast(5.0000001201e-1f);
  p = p * r * r + r + Broadcast(1.0f);
  const BitsVec bits = (__builtin_convertvector(whole, BitsVec) + 127u) << 23;
  Vec scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const Vec result = p * scale;
  return x < floor_value ? Broadcast(0.0f) : result;
}

JAXPORT_INLINE float Exp(float x) { return Exp(Broadcast(x))[0]; }

struct Shapes {
  int64_t batch, heads, kv_heads, queries, keys, dim;
  int64_t key_slivers, dim_slivers;  // ceil(keys / 16), ceil(dim / 16)
  float scale;
};

// Keys and values of one (batch, key/value head) as the tiles read them, zeros past the end.
void PackKeysValues(const Shapes& s, const float* key, const float* value, float* keys, float* values) {
  std::fill(keys, keys + s.key_slivers * s.dim * kNr, 0.0f);
  std::fill(values, values + s.dim_slivers * s.keys * kNr, 0.0f);
  for (int64_t j = 0; j < s.keys; ++j) {
    const float* k_row = key + j * s.dim;
    float* k_sliver = keys + (j / kNr) * s.dim * kNr + j % kNr;
    for (int64_t d = 0; d < s.dim; ++d) k_sliver[d * kNr] = k_row[d];
    const float* v_row = value + j * s.dim;
    for (int64_t d = 0; d < s.dim; ++d) values[((d / kNr) * s.keys + j) * kNr + d % kNr] = v_row[d];
  }
}

// Per-thread scratch for one block of query rows.
struct Scratch {
  explicit Scratch(const Shapes& s)
      : queries(kQueryRows * s.dim),
        scores(kQueryRows * kKeyBlock),
        weights(kQueryRows * kKeyBlock),
        out(kQueryRows * s.dim_slivers * kNr),
        top(kQueryRows),
        total(kQueryRows) {}
  std::vector<float> queries, scores, weights, out, top, total;
};

// The scores of `rows` packed query rows against `block` keys from packed keys, scaled, into
// `scores` (rows of kKeyBlock), -inf past `block` to the next multiple of kLanes.
__attribute__((target_clones("arch=x86-64-v3", "default")))
void Scores(const Shapes& s, const float* queries, const float* keys, int64_t rows, int64_t block, float* scores) {
  for (int64_t i = 0; i < rows; i += kMr) {
    for (int64_t j = 0; j < block; j += kNr) {
      Tile(queries + i * s.dim, keys + (j / kNr) * s.dim * kNr, s.dim, scores + i * kKeyBlock + j, kKeyBlock,
           std::min(kMr, rows - i), std::min(kNr, block - j), false);
    }
  }
  const int64_t padded = (block + kLanes - 1) / kLanes * kLanes;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * kKeyBlock;
    for (int64_t c = 0; c < block; ++c) row[c] *= s.scale;
    for (int64_t c = block; c < padded; ++c) row[c] = -kInf;
  }
}

// Each row's running maximum `top` (of its scores but NaN) and sum `total` brought up to date
// with a block of scores (up to `padded` columns), the scores replaced by their weights
// exp(score - top), and the row's output so far rescaled to the new maximum.
__attribute__((target_clones("arch=x86-64-v3", "default")))
void Softmax(int64_t rows, int64_t padded, float* scores, float* top, float* total, float* out, int64_t ldo) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * kKeyBlock;
    Vec most = Broadcast(top[r]);
    for (int64_t c = 0; c < padded; c += kLanes) {
      const Vec v = Load(row + c);
      most = v > most ? v : most;  // NaN scores are skipped here and make their weights NaN below
    }
    float new_top = top[r];
    for (int64_t l = 0; l < kLanes; ++l) new_top = most[l] > new_top ? most[l] : new_top;
    const float shift = new_top == -kInf ? 0.0f : new_top;
    const float rescale = Exp(top[r] - shift);
    Vec sum = Broadcast(0.0f);
    for (int64_t c = 0; c < padded; c += kLanes) {
      const Vec p = Exp(Load(row + c) - Broadcast(shift));
      Store(row + c, p);
      sum += p;
    }
    float block_total = 0.0f;
    for (int64_t l = 0; l < kLanes; ++l) block_total += sum[l];
    total[r] = total[r] * rescale + block_total;
    top[r] = new_top;
    if (rescale != 1.0f) {
      float* out_row = out + r * ldo;
      for (int64_t d = 0; d < ldo; ++d) out_row[d] *= rescale;
    }
  }
}

// The weights of `rows` rows for `block` keys (packed in slivers of 6 rows) times the values,
// added to the output rows.
__attribute__((target_clones("arch=x86-64-v3", "default")))
void AddWeightedValues(const Shapes& s, const float* weights, const float* values, int64_t rows, int64_t block,
                       float* out, int64_t ldo) {
  for (int64_t i = 0; i < rows; i += kMr) {
    for (int64_t d = 0; d < s.dim_slivers; ++d) {
      Tile(weights + i * block, values + d * s.keys * kNr, block, out + i * ldo + d * kNr, ldo,
           std::min(kMr, rows - i), std::min(kNr, s.dim - d * kNr), true);
    }
  }
}

// Output rows [q0, q0 + rows) of one head and their rows' logsumexp: `query`, `out` and
// `logsumexp` point at the head's first row.
void QueryBlock(const Shapes& s, const float* query, const float* keys, const float* values, int64_t q0,
                Scratch& w, float* out, float* logsumexp) {
  const int64_t rows = std::min(kQueryRows, s.queries - q0), ldo = s.dim_slivers * kNr;
  PackRows(query + q0 * s.dim, s.dim, rows, s.dim, w.queries.data());
  std::fill(w.out.begin(), w.out.end(), 0.0f);
  std::fill(w.top.begin(), w.top.end(), -kInf);
  std::fill(w.total.begin(), w.total.end(), 0.0f);
  for (int64_t j0 = 0; j0 < s.keys; j0 += kKeyBlock) {
    const int64_t block = std::min(kKeyBlock, s.keys - j0), padded = (block + kLanes - 1) / kLanes * kLanes;
    Scores(s, w.queries.data(), keys + (j0 / kNr) * s.dim * kNr, rows, block, w.scores.data());
    Softmax(rows, padded, w.scores.data(), w.top.data(), w.total.data(), w.out.data(), ldo);
    PackRows(w.scores.data(), kKeyBlock, rows, block, w.weights.data());
    AddWeightedValues(s, w.weights.data(), values + j0 * kNr, rows, block, w.out.data(), ldo);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const bool dead = w.top[r] == -kInf;
    const float total = dead ? 1.0f : w.total[r];
    const float* acc = w.out.data() + r * ldo;
    float* row = out + (q0 + r) * s.dim;
    for (int64_t d = 0; d < s.dim; ++d) row[d] = acc[d] / total;
    logsumexp[q0 + r] = dead ? 0.0f : w.top[r] + std::log(w.total[r]);
  }
}

ffi::Error AttentionImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> query, ffi::Buffer<ffi::F32> key,
                         ffi::Buffer<ffi::F32> value, ffi::ResultBuffer<ffi::F32> out,
                         ffi::ResultBuffer<ffi::F32> logsumexp, float scale) {
  const auto qd = query.dimensions(), kd = key.dimensions(), vd = value.dimensions(), od = out->dimensions();
  const auto ld = logsumexp->dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4 || od.size() != 4 || ld.size() != 3) {
    return ffi::Error::InvalidArgument("jaxport_attention: operands are not [batch, heads, sequence, dim]");
  }
  Shapes s{qd[0], qd[1], kd[1], qd[2], kd[2], qd[3], (kd[2] + kNr - 1) / kNr, (qd[3] + kNr - 1) / kNr, scale};
  if (kd[0] != s.batch || vd[0] != s.batch || vd[1] != s.kv_heads || vd[2] != s.keys || kd[3] != s.dim ||
      vd[3] != s.dim || s.kv_heads == 0 || s.heads % s.kv_heads != 0 || od[0] != s.batch || od[1] != s.heads ||
      od[2] != s.queries || od[3] != s.dim || ld[0] != s.batch || ld[1] != s.heads || ld[2] != s.queries) {
    return ffi::Error::InvalidArgument("jaxport_attention: operand shapes do not attend");
  }
  const int64_t pairs = s.batch * s.kv_heads;
  if (s.batch * s.heads * s.queries == 0) return ffi::Error::Success();  // a head size of 0 still has logsumexps
  const int64_t key_size = s.key_slivers * s.dim * kNr, value_size = s.dim_slivers * s.keys * kNr;
  std::vector<float> keys(pairs * key_size), values(pairs * value_size);
  jaxport::ParallelFor(pool, pairs, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      PackKeysValues(s, key.typed_data() + p * s.keys * s.dim, value.typed_data() + p * s.keys * s.dim,
                     keys.data() + p * key_size, values.data() + p * value_size);
    }
  });
  const int64_t blocks = (s.queries + kQueryRows - 1) / kQueryRows, groups = s.heads / s.kv_heads;
  jaxport::ParallelFor(pool, s.batch * s.heads * blocks, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch(s);
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t head = unit / blocks, q0 = unit % blocks * kQueryRows;  // head counts over the batch
      const int64_t pair = head / s.heads * s.kv_heads + head % s.heads / groups;
      const int64_t offset = head * s.queries * s.dim;
      QueryBlock(s, query.typed_data() + offset, keys.data() + pair * key_size, values.data() + pair * value_size,
                 q0, scratch, out->typed_data() + offset, logsumexp->typed_data() + head * s.queries);
    }
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxportAttentionF32, AttentionImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<float>("scale"));
