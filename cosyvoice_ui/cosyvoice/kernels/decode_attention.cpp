// Attention of one decoding step (issue 26), written for this project: every query head sees every cached key.
//
//   score[h, j] = scale * (q[h] . k[g(h), j]  +  qp[h] . p[h, j])      (the second term only when positions are given)
//   out[h]      = sum_j softmax_j(score[h]) * v[g(h), j]
//
// q [H, D] float32; k, v [G, K, D] float32 or bfloat16 (a cache kept in bf16 reads half the bytes), with any row
// and head strides (views into a decode's preallocated cache) and each row contiguous; query heads share key heads
// in groups of H / G (grouped-query attention: v2/v3's Qwen2, 14 over 2); v1's relative-position attention gives
// qp (q + pos_bias_v) and p [H, K, D] (stored as the keys are), its projected positions r = K-1 ... 0.
// One pass over the keys (and positions) for all heads of a group, one over the values: the step reads each cached
// byte once, where torch's batched products read them per head and the scores in between (v1: three products and
// a softmax a layer).
// Work is split over key heads with at::parallel_for (torch's own OpenMP threads). Any head width (a tail past
// the last 16 values is read masked). Scores, softmax and sums in float32 whatever the cache holds.
// The softmax subtracts the row's maximum, sums in float32 and divides once at the end: float rounding away from
// torch's softmax and products, no more.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <immintrin.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

// e^x for 16 floats, 1-2 ulp: x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor polynomial (error
// below 1.3e-7 relative), times 2^n by scalef. Inputs below -103 give 0 (float's smallest subnormal is e^-103.3).
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // ln2 in two parts, the first short: n times it is exact
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.f / 720.f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

inline __mmask16 lanes_below(int64_t n) {  // the first n of 16 lanes (n >= 16: all)
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

// 16 cached values as float32: float32 as they are, bfloat16 widened exactly (its bits are a float's top half).
inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(const c10::BFloat16* p, __mmask16 m) {
  const __m256i half = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

// a . b over d values as 16 partial sums (four independent chains; a tail past the last 16 loaded masked).
template <typename T>
inline __m512 dot_lanes(const float* a, const T* b, int64_t d) {
  const __mmask16 all = 0xFFFF;
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= d; i += 64) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), load16(b + i, all), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), load16(b + i + 16, all), s1);
    s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), load16(b + i + 32, all), s2);
    s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), load16(b + i + 48, all), s3);
  }
  for (; i < d; i += 16) {
    const __mmask16 m = lanes_below(d - i);
    s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), load16(b + i, m), s0);
  }
  return _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3));
}

// scores[0 .. k) → the softmax's numerators e^(s - max), in place; returns their sum.
float exponentiate(float* scores, int64_t k) {
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 16 <= k; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(scores + j));
  float top = _mm512_reduce_max_ps(vmax);
  for (; j < k; ++j) top = std::max(top, scores[j]);
  const __m512 vtop = _mm512_set1_ps(top);
  __m512 vsum = _mm512_setzero_ps();
  for (j = 0; j + 16 <= k; j += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(scores + j), vtop));
    _mm512_storeu_ps(scores + j, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  if (j < k) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (k - j)) - 1u);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, scores + j), vtop));
    _mm512_mask_storeu_ps(scores + j, tail, e);
    vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(tail, e));
  }
  return _mm512_reduce_add_ps(vsum);
}

// out[i] = sum_j weights[i][j] * v[j] for `count` <= 4 query rows (weights rows `k` apart), then divided by sums[i].
template <int count, typename T>
void weigh_values(const float* weights, int64_t k, const T* v, int64_t v_row, int64_t d, const float* sums,
                  float* out, int64_t out_row) {
  for (int64_t c = 0; c < d; c += 64) {  // 64 output lanes at a time: 4 x count accumulators in registers
    __mmask16 mask[4];
    for (int l = 0; l < 4; ++l) mask[l] = c + 16 * l < d ? lanes_below(d - c - 16 * l) : 0;
    __m512 acc[count][4];
    for (int i = 0; i < count; ++i)
      for (int l = 0; l < 4; ++l) acc[i][l] = _mm512_setzero_ps();
    for (int64_t j = 0; j < k; ++j) {
      const T* vj = v + j * v_row + c;
      __m512 vl[4];
      for (int l = 0; l < 4; ++l) vl[l] = load16(vj + 16 * l, mask[l]);
      for (int i = 0; i < count; ++i) {
        const __m512 w = _mm512_set1_ps(weights[i * k + j]);
        for (int l = 0; l < 4; ++l) acc[i][l] = _mm512_fmadd_ps(w, vl[l], acc[i][l]);
      }
    }
    for (int i = 0; i < count; ++i) {
      const __m512 inverse = _mm512_set1_ps(1.f / sums[i]);
      for (int l = 0; l < 4; ++l)
        _mm512_mask_storeu_ps(out + i * out_row + c + 16 * l, mask[l], _mm512_mul_ps(acc[i][l], inverse));
    }
  }
}

void check_rows(const at::Tensor& t, const char* name, int64_t d, at::ScalarType dtype) {
  TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", dtype, " like the keys, got ", t.scalar_type());
  TORCH_CHECK(t.dim() == 3, name, " must be [heads, keys, width], got ", t.dim(), " dimensions");
  TORCH_CHECK(t.size(2) == d, name, " rows have width ", t.size(2), ", the queries ", d);
  TORCH_CHECK(t.stride(2) == 1, name, " rows must be contiguous");
}

template <typename T>
void attend(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& qp,
            const at::Tensor& p, float scale, at::Tensor& out) {
  const int64_t h = q.size(0), d = q.size(1), g = keys.size(0), k = keys.size(1);
  const int64_t per_group = h / g;
  const float* qd = q.data_ptr<float>();
  const float* qpd = p.defined() ? qp.data_ptr<float>() : nullptr;
  const T* kd = keys.data_ptr<T>();
  const T* vd = values.data_ptr<T>();
  const T* pd = p.defined() ? p.data_ptr<T>() : nullptr;
  float* od = out.data_ptr<float>();
  at::parallel_for(0, g, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(per_group * k);
    std::vector<float> sums(per_group);
    for (int64_t group = begin; group < end; ++group) {
      const T* kg = kd + group * keys.stride(0);
      const T* vg = vd + group * values.stride(0);
      const int64_t first = group * per_group;
      for (int64_t j = 0; j < k; ++j) {  // one read of the group's keys serves all its query heads
        const T* kj = kg + j * keys.stride(1);
        for (int64_t i = 0; i < per_group; ++i) {
          __m512 lanes = dot_lanes(qd + (first + i) * d, kj, d);
          if (pd) lanes = _mm512_add_ps(lanes, dot_lanes(qpd + (first + i) * d, pd + (first + i) * p.stride(0) +
                                                         j * p.stride(1), d));
          scores[i * k + j] = _mm512_reduce_add_ps(lanes) * scale;
        }
      }
      for (int64_t i = 0; i < per_group; ++i) sums[i] = exponentiate(scores.data() + i * k, k);
      for (int64_t i = 0; i < per_group; i += 4) {
        const float* w = scores.data() + i * k;
        float* o = od + (first + i) * d;
        switch (std::min<int64_t>(4, per_group - i)) {
          case 1: weigh_values<1>(w, k, vg, values.stride(1), d, sums.data() + i, o, d); break;
          case 2: weigh_values<2>(w, k, vg, values.stride(1), d, sums.data() + i, o, d); break;
          case 3: weigh_values<3>(w, k, vg, values.stride(1), d, sums.data() + i, o, d); break;
          default: weigh_values<4>(w, k, vg, values.stride(1), d, sums.data() + i, o, d); break;
        }
      }
    }
  });
}

at::Tensor decode_attention(const at::Tensor& query, const at::Tensor& keys, const at::Tensor& values,
                            const c10::optional<at::Tensor>& position_query,
                            const c10::optional<at::Tensor>& positions, double scale) {
  TORCH_CHECK(query.scalar_type() == at::kFloat && query.dim() == 2, "query must be float32 [heads, width]");
  const int64_t h = query.size(0), d = query.size(1);
  TORCH_CHECK(d > 0, "the heads must have a width");
  const at::ScalarType stored = keys.scalar_type();
  TORCH_CHECK(stored == at::kFloat || stored == at::kBFloat16, "keys must be float32 or bfloat16, got ", stored);
  check_rows(keys, "keys", d, stored);
  check_rows(values, "values", d, stored);
  const int64_t g = keys.size(0), k = keys.size(1);
  TORCH_CHECK(values.size(0) == g && values.size(1) == k, "values must match the keys' [heads, keys]");
  TORCH_CHECK(g > 0 && h % g == 0, h, " query heads cannot share ", g, " key heads evenly");
  TORCH_CHECK(k > 0, "there must be at least one key");
  TORCH_CHECK(position_query.has_value() == positions.has_value(),
              "position_query and positions come together or not at all");
  const at::Tensor q = query.contiguous();
  at::Tensor qp, p;
  if (positions.has_value()) {
    qp = position_query->contiguous();
    p = *positions;
    TORCH_CHECK(qp.scalar_type() == at::kFloat && qp.sizes() == query.sizes(), "position_query must be like query");
    check_rows(p, "positions", d, stored);
    TORCH_CHECK(p.size(0) == h && p.size(1) == k, "positions must be [query heads, keys, width]");
  }
  at::Tensor out = at::empty({h, d}, query.options());
  if (stored == at::kFloat) {
    attend<float>(q, keys, values, qp, p, static_cast<float>(scale), out);
  } else {
    attend<c10::BFloat16>(q, keys, values, qp, p, static_cast<float>(scale), out);
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(cosyvoice_kernels, m) {
  m.def("decode_attention(Tensor query, Tensor keys, Tensor values, Tensor? position_query, Tensor? positions, "
        "float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(cosyvoice_kernels, CPU, m) { m.impl("decode_attention", &decode_attention); }
