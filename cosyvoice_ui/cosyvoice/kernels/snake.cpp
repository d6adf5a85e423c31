// The vocoder's Snake activation in one pass (issue 26), written for this project:
//
//   y[b, c, t] = x[b, c, t] + inv_alpha[c] * sin(alpha[c] * x[b, c, t])^2
//
// torch runs it as five element-wise ops, each reading and writing the whole signal (the v3 vocoder's last stage:
// 64 channels x 30k samples for 5 s of audio) and, in bf16, rounding after each. Here each value is read once,
// computed in float32 and rounded once.
// x [B, C, T] float32 or bfloat16, laid out time-major (channels adjacent: conv_layout.py) or with time adjacent;
// any other layout is made contiguous first. The output has the input's dtype and layout. alpha, inv_alpha [C]
// float32.
// sin(v)^2 = sin(r)^2 with r = v - n pi, n = round(v / pi), |r| <= pi/2 (the sign of sin(r) squares away); pi in
// four parts, so n pi is exact for |n| < 2^16 or so; sin(r) by an odd degree-9 minimax polynomial (a few ulp).
// Arguments past about 2^16 lose accuracy (the signal's values are far smaller); inf and NaN give NaN, as sin does.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <immintrin.h>
#include <algorithm>
#include <cstdint>

namespace snake_impl {

inline __m512 sin_squared(__m512 v) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(0.318309886183790671538f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(3.140625f), v);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.0009670257568359375f), r);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(6.2771141529083251953e-07f), r);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.2154201256553420762e-10f), r);
  const __m512 s = _mm512_mul_ps(r, r);
  __m512 u = _mm512_set1_ps(2.6083159809786593541503e-06f);
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(-0.0001981069071916863322258f));
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(0.00833307858556509017944336f));
  u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(-0.166666597127914428710938f));
  const __m512 sine = _mm512_fmadd_ps(_mm512_mul_ps(s, r), u, r);
  return _mm512_mul_ps(sine, sine);
}

inline __mmask16 first_lanes(int64_t n) {  // the first n of 16 lanes (n >= 16: all)
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

inline __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load(const c10::BFloat16* p, __mmask16 m) {
  const __m256i half = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

inline void store(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
inline void store(c10::BFloat16* p, __m512 v, __mmask16 m) {
  // Round to nearest even, as torch's float-to-bf16 conversion does; NaN stays a quiet NaN.
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i top = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd)), 16);
  top = _mm512_mask_mov_epi32(top, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(top));
}

inline __m512 snake16(__m512 x, __m512 alpha, __m512 inv_alpha) {
  return _mm512_fmadd_ps(inv_alpha, sin_squared(_mm512_mul_ps(alpha, x)), x);
}

// Rows of channels (time-major): row r = (b, t) holds C values, channel c at offset c.
template <typename T>
void channel_rows(const T* x, T* y, const float* alpha, const float* inv_alpha, int64_t batches, int64_t frames,
                  int64_t channels, int64_t x_batch, int64_t y_batch) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(channels, 1));
  at::parallel_for(0, batches * frames, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / frames, t = row % frames;
      const T* in = x + b * x_batch + t * channels;
      T* out = y + b * y_batch + t * channels;
      for (int64_t c = 0; c < channels; c += 16) {
        const __mmask16 m = first_lanes(channels - c);
        const __m512 a = _mm512_maskz_loadu_ps(m, alpha + c), ia = _mm512_maskz_loadu_ps(m, inv_alpha + c);
        store(out + c, snake16(load(in + c, m), a, ia), m);
      }
    }
  });
}

// Rows of time (plain layout): row r = (b, c) holds T values of one channel.
template <typename T>
void time_rows(const T* x, T* y, const float* alpha, const float* inv_alpha, int64_t batches, int64_t frames,
               int64_t channels) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(frames, 1));
  at::parallel_for(0, batches * channels, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t c = row % channels;
      const __m512 a = _mm512_set1_ps(alpha[c]), ia = _mm512_set1_ps(inv_alpha[c]);
      const T* in = x + row * frames;
      T* out = y + row * frames;
      for (int64_t t = 0; t < frames; t += 16) {
        const __mmask16 m = first_lanes(frames - t);
        store(out + t, snake16(load(in + t, m), a, ia), m);
      }
    }
  });
}

template <typename T>
void run(const at::Tensor& x, at::Tensor& y, const at::Tensor& alpha, const at::Tensor& inv_alpha, bool by_channel) {
  const int64_t batches = x.size(0), channels = x.size(1), frames = x.size(2);
  if (by_channel) {
    channel_rows<T>(x.const_data_ptr<T>(), y.data_ptr<T>(), alpha.const_data_ptr<float>(),
                    inv_alpha.const_data_ptr<float>(), batches, frames, channels, x.stride(0), y.stride(0));
  } else {
    time_rows<T>(x.const_data_ptr<T>(), y.data_ptr<T>(), alpha.const_data_ptr<float>(),
                 inv_alpha.const_data_ptr<float>(), batches, frames, channels);
  }
}

// Channels adjacent and time steps C apart (any batch stride): the time-major layout of conv_layout.py.
bool channel_rows_layout(const at::Tensor& x) {
  return (x.size(1) == 1 || x.stride(1) == 1) && (x.size(2) == 1 || x.stride(2) == x.size(1));
}

at::Tensor snake(const at::Tensor& x_in, const at::Tensor& alpha_in, const at::Tensor& inv_alpha_in) {
  TORCH_CHECK(x_in.dim() == 3, "snake: x must be [batch, channels, time]");
  TORCH_CHECK(x_in.scalar_type() == at::kFloat || x_in.scalar_type() == at::kBFloat16,
              "snake: x must be float32 or bfloat16");
  const int64_t channels = x_in.size(1);
  TORCH_CHECK(alpha_in.numel() == channels && inv_alpha_in.numel() == channels,
              "snake: alpha and inv_alpha need one value per channel");
  const at::Tensor alpha = alpha_in.to(at::kFloat).contiguous().view({channels});
  const at::Tensor inv_alpha = inv_alpha_in.to(at::kFloat).contiguous().view({channels});
  const bool by_channel = channel_rows_layout(x_in);
  const at::Tensor x = by_channel ? x_in : x_in.contiguous();
  at::Tensor y = by_channel
      ? at::empty_strided({x.size(0), channels, x.size(2)}, {x.size(2) * channels, 1, channels}, x.options())
      : at::empty_like(x, at::MemoryFormat::Contiguous);
  if (x.numel() == 0) return y;
  if (x.scalar_type() == at::kFloat) {
    run<float>(x, y, alpha, inv_alpha, by_channel);
  } else {
    run<c10::BFloat16>(x, y, alpha, inv_alpha, by_channel);
  }
  return y;
}

}  // namespace snake_impl

TORCH_LIBRARY_FRAGMENT(cosyvoice_kernels, m) {
  m.def("snake(Tensor x, Tensor alpha, Tensor inv_alpha) -> Tensor");
}

TORCH_LIBRARY_IMPL(cosyvoice_kernels, CPU, m) { m.impl("snake", &snake_impl::snake); }
