// int8 linear layers for CPU decoding (issue 26): y = (q8(x) . W^T) * scales + b, written for this project.
//
// W: int8 weights with one float scale per output row, stored in blocks of 16 output rows, each block laid out
// [K/4][16][4] (4 consecutive inputs of each of the 16 rows side by side: one 64-byte load feeds one AVX-512
// VNNI instruction for 16 outputs), so a whole layer is one sequential stream. x: float32 [M, K], quantised per
// row to int8 with a symmetric scale absmax/127 and no zero point. The integer dot products are exact, so a
// row's output does not depend on the other rows of the call (a batched decoding step gives each request what
// it would get alone).
// vpdpbusd multiplies unsigned by signed bytes: x goes in as q + 128 and 128 * sum(W[n]) comes off again (exact).
// Work is split over blocks of output rows with at::parallel_for (torch's own OpenMP threads); each block is read
// once and serves every row of x, four at a time. A call of up to 4 rows (decoding) reads four of its thread's
// blocks side by side, as four sequential streams.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <immintrin.h>
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace {

constexpr int64_t kBlockRows = 16;

// One row of x → int8 values biased by +128 (as uint8) and its scale; `padded` bytes, the tail past K set to
// 128 (a zero, against the zero-padded weight tail). Rounding: to nearest, ties to even, in both loops.
void quantize_row(const float* row, int64_t k, int64_t padded, uint8_t* out, float* scale) {
  __m512 vmax = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= k; j += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(row + j)));
  float absmax = _mm512_reduce_max_ps(vmax);
  for (; j < k; ++j) absmax = std::max(absmax, std::fabs(row[j]));
  const float s = absmax > 0.f ? absmax / 127.f : 1.f;
  const float inverse = 1.f / s;
  const __m512 vinverse = _mm512_set1_ps(inverse);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), bias = _mm512_set1_epi32(128);
  for (j = 0; j + 16 <= k; j += 16) {
    __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(row + j), vinverse));  // nearest, ties to even
    q = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q, lo), hi), bias);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), _mm512_cvtepi32_epi8(q));
  }
  for (; j < k; ++j) {
    const float v = std::min(127.f, std::max(-127.f, std::nearbyint(row[j] * inverse)));
    out[j] = static_cast<uint8_t>(static_cast<int>(v) + 128);
  }
  for (j = k; j < padded; ++j) out[j] = 128;
  *scale = s;
}

// Output rows of one weight block for `R` rows of x (R <= 4): 16 outputs per row.
template <int R>
void block_rows(const int8_t* wb, int64_t k4, const uint8_t* xq, int64_t padded, int32_t* dots) {
  __m512i acc[R], acc2[R];
  for (int r = 0; r < R; ++r) acc[r] = acc2[r] = _mm512_setzero_si512();
  const int32_t* x32[R];
  for (int r = 0; r < R; ++r) x32[r] = reinterpret_cast<const int32_t*>(xq + r * padded);
  int64_t j = 0;
  for (; j + 1 < k4; j += 2) {  // two accumulators per row: two independent chains of vpdpbusd
    const __m512i w0 = _mm512_loadu_si512(wb + j * 64);
    const __m512i w1 = _mm512_loadu_si512(wb + (j + 1) * 64);
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_set1_epi32(x32[r][j]), w0);
      acc2[r] = _mm512_dpbusd_epi32(acc2[r], _mm512_set1_epi32(x32[r][j + 1]), w1);
    }
  }
  if (j < k4) {
    const __m512i w0 = _mm512_loadu_si512(wb + j * 64);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_set1_epi32(x32[r][j]), w0);
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_si512(dots + r * kBlockRows, _mm512_add_epi32(acc[r], acc2[r]));
}

// The same for `S` blocks at once (R <= 4 rows): S sequential weight streams per thread, one vpdpbusd chain per
// block and row. A decoding step's layers take 0.88x the time of one stream at a time for one row, 0.95x for four
// (v1/v3 layer shapes, 2 threads, AMD Zen 4; issue 26, sixteenth pass): more reads in flight. dots: [S][R][16].
template <int S, int R>
void blocks_rows(const int8_t* const* wb, int64_t k4, const uint8_t* xq, int64_t padded, int32_t* dots) {
  __m512i acc[S][R];
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < R; ++r) acc[s][r] = _mm512_setzero_si512();
  const int32_t* x32[R];
  for (int r = 0; r < R; ++r) x32[r] = reinterpret_cast<const int32_t*>(xq + r * padded);
  for (int64_t j = 0; j < k4; ++j) {
    __m512i xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm512_set1_epi32(x32[r][j]);
    for (int s = 0; s < S; ++s) {
      const __m512i w = _mm512_loadu_si512(wb[s] + j * 64);
      for (int r = 0; r < R; ++r) acc[s][r] = _mm512_dpbusd_epi32(acc[s][r], xv[r], w);
    }
  }
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < R; ++r) _mm512_storeu_si512(dots + (s * R + r) * kBlockRows, acc[s][r]);
}

constexpr int kStreams = 4;  // blocks read side by side by one thread when a call has at most 4 rows

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& weight, int64_t out_features,
                       const at::Tensor& weight_scale, const at::Tensor& weight_sum, const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.dim() == 2, "int8_linear: x must be float32 [M, K]");
  TORCH_CHECK(weight.scalar_type() == at::kChar && weight.dim() == 4 && weight.is_contiguous() &&
              weight.size(2) == kBlockRows && weight.size(3) == 4,
              "int8_linear: weight must be contiguous int8 [blocks, K/4, 16, 4]");
  const int64_t rows = x.size(0), k = x.size(1), blocks = weight.size(0), k4 = weight.size(1);
  const int64_t padded = k4 * 4;
  TORCH_CHECK(padded >= k && padded < k + 4, "int8_linear: x has ", k, " columns, the weight ", padded);
  TORCH_CHECK(out_features > (blocks - 1) * kBlockRows && out_features <= blocks * kBlockRows,
              "int8_linear: ", out_features, " outputs do not fit ", blocks, " blocks");
  TORCH_CHECK(weight_scale.scalar_type() == at::kFloat && weight_scale.numel() == out_features &&
              weight_scale.is_contiguous(), "int8_linear: weight_scale must be float32 [N]");
  TORCH_CHECK(weight_sum.scalar_type() == at::kInt && weight_sum.numel() == out_features && weight_sum.is_contiguous(),
              "int8_linear: weight_sum must be int32 [N]");
  const float* b = nullptr;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->numel() == out_features && bias->is_contiguous(),
                "int8_linear: bias must be float32 [N]");
    b = bias->data_ptr<float>();
  }
  const at::Tensor xc = x.contiguous();
  at::Tensor y = at::empty({rows, out_features}, x.options());
  if (rows == 0) return y;
  at::Tensor x_scale_t = at::empty({rows}, x.options());
  at::Tensor xq_t = at::empty({rows, padded}, x.options().dtype(at::kByte));
  const float* xf = xc.data_ptr<float>();
  uint8_t* xq = xq_t.data_ptr<uint8_t>();
  float* x_scale = x_scale_t.data_ptr<float>();
  if (rows <= 16) {  // a decoding step: not worth waking the other threads
    for (int64_t m = 0; m < rows; ++m) quantize_row(xf + m * k, k, padded, xq + m * padded, x_scale + m);
  } else {
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
      for (int64_t m = begin; m < end; ++m) quantize_row(xf + m * k, k, padded, xq + m * padded, x_scale + m);
    });
  }
  const int8_t* w = weight.data_ptr<int8_t>();
  const float* w_scale = weight_scale.data_ptr<float>();
  const int32_t* w_sum = weight_sum.data_ptr<int32_t>();
  float* out = y.data_ptr<float>();
  // y[m0 .. m0+group) of block `blk` from its integer dots ([group][16]): the zero-point and scales.
  auto finish = [&](int64_t blk, int64_t m0, int64_t group, const int32_t* dots) {
    const int64_t n0 = blk * kBlockRows, n1 = std::min(n0 + kBlockRows, out_features);
    for (int64_t r = 0; r < group; ++r) {
      const float xs = x_scale[m0 + r];
      float* yr = out + (m0 + r) * out_features;
      for (int64_t n = n0; n < n1; ++n) {
        const int32_t dot = dots[r * kBlockRows + (n - n0)] - 128 * w_sum[n];
        const float v = static_cast<float>(dot) * (xs * w_scale[n]);
        yr[n] = b ? v + b[n] : v;
      }
    }
  };
  auto block_of = [&](int64_t blk) { return w + blk * k4 * 4 * kBlockRows; };
  const int64_t grain = rows > 4 ? 1 : 4;  // up to 4 rows: a layer of 4 blocks (64 outputs) or fewer stays on one thread
  at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
    alignas(64) int32_t dots[kStreams * 4 * kBlockRows];
    int64_t rest = begin;  // blocks from here on go one at a time
    if (rows <= 4 && end - begin >= kStreams) {
      // The thread's blocks in kStreams runs of `per`, read side by side; a last partial round goes one at a time.
      const int64_t per = (end - begin) / kStreams;
      for (int64_t i = 0; i < per; ++i) {
        const int8_t* wb[kStreams];
        for (int s = 0; s < kStreams; ++s) wb[s] = block_of(begin + s * per + i);
        switch (rows) {
          case 1: blocks_rows<kStreams, 1>(wb, k4, xq, padded, dots); break;
          case 2: blocks_rows<kStreams, 2>(wb, k4, xq, padded, dots); break;
          case 3: blocks_rows<kStreams, 3>(wb, k4, xq, padded, dots); break;
          default: blocks_rows<kStreams, 4>(wb, k4, xq, padded, dots); break;
        }
        for (int s = 0; s < kStreams; ++s) finish(begin + s * per + i, 0, rows, dots + s * rows * kBlockRows);
      }
      rest = begin + kStreams * per;
    }
    for (int64_t blk = rest; blk < end; ++blk) {
      const int8_t* wb = block_of(blk);
      for (int64_t m0 = 0; m0 < rows; m0 += 4) {
        const int64_t group = std::min<int64_t>(4, rows - m0);
        const uint8_t* xg = xq + m0 * padded;
        switch (group) {
          case 1: block_rows<1>(wb, k4, xg, padded, dots); break;
          case 2: block_rows<2>(wb, k4, xg, padded, dots); break;
          case 3: block_rows<3>(wb, k4, xg, padded, dots); break;
          default: block_rows<4>(wb, k4, xg, padded, dots); break;
        }
        finish(blk, m0, group, dots);
      }
    }
  });
  return y;
}

}  // namespace

TORCH_LIBRARY(cosyvoice_kernels, m) {
  m.def("int8_linear(Tensor x, Tensor weight, int out_features, Tensor weight_scale, Tensor weight_sum, "
        "Tensor? bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(cosyvoice_kernels, CPU, m) { m.impl("int8_linear", &int8_linear); }
