// K-quant quantizers (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K): searches for sub-block scales and
// super-block scale codes, then packs ggml-compatible blocks. Dequantize lives in quantize.cpp.
// Everything here works on caller buffers and the stack (no heap, no globals), so any number of
// threads may quantize disjoint rows at once.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace duet {
namespace {

constexpr float kTinyMax = 1e-15f;  // a sub-block whose |x| stays below this quantizes to 0

// Round-to-nearest-even of v after clamping it to [lo, hi]; NaN maps to lo. Adding 1.5 * 2^23
// pushes the fraction out of the mantissa, whose low bits then hold the rounded integer.
inline int round_clamped(float v, float lo, float hi) {
  v = v > lo ? v : lo;
  v = v < hi ? v : hi;
  const float t = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &t, sizeof(bits));
  return (bits & 0x007fffff) - 0x00400000;
}

inline float f16_round(float v) { return f16_to_f32(f32_to_f16(v)); }

// ---------------------------------------------------------------------------------------------
// Error weights. The objective of every search below is sum_i w_i * (x_i - xq_i)^2.
enum class Weighting {
  kUniform,      // plain squared error
  kRmsPlusAbs,   // sqrt(mean x^2 over the sub-block) + |x|: favours large weights, gently
  kAbs,          // |x|
  kSquare,       // x^2: favours large weights strongly
};

template <int kN>
void fill_weights(Weighting mode, const float* x, float* w) {
  if (mode == Weighting::kUniform) {
    for (int i = 0; i < kN; ++i) w[i] = 1.0f;
    return;
  }
  if (mode == Weighting::kAbs) {
    for (int i = 0; i < kN; ++i) w[i] = std::fabs(x[i]);
    return;
  }
  if (mode == Weighting::kSquare) {
    for (int i = 0; i < kN; ++i) w[i] = x[i] * x[i];
    return;
  }
  float sum_xx = 0.0f;
  for (int i = 0; i < kN; ++i) sum_xx += x[i] * x[i];
  const float rms = std::sqrt(sum_xx / kN);
  for (int i = 0; i < kN; ++i) w[i] = rms + std::fabs(x[i]);
}

// ---------------------------------------------------------------------------------------------
// Affine sub-blocks: x ~= a * q + b with q in [0, qmax] and b <= 0 (the format subtracts a
// non-negative min). Used by Q2_K, Q4_K and Q5_K.

struct AffineFit {
  float a = 0.0f;  // scale
  float b = 0.0f;  // offset, <= 0
  double err = 0.0;
};

// Weighted moments of one sub-block for the normal equations of x ~= a*q + b.
struct AffineMoments {
  double w = 0, x = 0, xx = 0;  // independent of the codes
  double q = 0, qq = 0, xq = 0;  // depend on the codes
};

// Least-squares (a, b) for the codes summarized in m, with b clipped to <= 0; err is the
// weighted squared error, computed from the moments.
inline AffineFit solve_affine(const AffineMoments& m) {
  AffineFit f;
  f.err = INFINITY;
  const double det = m.w * m.qq - m.q * m.q;
  double a, b;
  if (det > 0) {
    a = (m.w * m.xq - m.x * m.q) / det;
    b = (m.qq * m.x - m.q * m.xq) / det;
    if (b > 0) {
      b = 0;
      a = m.xq / m.qq;
    }
  } else if (m.qq > 0) {  // all codes equal and non-zero
    b = 0;
    a = m.xq / m.qq;
  } else {
    return f;
  }
  f.a = static_cast<float>(a);
  f.b = static_cast<float>(b);
  f.err = m.xx - 2 * a * m.xq - 2 * b * m.x + a * a * m.qq + 2 * a * b * m.q + b * b * m.w;
  return f;
}

// Codes for x ~= a*q + b at fixed (a, b), accumulating the code-dependent moments.
template <int kN>
void round_affine(const float* x, const float* w, float inv_a, float b, int qmax, uint8_t* q,
                  AffineMoments* m) {
  double sq = 0, sqq = 0, sxq = 0;
  const float hi = static_cast<float>(qmax);
  for (int i = 0; i < kN; ++i) {
    const int l = round_clamped((x[i] - b) * inv_a, 0.0f, hi);
    q[i] = static_cast<uint8_t>(l);
    const float wl = w[i] * static_cast<float>(l);
    sq += wl;
    sqq += wl * static_cast<float>(l);
    sxq += wl * x[i];
  }
  m->q = sq;
  m->qq = sqq;
  m->xq = sxq;
}

// Search for one sub-block: scan n_steps inverse scales (qmax + r0 + k*dr) / (max - min) with the
// offset pinned at min(x, 0), round, and solve the weighted least squares for (a, b) at each;
// then polish the best by alternating re-rounding at the fitted (a, b) with re-solving, while the
// error keeps falling. Writes the codes of the returned fit into q.
template <int kN>
AffineFit fit_affine(const float* x, const float* w, int qmax, float r0, float dr, int n_steps,
                     uint8_t* q) {
  float lo = x[0], hi = x[0];
  AffineMoments m;
  for (int i = 0; i < kN; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
    m.w += w[i];
    m.x += w[i] * x[i];
    m.xx += w[i] * x[i] * x[i];
  }
  if (lo > 0) lo = 0;
  AffineFit best;
  if (hi - lo < kTinyMax) {  // constant (non-positive) sub-block: all codes 0, offset = value
    std::memset(q, 0, kN);
    best.b = lo;
    return best;
  }
  best.err = INFINITY;
  uint8_t cand[kN];
  const float range = hi - lo;
  for (int k = 0; k <= n_steps; ++k) {
    const float inv_a = (static_cast<float>(qmax) + r0 + dr * static_cast<float>(k)) / range;
    round_affine<kN>(x, w, inv_a, lo, qmax, cand, &m);
    const AffineFit f = solve_affine(m);
    if (f.err < best.err) {
      best = f;
      std::memcpy(q, cand, kN);
    }
  }
  for (int iter = 0; iter < 4 && best.a > 0; ++iter) {
    round_affine<kN>(x, w, 1.0f / best.a, best.b, qmax, cand, &m);
    const AffineFit f = solve_affine(m);
    if (!(f.err < best.err * (1 - 1e-7))) break;
    best = f;
    std::memcpy(q, cand, kN);
  }
  if (!(best.err < INFINITY)) {  // degenerate weights: fall back to the plain min/max grid
    best.a = range / static_cast<float>(qmax);
    best.b = lo;
    round_affine<kN>(x, w, 1.0f / best.a, lo, qmax, q, &m);
    best.err = 0;
  }
  return best;
}

// Exact weighted error of one sub-block dequantized as sd*q - sm (ggml's order of operations),
// with each code the nearest one; writes the codes into q.
template <int kN>
float eval_affine(const float* x, const float* w, float sd, float sm, int qmax, uint8_t* q) {
  float err = 0.0f;
  if (!(sd > 0)) {
    for (int i = 0; i < kN; ++i) {
      q[i] = 0;
      const float e = -sm - x[i];
      err += w[i] * e * e;
    }
    return err;
  }
  const float inv = 1.0f / sd;
  const float hi = static_cast<float>(qmax);
  for (int i = 0; i < kN; ++i) {
    const int l = round_clamped((x[i] + sm) * inv, 0.0f, hi);
    q[i] = static_cast<uint8_t>(l);
    const float e = sd * static_cast<float>(l) - sm - x[i];
    err += w[i] * e * e;
  }
  return err;
}

struct AffineParams {
  int qmax;      // codes in [0, qmax]
  int code_max;  // sub-block scale and min codes in [0, code_max]
  float r0, dr;  // scan of fit_affine
  int n_steps;
  Weighting weighting;
};

// Per-sub-block choice at fixed super-scales (d, dmin): the scale and min codes are each taken
// from the floor/ceil neighbours of the continuous fit, the pair with the smallest exact error
// wins. Returns the total error; writes codes and values.
template <int kSub, int kNSub>
float choose_affine_codes(const float* x, const float* w, const AffineFit* fit, float d,
                          float dmin, const AffineParams& p, uint8_t* ls, uint8_t* lm,
                          uint8_t* q) {
  const float code_max = static_cast<float>(p.code_max);
  uint8_t cand[kSub];
  float total = 0.0f;
  for (int j = 0; j < kNSub; ++j) {
    const float* xs = x + j * kSub;
    const float* ws = w + j * kSub;
    const int la0 = d > 0 ? round_clamped(fit[j].a / d - 0.5f, 0.0f, code_max) : 0;
    const int lm0 = dmin > 0 ? round_clamped(-fit[j].b / dmin - 0.5f, 0.0f, code_max) : 0;
    float best = INFINITY;
    for (int la = la0; la <= la0 + 1 && la <= p.code_max; ++la) {
      for (int lb = lm0; lb <= lm0 + 1 && lb <= p.code_max; ++lb) {
        const float sd = d * static_cast<float>(la), sm = dmin * static_cast<float>(lb);
        const float e = eval_affine<kSub>(xs, ws, sd, sm, p.qmax, cand);
        if (e < best) {
          best = e;
          ls[j] = static_cast<uint8_t>(la);
          lm[j] = static_cast<uint8_t>(lb);
          std::memcpy(q + j * kSub, cand, kSub);
        }
      }
    }
    total += best;
  }
  return total;
}

// One super-block of kNSub affine sub-blocks of kSub elements: x ~= d*ls_j*q - dmin*lm_j with
// integer codes ls_j, lm_j in [0, code_max] and f16 super-scales d, dmin. Fits each sub-block,
// starts from the super-scales that map the largest scale and min to code_max, then refines
// (d, dmin) by least squares over the whole super-block with codes and values held fixed,
// re-choosing codes after each step while the exact error falls.
template <int kSub, int kNSub>
void encode_affine(const float* x, const AffineParams& p, uint16_t* d_out, uint16_t* dmin_out,
                   uint8_t* ls, uint8_t* lm, uint8_t* q) {
  float w[kSub * kNSub];
  AffineFit fit[kNSub];
  float max_a = 0.0f, max_m = 0.0f;
  for (int j = 0; j < kNSub; ++j) {
    fill_weights<kSub>(p.weighting, x + j * kSub, w + j * kSub);
    fit[j] = fit_affine<kSub>(x + j * kSub, w + j * kSub, p.qmax, p.r0, p.dr, p.n_steps,
                              q + j * kSub);
    if (fit[j].a > max_a) max_a = fit[j].a;
    if (-fit[j].b > max_m) max_m = -fit[j].b;
  }
  const float code_max = static_cast<float>(p.code_max);
  uint16_t dh = f32_to_f16(max_a / code_max);
  uint16_t mh = f32_to_f16(max_m / code_max);
  float err = choose_affine_codes<kSub, kNSub>(x, w, fit, f16_to_f32(dh), f16_to_f32(mh), p, ls,
                                               lm, q);
  uint8_t ls2[kNSub], lm2[kNSub], q2[kSub * kNSub];
  for (int iter = 0; iter < 3; ++iter) {
    // Normal equations of x_i ~= d*u_i - dmin*v_i with u = ls*q and v = lm.
    double suu = 0, suv = 0, svv = 0, sxu = 0, sxv = 0;
    for (int j = 0; j < kNSub; ++j) {
      const float v = static_cast<float>(lm[j]);
      for (int i = j * kSub; i < (j + 1) * kSub; ++i) {
        const float u = static_cast<float>(ls[j]) * static_cast<float>(q[i]);
        suu += w[i] * u * u;
        suv += w[i] * u * v;
        svv += w[i] * v * v;
        sxu += w[i] * x[i] * u;
        sxv += w[i] * x[i] * v;
      }
    }
    const double det = suu * svv - suv * suv;
    double dn, mn;
    if (det > 0) {
      dn = (sxu * svv - sxv * suv) / det;
      mn = (sxu * suv - sxv * suu) / det;
    } else if (suu > 0) {
      dn = sxu / suu;
      mn = f16_to_f32(mh);
    } else {
      break;
    }
    if (!(dn > 0) || !(mn >= 0)) break;
    const uint16_t dh2 = f32_to_f16(static_cast<float>(dn));
    const uint16_t mh2 = f32_to_f16(static_cast<float>(mn));
    if (dh2 == dh && mh2 == mh) break;
    const float err2 = choose_affine_codes<kSub, kNSub>(x, w, fit, f16_to_f32(dh2),
                                                        f16_to_f32(mh2), p, ls2, lm2, q2);
    if (!(err2 < err)) break;
    err = err2;
    dh = dh2;
    mh = mh2;
    std::memcpy(ls, ls2, kNSub);
    std::memcpy(lm, lm2, kNSub);
    std::memcpy(q, q2, kSub * kNSub);
  }
  *d_out = dh;
  *dmin_out = mh;
}

// ---------------------------------------------------------------------------------------------
// Symmetric sub-blocks: x ~= s * q with q in [-nneg, nneg - 1]. Used by Q3_K and Q6_K.

// Codes for x ~= s*q at fixed 1/s; returns sum w*x*q and sum w*q*q through the pointers.
template <int kN>
void round_symmetric(const float* x, const float* w, float inv_s, int nneg, int8_t* q,
                     double* sxq, double* sqq) {
  double a = 0, b = 0;
  const float lo = static_cast<float>(-nneg), hi = static_cast<float>(nneg - 1);
  for (int i = 0; i < kN; ++i) {
    const int l = round_clamped(x[i] * inv_s, lo, hi);
    q[i] = static_cast<int8_t>(l);
    const float wl = w[i] * static_cast<float>(l);
    a += wl * x[i];
    b += wl * static_cast<float>(l);
  }
  *sxq = a;
  *sqq = b;
}

// Search for one sub-block: every code vector that rounding at some inverse scale t in
// [(nneg + r_lo) / amax, (nneg + r_hi) / amax] produces, with the element of largest magnitude on
// the long side -nneg, is scored by its least-squares scale (maximizing (sum wxq)^2 / sum wqq).
// Codes only change where t*|x_i| crosses a half-integer, so the scan sorts those crossings and
// updates the sums one code at a time: an exact search over the interval, not a grid. Returns the
// signed scale and the codes in q.
template <int kN>
float fit_symmetric(const float* x, const float* w, int nneg, float r_lo, float r_hi, int8_t* q) {
  float amax = 0.0f, vmax = 0.0f;
  for (int i = 0; i < kN; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      vmax = x[i];
    }
  }
  if (amax < kTinyMax) {
    std::memset(q, 0, kN);
    return 0.0f;
  }
  // Work on y = sign * x, whose extreme is -amax, so codes grow in magnitude with t.
  const float sign = vmax > 0 ? -1.0f : 1.0f;
  const float t_lo = (static_cast<float>(nneg) + r_lo) / amax;
  const float t_hi = (static_cast<float>(nneg) + r_hi) / amax;
  const float lo = static_cast<float>(-nneg), hi = static_cast<float>(nneg - 1);
  int8_t l[kN];
  // Crossing keys: the float bits of t (positive, so they order like t) above the element index.
  uint64_t events[kN * 8];
  int n_events = 0;
  double sxq = 0, sqq = 0;
  for (int i = 0; i < kN; ++i) {
    const float y = sign * x[i];
    const int li = round_clamped(t_lo * y, lo, hi);
    l[i] = static_cast<int8_t>(li);
    sxq += static_cast<double>(w[i]) * y * li;
    sqq += static_cast<double>(w[i]) * li * li;
    const float ay = std::fabs(y);
    if (ay == 0.0f) continue;
    const int k_last = y > 0 ? nneg - 2 : nneg - 1;  // last half-integer before saturation
    for (int k = li < 0 ? -li : li; k <= k_last && n_events < kN * 8; ++k) {
      const float t = (static_cast<float>(k) + 0.5f) / ay;
      if (t >= t_hi) break;
      uint32_t bits;
      std::memcpy(&bits, &t, sizeof(bits));
      events[n_events++] = (static_cast<uint64_t>(bits) << 8) | static_cast<uint64_t>(i);
    }
  }
  std::sort(events, events + n_events);
  double best_score = sqq > 0 ? sxq * sxq / sqq : -1.0;
  int best_e = 0;  // number of crossings applied in the best state
  for (int e = 0; e < n_events; ++e) {
    const int i = static_cast<int>(events[e] & 0xff);
    const float y = sign * x[i];
    const int step = y > 0 ? 1 : -1;
    const int li = l[i];
    sxq += static_cast<double>(w[i]) * y * step;
    sqq += static_cast<double>(w[i]) * (2 * li * step + 1);
    l[i] = static_cast<int8_t>(li + step);
    if (sqq > 0 && sxq * sxq > best_score * sqq) {
      best_score = sxq * sxq / sqq;
      best_e = e + 1;
    }
  }
  // Replay the crossings up to the best state.
  sxq = 0;
  sqq = 0;
  for (int i = 0; i < kN; ++i) l[i] = static_cast<int8_t>(round_clamped(t_lo * sign * x[i], lo, hi));
  for (int e = 0; e < best_e; ++e) {
    const int i = static_cast<int>(events[e] & 0xff);
    l[i] = static_cast<int8_t>(l[i] + (sign * x[i] > 0 ? 1 : -1));
  }
  for (int i = 0; i < kN; ++i) {
    q[i] = l[i];  // x ~= (sign * s_y) * l: the codes keep their range, the scale takes the sign
    sxq += static_cast<double>(w[i]) * x[i] * q[i];
    sqq += static_cast<double>(w[i]) * q[i] * q[i];
  }
  return sqq > 0 ? static_cast<float>(sxq / sqq) : 0.0f;
}

// Exact weighted error of one sub-block dequantized as s*q with nearest codes; writes q.
template <int kN>
float eval_symmetric(const float* x, const float* w, float s, int nneg, int8_t* q) {
  float err = 0.0f;
  if (s == 0.0f) {
    for (int i = 0; i < kN; ++i) {
      q[i] = 0;
      err += w[i] * x[i] * x[i];
    }
    return err;
  }
  const float inv = 1.0f / s;
  const float lo = static_cast<float>(-nneg), hi = static_cast<float>(nneg - 1);
  for (int i = 0; i < kN; ++i) {
    const int l = round_clamped(x[i] * inv, lo, hi);
    q[i] = static_cast<int8_t>(l);
    const float e = s * static_cast<float>(l) - x[i];
    err += w[i] * e * e;
  }
  return err;
}

struct SymmetricParams {
  int nneg;      // codes in [-nneg, nneg - 1]
  int code_neg;  // sub-block scale codes in [-code_neg, code_neg - 1]
  float r_lo, r_hi;  // scan of fit_symmetric
  int code_radius;    // scale codes tried beyond the floor/ceil of the fit, each side
  Weighting weighting;
};

// Per-sub-block choice at a fixed super-scale d: each scale code is the floor or ceil neighbour of
// the continuous fit, whichever gives the smaller exact error. Returns the total error; writes
// codes and values.
template <int kSub, int kNSub>
float choose_symmetric_codes(const float* x, const float* w, const float* s, float d,
                             const SymmetricParams& p, int8_t* codes, int8_t* q) {
  const float lo = static_cast<float>(-p.code_neg), hi = static_cast<float>(p.code_neg - 1);
  int8_t cand[kSub];
  float total = 0.0f;
  for (int j = 0; j < kNSub; ++j) {
    const float* xs = x + j * kSub;
    const float* ws = w + j * kSub;
    const int l0 = d != 0.0f ? round_clamped(s[j] / d - 0.5f, lo, hi) : 0;
    float best = INFINITY;
    const int l_first = l0 - p.code_radius < -p.code_neg ? -p.code_neg : l0 - p.code_radius;
    const int l_last = l0 + 1 + p.code_radius > p.code_neg - 1 ? p.code_neg - 1 : l0 + 1 + p.code_radius;
    for (int l = l_first; l <= l_last; ++l) {
      const float e = eval_symmetric<kSub>(xs, ws, d * static_cast<float>(l), p.nneg, cand);
      if (e < best) {
        best = e;
        codes[j] = static_cast<int8_t>(l);
        std::memcpy(q + j * kSub, cand, kSub);
      }
    }
    total += best;
  }
  return total;
}

// One super-block of kNSub symmetric sub-blocks of kSub elements: x ~= d*c_j*q with signed integer
// scale codes c_j and one f16 super-scale d. Fits each sub-block, starts from the d that maps the
// scale of largest magnitude to the code -code_neg, then refines d by least squares over the whole
// super-block with codes and values held fixed, re-choosing codes after each step while the exact
// error falls. Returns d as f16 bits.
template <int kSub, int kNSub>
uint16_t encode_symmetric(const float* x, const SymmetricParams& p, int8_t* codes, int8_t* q) {
  float w[kSub * kNSub];
  float s[kNSub];
  float smax = 0.0f, amax = 0.0f;
  for (int j = 0; j < kNSub; ++j) {
    fill_weights<kSub>(p.weighting, x + j * kSub, w + j * kSub);
    s[j] = fit_symmetric<kSub>(x + j * kSub, w + j * kSub, p.nneg, p.r_lo, p.r_hi, q + j * kSub);
    if (std::fabs(s[j]) > amax) {
      amax = std::fabs(s[j]);
      smax = s[j];
    }
  }
  if (amax < kTinyMax) {
    std::memset(codes, 0, kNSub);
    std::memset(q, 0, kSub * kNSub);
    return f32_to_f16(0.0f);
  }
  uint16_t dh = f32_to_f16(-smax / static_cast<float>(p.code_neg));
  float err = choose_symmetric_codes<kSub, kNSub>(x, w, s, f16_to_f32(dh), p, codes, q);
  int8_t codes2[kNSub], q2[kSub * kNSub];
  for (int iter = 0; iter < 3; ++iter) {
    double suu = 0, sxu = 0;  // normal equation of x_i ~= d*u_i with u = c*q
    for (int j = 0; j < kNSub; ++j)
      for (int i = j * kSub; i < (j + 1) * kSub; ++i) {
        const float u = static_cast<float>(codes[j]) * static_cast<float>(q[i]);
        suu += w[i] * u * u;
        sxu += w[i] * x[i] * u;
      }
    if (!(suu > 0)) break;
    const uint16_t dh2 = f32_to_f16(static_cast<float>(sxu / suu));
    if (dh2 == dh) break;
    const float err2 = choose_symmetric_codes<kSub, kNSub>(x, w, s, f16_to_f32(dh2), p, codes2, q2);
    if (!(err2 < err)) break;
    err = err2;
    dh = dh2;
    std::memcpy(codes, codes2, kNSub);
    std::memcpy(q, q2, kSub * kNSub);
  }
  return dh;
}

// ---------------------------------------------------------------------------------------------
// Packing. Element e of a super-block with 2-bit low parts sits in byte (e/128)*32 + e%32 at bit
// 2*((e%128)/32); high bits of Q3_K/Q5_K sit in byte e%32 at bit e/32.

void pack_2bit(const uint8_t* l, uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 32; ++i) {
      const uint8_t* g = l + 128 * h + i;
      qs[32 * h + i] = static_cast<uint8_t>(g[0] | (g[32] << 2) | (g[64] << 4) | (g[96] << 6));
    }
}

// 6-bit scale and min codes of Q4_K/Q5_K: sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scale)
// and 4-7 (min); sub-blocks 4-7 split into a nibble of bytes 8-11 and 2 bits atop bytes 0-7.
void pack_k4_scales(const uint8_t* ls, const uint8_t* lm, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(ls[j] | ((ls[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(lm[j] | ((lm[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((ls[j + 4] & 0x0f) | ((lm[j + 4] & 0x0f) << 4));
  }
}

// Signs the whole super-block so that an all-positive block can use a positive offset: the
// formats only subtract mins, so such a block is quantized as -x with negated super-scales.
bool all_positive(const float* x) {
  for (int i = 0; i < kQK_K; ++i)
    if (!(x[i] > 0)) return false;
  return true;
}

void quantize_block_q2_K(const float* x, BlockQ2_K* y) {
  float flipped[kQK_K];
  const bool flip = all_positive(x);
  if (flip)
    for (int i = 0; i < kQK_K; ++i) flipped[i] = -x[i];
  const AffineParams p{3, 15, -0.5f, 0.1f, 15, Weighting::kUniform};
  uint8_t ls[16], lm[16], q[kQK_K];
  encode_affine<16, 16>(flip ? flipped : x, p, &y->d, &y->dmin, ls, lm, q);
  if (flip) {
    y->d ^= 0x8000;
    y->dmin ^= 0x8000;
  }
  for (int j = 0; j < 16; ++j) y->scales[j] = static_cast<uint8_t>(ls[j] | (lm[j] << 4));
  pack_2bit(q, y->qs);
}

void quantize_block_q3_K(const float* x, BlockQ3_K* y) {
  const SymmetricParams p{4, 32, -1.0f, 1.0f, 0, Weighting::kUniform};
  int8_t codes[16], q[kQK_K];
  y->d = encode_symmetric<16, 16>(x, p, codes, q);
  std::memset(y->scales, 0, sizeof(y->scales));
  for (int j = 0; j < 16; ++j) {
    const int c = codes[j] + 32;  // 6 bits: low nibble in byte j%8 (high half for j>=8)
    y->scales[j % 8] |= static_cast<uint8_t>((c & 0x0f) << (j < 8 ? 0 : 4));
    y->scales[8 + j % 4] |= static_cast<uint8_t>((c >> 4) << (2 * (j / 4)));
  }
  uint8_t low[kQK_K];
  std::memset(y->hmask, 0, sizeof(y->hmask));
  for (int e = 0; e < kQK_K; ++e) {
    const int l = q[e] + 4;  // [0, 7]; the high bit is stored set for l >= 4
    low[e] = static_cast<uint8_t>(l & 3);
    if (l & 4) y->hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
  }
  pack_2bit(low, y->qs);
}

template <typename Block>
void encode_q45_K(const float* x, int qmax, float r0, int n_steps, Block* y, uint8_t* q) {
  float flipped[kQK_K];
  const bool flip = all_positive(x);
  if (flip)
    for (int i = 0; i < kQK_K; ++i) flipped[i] = -x[i];
  const AffineParams p{qmax, 63, r0, 0.1f, n_steps, Weighting::kUniform};
  uint8_t ls[8], lm[8];
  encode_affine<32, 8>(flip ? flipped : x, p, &y->d, &y->dmin, ls, lm, q);
  if (flip) {
    y->d ^= 0x8000;
    y->dmin ^= 0x8000;
  }
  pack_k4_scales(ls, lm, y->scales);
}

void quantize_block_q4_K(const float* x, BlockQ4_K* y) {
  uint8_t q[kQK_K];
  encode_q45_K(x, 15, -1.0f, 20, y, q);
  for (int c = 0; c < 4; ++c)
    for (int i = 0; i < 32; ++i)
      y->qs[32 * c + i] = static_cast<uint8_t>(q[64 * c + i] | (q[64 * c + 32 + i] << 4));
}

void quantize_block_q5_K(const float* x, BlockQ5_K* y) {
  uint8_t q[kQK_K];
  encode_q45_K(x, 31, -0.5f, 15, y, q);
  std::memset(y->qh, 0, sizeof(y->qh));
  for (int c = 0; c < 4; ++c)
    for (int i = 0; i < 32; ++i) {
      const int lo = q[64 * c + i], hi = q[64 * c + 32 + i];
      y->qs[32 * c + i] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
      y->qh[i] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
}

void quantize_block_q6_K(const float* x, BlockQ6_K* y) {
  const SymmetricParams p{32, 128, -3.0f, 3.0f, 0, Weighting::kUniform};
  int8_t q[kQK_K];
  y->d = encode_symmetric<16, 16>(x, p, y->scales, q);
  for (int h = 0; h < 2; ++h) {
    const int8_t* g = q + 128 * h;
    for (int i = 0; i < 32; ++i) {
      const int l0 = g[i] + 32, l1 = g[i + 32] + 32, l2 = g[i + 64] + 32, l3 = g[i + 96] + 32;
      y->ql[64 * h + i] = static_cast<uint8_t>((l0 & 0x0f) | ((l2 & 0x0f) << 4));
      y->ql[64 * h + 32 + i] = static_cast<uint8_t>((l1 & 0x0f) | ((l3 & 0x0f) << 4));
      y->qh[32 * h + i] =
          static_cast<uint8_t>((l0 >> 4) | ((l1 >> 4) << 2) | ((l2 >> 4) << 4) | ((l3 >> 4) << 6));
    }
  }
}

// Activation-side block: one float scale mapping the largest magnitude to -127 (so the
// element of largest magnitude is exact), as ggml does; bsums hold sums of 16 codes.
void quantize_block_q8_K(const float* x, BlockQ8_K* y) {
  float amax = 0.0f, vmax = 0.0f;
  for (int i = 0; i < kQK_K; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      vmax = x[i];
    }
  }
  if (amax == 0.0f) {
    std::memset(y, 0, sizeof(*y));
    return;
  }
  const float inv = -127.0f / vmax;
  for (int i = 0; i < kQK_K; ++i) y->qs[i] = static_cast<int8_t>(round_clamped(inv * x[i], -128.0f, 127.0f));
  for (int j = 0; j < 16; ++j) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += y->qs[16 * j + i];
    y->bsums[j] = static_cast<int16_t>(sum);
  }
  y->d = 1.0f / inv;
}

template <typename Block, void (*kQuantizeBlock)(const float*, Block*)>
void quantize_rows(const float* x, void* y, int64_t n) {
  DUET_CHECK_MSG(n % kQK_K == 0, "K-quant row length %lld is not a multiple of %d",
                 static_cast<long long>(n), kQK_K);
  Block* out = static_cast<Block*>(y);
  for (int64_t i = 0; i < n / kQK_K; ++i) kQuantizeBlock(x + i * kQK_K, out + i);
}

}  // namespace

void quantize_row_q2_K(const float* x, void* y, int64_t n) {
  quantize_rows<BlockQ2_K, quantize_block_q2_K>(x, y, n);
}
void quantize_row_q3_K(const float* x, void* y, int64_t n) {
  quantize_rows<BlockQ3_K, quantize_block_q3_K>(x, y, n);
}
void quantize_row_q4_K(const float* x, void* y, int64_t n) {
  quantize_rows<BlockQ4_K, quantize_block_q4_K>(x, y, n);
}
void quantize_row_q5_K(const float* x, void* y, int64_t n) {
  quantize_rows<BlockQ5_K, quantize_block_q5_K>(x, y, n);
}
void quantize_row_q6_K(const float* x, void* y, int64_t n) {
  quantize_rows<BlockQ6_K, quantize_block_q6_K>(x, y, n);
}
void quantize_row_q8_K(const float* x, void* y, int64_t n) {
  quantize_rows<BlockQ8_K, quantize_block_q8_K>(x, y, n);
}

}  // namespace duet
