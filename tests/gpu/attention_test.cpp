// GPU paged attention (kernels/cuda/attention.h) against two references: a double-precision
// attention over the same cache contents (the tight bound), and the CPU kernel attention_paged
// (kernels/cpu/attention.h; it rounds q and the softmax weights to F16 for F16 caches, as
// llama.cpp does, hence a looser bound). Cases: several sequences of 1..3000 keys, kv_block_size
// 16 / 256 / 7 with shuffled non-contiguous block ids, GQA groups 1/2/4/7/8, head_dim 64/128/256,
// sliding windows shorter than the context, prefill-only, decode-only and mixed batches, F16 and
// F32 caches; unwritten cache slots hold NaN so a read of one shows. On sm_80+ every case runs
// twice, through both prompt paths (AttentionPromptPath: the mma.sync kernel and the generic
// sm_70 kernels, which DUET_KERNELS=generic or DUET_ATTN_WMMA=1 select in a real run), so prompt
// rows at head_dim 64/128/256, GQA, windows, ragged sequences and prompts continuing a cache go
// through each (DUET_ATTN_MMA_VARIANT=w4b2 or w8b1 runs everything through the mma kernel's other
// block shapes; attention.cu). ShortContextSplits runs decode rows of 1..300 keys (one and 32
// sequences, exact and graph-padded grid bounds) through the short splits, and
// GraphReplayLongerContext replays a captured decode launch at longer contexts than at capture
// (DUET_ATTN_SPLIT_SHORT=0 runs both through the previous split policy). Batches of more than 8
// tokens at short grid bounds take whole contexts per decode block, 4 tiles at a time (32
// sequences in ShortContextSplits and F16OutputMatchesFloat; DUET_ATTN_GROUPS=1, 2 or 4 runs
// every decode row through one form). Decode launches whose pieces reach 256 keys at the grid's
// bound (the "decode 1..3000 keys" and "decode long d128 g7" cases, up to 16384 keys) run the
// mma.sync ring decode kernel on the mma path and the tile-by-tile kernel on the generic one
// (DUET_ATTN_DECODE_MMA=1 puts every decode row of the mma path on the ring kernel, windows,
// head_dim 64 and groups of 1 and 16 included; DUET_ATTN_DECODE_MMA_STAGES=2 selects its
// two-stage ring, DUET_ATTN_MERGE_WIDE=0 the previous merge of more than 8 pieces). Then a benchmark
// printout (not pass/fail): decode K/V bandwidth (short contexts too, with a graph's grid bound)
// and prompt TFLOP/s of both prompt paths. Needs a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant_kernels.cuh"
#include "runtime/cuda_check.h"
#include "runtime/device.h"
#include "tensor/half.h"

namespace duet::cuda {
namespace {

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) { DUET_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T))); }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) {
    DUET_CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  std::vector<T> get() const {
    std::vector<T> h(n);
    DUET_CUDA_CHECK(cudaDeviceSynchronize());
    DUET_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

struct Seq {
  int n_ctx;  // keys already in the cache
  int n_new;  // tokens of this batch (positions n_ctx .. n_ctx + n_new - 1)
};

struct Case {
  const char* name;
  int n_heads, n_kv_heads, head_dim, block_size;
  DType dtype;
  int window;
  std::vector<Seq> seqs;
};

// Everything a launch needs, host and device.
struct Problem {
  Case c;
  int n_tokens = 0, max_blocks = 0, max_seq_tokens = 0, max_kv_len = 0, n_blocks = 0;
  std::vector<int32_t> positions, seq_ids, tables, tok_begin, tok_n;
  std::vector<uint8_t> kcache, vcache;
  std::vector<float> q;
};

Problem make_problem(const Case& c, uint32_t seed) {
  Problem p;
  p.c = c;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int bs = c.block_size;
  for (const Seq& s : c.seqs) {
    const int len = s.n_ctx + s.n_new;
    p.max_blocks = std::max(p.max_blocks, (len + bs - 1) / bs);
    p.max_seq_tokens = std::max(p.max_seq_tokens, s.n_new);
    p.max_kv_len = std::max(p.max_kv_len, len);
  }
  int total_blocks = 0;
  for (const Seq& s : c.seqs) total_blocks += (s.n_ctx + s.n_new + bs - 1) / bs;
  p.n_blocks = total_blocks + 5;  // a few never used
  std::vector<int32_t> ids(p.n_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int ns = static_cast<int>(c.seqs.size());
  p.tables.assign(static_cast<size_t>(ns) * p.max_blocks, -1);
  int next = 0;
  for (int s = 0; s < ns; ++s) {
    const int nb = (c.seqs[s].n_ctx + c.seqs[s].n_new + bs - 1) / bs;
    for (int j = 0; j < nb; ++j) p.tables[s * p.max_blocks + j] = ids[next++];
  }
  const size_t eb = c.dtype == DType::kF16 ? 2 : 4;
  const size_t elems = static_cast<size_t>(p.n_blocks) * c.n_kv_heads * bs * c.head_dim;
  p.kcache.assign(elems * eb, 0xff);  // NaN in F16 and F32
  p.vcache.assign(elems * eb, 0xff);
  PagedKvLayer layer{c.dtype, p.kcache.data(), p.vcache.data(), bs, c.n_kv_heads, c.head_dim};
  const int kvd = c.n_kv_heads * c.head_dim;
  std::vector<float> k(kvd), v(kvd);
  for (int s = 0; s < ns; ++s) {
    p.tok_begin.push_back(p.n_tokens);
    p.tok_n.push_back(c.seqs[s].n_new);
    for (int pos = 0; pos < c.seqs[s].n_ctx + c.seqs[s].n_new; ++pos) {
      for (auto& x : k) x = nd(rng);
      for (auto& x : v) x = nd(rng);
      kv_write(layer, &p.tables[s * p.max_blocks], pos, k.data(), v.data());
      if (pos >= c.seqs[s].n_ctx) {
        p.positions.push_back(pos);
        p.seq_ids.push_back(s);
        ++p.n_tokens;
      }
    }
  }
  // Queries with std 2: scores of std ~2 after the 1/sqrt(d) scale, a softmax neither flat nor one-hot.
  p.q.resize(static_cast<size_t>(p.n_tokens) * c.n_heads * c.head_dim);
  for (auto& x : p.q) x = 2.0f * nd(rng);
  return p;
}

float cache_at(const Problem& p, const std::vector<uint8_t>& cache, int seq, int pos, int kvh, int d) {
  const int bs = p.c.block_size;
  const int32_t blk = p.tables[seq * p.max_blocks + pos / bs];
  const size_t off = ((static_cast<size_t>(blk) * p.c.n_kv_heads + kvh) * bs + pos % bs) * p.c.head_dim + d;
  if (p.c.dtype == DType::kF16) {
    uint16_t h;
    std::memcpy(&h, cache.data() + off * 2, 2);
    return f16_to_f32(h);
  }
  float f;
  std::memcpy(&f, cache.data() + off * 4, 4);
  return f;
}

// Double-precision attention over the cache's (already rounded) K/V and the float q. K/V are
// first gathered into dense [seq][pos][kv_head][d] arrays so the loops stay cheap.
std::vector<float> reference_double(const Problem& p, float scale) {
  const Case& c = p.c;
  const int hd = c.head_dim, group = c.n_heads / c.n_kv_heads, kvd = c.n_kv_heads * hd;
  std::vector<std::vector<double>> kd(c.seqs.size()), vd(c.seqs.size());
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const int len = c.seqs[s].n_ctx + c.seqs[s].n_new;
    kd[s].resize(static_cast<size_t>(len) * kvd);
    vd[s].resize(static_cast<size_t>(len) * kvd);
    for (int pos = 0; pos < len; ++pos)
      for (int h = 0; h < c.n_kv_heads; ++h)
        for (int d = 0; d < hd; ++d) {
          kd[s][static_cast<size_t>(pos) * kvd + h * hd + d] = cache_at(p, p.kcache, static_cast<int>(s), pos, h, d);
          vd[s][static_cast<size_t>(pos) * kvd + h * hd + d] = cache_at(p, p.vcache, static_cast<int>(s), pos, h, d);
        }
  }
  std::vector<float> out(p.q.size());
  std::vector<double> sc, o(hd);
  for (int t = 0; t < p.n_tokens; ++t) {
    const int pos = p.positions[t], seq = p.seq_ids[t];
    const int kb = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
    for (int h = 0; h < c.n_heads; ++h) {
      const int kvh = h / group;
      const float* q = &p.q[(static_cast<size_t>(t) * c.n_heads + h) * hd];
      sc.assign(pos + 1 - kb, 0.0);
      double mx = -INFINITY;
      for (int j = kb; j <= pos; ++j) {
        const double* k = &kd[seq][static_cast<size_t>(j) * kvd + kvh * hd];
        double s = 0;
        for (int d = 0; d < hd; ++d) s += static_cast<double>(q[d]) * k[d];
        sc[j - kb] = s * scale;
        mx = std::max(mx, sc[j - kb]);
      }
      double sum = 0;
      for (double& s : sc) sum += s = std::exp(s - mx);
      std::fill(o.begin(), o.end(), 0.0);
      for (int j = kb; j <= pos; ++j) {
        const double* v = &vd[seq][static_cast<size_t>(j) * kvd + kvh * hd];
        for (int d = 0; d < hd; ++d) o[d] += sc[j - kb] * v[d];
      }
      for (int d = 0; d < hd; ++d) out[(static_cast<size_t>(t) * c.n_heads + h) * hd + d] = static_cast<float>(o[d] / sum);
    }
  }
  return out;
}

std::vector<float> reference_cpu(const Problem& p, float scale) {
  const Case& c = p.c;
  const int hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  PagedKvLayer layer{c.dtype, const_cast<uint8_t*>(p.kcache.data()), const_cast<uint8_t*>(p.vcache.data()), c.block_size,
                     c.n_kv_heads, hd};
  std::vector<float> out(p.q.size());
  std::vector<float> scratch(attention_scratch_floats(hd, group, p.max_kv_len));
  for (int t = 0; t < p.n_tokens; ++t) {
    const int pos = p.positions[t], seq = p.seq_ids[t];
    const int kb = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
    const AttnOrder order = p.tok_n[seq] > 1 ? AttnOrder::kBatch : AttnOrder::kSingle;
    for (int kvh = 0; kvh < c.n_kv_heads; ++kvh) {
      const size_t o = (static_cast<size_t>(t) * c.n_heads + kvh * group) * hd;
      attention_paged(layer, &p.tables[seq * p.max_blocks], kvh, kb, pos + 1, &p.q[o], group, scale, order, &out[o],
                      scratch.data());
    }
  }
  return out;
}

// Device copies of a problem and one launch; returns the output rows (ldo = n_heads * head_dim).
struct DeviceProblem {
  Dev<uint8_t> k, v;
  Dev<float> q, out;
  Dev<int32_t> pos, seq, tab, tb, tn;
  Dev<uint8_t> scratch;
  PagedKvCache kv;
  AttentionBatch batch;
  int qd;
  // grid_kv_len: the batch's max_kv_len bound (0: the problem's own); a larger one sizes the grid
  // and scratch as a captured decode graph does (for the longest context the cache allows).
  explicit DeviceProblem(const Problem& p, int grid_kv_len = 0)
      : k(p.kcache), v(p.vcache), q(p.q), out(p.q.size()), pos(p.positions), seq(p.seq_ids), tab(p.tables),
        tb(p.tok_begin), tn(p.tok_n),
        scratch(std::max<size_t>(1, attention_scratch_bytes(p.n_tokens, p.c.n_heads, p.c.head_dim,
                                                             std::max(grid_kv_len, p.max_kv_len)))) {
    kv = PagedKvCache{p.c.dtype, k.p, v.p, p.c.block_size, p.c.n_kv_heads, p.c.head_dim};
    batch.n_tokens = p.n_tokens;
    batch.n_seqs = static_cast<int>(p.c.seqs.size());
    batch.positions = pos.p;
    batch.seq_ids = seq.p;
    batch.block_tables = tab.p;
    batch.max_blocks = p.max_blocks;
    batch.max_seq_tokens = p.max_seq_tokens;
    batch.max_kv_len = std::max(grid_kv_len, p.max_kv_len);
    batch.seq_token_begin = tb.p;
    batch.seq_n_tokens = tn.p;
    batch.scratch = scratch.p;
    batch.scratch_bytes = scratch.n;
    qd = p.c.n_heads * p.c.head_dim;
    DUET_CUDA_CHECK(cudaMemset(out.p, 0xff, out.n * sizeof(float)));  // NaN: an unwritten row shows
  }
  void launch(const Problem& p, float scale, cudaStream_t stream = nullptr) {
    launch_attention(kv, batch, q.p, qd, p.c.n_heads, scale, p.c.window, out.p, qd, stream);
  }
};

class GpuAttention : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_GT(device_count(), 0) << "no CUDA device"; }
};

const char* path_name(AttentionPromptPath p) { return p == AttentionPromptPath::kMma ? "mma" : "generic"; }

// The prompt paths this device runs: mma (where it is the default) and generic.
std::vector<AttentionPromptPath> prompt_paths() {
  set_attention_prompt_path(AttentionPromptPath::kAuto);
  std::vector<AttentionPromptPath> paths;
  if (attention_prompt_path() == AttentionPromptPath::kMma) paths.push_back(AttentionPromptPath::kMma);
  paths.push_back(AttentionPromptPath::kGeneric);
  return paths;
}

// Largest errors of a launch against both references, and the count of elements out of bounds
// (the bounds are explained above ParityTable). path: the prompt path the launch ran.
struct Errors {
  double gd = 0, td = 0, cd = 0, gc = 0;  // fp32 rows vs f64, tensor-core rows vs f64, cpu vs f64, gpu vs cpu
  int64_t bad = 0;
};

Errors compare(const Problem& p, const std::vector<float>& got, const std::vector<float>& refd,
               const std::vector<float>& refc, AttentionPromptPath path) {
  const Case& c = p.c;
  Errors e;
  const double bound_gc = c.dtype == DType::kF16 ? 1e-2 : 2e-4;
  const size_t row = static_cast<size_t>(c.n_heads) * c.head_dim;
  for (size_t i = 0; i < got.size(); ++i) {
    const int t = static_cast<int>(i / row);
    const bool prompt_row = p.tok_n[p.seq_ids[t]] > 1;
    // Tensor-core rows: F16 caches at head_dim <= 128 (both paths, prompt and decode), and
    // every F16 prompt row on the mma path.
    const bool tc = c.dtype == DType::kF16 && (c.head_dim <= 128 || (prompt_row && path == AttentionPromptPath::kMma));
    const double gd = std::fabs(static_cast<double>(got[i]) - refd[i]);
    const double cd = std::fabs(static_cast<double>(refc[i]) - refd[i]);
    const double gc = std::fabs(static_cast<double>(got[i]) - refc[i]);
    if (!(gd <= (tc ? 1e-2 : 2e-4)) || !(gc <= bound_gc)) ++e.bad;  // NaN counts as bad
    (tc ? e.td : e.gd) = std::max(tc ? e.td : e.gd, gd);
    e.cd = std::max(e.cd, cd);
    e.gc = std::max(e.gc, gc);
  }
  return e;
}

// Bounds. FP32 rows (the SIMT kernels: F32 caches, head_dim 256) vs double: FP32
// dot products over <= 256 terms of size ~2 (q) x ~1 (k) and online-softmax sums over <= 3000
// keys: score errors ~1e-5, weights relative ~1e-5, outputs (convex combinations of N(0,1) values,
// |v| <= ~5) within ~5e-5: bound 2e-4. Tensor-core rows (F16 caches at head_dim <= 128, prompt
// and decode) round q and the weights to F16, like the CPU reference: relative 2^-11 each, up to
// ~2.5e-3 on an output of |v| <= 5 from the weights and as much from q: bound 1e-2 against both
// references. GPU vs CPU on other rows: the CPU's own F16 rounding, same 1e-2 for F16 caches,
// 2e-4 for F32 (the CPU rounds nothing then). The mma prompt kernel (prompt rows of F16 caches at
// every head_dim, head_dim 256 included) rounds the same two things, q as q * scale * log2(e)
// instead of q * scale (the same 2^-11 relative step; the per-score error does not grow with
// head_dim since q * scale keeps scores at std ~2): the tensor-core bound, 1e-2.
TEST_F(GpuAttention, ParityTable) {
  const DType F16 = DType::kF16, F32 = DType::kF32;
  const std::vector<Case> cases = {
      {"decode 1..3000 keys, g7", 28, 4, 128, 16, F16, 0, {{0, 1}, {6, 1}, {99, 1}, {1023, 1}, {2999, 1}}},
      {"prefill 300, g7", 28, 4, 128, 16, F16, 0, {{0, 300}}},
      {"mixed, g7", 28, 4, 128, 16, F16, 0, {{0, 200}, {500, 1}, {1000, 37}, {2999, 1}, {10, 1}, {0, 1}, {7, 2}}},
      {"mixed bs256 d64 g4", 32, 8, 64, 256, F16, 0, {{0, 150}, {300, 1}, {2000, 65}, {1, 1}}},
      {"mixed bs7 d256 g1", 8, 8, 256, 7, F16, 0, {{0, 100}, {40, 1}, {700, 20}, {2500, 1}}},
      {"mixed bs7 d128 g8 F32", 32, 4, 128, 7, F32, 0, {{0, 70}, {1500, 1}, {300, 33}, {2999, 1}}},
      {"window 512 d256 g2", 16, 8, 256, 16, F16, 512, {{0, 600}, {2000, 1}, {1500, 64}, {2999, 1}}},
      {"window 512 decode d128 g7", 28, 4, 128, 16, F16, 512, {{2999, 1}, {600, 1}, {100, 1}, {511, 1}, {512, 1}}},
      {"prefill 2 + chunk d64 F32", 16, 4, 64, 16, F32, 0, {{0, 2}, {1000, 70}}},
      {"window 100 bs7 d64 g1 F32", 4, 4, 64, 7, F32, 100, {{0, 250}, {400, 1}, {37, 80}}},
      // Prompt-kernel edges: row tiles of 64 with ragged ends (2, 17, 64, 65, 130 tokens), prompts
      // continuing a cache (n_ctx > 0, so key tiles start off the row tile), windows shorter than
      // a tile and than the prompt, kv_block_size not dividing a tile, every head_dim.
      {"prompt ragged d128 g7", 28, 4, 128, 16, F16, 0,
       {{0, 2}, {0, 17}, {0, 64}, {0, 65}, {5, 63}, {0, 130}, {2000, 129}, {0, 1}, {33, 3}}},
      {"prompt window 100 d64 g8", 32, 4, 64, 16, F16, 100, {{0, 300}, {50, 77}, {400, 1}}},
      {"prompt ragged bs7 d256 g2", 16, 8, 256, 7, F16, 0, {{0, 97}, {1200, 33}, {0, 2}, {10, 1}}},
      {"prompt window 40 bs7 d128 g1", 8, 8, 128, 7, F16, 40, {{0, 200}, {300, 90}}},
      {"prompt continue bs256 d64 g4", 32, 8, 64, 256, F16, 0, {{2500, 200}, {63, 64}}},
      {"prompt window 300 d256 g8", 16, 2, 256, 16, F16, 300, {{0, 1}, {700, 150}, {0, 70}}},
      // Long-context decode (pieces of several 64-key tiles: the mma ring kernel on the mma path,
      // the tile-by-tile kernel on the generic one): the key at pos in the first, a middle or a
      // later tile of the last piece, a full group of 16 query heads, windows, blocks of 7 keys.
      {"decode long d128 g7", 28, 4, 128, 16, F16, 0, {{16383, 1}, {8190, 1}, {4100, 1}, {700, 1}}},
      {"decode long window 3000 bs7 d64 g16", 32, 2, 64, 7, F16, 3000, {{9000, 1}, {2999, 1}, {3100, 1}}},
      {"decode long bs256 d128 g1", 8, 8, 128, 256, F16, 0, {{6000, 1}, {1000, 1}, {255, 1}}},
  };
  const std::vector<AttentionPromptPath> paths = prompt_paths();
  int seed = 100;
  std::printf("  %-30s %-7s %6s %6s  %-10s %-10s %-10s %-10s\n", "case", "prompt", "tokens", "maxkv", "fp32-f64",
              "tc-f64", "cpu-f64", "gpu-cpu");
  for (const Case& c : cases) {
    const Problem p = make_problem(c, seed++);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const std::vector<float> refd = reference_double(p, scale), refc = reference_cpu(p, scale);
    for (const AttentionPromptPath path : paths) {
      set_attention_prompt_path(path);
      DeviceProblem dp(p);
      dp.launch(p, scale);
      const Errors e = compare(p, dp.out.get(), refd, refc, path);
      std::printf("  %-30s %-7s %6d %6d  %.3e  %.3e  %.3e  %.3e  %s\n", c.name, path_name(path), p.n_tokens,
                  p.max_kv_len, e.gd, e.td, e.cd, e.gc, e.bad ? "FAIL" : "ok");
      EXPECT_EQ(e.bad, 0) << c.name << " (" << path_name(path) << " prompt path): max |gpu - f64| " << e.gd
                          << " (tc rows " << e.td << "), max |gpu - cpu| " << e.gc;
    }
  }
  set_attention_prompt_path(AttentionPromptPath::kAuto);
}

// A problem whose batch tokens sit `back` positions earlier (each >= 0): the same cache, a
// shorter context, as an earlier decode step of the same sequences saw it.
Problem earlier(const Problem& p, int back) {
  Problem e = p;
  e.max_kv_len = 0;
  for (int32_t& pos : e.positions) {
    pos = std::max(0, pos - back);
    e.max_kv_len = std::max(e.max_kv_len, pos + 1);
  }
  return e;
}

// Decode rows at short contexts (1..300 keys: one or a few 32-key short splits, the split edges
// 31/32/33, 63/64/65, 255/256/257), one sequence (the smallest grids, the most short splits) and
// 32 sequences, with the grid bound exact and padded to 4096 / 32768 keys as a captured decode
// graph pads it; GQA 28/4 at head_dim 128 and 64 (tensor-core kernel), 16/8 at 256 and an F32
// cache (SIMT kernel), a sliding window. Same bounds as ParityTable.
TEST_F(GpuAttention, ShortContextSplits) {
  const DType F16 = DType::kF16, F32 = DType::kF32;
  struct Geometry {
    const char* name;
    int n_heads, n_kv_heads, head_dim, block_size;
    DType dtype;
    int window;
  };
  const Geometry geoms[] = {
      {"g7 d128", 28, 4, 128, 16, F16, 0},  {"g4 d64", 32, 8, 64, 16, F16, 0},
      {"g2 d256", 16, 8, 256, 16, F16, 0},  {"g7 d128 F32 bs7", 28, 4, 128, 7, F32, 0},
      {"g7 d128 window 100", 28, 4, 128, 16, F16, 100},
  };
  const int singles[] = {1, 2, 31, 32, 33, 63, 64, 65, 100, 128, 129, 200, 255, 256, 257, 300};
  const int bounds[] = {0, 4096, 32768};
  int seed = 300;
  int64_t total_bad = 0;
  for (const Geometry& g : geoms) {
    std::vector<std::vector<Seq>> batches;
    for (const int n : singles) batches.push_back({{n - 1, 1}});
    std::vector<Seq> many;
    for (int s = 0; s < 32; ++s) many.push_back({(s * 37 + 5) % 300, 1});  // 32 contexts of 6..300 keys
    batches.push_back(many);
    for (const std::vector<Seq>& seqs : batches) {
      const Case c{g.name, g.n_heads, g.n_kv_heads, g.head_dim, g.block_size, g.dtype, g.window, seqs};
      const Problem p = make_problem(c, seed++);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      const std::vector<float> refd = reference_double(p, scale), refc = reference_cpu(p, scale);
      for (const int bound : bounds) {
        DeviceProblem dp(p, bound);
        dp.launch(p, scale);
        const Errors e = compare(p, dp.out.get(), refd, refc, AttentionPromptPath::kGeneric);
        if (e.bad || seqs.size() > 1 || p.max_kv_len == 128 || p.max_kv_len == 300)
          std::printf("  short %-20s %2zu seqs maxkv %4d bound %5d: f64 %.3e tc %.3e cpu %.3e  %s\n", g.name,
                      seqs.size(), p.max_kv_len, dp.batch.max_kv_len, e.gd, e.td, e.gc, e.bad ? "FAIL" : "ok");
        EXPECT_EQ(e.bad, 0) << g.name << ", " << seqs.size() << " seqs, max_kv_len " << p.max_kv_len << ", grid bound "
                            << dp.batch.max_kv_len;
        total_bad += e.bad;
      }
    }
  }
  std::printf("  short-context splits: %s\n", total_bad ? "FAIL" : "ok");
}

// The decode-output tests' geometries: tensor-core (F16 head_dim 64 / 128) and SIMT (F32; F16
// head_dim 256) decode kernels; and their batches (bound: the grid's max_kv_len, 0 the problem's
// own).
struct OutGeometry {
  const char* name;
  int n_heads, n_kv_heads, head_dim;
  DType dtype;
};
const OutGeometry kOutGeoms[] = {{"g7 d128 F16", 28, 4, 128, DType::kF16},
                                 {"g4 d64 F16", 32, 8, 64, DType::kF16},
                                 {"g7 d128 F32", 28, 4, 128, DType::kF32},
                                 {"g2 d256 F16", 16, 8, 256, DType::kF16}};
struct OutBatch {
  std::vector<Seq> seqs;
  int bound;
  const char* what;
};

// The int8 output for the o product (AttentionQ8Out) is, to the bit, the float output quantized
// by launch_quantize_act_q8: written by the merge where contexts are split (also for a token of
// the batch whose context fits one split: its row is read back from out), by the quantizer
// launched after the decode kernel where the grid has no splits. Tensor-core (F16 head_dim 64 /
// 128) and SIMT (F32; F16 head_dim 256) decode kernels.
TEST_F(GpuAttention, Q8OutputMatchesQuantizedFloat) {
  const OutBatch batches[] = {{{{200, 1}}, 0, "1 seq, split"},
                              {{{5, 1}, {300, 1}, {77, 1}}, 4096, "3 seqs, split, one short"},
                              {{{10, 1}, {20, 1}}, 0, "2 seqs, no split"}};
  int seed = 950;
  for (const OutGeometry& g : kOutGeoms) {
    for (const OutBatch& b : batches) {
      const Case c{g.name, g.n_heads, g.n_kv_heads, g.head_dim, 16, g.dtype, 0, b.seqs};
      const Problem p = make_problem(c, seed++);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      const int64_t k = int64_t{c.n_heads} * c.head_dim;
      DeviceProblem plain(p, b.bound), fused(p, b.bound);
      Dev<int8_t> q_ref(p.n_tokens * k), q_got(p.n_tokens * k);
      Dev<float> m_ref(p.n_tokens * k / 8), m_got(p.n_tokens * k / 8);  // float4 per 32
      plain.launch(p, scale);
      kernels::launch_quantize_act_q8(plain.out.p, k, p.n_tokens, k, q_ref.p, reinterpret_cast<float4*>(m_ref.p), false,
                                      nullptr);
      launch_attention(fused.kv, fused.batch, fused.q.p, fused.qd, c.n_heads, scale, c.window, fused.out.p, fused.qd,
                       nullptr, AttentionQ8Out{q_got.p, reinterpret_cast<float4*>(m_got.p)});
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << g.name << ", " << b.what;
      const auto qr = q_ref.get(), qg = q_got.get();
      const auto mr = m_ref.get(), mg = m_got.get();
      const bool same = qr == qg && std::memcmp(mr.data(), mg.data(), mr.size() * sizeof(float)) == 0;
      std::printf("  q8 out %-12s %-26s %s\n", g.name, b.what, same ? "bit-identical" : "FAIL");
      EXPECT_TRUE(same) << g.name << ", " << b.what;
    }
  }
}

// The F16 output for a tensor-core o product (AttentionF16Out) is, to the bit, the float output
// rounded to F16 (__float2half_rn), for every token: written by the decode kernel where a token's
// context is one split, by the merge where it is split. 32 sequences (the batched decode it is
// for) and 3, grids with and without splits, tensor-core and SIMT decode kernels.
TEST_F(GpuAttention, F16OutputMatchesFloat) {
  std::vector<Seq> s32, s32short;
  for (int s = 0; s < 32; ++s) s32.push_back({(s * 53 + 17) % 900, 1});
  for (int s = 0; s < 32; ++s) s32short.push_back({(s * 37 + 5) % 300, 1});  // whole contexts per block (decode_groups)
  const OutBatch batches[] = {{s32, 0, "32 seqs"},
                              {s32short, 0, "32 seqs, short"},
                              {s32, 8192, "32 seqs, split grid"},
                              {{{5, 1}, {300, 1}, {77, 1}}, 4096, "3 seqs, split, one short"}};
  int seed = 1200;
  for (const OutGeometry& g : kOutGeoms) {
    for (const OutBatch& b : batches) {
      const Case c{g.name, g.n_heads, g.n_kv_heads, g.head_dim, 16, g.dtype, 0, b.seqs};
      const Problem p = make_problem(c, seed++);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      const int64_t k = int64_t{c.n_heads} * c.head_dim, ld = k + 16;  // a row stride wider than the row
      DeviceProblem dp(p, b.bound);
      Dev<uint16_t> h(static_cast<size_t>(p.n_tokens) * ld);
      DUET_CUDA_CHECK(cudaMemset(h.p, 0xff, h.n * sizeof(uint16_t)));
      launch_attention(dp.kv, dp.batch, dp.q.p, dp.qd, c.n_heads, scale, c.window, dp.out.p, dp.qd, nullptr,
                       AttentionQ8Out{}, AttentionF16Out{reinterpret_cast<__half*>(h.p), ld});
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << g.name << ", " << b.what;
      const std::vector<float> out = dp.out.get();
      const std::vector<uint16_t> got = h.get();
      int64_t bad = 0;
      for (int t = 0; t < p.n_tokens; ++t)
        for (int64_t col = 0; col < k; ++col)
          bad += got[t * ld + col] != f32_to_f16(out[t * k + col]);
      const Errors e = compare(p, out, reference_double(p, scale), reference_cpu(p, scale), AttentionPromptPath::kGeneric);
      std::printf("  f16 out %-12s %-26s %s (float rows %s)\n", g.name, b.what, bad ? "FAIL" : "bit-identical",
                  e.bad ? "FAIL" : "ok");
      EXPECT_EQ(bad, 0) << g.name << ", " << b.what;
      EXPECT_EQ(e.bad, 0) << g.name << ", " << b.what;
    }
  }
}

// A decode launch captured in a CUDA graph with the grid sized for 4096 keys (as the runner
// captures decode steps), replayed first with the contexts of capture time, then with every
// context grown (positions rewritten in place, as the runner's upload does): each replay must
// match the references at its own contexts, so per-token split lengths follow the context on
// the device. One sequence (28/4, head_dim 128 and 64) and 32 sequences.
TEST_F(GpuAttention, GraphReplayLongerContext) {
  struct G {
    const char* name;
    int n_heads, n_kv_heads, head_dim;
    std::vector<Seq> seqs;
  };
  std::vector<Seq> s32;
  for (int s = 0; s < 32; ++s) s32.push_back({200 + 19 * s, 1});  // 201..790 keys
  const G gs[] = {
      {"1 seq g7 d128", 28, 4, 128, {{1500, 1}}},
      {"1 seq g4 d64", 32, 8, 64, {{700, 1}}},
      {"32 seqs g7 d128", 28, 4, 128, s32},
  };
  int seed = 500;
  for (const G& g : gs) {
    const Case c{g.name, g.n_heads, g.n_kv_heads, g.head_dim, 16, DType::kF16, 0, g.seqs};
    const Problem full = make_problem(c, seed++);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    // Capture-time contexts: 1, 100 and 190 keys shorter (down to 1 key), then the full ones.
    const Problem steps[] = {earlier(full, 1400), earlier(full, 100), earlier(full, 0)};
    DeviceProblem dp(steps[0], 4096);
    dp.launch(steps[0], scale);  // eager first: one-time device queries stay out of the capture
    DUET_CUDA_CHECK(cudaDeviceSynchronize());
    cudaStream_t s;
    DUET_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    DUET_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    dp.launch(steps[0], scale, s);
    DUET_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    DUET_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));
    for (const Problem& st : steps) {
      DUET_CUDA_CHECK(cudaMemcpyAsync(dp.pos.p, st.positions.data(), st.positions.size() * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, s));
      DUET_CUDA_CHECK(cudaMemsetAsync(dp.out.p, 0xff, dp.out.n * sizeof(float), s));
      DUET_CUDA_CHECK(cudaGraphLaunch(exec, s));
      DUET_CUDA_CHECK(cudaStreamSynchronize(s));
      const Errors e = compare(st, dp.out.get(), reference_double(st, scale), reference_cpu(st, scale),
                               AttentionPromptPath::kGeneric);
      std::printf("  graph replay %-16s maxkv %4d (captured at %4d, grid bound 4096): tc %.3e cpu %.3e  %s\n",
                  g.name, st.max_kv_len, steps[0].max_kv_len, e.td, e.gc, e.bad ? "FAIL" : "ok");
      EXPECT_EQ(e.bad, 0) << g.name << " replayed at max_kv_len " << st.max_kv_len;
    }
    DUET_CUDA_CHECK(cudaGraphExecDestroy(exec));
    DUET_CUDA_CHECK(cudaGraphDestroy(graph));
    DUET_CUDA_CHECK(cudaStreamDestroy(s));
  }
}

// KV written by launch_kv_write then read by launch_attention in one stream, as the forward does
// (F16 cache, a mixed batch): the result must equal attention over the CPU-written cache.
TEST_F(GpuAttention, KvWriteThenAttend) {
  const Case c{"kv_write + attention", 28, 4, 128, 16, DType::kF16, 0, {{0, 40}, {300, 1}, {90, 9}}};
  Problem p = make_problem(c, 7);
  const float scale = 1.0f / std::sqrt(128.0f);
  DeviceProblem ref(p);
  ref.launch(p, scale);
  const std::vector<float> want = ref.out.get();
  // Rebuild the batch tokens' K/V rows on the host from the cache (exact F16 values), wipe their
  // slots on the device copy, and write them again through launch_kv_write.
  const int kvd = c.n_kv_heads * c.head_dim;
  std::vector<float> k(static_cast<size_t>(p.n_tokens) * kvd), v(k.size());
  for (int t = 0; t < p.n_tokens; ++t)
    for (int h = 0; h < c.n_kv_heads; ++h)
      for (int d = 0; d < c.head_dim; ++d) {
        k[t * kvd + h * c.head_dim + d] = cache_at(p, p.kcache, p.seq_ids[t], p.positions[t], h, d);
        v[t * kvd + h * c.head_dim + d] = cache_at(p, p.vcache, p.seq_ids[t], p.positions[t], h, d);
      }
  Problem wiped = p;
  for (int t = 0; t < p.n_tokens; ++t)
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const int32_t blk = p.tables[p.seq_ids[t] * p.max_blocks + p.positions[t] / c.block_size];
      const size_t off = ((static_cast<size_t>(blk) * c.n_kv_heads + h) * c.block_size + p.positions[t] % c.block_size) * c.head_dim;
      std::memset(wiped.kcache.data() + off * 2, 0xff, c.head_dim * 2);
      std::memset(wiped.vcache.data() + off * 2, 0xff, c.head_dim * 2);
    }
  DeviceProblem dp(wiped);
  Dev<float> dk(k), dv(v);
  launch_kv_write(dp.kv, dp.batch, dk.p, kvd, dv.p, kvd, nullptr);
  dp.launch(wiped, scale);
  const std::vector<float> got = dp.out.get();
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << "attention after kv_write differs";
  std::printf("  kv_write then attention: %s\n", std::memcmp(got.data(), want.data(), got.size() * 4) ? "FAIL" : "bit-identical");
}

// Not pass/fail: decode K/V bandwidth and prompt throughput at Qwen2-7B-like shapes.
double time_ms(DeviceProblem& dp, const Problem& p, float scale, int iters) {
  cudaStream_t s;
  DUET_CUDA_CHECK(cudaStreamCreate(&s));
  for (int i = 0; i < 3; ++i) dp.launch(p, scale, s);
  cudaEvent_t a, b;
  DUET_CUDA_CHECK(cudaEventCreate(&a));
  DUET_CUDA_CHECK(cudaEventCreate(&b));
  DUET_CUDA_CHECK(cudaEventRecord(a, s));
  for (int i = 0; i < iters; ++i) dp.launch(p, scale, s);
  DUET_CUDA_CHECK(cudaEventRecord(b, s));
  DUET_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  DUET_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  DUET_CUDA_CHECK(cudaEventDestroy(a));
  DUET_CUDA_CHECK(cudaEventDestroy(b));
  DUET_CUDA_CHECK(cudaStreamDestroy(s));
  return ms / iters;
}

// A problem for timing only: the cache is filled with small random F16 values directly (no
// reference needed), block ids shuffled like the parity cases.
Problem bench_problem(const Case& c) {
  Problem p;
  p.c = c;
  const int bs = c.block_size;
  for (const Seq& s : c.seqs) {
    const int len = s.n_ctx + s.n_new;
    p.max_blocks = std::max(p.max_blocks, (len + bs - 1) / bs);
    p.max_seq_tokens = std::max(p.max_seq_tokens, s.n_new);
    p.max_kv_len = std::max(p.max_kv_len, len);
    p.n_blocks += (len + bs - 1) / bs;
  }
  std::mt19937 rng(5);
  std::vector<int32_t> ids(p.n_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int ns = static_cast<int>(c.seqs.size());
  p.tables.assign(static_cast<size_t>(ns) * p.max_blocks, 0);
  int next = 0;
  for (int s = 0; s < ns; ++s) {
    const int nb = (c.seqs[s].n_ctx + c.seqs[s].n_new + bs - 1) / bs;
    for (int j = 0; j < nb; ++j) p.tables[s * p.max_blocks + j] = ids[next++];
    p.tok_begin.push_back(p.n_tokens);
    p.tok_n.push_back(c.seqs[s].n_new);
    for (int i = 0; i < c.seqs[s].n_new; ++i) {
      p.positions.push_back(c.seqs[s].n_ctx + i);
      p.seq_ids.push_back(s);
      ++p.n_tokens;
    }
  }
  const size_t elems = static_cast<size_t>(p.n_blocks) * c.n_kv_heads * bs * c.head_dim;
  p.kcache.resize(elems * 2);
  p.vcache.resize(elems * 2);
  uint32_t x = 12345;
  for (size_t i = 0; i < elems; ++i) {
    x = x * 1664525u + 1013904223u;
    const uint16_t h = f32_to_f16(static_cast<float>(static_cast<int>(x >> 20) - 2048) / 2048.0f);
    std::memcpy(&p.kcache[i * 2], &h, 2);
    x = x * 1664525u + 1013904223u;
    const uint16_t g = f32_to_f16(static_cast<float>(static_cast<int>(x >> 20) - 2048) / 2048.0f);
    std::memcpy(&p.vcache[i * 2], &g, 2);
  }
  p.q.resize(static_cast<size_t>(p.n_tokens) * c.n_heads * c.head_dim);
  for (size_t i = 0; i < p.q.size(); ++i) p.q[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
  return p;
}

TEST_F(GpuAttention, Benchmark) {
  const double peak_gbs = 4300.0;
  const float scale = 1.0f / std::sqrt(128.0f);
  struct B {
    const char* name;
    Case c;
    int grid_kv_len = 0;  // the grid bound, as DeviceProblem (4096: a captured decode graph's)
  };
  std::vector<Seq> s32(32, Seq{1023, 1}), s32l(32, Seq{4095, 1}), s32s(32, Seq{127, 1});
  const B decodes[] = {
      {"decode 1 x 128 keys", {"", 28, 4, 128, 16, DType::kF16, 0, {{127, 1}}}},
      {"decode 1 x 128 keys, bound 4096", {"", 28, 4, 128, 16, DType::kF16, 0, {{127, 1}}}, 4096},
      {"decode 32 x 128 keys, bound 4096", {"", 28, 4, 128, 16, DType::kF16, 0, s32s}, 4096},
      {"decode 1 x 4096 keys", {"", 28, 4, 128, 16, DType::kF16, 0, {{4095, 1}}}},
      {"decode 32 x 1024 keys", {"", 28, 4, 128, 16, DType::kF16, 0, s32}},
      {"decode 32 x 4096 keys", {"", 28, 4, 128, 16, DType::kF16, 0, s32l}},
      {"decode 32 x 1024 keys d64 g4", {"", 32, 8, 64, 16, DType::kF16, 0, s32}},
      {"decode 1 x 16384 keys", {"", 28, 4, 128, 16, DType::kF16, 0, {{16383, 1}}}},
      {"decode 1 x 32768 keys", {"", 28, 4, 128, 16, DType::kF16, 0, {{32767, 1}}}},
      {"decode 1 x 32768 keys bs256", {"", 28, 4, 128, 256, DType::kF16, 0, {{32767, 1}}}},
  };
  for (const B& b : decodes) {
    const Problem p = bench_problem(b.c);
    DeviceProblem dp(p, b.grid_kv_len);
    const double ms = time_ms(dp, p, scale, 50);
    double bytes = 0;
    for (const Seq& s : b.c.seqs) bytes += 2.0 * (s.n_ctx + s.n_new) * b.c.n_kv_heads * b.c.head_dim * 2;  // K and V, F16
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    std::printf("  bench %-30s head_dim %d, %d q / %d kv heads: %8.1f us, K/V %7.1f GB/s = %4.1f%% of %.0f GB/s\n", b.name,
                b.c.head_dim, b.c.n_heads, b.c.n_kv_heads, ms * 1e3, gbs, 100.0 * gbs / peak_gbs, peak_gbs);
  }
  // Prompt: both paths (generic = WMMA at head_dim <= 128, FP32 SIMT at 256). Causal flops
  // 4 n^2 / 2 head_dim n_heads (QK^T and PV, each key counted once per row that sees it).
  struct PromptBench {
    int head_dim, n_heads, n_kv_heads;
    std::vector<Seq> seqs;
  };
  const PromptBench prompts[] = {
      {128, 28, 4, {{0, 2048}}},   // Qwen2-7B
      {64, 28, 4, {{0, 2048}}},
      {256, 16, 8, {{0, 2048}}},   // Gemma-2-9B-like
      {128, 28, 4, {{0, 512}, {1024, 512}, {0, 300}, {3000, 200}}},  // ragged, two continuing a cache
  };
  for (const PromptBench& pb : prompts) {
    const Case c{"", pb.n_heads, pb.n_kv_heads, pb.head_dim, 16, DType::kF16, 0, pb.seqs};
    const Problem p = bench_problem(c);
    double flops = 0;
    int n_new = 0;
    for (const Seq& s : pb.seqs) {
      n_new += s.n_new;
      for (int t = 0; t < s.n_new; ++t) flops += 4.0 * (s.n_ctx + t + 1) * c.n_heads * c.head_dim;
    }
    std::string shape = std::to_string(n_new) + " tokens";
    if (pb.seqs.size() > 1) shape += " in " + std::to_string(pb.seqs.size()) + " seqs";
    for (const AttentionPromptPath path : prompt_paths()) {
      set_attention_prompt_path(path);
      DeviceProblem dp(p);
      const double ms = time_ms(dp, p, 1.0f / std::sqrt(static_cast<float>(c.head_dim)), 10);
      std::printf("  bench prompt %-22s head_dim %3d, %d q / %d kv heads, %-7s: %8.1f us, %6.1f TFLOP/s (causal flops)\n",
                  shape.c_str(), c.head_dim, c.n_heads, c.n_kv_heads, path_name(path), ms * 1e3,
                  flops / (ms * 1e-3) / 1e12);
    }
    set_attention_prompt_path(AttentionPromptPath::kAuto);
  }
}

}  // namespace
}  // namespace duet::cuda
