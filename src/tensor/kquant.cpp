// K-quant quantizers (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K): per sub-block scale searches, then a
// search for the super-block scales and the integer scale codes, then ggml-compatible packing.
// The objective is the plain squared error; every search keeps per-element weights so that an
// importance matrix can plug in later (today they are all 1). Dequantize lives in quantize.cpp.
// Works on caller buffers and the stack only (no heap, no globals): safe from any thread.
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace duet {
namespace {

constexpr float kTinyMax = 1e-15f;  // a sub-block whose |x| stays below this quantizes to 0
constexpr int kLanes = 8;           // independent accumulators, so loops vectorize without
                                    // reassociating a float sum

// Nearest integer (ties to even) of v clamped to [lo, hi], as a float; NaN maps to lo. Adding
// 1.5 * 2^23 pushes the fraction out of the mantissa (|v| < 2^22 after the clamp).
inline float round_clamp(float v, float lo, float hi) {
  v = v > lo ? v : lo;
  v = v < hi ? v : hi;
  return (v + 12582912.0f) - 12582912.0f;
}

template <int kN>
double sum_lanes(const float (&a)[kN]) {
  double s = 0;
  for (int k = 0; k < kN; ++k) s += a[k];
  return s;
}

// f16 bits of v, but never 0 for a non-zero v: a super-scale that underflows f16 would zero the
// whole super-block, while the smallest subnormal still lets the codes represent part of it.
uint16_t f16_nonzero(float v) {
  uint16_t h = f32_to_f16(v);
  if ((h & 0x7fff) == 0 && v != 0.0f) h |= 1;
  return h;
}

// ---------------------------------------------------------------------------------------------
// Affine sub-blocks: x ~= a*q + b with q in [0, qmax] and b <= 0 (the formats subtract a
// non-negative min). Used by Q2_K, Q4_K and Q5_K.

struct AffineFit {
  float a = 0.0f;  // scale
  float b = 0.0f;  // offset, <= 0
  double err = 0.0;
};

// Weighted moments of one sub-block for the normal equations of x ~= a*q + b.
struct AffineMoments {
  double w = 0, x = 0, xx = 0;   // independent of the codes
  double q = 0, qq = 0, xq = 0;  // depend on the codes
};

// Least-squares (a, b) for the codes summarized in m, with b clipped to <= 0; err is the
// weighted squared error, computed from the moments.
AffineFit solve_affine(const AffineMoments& m) {
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

// Codes for x ~= a*q + b at fixed (1/a, b): the nearest, clamped to [0, qmax].
template <int kN>
void affine_codes(const float* x, float inv_a, float b, int qmax, uint8_t* q) {
  const float hi = static_cast<float>(qmax);
  for (int i = 0; i < kN; ++i)
    q[i] = static_cast<uint8_t>(static_cast<int>(round_clamp((x[i] - b) * inv_a, 0.0f, hi)));
}

// The code-dependent moments of m for the codes affine_codes would give (stores nothing, so the
// loop vectorizes).
template <int kN>
void affine_moments(const float* x, const float* w, float inv_a, float b, int qmax,
                    AffineMoments* m) {
  static_assert(kN % kLanes == 0);
  float sq[kLanes] = {}, sqq[kLanes] = {}, sxq[kLanes] = {};
  const float hi = static_cast<float>(qmax);
  for (int i0 = 0; i0 < kN; i0 += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const int i = i0 + k;
      const float l = round_clamp((x[i] - b) * inv_a, 0.0f, hi);
      const float wl = w[i] * l;
      sq[k] += wl;
      sqq[k] += wl * l;
      sxq[k] += wl * x[i];
    }
  }
  m->q = sum_lanes(sq);
  m->qq = sum_lanes(sqq);
  m->xq = sum_lanes(sxq);
}

// Search for one sub-block: scan n_steps + 1 inverse scales (qmax + r0 + k*dr) / (max - min) with
// the offset pinned at min(x, 0), round, and solve the weighted least squares for (a, b) at each;
// then polish the best by re-rounding at the fitted (a, b) and re-solving while the error falls.
template <int kN>
AffineFit fit_affine(const float* x, const float* w, int qmax, float r0, float dr, int n_steps) {
  float lo = x[0], hi = x[0];
  AffineMoments m;
  for (int i = 0; i < kN; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
    m.w += w[i];
    m.x += w[i] * x[i];
    m.xx += static_cast<double>(w[i]) * x[i] * x[i];
  }
  if (lo > 0) lo = 0;
  AffineFit best;
  if (hi - lo < kTinyMax) {  // constant (non-positive) sub-block: all codes 0, offset = value
    best.b = lo;
    return best;
  }
  best.err = INFINITY;
  const float range = hi - lo;
  for (int k = 0; k <= n_steps; ++k) {
    const float inv_a = (static_cast<float>(qmax) + r0 + dr * static_cast<float>(k)) / range;
    affine_moments<kN>(x, w, inv_a, lo, qmax, &m);
    const AffineFit f = solve_affine(m);
    if (f.err < best.err) best = f;
  }
  for (int iter = 0; iter < 2 && best.a > 0; ++iter) {
    affine_moments<kN>(x, w, 1.0f / best.a, best.b, qmax, &m);
    const AffineFit f = solve_affine(m);
    if (!(f.err < best.err * (1 - 1e-6))) break;
    best = f;
  }
  if (!(best.err < INFINITY)) {  // zero weights: fall back to the plain min/max grid
    best.a = range / static_cast<float>(qmax);
    best.b = lo;
    best.err = 0;
  }
  return best;
}

// Exact weighted error of one sub-block dequantized as sd*q - sm (ggml's order of operations),
// each code the nearest one (those of affine_codes(1/sd, -sm)).
template <int kN>
float eval_affine(const float* x, const float* w, float sd, float sm, int qmax) {
  float err[kLanes] = {};
  const float inv = sd > 0 ? 1.0f / sd : 0.0f;  // sd == 0: every code rounds to 0
  const float hi = static_cast<float>(qmax);
  for (int i0 = 0; i0 < kN; i0 += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const int i = i0 + k;
      const float l = round_clamp((x[i] + sm) * inv, 0.0f, hi);
      const float e = sd * l - sm - x[i];
      err[k] += w[i] * e * e;
    }
  }
  return static_cast<float>(sum_lanes(err));
}

struct AffineParams {
  int qmax;      // codes in [0, qmax]
  int code_max;  // sub-block scale and min codes in [0, code_max]
  float r0, dr;  // scan of fit_affine
  int n_steps;
};

// Per-sub-block choice at fixed super-scales (d, dmin): for the floor and the ceil of the fitted
// scale's code, the min code is the floor or ceil of the fitted min, or, when the scale code is 0
// (e.g. next to a large outlier), the code of the sub-block's mean. The exact error decides.
// Returns the total error; writes codes and values.
template <int kSub, int kNSub>
float choose_affine_codes(const float* x, const float* w, const AffineFit* fit, float d, float dmin,
                          const AffineParams& p, uint8_t* ls, uint8_t* lm, uint8_t* q) {
  const float code_max = static_cast<float>(p.code_max);
  float total = 0.0f;
  for (int j = 0; j < kNSub; ++j) {
    const float* xs = x + j * kSub;
    const float* ws = w + j * kSub;
    const int la0 = d > 0 ? static_cast<int>(round_clamp(fit[j].a / d - 0.5f, 0.0f, code_max)) : 0;
    const int lm0 =
        dmin > 0 ? static_cast<int>(round_clamp(-fit[j].b / dmin - 0.5f, 0.0f, code_max)) : 0;
    float best = INFINITY;
    auto consider = [&](int la, int lb) {
      const float e = eval_affine<kSub>(xs, ws, d * static_cast<float>(la),
                                        dmin * static_cast<float>(lb), p.qmax);
      if (e < best) {
        best = e;
        ls[j] = static_cast<uint8_t>(la);
        lm[j] = static_cast<uint8_t>(lb);
      }
    };
    for (int la = la0; la <= la0 + 1 && la <= p.code_max; ++la)
      for (int lb = lm0; lb <= lm0 + 1 && lb <= p.code_max; ++lb) consider(la, lb);
    if (la0 == 0 && dmin > 0) {  // a zero scale leaves only the offset: the best is -mean(x)
      float sw = 0.0f, sx = 0.0f;
      for (int i = 0; i < kSub; ++i) {
        sw += ws[i];
        sx += ws[i] * xs[i];
      }
      const int lb = sw > 0 ? static_cast<int>(round_clamp(-sx / sw / dmin, 0.0f, code_max)) : 0;
      if (lb < lm0 || lb > lm0 + 1) consider(0, lb);
    }
    const float sd = d * static_cast<float>(ls[j]);
    affine_codes<kSub>(xs, sd > 0 ? 1.0f / sd : 0.0f, -dmin * static_cast<float>(lm[j]), p.qmax,
                       q + j * kSub);
    total += best;
  }
  return total;
}

// One super-block of kNSub affine sub-blocks of kSub elements: x ~= d*ls_j*q - dmin*lm_j with
// integer codes ls_j, lm_j in [0, code_max] and f16 super-scales d, dmin. Fits each sub-block,
// starts from the super-scales that map the largest scale and min to code_max, then refines
// (d, dmin) by least squares over the whole super-block with codes and values held fixed,
// re-choosing the codes after each step while the exact error falls.
template <int kSub, int kNSub>
void encode_affine(const float* x, const AffineParams& p, uint16_t* d_out, uint16_t* dmin_out,
                   uint8_t* ls, uint8_t* lm, uint8_t* q) {
  float w[kSub * kNSub];
  for (float& v : w) v = 1.0f;
  AffineFit fit[kNSub];
  float max_a = 0.0f, max_m = 0.0f;
  for (int j = 0; j < kNSub; ++j) {
    fit[j] = fit_affine<kSub>(x + j * kSub, w + j * kSub, p.qmax, p.r0, p.dr, p.n_steps);
    if (fit[j].a > max_a) max_a = fit[j].a;
    if (-fit[j].b > max_m) max_m = -fit[j].b;
  }
  const float code_max = static_cast<float>(p.code_max);
  uint16_t dh = f16_nonzero(max_a / code_max);
  uint16_t mh = f16_nonzero(max_m / code_max);
  float err =
      choose_affine_codes<kSub, kNSub>(x, w, fit, f16_to_f32(dh), f16_to_f32(mh), p, ls, lm, q);
  uint8_t ls2[kNSub], lm2[kNSub], q2[kSub * kNSub];
  for (int iter = 0; iter < 2; ++iter) {
    // Normal equations of x_i ~= d*u_i - dmin*v_i with u = ls*q and v = lm.
    double suu = 0, suv = 0, svv = 0, sxu = 0, sxv = 0;
    for (int j = 0; j < kNSub; ++j) {
      float uu[kLanes] = {}, uw[kLanes] = {}, ww[kLanes] = {}, xu[kLanes] = {}, xw[kLanes] = {};
      const float lsj = static_cast<float>(ls[j]);
      for (int i0 = j * kSub; i0 < (j + 1) * kSub; i0 += kLanes) {
        for (int k = 0; k < kLanes; ++k) {
          const int i = i0 + k;
          const float u = lsj * static_cast<float>(q[i]);
          uu[k] += w[i] * u * u;
          uw[k] += w[i] * u;
          ww[k] += w[i];
          xu[k] += w[i] * x[i] * u;
          xw[k] += w[i] * x[i];
        }
      }
      const double v = lm[j];
      suu += sum_lanes(uu);
      suv += sum_lanes(uw) * v;
      svv += sum_lanes(ww) * v * v;
      sxu += sum_lanes(xu);
      sxv += sum_lanes(xw) * v;
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
    const uint16_t dh2 = f16_nonzero(static_cast<float>(dn));
    const uint16_t mh2 = f32_to_f16(static_cast<float>(mn));
    if (dh2 == dh && mh2 == mh) break;
    const float err2 = choose_affine_codes<kSub, kNSub>(x, w, fit, f16_to_f32(dh2), f16_to_f32(mh2),
                                                        p, ls2, lm2, q2);
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
// Symmetric sub-blocks: x ~= s*q with q in [-nneg, nneg - 1]. Used by Q3_K and Q6_K.

// Search for one sub-block over the inverse scales t in [nneg + r_lo, nneg + r_hi] / amax (the
// element of largest magnitude on the long side -nneg of the code range), scoring the codes that
// rounding at t gives by their least-squares scale: maximize (sum wxq)^2 / sum wqq. Codes
// change only where t*|x_i| crosses a half-integer, and each crossing adds a known amount to both
// sums (|x_i| and 2k+1 for the step k -> k+1), so crossings are binned into kCells slices of the
// interval and one pass over the cells scores every slice end: a scan of kCells + 1 scales at the
// cost of the crossings. The best is polished by one re-rounding at its fitted scale. Returns the
// signed scale.
template <int kN, int kCells>
float fit_symmetric(const float* x, const float* w, int nneg, float r_lo, float r_hi) {
  float amax = 0.0f, vmax = 0.0f;
  for (int i = 0; i < kN; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      vmax = x[i];
    }
  }
  if (amax < kTinyMax) return 0.0f;
  // Work on y = sign * x, whose extreme is -amax; codes then only grow in magnitude with t.
  const float sign = vmax > 0 ? -1.0f : 1.0f;
  const float t_lo = (static_cast<float>(nneg) + r_lo) / amax;
  const float t_hi = (static_cast<float>(nneg) + r_hi) / amax;
  const float cells_per_t = static_cast<float>(kCells) / (t_hi - t_lo);
  const float lo = static_cast<float>(-nneg), hi = static_cast<float>(nneg - 1);
  float cell_xq[kCells] = {}, cell_qq[kCells] = {};
  double sxq = 0, sqq = 0;
  for (int i = 0; i < kN; ++i) {
    const float y = sign * x[i];
    const float l = round_clamp(t_lo * y, lo, hi);
    sxq += static_cast<double>(w[i]) * y * l;
    sqq += static_cast<double>(w[i]) * l * l;
    const float ay = std::fabs(y);
    if (ay == 0.0f) continue;
    // Step k -> k+1 happens at t = (k + 0.5) / ay, in cell (t - t_lo) * cells_per_t.
    const int k_sat = y > 0 ? nneg - 2 : nneg - 1;  // last step before the code saturates
    const int k_end =
        static_cast<int>(round_clamp(t_hi * ay - 1.0f, -1.0f, static_cast<float>(k_sat)));
    const float c_step = cells_per_t / ay;
    const float c_first = (0.5f / ay - t_lo) * cells_per_t;
    const float wy = w[i] * ay;
    for (int k = static_cast<int>(std::fabs(l)); k <= k_end; ++k) {
      const float cf = c_first + c_step * static_cast<float>(k);  // clamped as a float: NaN -> 0
      const int c = cf > 0 ? (cf < kCells - 1 ? static_cast<int>(cf) : kCells - 1) : 0;
      cell_xq[c] += wy;
      cell_qq[c] += w[i] * static_cast<float>(2 * k + 1);
    }
  }
  double best_score = sqq > 0 ? sxq * sxq / sqq : -1.0;
  int best_c = -1;
  for (int c = 0; c < kCells; ++c) {
    sxq += cell_xq[c];
    sqq += cell_qq[c];
    if (sqq > 0 && sxq * sxq > best_score * sqq) {
      best_score = sxq * sxq / sqq;
      best_c = c;
    }
  }
  float t = t_lo + static_cast<float>(best_c + 1) / cells_per_t;
  float scale = 0.0f;
  double best_err = INFINITY;
  for (int pass = 0; pass < 2; ++pass) {  // the scan's winner, then one polish at its scale
    float xq[kLanes] = {}, qq[kLanes] = {}, xx[kLanes] = {};
    for (int i0 = 0; i0 < kN; i0 += kLanes) {
      for (int k = 0; k < kLanes; ++k) {
        const int i = i0 + k;
        const float l = round_clamp(t * sign * x[i], lo, hi);
        xq[k] += w[i] * x[i] * sign * l;
        qq[k] += w[i] * l * l;
        xx[k] += w[i] * x[i] * x[i];
      }
    }
    const double sxq2 = sum_lanes(xq), sqq2 = sum_lanes(qq);
    if (!(sqq2 > 0)) break;
    const double err = sum_lanes(xx) - sxq2 * sxq2 / sqq2;
    if (!(err < best_err)) break;
    best_err = err;
    scale = static_cast<float>(sign * sxq2 / sqq2);  // x ~= (sign * s_y) * l
    t = static_cast<float>(sqq2 / sxq2);             // 1 / s_y
  }
  return scale;
}

// Codes for x ~= s*q at fixed 1/s: the nearest, clamped to [-nneg, nneg - 1].
template <int kN>
void symmetric_codes(const float* x, float inv_s, int nneg, int8_t* q) {
  const float lo = static_cast<float>(-nneg), hi = static_cast<float>(nneg - 1);
  for (int i = 0; i < kN; ++i)
    q[i] = static_cast<int8_t>(static_cast<int>(round_clamp(x[i] * inv_s, lo, hi)));
}

// Exact weighted error of one sub-block dequantized as s*q, each code the nearest one (those of
// symmetric_codes(1/s)).
template <int kN>
float eval_symmetric(const float* x, const float* w, float s, int nneg) {
  float err[kLanes] = {};
  const float inv = s != 0.0f ? 1.0f / s : 0.0f;  // s == 0: every code rounds to 0
  const float lo = static_cast<float>(-nneg), hi = static_cast<float>(nneg - 1);
  for (int i0 = 0; i0 < kN; i0 += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const int i = i0 + k;
      const float l = round_clamp(x[i] * inv, lo, hi);
      const float e = s * l - x[i];
      err[k] += w[i] * e * e;
    }
  }
  return static_cast<float>(sum_lanes(err));
}

struct SymmetricParams {
  int nneg;          // codes in [-nneg, nneg - 1]
  int code_neg;      // sub-block scale codes in [-code_neg, code_neg - 1]
  float r_lo, r_hi;  // scan of fit_symmetric
};

// Per-sub-block choice at a fixed super-scale d: each scale code is the floor or the ceil of the
// fitted scale's, whichever gives the smaller exact error. Returns the total error; writes codes
// and values.
template <int kSub, int kNSub>
float choose_symmetric_codes(const float* x, const float* w, const float* s, float d,
                             const SymmetricParams& p, int8_t* codes, int8_t* q) {
  const float lo = static_cast<float>(-p.code_neg), hi = static_cast<float>(p.code_neg - 1);
  float total = 0.0f;
  for (int j = 0; j < kNSub; ++j) {
    const float* xs = x + j * kSub;
    const float* ws = w + j * kSub;
    const int l0 = d != 0.0f ? static_cast<int>(round_clamp(s[j] / d - 0.5f, lo, hi)) : 0;
    float best = INFINITY;
    for (int l = l0; l <= l0 + 1 && l <= p.code_neg - 1; ++l) {
      const float e = eval_symmetric<kSub>(xs, ws, d * static_cast<float>(l), p.nneg);
      if (e < best) {
        best = e;
        codes[j] = static_cast<int8_t>(l);
      }
    }
    const float sj = d * static_cast<float>(codes[j]);
    symmetric_codes<kSub>(xs, sj != 0.0f ? 1.0f / sj : 0.0f, p.nneg, q + j * kSub);
    total += best;
  }
  return total;
}

// One super-block of kNSub symmetric sub-blocks of kSub elements: x ~= d*c_j*q with signed integer
// scale codes c_j and one f16 super-scale d. Fits each sub-block, starts from the d that maps the
// scale of largest magnitude to the code -code_neg, then refines d by least squares over the whole
// super-block with codes and values held fixed, re-choosing the codes after each step while the
// exact error falls. Returns d as f16 bits.
template <int kSub, int kNSub, int kCells>
uint16_t encode_symmetric(const float* x, const SymmetricParams& p, int8_t* codes, int8_t* q) {
  float w[kSub * kNSub];
  for (float& v : w) v = 1.0f;
  float s[kNSub];
  float smax = 0.0f, amax = 0.0f;
  for (int j = 0; j < kNSub; ++j) {
    s[j] = fit_symmetric<kSub, kCells>(x + j * kSub, w + j * kSub, p.nneg, p.r_lo, p.r_hi);
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
  uint16_t dh = f16_nonzero(-smax / static_cast<float>(p.code_neg));
  float err = choose_symmetric_codes<kSub, kNSub>(x, w, s, f16_to_f32(dh), p, codes, q);
  int8_t codes2[kNSub], q2[kSub * kNSub];
  for (int iter = 0; iter < 2; ++iter) {
    float uu[kLanes] = {}, xu[kLanes] = {};  // normal equation of x_i ~= d*u_i with u = c*q
    for (int j = 0; j < kNSub; ++j) {
      const float c = static_cast<float>(codes[j]);
      for (int i0 = j * kSub; i0 < (j + 1) * kSub; i0 += kLanes) {
        for (int k = 0; k < kLanes; ++k) {
          const int i = i0 + k;
          const float u = c * static_cast<float>(q[i]);
          uu[k] += w[i] * u * u;
          xu[k] += w[i] * x[i] * u;
        }
      }
    }
    const double suu = sum_lanes(uu), sxu = sum_lanes(xu);
    if (!(suu > 0)) break;
    const uint16_t dh2 = f16_nonzero(static_cast<float>(sxu / suu));
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
// Packing. In a super-block with 2-bit low parts, element e sits in byte (e/128)*32 + e%32 at
// bit 2*((e%128)/32); the high bits of Q3_K/Q5_K sit in byte e%32 at bit e/32.

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

// The affine formats only subtract mins, so a super-block with no value <= 0 (a norm-like
// vector around 1, say) would waste its codes on [0, min]. Such a block is quantized as -x and
// its super-scales negated: the mins then add, and dequantize needs no special case.
template <int kSub, int kNSub>
bool encode_affine_signed(const float* x, const AffineParams& p, uint16_t* d, uint16_t* dmin,
                          uint8_t* ls, uint8_t* lm, uint8_t* q) {
  bool positive = true;
  for (int i = 0; i < kQK_K; ++i) positive = positive && x[i] > 0;
  if (!positive) {
    encode_affine<kSub, kNSub>(x, p, d, dmin, ls, lm, q);
    return false;
  }
  float neg[kQK_K];
  for (int i = 0; i < kQK_K; ++i) neg[i] = -x[i];
  encode_affine<kSub, kNSub>(neg, p, d, dmin, ls, lm, q);
  *d ^= 0x8000;
  *dmin ^= 0x8000;
  return true;
}

// Q2_K: 16 sub-blocks of 16, q in [0, 3], 4-bit scale and min codes. Scan: max - min spans 2.5 to
// 4 code steps.
void quantize_block_q2_K(const float* x, BlockQ2_K* y) {
  const AffineParams p{3, 15, -0.5f, 0.1f, 15};
  uint8_t ls[16], lm[16], q[kQK_K];
  encode_affine_signed<16, 16>(x, p, &y->d, &y->dmin, ls, lm, q);
  for (int j = 0; j < 16; ++j) y->scales[j] = static_cast<uint8_t>(ls[j] | (lm[j] << 4));
  pack_2bit(q, y->qs);
}

// Q3_K: 16 sub-blocks of 16, q in [-4, 3], 6-bit signed scale codes. Scan: the largest magnitude
// at 3 to 5 code steps.
void quantize_block_q3_K(const float* x, BlockQ3_K* y) {
  const SymmetricParams p{4, 32, -1.0f, 1.0f};
  int8_t codes[16], q[kQK_K];
  y->d = encode_symmetric<16, 16, 32>(x, p, codes, q);
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

// Q4_K: 8 sub-blocks of 32, q in [0, 15], 6-bit scale and min codes. Scan: max - min spans 12 to
// 16 code steps.
void quantize_block_q4_K(const float* x, BlockQ4_K* y) {
  const AffineParams p{15, 63, -3.0f, 0.2f, 20};
  uint8_t ls[8], lm[8], q[kQK_K];
  encode_affine_signed<32, 8>(x, p, &y->d, &y->dmin, ls, lm, q);
  pack_k4_scales(ls, lm, y->scales);
  for (int c = 0; c < 4; ++c)
    for (int i = 0; i < 32; ++i)
      y->qs[32 * c + i] = static_cast<uint8_t>(q[64 * c + i] | (q[64 * c + 32 + i] << 4));
}

// Q5_K: as Q4_K with q in [0, 31]; the fifth bits go to qh. Scan: max - min spans 27 to 32 steps.
void quantize_block_q5_K(const float* x, BlockQ5_K* y) {
  const AffineParams p{31, 63, -4.0f, 0.25f, 20};
  uint8_t ls[8], lm[8], q[kQK_K];
  encode_affine_signed<32, 8>(x, p, &y->d, &y->dmin, ls, lm, q);
  pack_k4_scales(ls, lm, y->scales);
  std::memset(y->qh, 0, sizeof(y->qh));
  for (int c = 0; c < 4; ++c)
    for (int i = 0; i < 32; ++i) {
      const int lo = q[64 * c + i], hi = q[64 * c + 32 + i];
      y->qs[32 * c + i] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
      y->qh[i] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
}

// Q6_K: 16 sub-blocks of 16, q in [-32, 31], int8 scale codes. Low nibbles go to ql, the two
// high bits to qh, in 128-element halves. Scan: the largest magnitude at 24 to 33 code steps; with
// this many levels, scales that leave codes unused often fit the other 15 elements better
// (measured: 3% less error than scanning 29 to 35 only).
void quantize_block_q6_K(const float* x, BlockQ6_K* y) {
  const SymmetricParams p{32, 128, -8.0f, 1.0f};
  int8_t q[kQK_K];
  y->d = encode_symmetric<16, 16, 32>(x, p, y->scales, q);
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

// Q8_K (the activation side of K-quant dot products): one float scale mapping the element of
// largest magnitude to -127, as ggml does, so results match ggml bit for bit; bsums hold the sums
// of each 16 codes.
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
  for (int i = 0; i < kQK_K; ++i)
    y->qs[i] = static_cast<int8_t>(static_cast<int>(round_clamp(inv * x[i], -128.0f, 127.0f)));
  for (int j = 0; j < 16; ++j) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += y->qs[16 * j + i];
    y->bsums[j] = static_cast<int16_t>(sum);
  }
  y->d = 1.0f / inv;
}

template <typename Block, void (*kQuantizeBlock)(const float*, Block*)>
void quantize_blocks(const float* x, void* y, int64_t n) {
  DUET_CHECK_MSG(n % kQK_K == 0, "K-quant row length %lld is not a multiple of %d",
                 static_cast<long long>(n), kQK_K);
  Block* out = static_cast<Block*>(y);
  for (int64_t i = 0; i < n / kQK_K; ++i) kQuantizeBlock(x + i * kQK_K, out + i);
}

}  // namespace

void quantize_row_q2_K(const float* x, void* y, int64_t n) {
  quantize_blocks<BlockQ2_K, quantize_block_q2_K>(x, y, n);
}
void quantize_row_q3_K(const float* x, void* y, int64_t n) {
  quantize_blocks<BlockQ3_K, quantize_block_q3_K>(x, y, n);
}
void quantize_row_q4_K(const float* x, void* y, int64_t n) {
  quantize_blocks<BlockQ4_K, quantize_block_q4_K>(x, y, n);
}
void quantize_row_q5_K(const float* x, void* y, int64_t n) {
  quantize_blocks<BlockQ5_K, quantize_block_q5_K>(x, y, n);
}
void quantize_row_q6_K(const float* x, void* y, int64_t n) {
  quantize_blocks<BlockQ6_K, quantize_block_q6_K>(x, y, n);
}
void quantize_row_q8_K(const float* x, void* y, int64_t n) {
  quantize_blocks<BlockQ8_K, quantize_block_q8_K>(x, y, n);
}

}  // namespace duet
