// Paged attention against a direct double-precision softmax(q.k * scale) . v, for F32 and F16
// caches, both summation orders, scattered block tables of several block sizes, and sliding
// windows. The F16 reference rounds q, k, v and the weights the way the kernel documents (a
// weight may still round to the neighbouring F16 value, hence the looser F16 bound).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "tensor/half.h"

namespace duet {
namespace {

struct AttnShape {
  int64_t hd = 64, n_kv = 2, group = 3, block = 5, n_pos = 37;
};

float round_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

// Reference for one query group at position pos attending [k_begin, pos].
std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                              const AttnShape& s, int64_t kv_head, int64_t k_begin, int64_t k_end, float scale, bool f16) {
  std::vector<double> out(s.group * s.hd, 0.0);
  for (int64_t g = 0; g < s.group; ++g) {
    std::vector<double> w(k_end - k_begin);
    double mx = -1e300;
    for (int64_t p = k_begin; p < k_end; ++p) {
      double dot = 0;
      for (int64_t d = 0; d < s.hd; ++d) {
        const float qv = q[g * s.hd + d], kv = k[(p * s.n_kv + kv_head) * s.hd + d];
        dot += static_cast<double>(f16 ? round_f16(qv) : qv) * (f16 ? round_f16(kv) : kv);
      }
      w[p - k_begin] = dot * scale;
      mx = std::max(mx, w[p - k_begin]);
    }
    double sum = 0;
    for (double& x : w) sum += (x = std::exp(x - mx));
    for (int64_t p = k_begin; p < k_end; ++p) {
      double pw = w[p - k_begin] / sum;
      if (f16) pw = round_f16(static_cast<float>(pw));
      for (int64_t d = 0; d < s.hd; ++d) {
        const float vv = v[(p * s.n_kv + kv_head) * s.hd + d];
        out[g * s.hd + d] += pw * (f16 ? round_f16(vv) : vv);
      }
    }
  }
  return out;
}

TEST(Attention, PagedMatchesReference) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (DType dt : {DType::kF32, DType::kF16}) {
    for (int64_t block : {1, 4, 5, 16, 64}) {
      AttnShape s;
      s.block = block;
      const int64_t n_blocks = (s.n_pos + block - 1) / block;
      // A scattered block table: physical blocks in shuffled order within a larger pool.
      std::vector<int32_t> table(n_blocks);
      std::vector<int32_t> perm(n_blocks * 2);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      std::copy(perm.begin(), perm.begin() + n_blocks, table.begin());
      const size_t eb = dt == DType::kF16 ? 2 : 4;
      std::vector<uint8_t> kbuf(perm.size() * s.n_kv * block * s.hd * eb), vbuf(kbuf.size());
      PagedKvLayer kv{dt, kbuf.data(), vbuf.data(), block, s.n_kv, s.hd};
      std::vector<float> k(s.n_pos * s.n_kv * s.hd), v(k.size());
      for (auto& x : k) x = nd(rng);
      for (auto& x : v) x = nd(rng);
      for (int64_t p = 0; p < s.n_pos; ++p) kv_write(kv, table.data(), p, &k[p * s.n_kv * s.hd], &v[p * s.n_kv * s.hd]);
      std::vector<float> q(s.group * s.hd);
      for (auto& x : q) x = nd(rng);
      std::vector<float> scratch(attention_scratch_floats(s.hd, s.group, s.n_pos)), out(s.group * s.hd);
      const float scale = 0.125f;
      for (AttnOrder order : {AttnOrder::kBatch, AttnOrder::kSingle}) {
        for (int64_t k_begin : {int64_t{0}, int64_t{9}}) {
          for (int64_t kv_head = 0; kv_head < s.n_kv; ++kv_head) {
            attention_paged(kv, table.data(), kv_head, k_begin, s.n_pos, q.data(), s.group, scale, order, out.data(),
                            scratch.data());
            const auto ref = reference(q, k, v, s, kv_head, k_begin, s.n_pos, scale, dt == DType::kF16);
            for (size_t i = 0; i < out.size(); ++i)
              ASSERT_NEAR(out[i], ref[i], (dt == DType::kF16 ? 2e-3 : 2e-5) * (1 + std::fabs(ref[i])))
                  << dtype_name(dt) << " block " << block << " order " << static_cast<int>(order) << " k_begin "
                  << k_begin << " i " << i;
          }
        }
      }
    }
  }
}

TEST(Attention, GgmlExpfIsAccurate) {
  for (float x = -100.0f; x <= 80.0f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    EXPECT_NEAR(ggml_expf(x), want, 4e-7 * want + 1e-38) << x;
  }
  EXPECT_EQ(ggml_expf(-INFINITY), 0.0f);
  EXPECT_EQ(ggml_expf(0.0f), 1.0f);
}

}  // namespace
}  // namespace duet
