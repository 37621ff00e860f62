// The decoder forward pass for llama, qwen2, qwen3 and gemma3. The four share one layer
// function: their differences are a handful of switches (ArchTraits below), which keeps the
// numerics of the common path written once. Per layer:
//   x += Wo . attn(rope(norm_qk(Wq,k,v . rms(x) + b)))   [gemma: post-attention norm first]
//   x += Wd . (act(Wg . rms(x)) * Wu . rms(x))             [gemma: post-FFN norm first]
// Matmuls and attention run on the thread pool; per-token element-wise work is split by token.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "base/check.h"
#include "model/arch_traits.h"
#include "tensor/quantize.h"

namespace duet {

struct Model::Scratch {
  std::vector<float> x, xn, q, k, v, attn, o, gate, up;
  std::vector<float> cs_global, cs_local;  // n_tokens x head_dim rope (cos, sin) pairs
  std::vector<std::vector<float>> attn_scratch;  // per thread
  std::vector<float> final_x;
  std::vector<int32_t> seq_tokens;  // tokens of each sequence in the batch
  std::vector<RowBatching> batching;  // per token
  std::vector<RowBatching> out_batching;  // per output row
  std::map<DType, QuantizedRows> act;  // activation rows of the current matmul input, by type
  const float* act_src = nullptr;
};

Model::Model(ModelWeights w, const ModelOptions& opt, KvStore kv)
    : w_(std::move(w)), opt_(opt), kv_(std::move(kv)), pool_(std::make_unique<ThreadPool>(opt.n_threads)),
      s_(std::make_unique<Scratch>()) {
  const bool llamacpp = opt_.numerics == Numerics::kLlamaCpp || (opt_.numerics == Numerics::kAuto && w_.source == "gguf");
  gelu_mode_ = llamacpp ? GeluMode::kF16Table : GeluMode::kExact;
}

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelOptions& options) {
  DUET_ASSIGN_OR_RETURN(ModelWeights w, load_model_weights(path));
  return create(std::move(w), options);
}

Result<std::unique_ptr<Model>> Model::create(ModelWeights weights, const ModelOptions& options) {
  ModelOptions opt = options;
  const HParams& hp = weights.hp;
  if (weights.sliding.size() != hp.n_layers) weights.sliding = default_sliding_layers(hp);  // not from the binders
  CacheGeometry g{opt.kv_block_size, opt.max_context, opt.max_seqs, opt.n_kv_blocks};
  DUET_RETURN_IF_ERROR(resolve_cache_geometry(hp, &g));
  opt.kv_block_size = g.kv_block_size, opt.max_context = g.max_context, opt.max_seqs = g.max_seqs, opt.n_kv_blocks = g.n_kv_blocks;
  DUET_ASSIGN_OR_RETURN(KvStore kv, KvStore::create(hp.n_layers, hp.n_kv_heads, hp.head_dim, opt.kv_block_size,
                                                    opt.n_kv_blocks, opt.kv_dtype));
  return std::unique_ptr<Model>(new Model(std::move(weights), opt, std::move(kv)));
}

namespace {

// Quantizes `x` (n rows of the matrix's n_cols) for each distinct activation type of `ws` once.
void quantize_for(std::map<DType, QuantizedRows>& cache, std::initializer_list<const WeightMatrix*> ws, const float* x,
                  int n, ThreadPool& pool) {
  std::vector<DType> done;
  for (const WeightMatrix* w : ws) {
    const DType act = activation_type(w->dtype);
    if (std::find(done.begin(), done.end(), act) != done.end()) continue;
    done.push_back(act);
    quantize_rows(w->dtype, x, n, w->n_cols, static_cast<size_t>(w->n_cols), &cache[act], pool);
  }
}

MatmulJob job_for(std::map<DType, QuantizedRows>& cache, const WeightMatrix& w, float* y) {
  return MatmulJob{&w, &cache[activation_type(w.dtype)], y, static_cast<size_t>(w.n_rows)};
}

// Runs fn(t) for every token, on the pool when there are enough tokens to be worth it.
template <typename Fn>
void for_tokens(ThreadPool& pool, int n, Fn&& fn) {
  if (n < 4) {
    for (int t = 0; t < n; ++t) fn(t);
    return;
  }
  pool.run(n, [&](int t, int) { fn(t); });
}

}  // namespace

void Model::layer_forward(uint32_t il, const ForwardBatch& b) {
  const HParams& hp = w_.hp;
  const ArchTraits tr = traits_of(hp.arch);
  const LayerWeights& L = w_.layers[il];
  Scratch& s = *s_;
  ThreadPool& pool = *pool_;
  const int n = static_cast<int>(b.tokens.size());
  const int64_t d = hp.d_model, hd = hp.head_dim, nh = hp.n_heads, nkv = hp.n_kv_heads;
  const int64_t qd = nh * hd, kvd = nkv * hd, ff = hp.d_ff;
  const bool swa = w_.sliding[il] != 0;
  const std::vector<float>& cs = swa ? s.cs_local : s.cs_global;
  PagedKvLayer kv = kv_.layer(il);

  // Attention block.
  for_tokens(pool, n, [&](int t) { rms_norm(&s.x[t * d], d, L.attn_norm.data(), hp.rms_eps, d, 1, &s.xn[t * d], d); });
  quantize_for(s.act, {&L.wq, &L.wk, &L.wv}, s.xn.data(), n, pool);
  const MatmulJob qkv[] = {job_for(s.act, L.wq, s.q.data()), job_for(s.act, L.wk, s.k.data()), job_for(s.act, L.wv, s.v.data())};
  matmul(qkv, pool, s.batching);
  const float q_scale = tr.q_prescale ? 1.0f / std::sqrt(hp.query_pre_attn_scalar > 0 ? hp.query_pre_attn_scalar : static_cast<float>(hd)) : 1.0f;
  for_tokens(pool, n, [&](int t) {
    float* qt = &s.q[t * qd];
    float* kt = &s.k[t * kvd];
    float* vt = &s.v[t * kvd];
    if (tr.qkv_bias) {
      for (int64_t i = 0; i < qd; ++i) qt[i] += L.bq[i];
      for (int64_t i = 0; i < kvd; ++i) kt[i] += L.bk[i];
      for (int64_t i = 0; i < kvd; ++i) vt[i] += L.bv[i];
    }
    if (tr.qk_norm) {
      rms_norm(qt, hd, L.q_norm.data(), hp.rms_eps, hd, nh, qt, hd);
      rms_norm(kt, hd, L.k_norm.data(), hp.rms_eps, hd, nkv, kt, hd);
    }
    rope_apply(qt, nh, hd, &cs[t * hd], w_.rope_style);
    rope_apply(kt, nkv, hd, &cs[t * hd], w_.rope_style);
    if (q_scale != 1.0f)
      for (int64_t i = 0; i < qd; ++i) qt[i] *= q_scale;
    const SeqKvView& sv = b.seqs[b.seq_ids[t]];
    kv_write(kv, sv.blocks, b.positions[t], kt, vt);
  });

  // Attention: one task per (token, kv head) when that gives every thread work, else one per
  // (token, query head) so that a single decode token still spreads over the pool.
  const float score_scale = tr.q_prescale ? 1.0f : 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t group = nh / nkv;
  const bool by_kv = static_cast<int64_t>(n) * nkv >= 2 * pool.n_threads();
  const int64_t heads_per_task = by_kv ? group : 1;
  const int64_t tasks_per_token = nh / heads_per_task;
  int64_t max_keys = 0;
  for (int t = 0; t < n; ++t) max_keys = std::max<int64_t>(max_keys, b.positions[t] + 1);
  const size_t scratch_floats = attention_scratch_floats(hd, heads_per_task, max_keys);
  for (auto& v : s.attn_scratch)
    if (v.size() < scratch_floats) v.resize(scratch_floats);
  pool.run(static_cast<int>(n * tasks_per_token), [&](int task, int thread) {
    const int t = static_cast<int>(task / tasks_per_token);
    const int64_t h0 = (task % tasks_per_token) * heads_per_task;  // first query head
    const int64_t pos = b.positions[t];
    const int64_t k_begin = swa && hp.sliding_window > 0 ? std::max<int64_t>(0, pos - hp.sliding_window + 1) : 0;
    const SeqKvView& sv = b.seqs[b.seq_ids[t]];
    const AttnOrder order = s.seq_tokens[b.seq_ids[t]] > 1 ? AttnOrder::kBatch : AttnOrder::kSingle;
    attention_paged(kv, sv.blocks, h0 / group, k_begin, pos + 1, &s.q[t * qd + h0 * hd], heads_per_task, score_scale,
                    order, &s.attn[t * qd + h0 * hd], s.attn_scratch[thread].data());
  });

  quantize_for(s.act, {&L.wo}, s.attn.data(), n, pool);
  const MatmulJob oj[] = {job_for(s.act, L.wo, s.o.data())};
  matmul(oj, pool, s.batching);
  for_tokens(pool, n, [&](int t) {
    float* ot = &s.o[t * d];
    if (tr.post_norms) rms_norm(ot, d, L.post_attn_norm.data(), hp.rms_eps, d, 1, ot, d);
    add_f32(d, ot, &s.x[t * d]);
    rms_norm(&s.x[t * d], d, L.ffn_norm.data(), hp.rms_eps, d, 1, &s.xn[t * d], d);
  });

  // FFN block.
  quantize_for(s.act, {&L.w_gate, &L.w_up}, s.xn.data(), n, pool);
  const MatmulJob gu[] = {job_for(s.act, L.w_gate, s.gate.data()), job_for(s.act, L.w_up, s.up.data())};
  matmul(gu, pool, s.batching);
  for_tokens(pool, n, [&](int t) { gated_activation(tr.act, gelu_mode_, &s.gate[t * ff], &s.up[t * ff], &s.gate[t * ff], ff); });
  quantize_for(s.act, {&L.w_down}, s.gate.data(), n, pool);
  const MatmulJob dj[] = {job_for(s.act, L.w_down, s.o.data())};
  matmul(dj, pool, s.batching);
  for_tokens(pool, n, [&](int t) {
    float* ot = &s.o[t * d];
    if (tr.post_norms) rms_norm(ot, d, L.post_ffn_norm.data(), hp.rms_eps, d, 1, ot, d);
    add_f32(d, ot, &s.x[t * d]);
  });
}

Status Model::forward(const ForwardBatch& b, float* logits) {
  DUET_RETURN_IF_ERROR(validate_forward_batch(b, w_.hp.vocab_size, kv_.kv_block_size(), kv_.n_kv_blocks()));
  const int n = static_cast<int>(b.tokens.size());
  if (n == 0) return Status::ok();
  const HParams& hp = w_.hp;
  const ArchTraits tr = traits_of(hp.arch);
  Scratch& s = *s_;
  const int64_t d = hp.d_model, hd = hp.head_dim, qd = int64_t{hp.n_heads} * hd, kvd = int64_t{hp.n_kv_heads} * hd;
  auto fit = [](std::vector<float>& v, size_t sz) {
    if (v.size() < sz) v.resize(sz);
  };
  fit(s.x, n * d);
  fit(s.xn, n * d);
  fit(s.q, n * qd);
  fit(s.k, n * kvd);
  fit(s.v, n * kvd);
  fit(s.attn, n * qd);
  fit(s.o, n * d);
  fit(s.gate, n * int64_t{hp.d_ff});
  fit(s.up, n * int64_t{hp.d_ff});
  fit(s.cs_global, n * hd);
  fit(s.cs_local, n * hd);
  s.attn_scratch.resize(pool_->n_threads());
  s.seq_tokens.assign(b.seqs.size(), 0);
  s.batching.resize(n);
  for (int t = 0; t < n; ++t) s.batching[t].seq_index = s.seq_tokens[b.seq_ids[t]]++;
  for (int t = 0; t < n; ++t) s.batching[t].seq_rows = s.seq_tokens[b.seq_ids[t]];

  // Embeddings and RoPE tables.
  const float emb_scale = tr.embed_scale ? std::sqrt(static_cast<float>(d)) : 1.0f;
  const WeightMatrix& te = w_.tok_embd;
  const float* ff = w_.rope_freqs.empty() ? nullptr : w_.rope_freqs.data();
  for_tokens(*pool_, n, [&](int t) {
    float* xt = &s.x[t * d];
    dequantize_row(te.dtype, te.data + static_cast<size_t>(b.tokens[t]) * te.row_bytes, xt, d);
    if (emb_scale != 1.0f)
      for (int64_t i = 0; i < d; ++i) xt[i] *= emb_scale;
    rope_cache(b.positions[t], hp.rope_theta, hd, ff, &s.cs_global[t * hd]);
    if (hp.arch == Arch::kGemma3) rope_cache(b.positions[t], hp.rope_theta_local, hd, ff, &s.cs_local[t * hd]);
  });

  for (uint32_t il = 0; il < hp.n_layers; ++il) layer_forward(il, b);

  // Final norm and the output matrix for the requested rows only.
  const int n_out = static_cast<int>(b.output_rows.size());
  if (n_out == 0) return Status::ok();
  fit(s.final_x, n_out * d);
  for (int i = 0; i < n_out; ++i)
    rms_norm(&s.x[b.output_rows[i] * d], d, w_.output_norm.data(), hp.rms_eps, d, 1, &s.final_x[i * d], d);
  quantize_for(s.act, {&w_.output}, s.final_x.data(), n_out, *pool_);
  // llama.cpp multiplies only the output rows: they form the batch of this product.
  std::vector<int32_t> out_count(b.seqs.size(), 0);
  s.out_batching.resize(n_out);
  for (int i = 0; i < n_out; ++i) s.out_batching[i].seq_index = out_count[b.seq_ids[b.output_rows[i]]]++;
  for (int i = 0; i < n_out; ++i) s.out_batching[i].seq_rows = out_count[b.seq_ids[b.output_rows[i]]];
  const MatmulJob out[] = {MatmulJob{&w_.output, &s.act[activation_type(w_.output.dtype)], logits, hp.vocab_size}};
  matmul(out, *pool_, s.out_batching);
  return Status::ok();
}

}  // namespace duet
