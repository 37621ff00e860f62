// CudaModel (see cuda_model.h). The layer body mirrors Model::layer_forward op for op, with
// ArchTraits deciding the same switches; every op is a launch on one stream.
#include "runner/cuda_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "base/check.h"
#include "base/env.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cta_timeline.h"
#include "kernels/cuda/ops.h"
#include "model/arch_traits.h"
#include "runtime/cuda_check.h"
#include "runtime/device_buffer.h"

namespace duet::cuda {
namespace {

// The keys a captured decode step's attention grid is sized for, given the batch's longest
// context (its largest position + 1, or its longest block table): the smallest power of two >= 256
// covering it, at most max_context. A grid sized for max_context instead splits short contexts
// into pieces and merges them (measured: a 32-sequence qwen2-7b step at 128 keys took 4.04 ms with
// the grid sized for 640 keys, 3.76 ms for 192); buckets keep the number of graphs logarithmic in
// max_context. DUET_GRAPH_CTX_BUCKETS=0 (read once) sizes every decode graph for max_context.
int decode_context_bucket(int kv_len, int max_context) {
  static const bool buckets = env_flag("DUET_GRAPH_CTX_BUCKETS", true);
  if (!buckets) return max_context;
  int bucket = 256;
  while (bucket < kv_len && bucket < max_context) bucket *= 2;
  return std::min(bucket, max_context);
}

DeviceBuffer upload_floats(const std::vector<float>& v) {
  DeviceBuffer b;
  if (v.empty()) return b;
  b.resize(v.size() * sizeof(float));
  DUET_CUDA_CHECK(cudaMemcpy(b.data(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  return b;
}

// Rows of several matrices of one type and width stacked into one host matrix (the bytes are
// copied from the mapping into `buf`, the FP8 scales into `sbuf`; both must outlive the upload).
// FP8: per-tensor and per-channel scales become one scale per row (exact: the same float for
// every row of a part); block scales stack when the parts share their block shape and every
// part but the last ends on a block boundary. Null when they differ in type or width, or the
// FP8 scales do not stack.
std::optional<WeightMatrix> stack_rows(std::initializer_list<const WeightMatrix*> ms, std::vector<uint8_t>* buf,
                                       std::vector<float>* sbuf) {
  const WeightMatrix& a = **ms.begin();
  int64_t rows = 0;
  for (const WeightMatrix* m : ms) {
    if (m->dtype != a.dtype || m->n_cols != a.n_cols || m->row_bytes != a.row_bytes) return std::nullopt;
    rows += m->n_rows;
  }
  WeightMatrix w = a;
  if (a.dtype == DType::kF8_E4M3) {
    auto row_scaled = [](const WeightMatrix* m) {  // one scale per row or one for all
      return m->fp8_scales != nullptr && m->fp8_block_cols >= m->n_cols &&
             (m->fp8_block_rows == 1 || m->fp8_block_rows >= m->n_rows);
    };
    bool all_rows = true, same_blocks = true;
    for (const WeightMatrix* m : ms) {
      all_rows = all_rows && row_scaled(m);
      same_blocks = same_blocks && m->fp8_scales != nullptr && m->fp8_block_rows == a.fp8_block_rows &&
                    m->fp8_block_cols == a.fp8_block_cols && m->fp8_scale_cols == a.fp8_scale_cols;
    }
    sbuf->clear();
    if (all_rows) {
      for (const WeightMatrix* m : ms)
        for (int64_t r = 0; r < m->n_rows; ++r) sbuf->push_back(m->fp8_scales[m->fp8_block_rows == 1 ? r : 0]);
      w.fp8_block_rows = 1;
      w.fp8_block_cols = a.n_cols;
      w.fp8_scale_cols = 1;
    } else if (same_blocks && a.fp8_block_rows > 0) {
      size_t i = 0;
      for (const WeightMatrix* m : ms) {
        if (++i < ms.size() && m->n_rows % a.fp8_block_rows != 0) return std::nullopt;
        const int64_t n = (m->n_rows + a.fp8_block_rows - 1) / a.fp8_block_rows * a.fp8_scale_cols;
        sbuf->insert(sbuf->end(), m->fp8_scales, m->fp8_scales + n);
      }
    } else {
      return std::nullopt;
    }
    w.fp8_scales = sbuf->data();
  }
  buf->resize(static_cast<size_t>(rows) * a.row_bytes);
  size_t off = 0;
  for (const WeightMatrix* m : ms) {
    std::memcpy(buf->data() + off, m->data, static_cast<size_t>(m->n_rows) * m->row_bytes);
    off += static_cast<size_t>(m->n_rows) * m->row_bytes;
  }
  w.data = buf->data();
  w.n_rows = rows;
  return w;
}

// Pinned host memory for the batch description (one async upload per forward).
class PinnedInts {
 public:
  ~PinnedInts() {
    if (p_) cudaFreeHost(p_);
  }
  int32_t* reserve(size_t n) {
    if (n > n_) {
      if (p_) DUET_CUDA_CHECK(cudaFreeHost(p_));
      DUET_CUDA_CHECK(cudaMallocHost(&p_, n * sizeof(int32_t)));
      n_ = n;
    }
    return static_cast<int32_t*>(p_);
  }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

struct DeviceLayer {
  DeviceWeight wq, wk, wv, wo, w_gate, w_up, w_down;
  // Fused products (one launch, one activation quantization, better occupancy on the small k/v
  // matrices): [wq; wk; wv] and [w_gate; w_up] stacked by rows, where the types allow.
  // Where wv's type differs (Q4_K_M's Q6_K attn_v), [wq; wk] alone (wqk).
  DeviceWeight wqkv, wqk, wgu;
  bool fused_qkv = false, fused_qk = false, fused_gu = false;
  DeviceBuffer attn_norm, ffn_norm, post_attn_norm, post_ffn_norm, q_norm, k_norm, bq, bk, bv;
  DeviceBuffer k_cache, v_cache;
};

const float* fptr(const DeviceBuffer& b) { return b.as<const float>(); }

// Whether f holds for every matrix of a layer's q/k/v products ([q;k;v], [q;k] and v, or three).
template <typename F>
bool every_qkv(const DeviceLayer& L, F&& f) {
  return L.fused_qkv ? f(L.wqkv.m) : L.fused_qk ? f(L.wqk.m) && f(L.wv.m) : f(L.wq.m) && f(L.wk.m) && f(L.wv.m);
}

// Decode attention writes the o product's int8 input (launch_attention's AttentionQ8Out) unless
// DUET_ATTN_Q8=0 (A/B knob: the product then quantizes attention's float output itself).
bool attention_writes_q8() {
  static const bool on = [] {
    const char* e = std::getenv("DUET_ATTN_Q8");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

// Decode batches (2-64 rows) whose o product runs on the quantized tensor-core kernel: attention
// writes that product's F16 input (launch_attention's AttentionF16Out) unless DUET_ATTN_F16=0 (A/B
// knob, read once: the product then converts attention's float output itself).
bool attention_writes_f16() {
  static const bool on = env_flag("DUET_ATTN_F16", true);
  return on;
}

// Batches on the quantized tensor-core kernel: the o product's grid (whole GPU) zeroes
// the gate/up output the FFN norm's few blocks (one per row, 151 KB each at qwen2-7b) zeroed
// before, unless DUET_MMA_ZERO=0 (A/B knob, read once).
bool mma_zeroes() {
  static const bool on = env_flag("DUET_MMA_ZERO", true);
  return on;
}

// Native FP8 prompts: the RMSNorms before the fused q/k/v and gate/up products write those
// products' E4M3 rows themselves (launch_rms_norm_fp8_rows), so the products' own quantizer
// launches and the float rows go away. DUET_FP8_NORM_ROWS=0 turns it off (A/B knob, read once).
bool fp8_norm_producer() {
  static const bool on = env_flag("DUET_FP8_NORM_ROWS", true);
  return on;
}

// Batches on the quantized tensor-core kernel (MatmulContext::mma_min_tokens() to 64 rows of K-quant
// / Q8_0 weights on sm_80+): the RMSNorms and the gated activation
// write the products' F16 input themselves (launch_rms_norm_f16, launch_gated_activation_f16;
// MatmulContext::f16_input), the norms zeroing the q/k/v and gate/up outputs the kernel adds into,
// so that no conversion launch runs before those products. DUET_F16_PRODUCERS=0 turns it off (A/B
// knob, read once).
bool f16_producers() {
  static const bool on = env_flag("DUET_F16_PRODUCERS", true);
  return on;
}

// The F16 gated activation of tensor-core batches is launched programmatically (sm_90), so that it
// is scheduled while the gate/up product runs, unless DUET_ACT_F16_PDL=0 (A/B knob, read once).
// Either way its trigger lets the down product after it request its first weights while it runs
// (most of the gain measured: perf.md, session 13 run 5).
bool f16_act_pdl() {
  static const bool on = env_flag("DUET_ACT_F16_PDL", true);
  return on;
}

// Batches on the quantized tensor-core kernel: the final RMSNorm writes the output product's F16
// input and the last down product's grid zeroes the logits rows (as the o product zeroes the
// gate/up output), in place of the float norm and a conversion launch that zeroed them, unless
// DUET_OUT_F16=0 (A/B knob, read once).
bool output_f16() {
  static const bool on = env_flag("DUET_OUT_F16", true);
  return on;
}

// Decode batches on the quantized tensor-core kernel: the q/k/v bias + RoPE + cache-write launch
// requests the o product's weights into L2 (QkvRopeParams::l2_prefetch) unless DUET_O_PREFETCH=0
// (A/B knob, read once). The grouped decode attention between them holds ~200 KB of shared memory
// an SM, so the o product's blocks become resident only as attention's exit, and their own early
// weight requests came late (kernel trace, perf.md session 20).
bool o_prefetch() {
  static const bool on = env_flag("DUET_O_PREFETCH", true);
  return on;
}

// Decode steps on the streaming kernel of F16 / BF16 / FP8 weights: the o product zeroes the
// gate/up output and the down product the next layer's q/k/v output, which those products then
// add into, so that their columns too are split between CTAs (stream-K, launch_matvec_mma),
// unless DUET_MV_ZERO=0 (A/B knob, read once; they then write whole rows a CTA).
bool mv_zero() {
  static const bool on = env_flag("DUET_MV_ZERO", true);
  return on;
}

// The float gated activation (the input of F16 / BF16 / FP8 matrix-vector products) is launched
// programmatically where the decode kernels are, unless DUET_ACT_ROWS_PDL=0 (A/B knob, read once).
bool act_rows_pdl() {
  static const bool on = env_flag("DUET_ACT_ROWS_PDL", true);
  return on;
}

// Native FP8 prompts: the down product adds into the residual stream in cuBLASLt's epilogue
// (matmul_fp8_rows(.., accumulate)) instead of writing O for a separate add (ncu, qwen2-7b
// 512-token FP8 prompt: the add kernel took 9 us a layer). DUET_FP8_DOWN_ACC=0 turns it off
// (A/B knob, read once).
bool fp8_down_accumulates() {
  static const bool on = env_flag("DUET_FP8_DOWN_ACC", true);
  return on;
}

}  // namespace

struct CudaModel::Impl {
  ModelWeights w;  // host views (mapping kept alive for the lifetime of the model)
  CudaModelOptions opt;
  DeviceInfo dev;
  ArchTraits tr;
  GeluMode gelu = GeluMode::kExact;
  // The attention kernels take head_dim 64/128/256; other head dims (the tiny test models) are
  // zero-padded to the next of those: padded q and k dims add nothing to the scores, padded v
  // dims produce outputs that are dropped.
  int attn_hd = 0;
  DeviceBuffer qp, ap;
  cudaStream_t stream = nullptr;
  std::unique_ptr<MatmulContext> mm;

  DeviceWeight tok_embd, output_own;
  const DeviceMatrix* output = nullptr;
  DeviceBuffer output_norm, rope_freqs;
  std::vector<DeviceLayer> layers;
  uint64_t weight_bytes = 0, decode_bytes = 0, macs_per_token = 0;

  // Activation scratch for up to cap_tokens tokens, and cap_out logit rows.
  int cap_tokens = 0, cap_out = 0;
  DeviceBuffer x, xn, attn, o, gate, up, final_x, logits;
  DeviceBuffer qkv, gu;  // outputs of the fused products
  DeviceBuffer greedy_dev;  // forward_greedy's ids, [cap_out] int32
  PinnedInts greedy_host;
  int last_n_out = 0;  // output rows of the last forward (rows of `logits` last_logits may copy)
  DeviceBuffer attn_scratch;
  DeviceBuffer meta_dev;
  size_t meta_cap = 0;
  PinnedInts meta_host;

  // Decode graphs by (n_tokens, n_seqs, max_blocks, n_out, greedy).
  struct Graph {
    int seen = 0;  // the first step of a shape runs eagerly (kernels set their attributes then)
    cudaGraphExec_t exec = nullptr;
  };
  std::map<std::tuple<int, int, int, int, bool>, Graph> graphs;

  // DUET_CUDA_PROFILE=1: every forward runs eagerly with an event after each op; the time
  // between consecutive events is added to that op's total (profile_report()).
  bool profile = false;
  // Set by a layer's down product when it zeroed the next layer's q/k/v output (batches on the
  // quantized tensor-core kernel, layer_forward); read and cleared by that layer's norm.
  bool qkv_zeroed = false;
  // The same for the streaming decode kernel of F16 / BF16 / FP8 weights (qkv_streams).
  bool qkv_mv_zeroed = false;
  // Batches whose output product takes the F16 input (output_takes_f16): set by forward_body
  // before the layers; the last layer's down product then zeroes the logits rows (which the output
  // product adds into) and sets logits_zeroed, read and cleared by the final norm.
  bool zero_logits = false, logits_zeroed = false;
  // forward()'s per-batch host scratch, kept between calls (no allocation per decode step).
  std::vector<int32_t> seq_begin, seq_count;
  std::vector<std::pair<int, int>> output_runs;
  std::vector<cudaEvent_t> events;
  std::vector<const char*> event_names;
  size_t n_marks = 0;
  std::map<std::string, std::pair<double, int64_t>> op_ms;  // name -> (ms, launches)
  int64_t profiled_forwards = 0;
  void mark(const char* name) {
    if (!profile) return;
    if (n_marks == events.size()) {
      cudaEvent_t e;
      DUET_CUDA_CHECK(cudaEventCreate(&e));
      events.push_back(e);
      event_names.push_back(name);
    }
    event_names[n_marks] = name;
    DUET_CUDA_CHECK(cudaEventRecord(events[n_marks++], stream));
  }
  bool profile_paused = false;  // pause_profile(): forwards not added to op_ms (nor to step_stats)
  // DUET_CUDA_STEP_TIMES=1 (graphs kept): each decode graph replay is bracketed by two events, and
  // per batch size the replay's GPU time is summed beside the wall time of the whole forward call
  // (metadata upload, launch, read-back and synchronisation included): profile_report() prints
  // what a step spends outside its graph.
  bool step_times = false;
  cudaEvent_t step_ev[2] = {nullptr, nullptr};
  struct StepStat {
    int64_t steps = 0;
    double gpu_ms = 0, wall_ms = 0;
  };
  std::map<int, StepStat> step_stats;  // by n_tokens
  void collect_profile() {
    if (!profile || n_marks == 0) return;
    if (profile_paused) {
      n_marks = 0;
      return;
    }
    DUET_CUDA_CHECK(cudaEventSynchronize(events[n_marks - 1]));
    for (size_t i = 1; i < n_marks; ++i) {
      float ms = 0;
      DUET_CUDA_CHECK(cudaEventElapsedTime(&ms, events[i - 1], events[i]));
      auto& t = op_ms[event_names[i]];
      t.first += ms;
      ++t.second;
    }
    n_marks = 0;
    ++profiled_forwards;
  }

  ~Impl() {
    for (auto& [key, g] : graphs)
      if (g.exec) cudaGraphExecDestroy(g.exec);
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    for (cudaEvent_t e : step_ev)
      if (e) cudaEventDestroy(e);
    if (stream) cudaStreamDestroy(stream);
  }

  void drop_graphs() {
    for (auto& [key, g] : graphs)
      if (g.exec) DUET_CUDA_CHECK(cudaGraphExecDestroy(g.exec));
    graphs.clear();
  }

  void reserve_tokens(int n_tokens, int n_out) {
    const HParams& hp = w.hp;
    if (n_tokens <= cap_tokens && n_out <= cap_out) return;
    drop_graphs();  // graphs hold the old pointers
    cap_tokens = std::max(cap_tokens, n_tokens);
    cap_out = std::max(cap_out, n_out);
    const size_t n = static_cast<size_t>(cap_tokens), f = sizeof(float);
    const size_t d = hp.d_model, qd = size_t{hp.n_heads} * hp.head_dim, kvd = size_t{hp.n_kv_heads} * hp.head_dim;
    x.resize(n * d * f);
    xn.resize(n * d * f);
    attn.resize(n * qd * f);
    o.resize(n * d * f);
    gate.resize(n * hp.d_ff * f);
    up.resize(n * hp.d_ff * f);
    qkv.resize(n * (qd + 2 * kvd) * f);
    gu.resize(n * 2 * hp.d_ff * f);
    if (attn_hd != int(hp.head_dim)) {
      const size_t pq = n * hp.n_heads * attn_hd * f;
      for (auto [buf, bytes] : {std::pair{&qp, pq}, {&ap, pq}}) {
        buf->resize(bytes);
        DUET_CUDA_CHECK(cudaMemsetAsync(buf->data(), 0, bytes, stream));  // the pad columns stay zero
      }
    }
    final_x.resize(size_t(cap_out) * d * f);
    logits.resize(size_t(cap_out) * hp.vocab_size * f);
    greedy_dev.resize(size_t(cap_out) * sizeof(int32_t));
    greedy_host.reserve(size_t(cap_out));
    const int64_t max_cols = std::max<int64_t>({int64_t(d), int64_t(qd), int64_t(hp.d_ff)});
    const int64_t max_rows = std::max<int64_t>({int64_t(hp.vocab_size), int64_t(hp.d_ff), int64_t(qd), int64_t(d)});
    mm->reserve(std::max(cap_tokens, cap_out), max_cols, max_rows);
  }

  PagedKvCache kv_layer(uint32_t il) const {
    PagedKvCache c;
    c.dtype = opt.kv_dtype;
    c.k = layers[il].k_cache.data();
    c.v = layers[il].v_cache.data();
    c.kv_block_size = static_cast<int>(opt.kv_block_size);
    c.n_kv_heads = static_cast<int>(w.hp.n_kv_heads);
    c.head_dim = attn_hd;
    return c;
  }

  void layer_forward(uint32_t il, int n, const AttentionBatch& ab);
  // Whether layer il's norm writes the F16 input of its q/k/v products for n rows (batches on
  // the quantized tensor-core kernel), zeroing their output [n][q | k | v].
  bool qkv_takes_f16(uint32_t il, int n) const;
  // Whether layer il's fused q/k/v product of n rows runs on the streaming decode kernel of F16 /
  // BF16 / FP8 weights and so can add into an output zeroed by the previous layer's down product
  // (its columns then split between CTAs: MatmulContext::streams_decode; DUET_MV_ZERO).
  bool qkv_streams(uint32_t il, int n) const;
  // Whether an RMSNorm of n rows can write product m's F16 input (launch_rms_norm_f16's widths,
  // the quantized tensor-core kernel taking m; DUET_F16_PRODUCERS).
  bool norm_writes_f16(const DeviceMatrix& m, int n) const;
  // Whether the final norm writes the F16 input of the output product (batches on the quantized
  // tensor-core kernel where every token is an output row), so that no conversion launch runs
  // before it.
  bool output_takes_f16(int n, int n_out, const std::vector<std::pair<int, int>>& out_runs) const;
  // The forward pass, then (greedy) the argmax of each logits row into greedy_dev.
  void run_forward(int n, int n_out, const AttentionBatch& ab, const int32_t* tokens_dev,
                   const std::vector<std::pair<int, int>>& out_runs, bool greedy);
  void forward_body(int n, int n_out, const AttentionBatch& ab, const int32_t* tokens_dev,
                    const std::vector<std::pair<int, int>>& out_runs);
};

// DUET_DBG_SKIP (benchmarking only: the results are wrong): a comma-separated list of decode-layer
// launches to leave out, to measure what each costs inside the captured step (duet bench with and
// without it): attn_norm, ffn_norm, rope (q/k/v bias, RoPE and the K/V cache write), attention,
// activation, output (the final norm and the output product), argmax, zero (every side job that zeroes
// a product's output before the product adds into it). Read once; CudaModel's load
// warns when it is set.
constexpr unsigned kSkipAttnNorm = 1, kSkipFfnNorm = 2, kSkipRope = 4, kSkipAttention = 8, kSkipActivation = 16,
                   kSkipOutput = 32, kSkipArgmax = 64, kSkipZero = 128;
static unsigned dbg_skip_mask() {
  static const unsigned mask = [] {
    const char* e = std::getenv("DUET_DBG_SKIP");
    unsigned m = 0;
    std::string list = e ? e : "";
    size_t pos = 0;
    while (pos <= list.size() && !list.empty()) {
      const size_t end = std::min(list.find(',', pos), list.size());
      const std::string tok = list.substr(pos, end - pos);
      if (tok == "attn_norm") m |= kSkipAttnNorm;
      else if (tok == "ffn_norm") m |= kSkipFfnNorm;
      else if (tok == "rope") m |= kSkipRope;
      else if (tok == "attention") m |= kSkipAttention;
      else if (tok == "activation") m |= kSkipActivation;
      else if (tok == "output") m |= kSkipOutput;
      else if (tok == "argmax") m |= kSkipArgmax;
      else if (tok == "zero") m |= kSkipZero;
      pos = end + 1;
    }
    return m;
  }();
  return mask;
}

bool CudaModel::Impl::norm_writes_f16(const DeviceMatrix& m, int n) const {
  const int64_t d = w.hp.d_model;
  return f16_producers() && d > 1024 && d <= kRmsNormF16MaxCols && mm->takes_f16(m, n);
}

bool CudaModel::Impl::qkv_takes_f16(uint32_t il, int n) const {
  const DeviceLayer& L = layers[il];
  const int64_t d = w.hp.d_model;
  const bool qkv_q8 =
      d <= kRmsNormQ8MaxCols && every_qkv(L, [&](const DeviceMatrix& m) { return mm->takes_q8(m, n); });
  return !qkv_q8 && every_qkv(L, [&](const DeviceMatrix& m) { return norm_writes_f16(m, n); });
}

bool CudaModel::Impl::qkv_streams(uint32_t il, int n) const {
  const DeviceLayer& L = layers[il];
  return mv_zero() && L.fused_qkv && mm->streams_decode(L.wqkv.m, n) && !qkv_takes_f16(il, n);
}

bool CudaModel::Impl::output_takes_f16(int n, int n_out, const std::vector<std::pair<int, int>>& out_runs) const {
  return output_f16() && n_out == n && out_runs.size() == 1 && out_runs[0].first == 0 && out_runs[0].second == n &&
         norm_writes_f16(*output, n);
}

void CudaModel::Impl::layer_forward(uint32_t il, int n, const AttentionBatch& ab) {
  const HParams& hp = w.hp;
  const DeviceLayer& L = layers[il];
  const int64_t d = hp.d_model, hd = hp.head_dim, nh = hp.n_heads, nkv = hp.n_kv_heads;
  const int64_t qd = nh * hd, kvd = nkv * hd, ff = hp.d_ff;
  const bool swa = w.sliding[il] != 0;
  cudaStream_t s = stream;
  float *X = x.as<float>(), *XN = xn.as<float>();
  float *A = attn.as<float>(), *O = o.as<float>(), *G = gate.as<float>(), *U = up.as<float>();
  // Decode batches: producers (norms, the activation) write the int8 input of block-quantized
  // products directly (q8) where the matrix-vector kernels take them, and the o and down products
  // add into the residual stream (fuse_res; not where Gemma's post-norms sit between product and
  // residual), as they do in batches where both take the quantized tensor-core kernel (no
  // zeroing, no add launch).
  const bool pdl = mm->pdl();
  const MatmulContext::Q8Input q8 = mm->q8_input();
  const bool fuse_res = !tr.post_norms && mm->accumulates(L.wo.m, n) && mm->accumulates(L.w_down.m, n);
  auto product = [&](const DeviceMatrix& wm, bool from_q8, const float* xin, int64_t ldx, float* y, int64_t ldy,
                     bool accumulate) {
    if (from_q8) mm->matmul_q8(wm, n, y, ldy, s, accumulate);
    else mm->matmul(wm, xin, ldx, n, y, ldy, s, accumulate);
  };

  const bool norm_q8_ok = d <= kRmsNormQ8MaxCols;
  const bool qkv_q8 = norm_q8_ok && every_qkv(L, [&](const DeviceMatrix& m) { return mm->takes_q8(m, n); });
  // Native FP8 prompts: the norm writes the E4M3 rows of the fused q/k/v product's input.
  const bool qkv_fp8 = !qkv_q8 && L.fused_qkv && d > 1024 && d <= kRmsNormFp8MaxCols && fp8_norm_producer() &&
                       mm->takes_fp8_rows(L.wqkv.m, n);
  // Batches on the quantized tensor-core kernel: the norm writes the q/k/v products'
  // F16 input and zeroes their output rows (all of [q | k | v]), and the products add into them.
  const bool qkv_f16 = qkv_takes_f16(il, n);
  const bool qkv_prezeroed = qkv_zeroed;  // by the previous layer's down product
  qkv_zeroed = false;
  DUET_CHECK(!qkv_prezeroed || qkv_f16);
  const bool qkv_mv_prezeroed = qkv_mv_zeroed;  // by the previous layer's down product
  qkv_mv_zeroed = false;
  DUET_CHECK(!qkv_mv_prezeroed || (L.fused_qkv && !qkv_f16 && !qkv_q8));
  auto skip = [](unsigned bit) { return (dbg_skip_mask() & bit) != 0; };
  const bool no_zero = skip(kSkipZero);
  if (skip(kSkipAttnNorm)) {
  } else if (qkv_q8) {
    launch_rms_norm_q8(X, d, fptr(L.attn_norm), hp.rms_eps, d, n, q8.q, q8.m, pdl, s);
  } else if (qkv_f16) {
    const MatmulContext::F16Input h = mm->f16_input(L.fused_qkv ? L.wqkv.m : L.fused_qk ? L.wqk.m : L.wq.m);
    launch_rms_norm_f16(X, nullptr, fptr(L.attn_norm), hp.rms_eps, d, n, h.h, h.ld, qkv.as<float>(), qd + 2 * kvd,
                        qkv_prezeroed || no_zero ? 0 : qd + 2 * kvd, s, pdl);
  } else if (qkv_fp8) {
    const MatmulContext::Fp8RowsInput f8 = mm->fp8_rows_input(L.wqkv.m);
    launch_rms_norm_fp8_rows(X, nullptr, fptr(L.attn_norm), hp.rms_eps, d, n, f8.q, f8.ld, f8.scales, s, pdl);
  } else {
    launch_rms_norm(X, d, fptr(L.attn_norm), hp.rms_eps, d, n, XN, d, s, pdl);
  }
  mark("norm");
  // Q, K, V of token t: slices of one row of qkv (ld = qd + 2 kvd), from one, two or three products.
  const int64_t ldq = qd + 2 * kvd, ldkv = ldq;
  float* Q = qkv.as<float>();
  float* K = Q + qd;
  float* V = K + kvd;
  if (qkv_f16) {
    if (L.fused_qkv) {
      mm->matmul_f16(L.wqkv.m, n, Q, ldq, s);
    } else if (L.fused_qk) {
      mm->matmul_f16(L.wqk.m, n, Q, ldq, s);
      mm->matmul_f16(L.wv.m, n, V, ldq, s);
    } else {
      mm->matmul_f16(L.wq.m, n, Q, ldq, s);
      mm->matmul_f16(L.wk.m, n, K, ldq, s);
      mm->matmul_f16(L.wv.m, n, V, ldq, s);
    }
  } else if (L.fused_qkv) {
    if (!qkv_fp8 || !mm->matmul_fp8_rows(L.wqkv.m, n, Q, ldq, s)) {
      if (qkv_fp8) launch_rms_norm(X, d, fptr(L.attn_norm), hp.rms_eps, d, n, XN, d, s);  // cuBLASLt declined
      product(L.wqkv.m, qkv_q8, XN, d, Q, ldq, qkv_mv_prezeroed);
    }
  } else if (L.fused_qk) {  // one launch for both where the kernels allow (Q4_K_M: Q4_K [wq; wk], Q6_K wv)
    if (!qkv_q8 || !mm->matmul_q8_pair(L.wqk.m, Q, L.wv.m, V, ldq, n, s)) {
      product(L.wqk.m, qkv_q8, XN, d, Q, ldq, false);
      product(L.wv.m, qkv_q8, XN, d, V, ldq, false);
    }
  } else {
    product(L.wq.m, qkv_q8, XN, d, Q, ldq, false);
    product(L.wk.m, qkv_q8, XN, d, K, ldq, false);
    product(L.wv.m, qkv_q8, XN, d, V, ldq, false);
  }
  mark("matmul qkv");
  // Biases, q/k norms, RoPE, Q pre-scaling and the K/V cache writes: one launch. Q is rewritten in
  // place, or into the padded qp (heads of attn_hd floats) where attention needs a larger head.
  const PagedKvCache kv = kv_layer(il);
  const bool padded = attn_hd != hd;
  QkvRopeParams rp;
  rp.q = Q, rp.k = K, rp.v = V, rp.ldq = ldq, rp.ldk = ldkv, rp.ldv = ldkv;
  if (tr.qkv_bias) rp.bq = fptr(L.bq), rp.bk = fptr(L.bk), rp.bv = fptr(L.bv);
  if (tr.qk_norm) rp.q_norm = fptr(L.q_norm), rp.k_norm = fptr(L.k_norm);
  rp.eps = hp.rms_eps;
  rp.n_heads = int(nh);
  rp.head_dim = int(hd);
  rp.rope_base = swa ? hp.rope_theta_local : hp.rope_theta;
  rp.freq_factors = fptr(rope_freqs);
  rp.rope_style = w.rope_style;
  if (tr.q_prescale)  // gemma3
    rp.q_scale = 1.0f / std::sqrt(hp.query_pre_attn_scalar > 0 ? hp.query_pre_attn_scalar : float(hd));
  rp.q_out = padded ? qp.as<float>() : Q;
  rp.ldq_out = padded ? nh * attn_hd : ldq;
  rp.q_head_stride = padded ? attn_hd : int(hd);
  // Block-quantized o weights in decode batches: attention writes the product's int8 input
  // itself (the merge of split contexts quantizes; no quantizer launch of the product's own).
  const bool o_q8 = attention_writes_q8() && !padded && ab.max_seq_tokens <= 1 && mm->takes_q8(L.wo.m, n);
  // Decode batches on the quantized tensor-core kernel: attention writes the o
  // product's F16 input itself (no conversion launch before the product).
  const bool o_f16 = !o_q8 && fuse_res && attention_writes_f16() && !padded && ab.max_seq_tokens <= 1 &&
                     mm->takes_f16(L.wo.m, n);
  // Then this launch also requests the o product's weights into L2 (DUET_O_PREFETCH), since the
  // o product's blocks cannot be resident beside attention's to request them early themselves.
  if (o_prefetch() && o_f16) {
    rp.l2_prefetch = L.wo.m.data;
    rp.l2_prefetch_bytes = L.wo.m.n_rows * int64_t(L.wo.m.row_bytes);
  }
  if (!skip(kSkipRope)) launch_qkv_rope_cache(rp, kv, ab, pdl, s);
  mark("bias/qk-norm/rope/kv write");
  const float score_scale = tr.q_prescale ? 1.0f : 1.0f / std::sqrt(float(hd));
  const int window = swa && hp.sliding_window > 0 ? int(hp.sliding_window) : 0;
  if (skip(kSkipAttention)) {
  } else if (!padded) {
    // Decode attention is launched programmatically on sm_90 (attention.cu, use_decode_pdl).
    AttentionF16Out o16;
    if (o_f16) {
      const MatmulContext::F16Input h = mm->f16_input(L.wo.m);
      o16 = AttentionF16Out{h.h, h.ld};
    }
    launch_attention(kv, ab, Q, ldq, int(nh), score_scale, window, A, qd, s,
                     o_q8 ? AttentionQ8Out{q8.q, q8.m} : AttentionQ8Out{}, o16);
  } else {
    launch_attention(kv, ab, qp.as<float>(), nh * attn_hd, int(nh), score_scale, window, ap.as<float>(), nh * attn_hd, s);
    const size_t row = hd * sizeof(float), prow = attn_hd * sizeof(float);
    DUET_CUDA_CHECK(cudaMemcpy2DAsync(A, row, ap.data(), prow, row, size_t(n) * nh, cudaMemcpyDeviceToDevice, s));
  }
  mark("attention");

  bool ffn_q8 = false, gu_fp8 = false, gu_f16 = false, gu_mv_zeroed = false;
  const bool gu_takes_q8 = L.fused_gu ? mm->takes_q8(L.wgu.m, n) : mm->takes_q8(L.w_gate.m, n) && mm->takes_q8(L.w_up.m, n);
  if (fuse_res) {
    ffn_q8 = gu_takes_q8 && norm_q8_ok;
    // Tensor-core batches: the F16 input of the fused gate/up product, its output zeroed (by the
    // o product's grid where that runs on the same kernel, else by the norm).
    gu_f16 = !ffn_q8 && L.fused_gu && norm_writes_f16(L.wgu.m, n);
    const bool gu_zero_by_o = gu_f16 && o_f16 && mma_zeroes();
    // The streaming decode kernel (int8 inputs never, F16 inputs for FP8 weight-only batches): the
    // o product zeroes the gate/up output, which that product then adds into (DUET_MV_ZERO).
    gu_mv_zeroed = L.fused_gu && mv_zero() && mm->streams_decode(L.wo.m, n) && mm->streams_decode(L.wgu.m, n);
    // What the o product zeroes as its side job: the gate/up output, where gate/up adds into it.
    const bool o_zeroes_gu = (gu_mv_zeroed || gu_zero_by_o) && !no_zero;
    float* const gu_zero = o_zeroes_gu ? gu.as<float>() : nullptr;
    const int64_t gu_zero_n = o_zeroes_gu ? int64_t(n) * 2 * ff : 0;
    if (o_q8) mm->matmul_q8(L.wo.m, n, X, d, s, /*accumulate=*/true);  // x += o
    else if (o_f16) mm->matmul_f16(L.wo.m, n, X, d, s, gu_zero, gu_zero_n);  // x += o
    else mm->matmul(L.wo.m, A, qd, n, X, d, s, /*accumulate=*/true, gu_zero, gu_zero_n);
    mark("matmul o");
    if (skip(kSkipFfnNorm)) {
    } else if (ffn_q8) {
      launch_rms_norm_q8(X, d, fptr(L.ffn_norm), hp.rms_eps, d, n, q8.q, q8.m, pdl, s);
    } else if (gu_f16) {
      const MatmulContext::F16Input h = mm->f16_input(L.wgu.m);
      launch_rms_norm_f16(X, nullptr, fptr(L.ffn_norm), hp.rms_eps, d, n, h.h, h.ld, gu.as<float>(), 2 * ff,
                          gu_zero_by_o || no_zero ? 0 : 2 * ff, s, pdl);
    } else {
      launch_rms_norm(X, d, fptr(L.ffn_norm), hp.rms_eps, d, n, XN, d, s, pdl);
    }
  } else {
    if (o_q8) mm->matmul_q8(L.wo.m, n, O, d, s);
    else mm->matmul(L.wo.m, A, qd, n, O, d, s);
    mark("matmul o");
    if (tr.post_norms) launch_rms_norm(O, d, fptr(L.post_attn_norm), hp.rms_eps, d, n, O, d, s, pdl);
    gu_fp8 = L.fused_gu && d <= kRmsNormFp8MaxCols && fp8_norm_producer() && mm->takes_fp8_rows(L.wgu.m, n);
    if (gu_fp8) {  // x += o; the E4M3 rows of rms(x), the gate/up product's input (native FP8 prompts)
      const MatmulContext::Fp8RowsInput f8 = mm->fp8_rows_input(L.wgu.m);
      launch_rms_norm_fp8_rows(X, O, fptr(L.ffn_norm), hp.rms_eps, d, n, f8.q, f8.ld, f8.scales, s, pdl);
    } else {
      launch_add_rms_norm(X, O, fptr(L.ffn_norm), hp.rms_eps, d, n, XN, s, pdl);  // x += o; xn = rms(x)
    }
  }
  mark("norm");
  const float *gate_in = G, *up_in = U;
  int64_t ldi = ff;
  if (L.fused_gu) {
    float* GU = gu.as<float>();
    if (gu_f16) {
      mm->matmul_f16(L.wgu.m, n, GU, 2 * ff, s);
    } else if (!gu_fp8 || !mm->matmul_fp8_rows(L.wgu.m, n, GU, 2 * ff, s)) {
      if (gu_fp8) launch_rms_norm(X, d, fptr(L.ffn_norm), hp.rms_eps, d, n, XN, d, s);  // cuBLASLt declined; x has o
      product(L.wgu.m, ffn_q8, XN, d, GU, 2 * ff, gu_mv_zeroed);
    }
    gate_in = GU, up_in = GU + ff, ldi = 2 * ff;  // [gate | up] rows of each token
  } else {
    product(L.w_gate.m, ffn_q8, XN, d, G, ff, false);
    product(L.w_up.m, ffn_q8, XN, d, U, ff, false);
  }
  mark("matmul gate+up");
  const bool down_q8 = mm->takes_q8(L.w_down.m, n);
  // Tensor-core batches: the activation writes the down product's F16 input (the product then
  // adds into the residual stream).
  const bool down_f16 = !down_q8 && fuse_res && f16_producers() && mm->takes_f16(L.w_down.m, n);
  // Native FP8 prompts: the activation writes the E4M3 rows of the down product's input.
  const bool down_fp8 = !down_q8 && ff <= kGatedFp8MaxCols && mm->takes_fp8_rows(L.w_down.m, n);
  if (skip(kSkipActivation)) {
  } else if (down_q8) {
    launch_gated_activation_q8(tr.act, gelu, gate_in, up_in, ldi, n, ff, q8.q, q8.m, pdl, s);
  } else if (down_f16) {
    const MatmulContext::F16Input h = mm->f16_input(L.w_down.m);
    launch_gated_activation_f16(tr.act, gelu, gate_in, up_in, ldi, n, ff, h.h, h.ld, s, pdl && f16_act_pdl());
  } else if (down_fp8) {
    const MatmulContext::Fp8RowsInput f8 = mm->fp8_rows_input(L.w_down.m);
    launch_gated_activation_fp8_rows(tr.act, gelu, gate_in, up_in, ldi, n, ff, f8.q, f8.ld, f8.scales, s);
  } else {
    // Programmatic in decode (DUET_ACT_ROWS_PDL): the float rows of the F16 / BF16 / FP8
    // matrix-vector products.
    launch_gated_activation_rows(tr.act, gelu, gate_in, up_in, ldi, n, ff, G, ff, s, pdl && act_rows_pdl());
  }
  mark("activation");
  if (down_f16) {
    // The next layer's q/k/v output zeroed by this product's grid, as the o product zeroes the
    // gate/up output (DUET_MMA_ZERO); the last layer's zeroes the logits rows instead, where the
    // output product takes F16.
    qkv_zeroed = mma_zeroes() && il + 1 < hp.n_layers && qkv_takes_f16(il + 1, n);
    logits_zeroed = mma_zeroes() && il + 1 == hp.n_layers && zero_logits;
    float* zero = no_zero ? nullptr : qkv_zeroed ? qkv.as<float>() : logits_zeroed ? logits.as<float>() : nullptr;
    const int64_t zero_n = no_zero ? 0 : qkv_zeroed ? int64_t(n) * (qd + 2 * kvd) : logits_zeroed ? int64_t(n) * hp.vocab_size : 0;
    mm->matmul_f16(L.w_down.m, n, X, d, s, zero, zero_n);  // x += down
    mark("matmul down");
  } else if (fuse_res) {
    // The streaming decode kernel: the next layer's q/k/v output zeroed in the same launch.
    qkv_mv_zeroed = il + 1 < hp.n_layers && qkv_streams(il + 1, n) && mm->streams_decode(L.w_down.m, n);
    if (qkv_mv_zeroed)
      mm->matmul(L.w_down.m, G, ff, n, X, d, s, /*accumulate=*/true, no_zero ? nullptr : qkv.as<float>(),
                 no_zero ? 0 : int64_t(n) * (qd + 2 * kvd));
    else
      product(L.w_down.m, down_q8, G, ff, X, d, true);  // x += down
    mark("matmul down");
  } else if (down_fp8 && !tr.post_norms && fp8_down_accumulates() &&
             mm->matmul_fp8_rows(L.w_down.m, n, X, d, s, /*accumulate=*/true)) {
    mark("matmul down");  // x += down in the GEMM's epilogue: no O rows, no add launch
  } else {
    if (!down_fp8 || !mm->matmul_fp8_rows(L.w_down.m, n, O, d, s)) {
      if (down_fp8) launch_gated_activation_rows(tr.act, gelu, gate_in, up_in, ldi, n, ff, G, ff, s);
      product(L.w_down.m, down_q8, G, ff, O, d, false);
    }
    mark("matmul down");
    if (tr.post_norms) launch_rms_norm(O, d, fptr(L.post_ffn_norm), hp.rms_eps, d, n, O, d, s, pdl);
    launch_add(X, O, int64_t(n) * d, s);
    mark("norm");
  }
}

void CudaModel::Impl::run_forward(int n, int n_out, const AttentionBatch& ab, const int32_t* tokens_dev,
                                  const std::vector<std::pair<int, int>>& out_runs, bool greedy) {
  forward_body(n, n_out, ab, tokens_dev, out_runs);
  if (greedy && n_out > 0 && (dbg_skip_mask() & kSkipArgmax) == 0) {
    launch_argmax(logits.as<float>(), n_out, w.hp.vocab_size, greedy_dev.as<int32_t>(), stream);
    mark("argmax");
  }
}

void CudaModel::Impl::forward_body(int n, int n_out, const AttentionBatch& ab, const int32_t* tokens_dev,
                                   const std::vector<std::pair<int, int>>& out_runs) {
  const HParams& hp = w.hp;
  const int64_t d = hp.d_model;
  const float emb_scale = tr.embed_scale ? std::sqrt(static_cast<float>(d)) : 1.0f;
  mark("start");
  mm->get_rows(tok_embd.m, tokens_dev, n, emb_scale, x.as<float>(), stream);
  mark("embedding");
  const bool out_f16 = n_out > 0 && output_takes_f16(n, n_out, out_runs);
  zero_logits = out_f16;
  logits_zeroed = qkv_zeroed = qkv_mv_zeroed = false;
  for (uint32_t il = 0; il < hp.n_layers; ++il) layer_forward(il, n, ab);
  zero_logits = false;
  if (n_out == 0 || (dbg_skip_mask() & kSkipOutput) != 0) return;
  if (out_f16) {  // batches on the quantized tensor-core kernel: the norm writes the F16 input
    const MatmulContext::F16Input h = mm->f16_input(*output);
    launch_rms_norm_f16(x.as<float>(), nullptr, fptr(output_norm), hp.rms_eps, d, n, h.h, h.ld, logits.as<float>(),
                        hp.vocab_size, logits_zeroed || (dbg_skip_mask() & kSkipZero) ? 0 : hp.vocab_size, stream,
                        mm->pdl());
    logits_zeroed = false;
    mark("norm");
    mm->matmul_f16(*output, n, logits.as<float>(), hp.vocab_size, stream);
    mark("matmul output");
    return;
  }
  if (out_runs.size() == 1 && d <= kRmsNormQ8MaxCols && mm->takes_q8(*output, n_out)) {  // decode: the norm writes the int8 input
    const MatmulContext::Q8Input q8 = mm->q8_input();
    launch_rms_norm_q8(x.as<float>() + int64_t(out_runs[0].first) * d, d, fptr(output_norm), hp.rms_eps, d, n_out,
                       q8.q, q8.m, mm->pdl(), stream);
    mark("norm");
    mm->matmul_q8(*output, n_out, logits.as<float>(), hp.vocab_size, stream);
    mark("matmul output");
    return;
  }
  int row = 0;
  for (auto [first, count] : out_runs) {  // contiguous runs of output rows
    launch_rms_norm(x.as<float>() + int64_t(first) * d, d, fptr(output_norm), hp.rms_eps, d, count,
                    final_x.as<float>() + int64_t(row) * d, d, stream);
    row += count;
  }
  mark("norm");
  mm->matmul(*output, final_x.as<float>(), d, n_out, logits.as<float>(), hp.vocab_size, stream);
  mark("matmul output");
}

#ifdef DUET_CTA_TIMELINE  // the diagnostic build's per-CTA timelines (kernels/cuda/cta_timeline.h)
CudaModel::CudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) { kernels::cta_timeline_start(); }
CudaModel::~CudaModel() { kernels::cta_timeline_dump(); }
#else
CudaModel::CudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;
#endif

const HParams& CudaModel::hparams() const { return impl_->w.hp; }
uint32_t CudaModel::kv_block_size() const { return impl_->opt.kv_block_size; }
uint32_t CudaModel::n_kv_blocks() const { return impl_->opt.n_kv_blocks; }
uint32_t CudaModel::max_context() const { return impl_->opt.max_context; }
const DeviceInfo& CudaModel::device() const { return impl_->dev; }
Fp8Mode CudaModel::fp8_mode() const { return impl_->mm->fp8_mode(); }
uint64_t CudaModel::decode_weight_bytes() const { return impl_->decode_bytes; }
uint64_t CudaModel::matmul_macs_per_token() const { return impl_->macs_per_token; }

std::string CudaModel::device_name() const {
  const DeviceInfo& d = impl_->dev;
  return "cuda:" + std::to_string(d.ordinal) + " (" + d.name + ", sm_" + std::to_string(d.sm) + ", " +
         kernel_path_name(d.path) + " kernels)";
}

Result<std::unique_ptr<CudaModel>> CudaModel::load(const std::string& path, const CudaModelOptions& options) {
  DUET_ASSIGN_OR_RETURN(ModelWeights w, load_model_weights(path));
  return create(std::move(w), options);
}

Result<std::unique_ptr<CudaModel>> CudaModel::create(ModelWeights weights, const CudaModelOptions& options) {
  auto im = std::make_unique<Impl>();
  Impl& m = *im;
  m.opt = options;
  DUET_ASSIGN_OR_RETURN(m.dev, query_device(options.device));
  const HParams& hp = weights.hp;
  if (weights.sliding.size() != hp.n_layers) weights.sliding = default_sliding_layers(hp);  // not from the binders
  CudaModelOptions& opt = m.opt;
  if (opt.kv_dtype != DType::kF16 && opt.kv_dtype != DType::kF32) return invalid_argument("KV cache type must be F16 or F32");
  if (hp.head_dim > 256 || hp.head_dim % 2 != 0)
    return invalid_argument("head_dim " + std::to_string(hp.head_dim) + " not supported by the CUDA attention (even, <= 256)");
  m.attn_hd = hp.head_dim <= 64 ? 64 : hp.head_dim <= 128 ? 128 : 256;
  CacheGeometry g{opt.kv_block_size, opt.max_context, opt.max_seqs, opt.n_kv_blocks};
  DUET_RETURN_IF_ERROR(resolve_cache_geometry(hp, &g));
  opt.kv_block_size = g.kv_block_size, opt.max_context = g.max_context, opt.max_seqs = g.max_seqs, opt.n_kv_blocks = g.n_kv_blocks;
  if (opt.max_batch_tokens == 0) opt.max_batch_tokens = 512;
  const bool llamacpp = opt.numerics == Numerics::kLlamaCpp || (opt.numerics == Numerics::kAuto && weights.source == "gguf");
  m.gelu = llamacpp ? GeluMode::kF16Table : GeluMode::kExact;
  m.tr = traits_of(hp.arch);
  if (const char* p = std::getenv("DUET_CUDA_PROFILE"); p && *p && std::strcmp(p, "0") != 0) m.profile = true;
  if (env_flag("DUET_CUDA_STEP_TIMES", false)) {
    m.step_times = true;
    for (cudaEvent_t& e : m.step_ev) DUET_CUDA_CHECK(cudaEventCreate(&e));
  }

  // Memory plan: weights (as stored) + KV cache must fit in what the device has free.
  const uint64_t elem = opt.kv_dtype == DType::kF16 ? 2 : 4;
  const uint64_t kv_layer_bytes = uint64_t{opt.n_kv_blocks} * opt.kv_block_size * hp.n_kv_heads * m.attn_hd * elem;
  const uint64_t kv_bytes = kv_layer_bytes * 2 * hp.n_layers;
  uint64_t w_bytes = 0;
  auto mat_bytes = [](const WeightMatrix& wm) { return static_cast<uint64_t>(wm.n_rows) * wm.row_bytes; };
  for (const LayerWeights& L : weights.layers)
    for (const WeightMatrix* wm : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) w_bytes += mat_bytes(*wm);
  const bool tied = weights.output.data == weights.tok_embd.data;
  m.decode_bytes = w_bytes + mat_bytes(weights.output);
  w_bytes += mat_bytes(weights.tok_embd) + (tied ? 0 : mat_bytes(weights.output));
  m.weight_bytes = w_bytes;
  if (w_bytes + kv_bytes + (256ull << 20) > m.dev.free_bytes)
    return out_of_range("model needs " + std::to_string((w_bytes + kv_bytes) >> 20) + " MiB on " + m.dev.name +
                        " (weights " + std::to_string(w_bytes >> 20) + " MiB + KV cache " + std::to_string(kv_bytes >> 20) +
                        " MiB) but " + std::to_string(m.dev.free_bytes >> 20) + " MiB are free");
  {
    const int64_t qd = int64_t{hp.n_heads} * hp.head_dim, kvd = int64_t{hp.n_kv_heads} * hp.head_dim;
    m.macs_per_token = uint64_t(hp.n_layers) * (uint64_t(hp.d_model) * (qd + 2 * kvd) + uint64_t(qd) * hp.d_model +
                                                 3ull * hp.d_model * hp.d_ff) +
                       uint64_t(hp.d_model) * hp.vocab_size;
  }

  DUET_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  m.mm = std::make_unique<MatmulContext>(m.dev, opt.fp8);
  bool bf16_notice = false;
  auto up = [&](const WeightMatrix& wm, DeviceWeight* out) -> Status {
    if (wm.dtype == DType::kBF16 && !m.dev.use_bf16() && !bf16_notice) {
      std::fprintf(stderr, "duet: notice: BF16 weights run as F16 on %s (%s kernels)\n", m.dev.name.c_str(),
                   kernel_path_name(m.dev.path));
      bf16_notice = true;
    }
    DUET_ASSIGN_OR_RETURN(*out, upload_matrix(wm, m.dev, opt.fp8));
    return Status::ok();
  };
  DUET_RETURN_IF_ERROR(up(weights.tok_embd, &m.tok_embd));
  if (tied) {
    m.output = &m.tok_embd.m;
  } else {
    DUET_RETURN_IF_ERROR(up(weights.output, &m.output_own));
    m.output = &m.output_own.m;
  }
  m.output_norm = upload_floats(weights.output_norm);
  if (!weights.rope_freqs.empty()) m.rope_freqs = upload_floats(weights.rope_freqs);
  m.layers.resize(hp.n_layers);
  const char* nf = std::getenv("DUET_CUDA_NO_FUSE");  // for comparing fused and separate products
  const bool fuse = !(nf && *nf && std::strcmp(nf, "0") != 0);
  for (uint32_t il = 0; il < hp.n_layers; ++il) {
    const LayerWeights& L = weights.layers[il];
    DeviceLayer& D = m.layers[il];
    // The q/k/v outputs are rows of one buffer either way (launch_qkv_rope_cache takes strides).
    std::vector<uint8_t> stacked;
    std::vector<float> stacked_scales;
    std::optional<WeightMatrix> qkv, qk;
    if (fuse) qkv = stack_rows({&L.wq, &L.wk, &L.wv}, &stacked, &stacked_scales);
    if (fuse && !qkv) qk = stack_rows({&L.wq, &L.wk}, &stacked, &stacked_scales);
    if (qkv) {
      DUET_RETURN_IF_ERROR(up(*qkv, &D.wqkv));
      D.fused_qkv = true;
    } else if (qk) {
      DUET_RETURN_IF_ERROR(up(*qk, &D.wqk));
      DUET_RETURN_IF_ERROR(up(L.wv, &D.wv));
      D.fused_qk = true;
    } else {
      DUET_RETURN_IF_ERROR(up(L.wq, &D.wq));
      DUET_RETURN_IF_ERROR(up(L.wk, &D.wk));
      DUET_RETURN_IF_ERROR(up(L.wv, &D.wv));
    }
    DUET_RETURN_IF_ERROR(up(L.wo, &D.wo));
    std::optional<WeightMatrix> gu = fuse ? stack_rows({&L.w_gate, &L.w_up}, &stacked, &stacked_scales) : std::nullopt;
    if (gu) {
      DUET_RETURN_IF_ERROR(up(*gu, &D.wgu));
      D.fused_gu = true;
    } else {
      DUET_RETURN_IF_ERROR(up(L.w_gate, &D.w_gate));
      DUET_RETURN_IF_ERROR(up(L.w_up, &D.w_up));
    }
    DUET_RETURN_IF_ERROR(up(L.w_down, &D.w_down));
    D.attn_norm = upload_floats(L.attn_norm);
    D.ffn_norm = upload_floats(L.ffn_norm);
    D.post_attn_norm = upload_floats(L.post_attn_norm);
    D.post_ffn_norm = upload_floats(L.post_ffn_norm);
    D.q_norm = upload_floats(L.q_norm);
    D.k_norm = upload_floats(L.k_norm);
    D.bq = upload_floats(L.bq);
    D.bk = upload_floats(L.bk);
    D.bv = upload_floats(L.bv);
    D.k_cache.resize(kv_layer_bytes);
    D.v_cache.resize(kv_layer_bytes);
    DUET_CUDA_CHECK(cudaMemsetAsync(D.k_cache.data(), 0, kv_layer_bytes, m.stream));
    DUET_CUDA_CHECK(cudaMemsetAsync(D.v_cache.data(), 0, kv_layer_bytes, m.stream));
    if (opt.verbose) std::fprintf(stderr, "\rduet: uploading weights to %s: layer %u/%u", m.dev.name.c_str(), il + 1, hp.n_layers);
  }
  if (dbg_skip_mask() != 0)
    std::fprintf(stderr, "duet: warning: DUET_DBG_SKIP is set: decode steps leave kernels out, results are wrong\n");
  if (opt.verbose)
    std::fprintf(stderr, "\rduet: %s: weights %.1f MiB, KV cache %.1f MiB (%u blocks of %u tokens)          \n",
                 m.dev.name.c_str(), w_bytes / 1048576.0, kv_bytes / 1048576.0, opt.n_kv_blocks, opt.kv_block_size);
  m.w = std::move(weights);
  m.reserve_tokens(static_cast<int>(opt.max_batch_tokens), 1);
  DUET_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return std::unique_ptr<CudaModel>(new CudaModel(std::move(im)));
}

Status CudaModel::forward(const ForwardBatch& b, float* logits_out) { return run(b, logits_out, nullptr); }

Status CudaModel::forward_greedy(const ForwardBatch& b, int32_t* tokens) { return run(b, nullptr, tokens); }

// logits_out (host) or tokens (host, the argmax of each output row, computed on the device).
Status CudaModel::run(const ForwardBatch& b, float* logits_out, int32_t* tokens) {
  Impl& m = *impl_;
  // DUET_CUDA_STEP_TIMES only: the forward call's start, and whether a decode graph replay is
  // bracketed by m.step_ev.
  const auto wall0 = m.step_times ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  bool replayed = false;
  const bool greedy = tokens != nullptr;
  const HParams& hp = m.w.hp;
  DUET_RETURN_IF_ERROR(validate_forward_batch(b, hp.vocab_size, m.opt.kv_block_size, m.opt.n_kv_blocks));
  const int n = static_cast<int>(b.tokens.size());
  if (n == 0) return Status::ok();
  const int n_seqs = static_cast<int>(b.seqs.size());
  const int n_out = static_cast<int>(b.output_rows.size());

  // The GPU kernels take each sequence's tokens as one run of consecutive positions.
  std::vector<int32_t>& begin = m.seq_begin;
  std::vector<int32_t>& count = m.seq_count;
  begin.assign(n_seqs, -1);
  count.assign(n_seqs, 0);
  for (int t = 0; t < n; ++t) {
    const int sq = b.seq_ids[t];
    if (begin[sq] < 0) {
      begin[sq] = t;
    } else if (t == 0 || b.seq_ids[t - 1] != sq || b.positions[t] != b.positions[t - 1] + 1) {
      return invalid_argument("the CUDA backend needs each sequence's tokens contiguous in the batch with consecutive "
                              "positions (token " + std::to_string(t) + ", sequence " + std::to_string(sq) + ")");
    }
    ++count[sq];
  }
  int max_blocks = 1, max_seq_tokens = 0, max_kv_len = 0;
  for (const SeqKvView& s : b.seqs) max_blocks = std::max<int>(max_blocks, int(s.n_blocks));
  for (int sq = 0; sq < n_seqs; ++sq) max_seq_tokens = std::max(max_seq_tokens, count[sq]);
  for (int t = 0; t < n; ++t) max_kv_len = std::max(max_kv_len, b.positions[t] + 1);

  // Output rows as contiguous runs (one norm launch per run).
  std::vector<std::pair<int, int>>& runs = m.output_runs;
  runs.clear();
  for (int i = 0; i < n_out; ++i) {
    const int r = b.output_rows[i];
    if (!runs.empty() && runs.back().first + runs.back().second == r) ++runs.back().second;
    else runs.emplace_back(r, 1);
  }

  // Decode steps (one token per sequence) replay a graph; the attention grid is then sized for
  // the context bucket of the batch's longest context (decode_context_bucket), so one graph serves
  // every step of that shape until a context crosses into the next bucket. Output rows must then
  // be every token in order, and block tables are padded to the bucket's blocks, so that the
  // graph's shape stays fixed as contexts grow inside it.
  const bool all_rows = runs.size() == 1 && runs[0].first == 0 && runs[0].second == n;
  const bool decode = m.opt.cuda_graphs && !m.profile && max_seq_tokens == 1 && n <= 256 && all_rows;
  if (decode) {
    const int bs = int(m.opt.kv_block_size);
    const int bucket = decode_context_bucket(std::max(max_kv_len, max_blocks * bs), int(m.opt.max_context));
    max_blocks = std::max<int>(max_blocks, (bucket + bs - 1) / bs);
  }
  const int grid_kv_len = decode ? max_blocks * int(m.opt.kv_block_size) : max_kv_len;

  m.reserve_tokens(n, n_out);
  // One int32 upload: tokens, positions, seq_ids, seq begin, seq count, block tables, padding.
  const size_t off_tok = 0, off_pos = n, off_seq = 2 * size_t(n), off_beg = 3 * size_t(n), off_cnt = off_beg + n_seqs,
               off_bt = off_cnt + n_seqs, total = off_bt + size_t(n_seqs) * max_blocks;
  int32_t* h = m.meta_host.reserve(total);
  std::memcpy(h + off_tok, b.tokens.data(), n * sizeof(int32_t));
  std::memcpy(h + off_pos, b.positions.data(), n * sizeof(int32_t));
  std::memcpy(h + off_seq, b.seq_ids.data(), n * sizeof(int32_t));
  for (int sq = 0; sq < n_seqs; ++sq) {
    h[off_beg + sq] = std::max(begin[sq], 0);
    h[off_cnt + sq] = count[sq];
    int32_t* bt = h + off_bt + size_t(sq) * max_blocks;
    std::fill(bt, bt + max_blocks, 0);
    std::memcpy(bt, b.seqs[sq].blocks, b.seqs[sq].n_blocks * sizeof(int32_t));
  }
  if (total > m.meta_cap) {
    m.drop_graphs();
    m.meta_dev.resize(total * sizeof(int32_t));
    m.meta_cap = total;
  }
  const size_t scratch = attention_scratch_bytes(n, int(hp.n_heads), m.attn_hd, grid_kv_len);
  if (scratch > m.attn_scratch.bytes()) {
    m.drop_graphs();
    m.attn_scratch.resize(scratch);
  }
  DUET_CUDA_CHECK(cudaMemcpyAsync(m.meta_dev.data(), h, total * sizeof(int32_t), cudaMemcpyHostToDevice, m.stream));
  const int32_t* md = m.meta_dev.as<const int32_t>();
  AttentionBatch ab;
  ab.n_tokens = n;
  ab.n_seqs = n_seqs;
  ab.positions = md + off_pos;
  ab.seq_ids = md + off_seq;
  ab.block_tables = md + off_bt;
  ab.max_blocks = max_blocks;
  ab.max_seq_tokens = max_seq_tokens;
  ab.max_kv_len = grid_kv_len;
  ab.seq_token_begin = md + off_beg;
  ab.seq_n_tokens = md + off_cnt;
  ab.scratch = m.attn_scratch.data();
  ab.scratch_bytes = m.attn_scratch.bytes();

  if (decode) {
    Impl::Graph& gr = m.graphs[std::make_tuple(n, n_seqs, max_blocks, n_out, greedy)];
    if (gr.seen++ == 0) {
      m.run_forward(n, n_out, ab, md + off_tok, runs, greedy);
    } else {
      if (!gr.exec) {
        cudaGraph_t g = nullptr;
        DUET_CUDA_CHECK(cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeThreadLocal));
        m.run_forward(n, n_out, ab, md + off_tok, runs, greedy);
        DUET_CUDA_CHECK(cudaStreamEndCapture(m.stream, &g));
        DUET_CUDA_CHECK(cudaGraphInstantiateWithFlags(&gr.exec, g, 0));  // this form exists from CUDA 11.4 to 13
        DUET_CUDA_CHECK(cudaGraphDestroy(g));
      }
      replayed = m.step_times && !m.profile_paused;
      if (replayed) DUET_CUDA_CHECK(cudaEventRecord(m.step_ev[0], m.stream));
      DUET_CUDA_CHECK(cudaGraphLaunch(gr.exec, m.stream));
      if (replayed) DUET_CUDA_CHECK(cudaEventRecord(m.step_ev[1], m.stream));
    }
  } else {
    m.run_forward(n, n_out, ab, md + off_tok, runs, greedy);
  }
  int32_t* ids_host = greedy && n_out > 0 ? m.greedy_host.reserve(size_t(n_out)) : nullptr;
  if (n_out > 0 && greedy)
    DUET_CUDA_CHECK(cudaMemcpyAsync(ids_host, m.greedy_dev.data(), size_t(n_out) * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, m.stream));
  else if (n_out > 0)
    DUET_CUDA_CHECK(cudaMemcpyAsync(logits_out, m.logits.data(), size_t(n_out) * hp.vocab_size * sizeof(float),
                                    cudaMemcpyDeviceToHost, m.stream));
  DUET_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  if (ids_host != nullptr) std::memcpy(tokens, ids_host, size_t(n_out) * sizeof(int32_t));
  if (replayed) {
    float gpu_ms = 0;
    DUET_CUDA_CHECK(cudaEventElapsedTime(&gpu_ms, m.step_ev[0], m.step_ev[1]));
    Impl::StepStat& st = m.step_stats[n];
    ++st.steps;
    st.gpu_ms += gpu_ms;
    st.wall_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();
  }
  m.last_n_out = n_out;
  m.collect_profile();
  return Status::ok();
}

Status CudaModel::last_logits(int n_rows, float* out) const {
  const Impl& m = *impl_;
  if (n_rows < 0 || n_rows > m.last_n_out)
    return invalid_argument("last_logits: " + std::to_string(n_rows) + " rows asked, the last forward produced " +
                            std::to_string(m.last_n_out));
  if (n_rows == 0) return Status::ok();
  DUET_CUDA_CHECK(cudaMemcpy(out, m.logits.data(), size_t(n_rows) * m.w.hp.vocab_size * sizeof(float),
                             cudaMemcpyDeviceToHost));
  return Status::ok();
}

void CudaModel::pause_profile(bool paused) { impl_->profile_paused = paused; }

std::string CudaModel::profile_report() const {
  const Impl& m = *impl_;
  std::string steps;
  for (const auto& [n, st] : m.step_stats) {
    char line[200];
    std::snprintf(line, sizeof line,
                  "  %3d tokens: %6lld replays, graph %8.1f us, forward call %8.1f us, outside the graph %6.1f us\n", n,
                  static_cast<long long>(st.steps), 1e3 * st.gpu_ms / st.steps, 1e3 * st.wall_ms / st.steps,
                  1e3 * (st.wall_ms - st.gpu_ms) / st.steps);
    steps += line;
  }
  if (!steps.empty()) steps = "decode steps (DUET_CUDA_STEP_TIMES; means per step):\n" + steps;
  if (!m.profile || m.profiled_forwards == 0) return steps;
  double total = 0;
  for (const auto& [name, t] : m.op_ms) total += t.first;
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [name, t] : m.op_ms) rows.emplace_back(t.first, name);
  std::sort(rows.rbegin(), rows.rend());
  std::string out = steps + "GPU time by op over " + std::to_string(m.profiled_forwards) + " forwards (eager, DUET_CUDA_PROFILE):\n";
  char line[160];
  for (const auto& [ms, name] : rows) {
    std::snprintf(line, sizeof line, "  %-22s %10.3f ms %6.1f%%  %8.1f us/forward\n", name.c_str(), ms, 100 * ms / total,
                  1e3 * ms / m.profiled_forwards);
    out += line;
  }
  return out;
}

}  // namespace duet::cuda
