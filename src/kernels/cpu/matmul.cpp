// Matmul driver (see matmul.h): task = (job, tile of kRowTile weight rows); a task walks its rows
// against every token, kTokenTile tokens at a time, so the weight tile stays in L1/L2 while the
// tokens stream past it.
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "tensor/quantize.h"

namespace duet {
namespace {

constexpr int kTokenTile = 16;

int64_t fp8_group_cols(const WeightMatrix& w) { return w.fp8_block_cols > 0 ? w.fp8_block_cols : w.n_cols; }

float fp8_row_dot(const WeightMatrix& w, int64_t r, const float* x) {
  const float* scales = w.fp8_scales + (r / w.fp8_block_rows) * w.fp8_scale_cols;
  return vec_dot_fp8(w.n_cols, w.data + r * w.row_bytes, x, scales, fp8_group_cols(w));
}

}  // namespace

DotVariant dot_variant_for(const WeightMatrix& w, const RowBatching& b) {
  switch (w.dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      // tinyBLAS takes batches of >= 2 rows when the weight rows are a multiple of 4 and the
      // row length a multiple of its 8-float vector.
      return b.seq_rows >= 2 && w.n_rows % 4 == 0 && w.n_cols % 8 == 0 ? DotVariant::kTinyBlas : DotVariant::kVecDot;
    case DType::kQ4_K:
      // Repacked when the matrix has a multiple of 8 rows; rows in complete groups of four go
      // through the gemm kernel, the remainder through gemv.
      if (w.n_rows % 8 == 0)
        return b.seq_index < b.seq_rows - b.seq_rows % 4 ? DotVariant::kRepackGemm : DotVariant::kRepackGemv;
      return b.seq_rows >= 8 ? DotVariant::kTiled : DotVariant::kVecDot;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      // Not repacked on x86 AVX2; batches of >= 8 rows take the tiled K-quant matmul.
      return b.seq_rows >= 8 ? DotVariant::kTiled : DotVariant::kVecDot;
    default:
      return DotVariant::kVecDot;
  }
}

void quantize_rows(DType w, const float* x, int n_tokens, int64_t n_cols, size_t x_stride, QuantizedRows* out,
                   ThreadPool& pool) {
  const DType act = activation_type(w);
  auto rb = row_bytes(act, static_cast<uint64_t>(n_cols));
  DUET_CHECK_MSG(rb.has_value(), "row of %lld is not a multiple of the %s block", static_cast<long long>(n_cols),
                 std::string(dtype_name(act)).c_str());
  out->act = act;
  out->n_cols = n_cols;
  out->n_rows = n_tokens;
  out->row_bytes = *rb;
  if (out->data.size() < out->row_bytes * n_tokens) out->data.resize(out->row_bytes * n_tokens);
  const bool with_scales = act == DType::kQ8_0 || act == DType::kQ8_1;
  if (with_scales) {
    if (out->block_scales.size() < static_cast<size_t>(n_tokens) * (n_cols / 32) * 2)
      out->block_scales.resize(static_cast<size_t>(n_tokens) * (n_cols / 32) * 2);
  } else {
    out->block_scales.clear();
  }
  auto one = [&](int t) {
    uint8_t* row = out->data.data() + t * out->row_bytes;
    quantize_activation(w, x + static_cast<size_t>(t) * x_stride, row, n_cols);
    if (with_scales) activation_block_scales(act, row, n_cols, out->block_scales.data() + static_cast<size_t>(t) * (n_cols / 32) * 2);
  };
  if (n_tokens < 8) {
    for (int t = 0; t < n_tokens; ++t) one(t);
    return;
  }
  pool.run(n_tokens, [&](int t, int) { one(t); });
}

void matmul(std::span<const MatmulJob> jobs, ThreadPool& pool, std::span<const RowBatching> batching) {
  if (jobs.empty()) return;
  const int n_tokens = jobs[0].x->n_rows;
  // Row tile: enough tasks for load balance (>= 4 per thread), rows a multiple of 4.
  int64_t total_rows = 0;
  for (const MatmulJob& j : jobs) {
    DUET_CHECK_MSG(j.x->act == activation_type(j.w->dtype) && j.x->n_cols == j.w->n_cols && j.x->n_rows == n_tokens,
                   "matmul: activation %s x %lld (%d rows) does not fit weight %s %lld x %lld",
                   std::string(dtype_name(j.x->act)).c_str(), static_cast<long long>(j.x->n_cols), j.x->n_rows,
                   std::string(dtype_name(j.w->dtype)).c_str(), static_cast<long long>(j.w->n_rows),
                   static_cast<long long>(j.w->n_cols));
    total_rows += j.w->n_rows;
  }
  const int64_t want_tasks = static_cast<int64_t>(pool.n_threads()) * 8;
  int64_t row_tile = std::max<int64_t>(4, (total_rows + want_tasks - 1) / want_tasks);
  row_tile = std::min<int64_t>((row_tile + 3) / 4 * 4, 256);
  struct Task {
    int job;
    int64_t r0, r1;
  };
  std::vector<Task> tasks;
  for (size_t j = 0; j < jobs.size(); ++j)
    for (int64_t r = 0; r < jobs[j].w->n_rows; r += row_tile)
      tasks.push_back({static_cast<int>(j), r, std::min(r + row_tile, jobs[j].w->n_rows)});
  pool.run(static_cast<int>(tasks.size()), [&](int ti, int) {
    const Task& task = tasks[ti];
    const MatmulJob& job = jobs[task.job];
    const WeightMatrix& w = *job.w;
    const QuantizedRows& x = *job.x;
    if (w.dtype == DType::kF8_E4M3) {
      for (int64_t r = task.r0; r < task.r1; ++r)
        for (int t = 0; t < n_tokens; ++t)
          job.y[t * job.y_stride + r] = fp8_row_dot(w, r, reinterpret_cast<const float*>(x.row(t)));
      return;
    }
    // Kernel per token (the summation order llama.cpp would use for it); runs of up to
    // kMaxDotRows tokens with the same variant share one unpacking of each weight row.
    DotVariant variant[kTokenTile];
    for (int t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
      const int t1 = std::min(n_tokens, t0 + kTokenTile);
      for (int t = t0; t < t1; ++t)
        variant[t - t0] = batching.empty() ? DotVariant::kVecDot : dot_variant_for(w, batching[t]);
      for (int t = t0; t < t1;) {
        int e = t + 1;
        while (e < t1 && e - t < kMaxDotRows && variant[e - t0] == variant[t - t0]) ++e;
        const DotVariant v = variant[t - t0];
        const VecDotMultiFn multi = e - t > 1 ? vec_dot_multi_fn(w.dtype, v) : nullptr;
        if (multi) {
          const void* rows[kMaxDotRows];
          const float* scales[kMaxDotRows];
          float res[kMaxDotRows];
          for (int k = t; k < e; ++k) {
            rows[k - t] = x.row(k);
            scales[k - t] = x.scales(k);
          }
          for (int64_t r = task.r0; r < task.r1; ++r) {
            multi(w.n_cols, w.data + r * w.row_bytes, rows, scales, e - t, res);
            for (int k = t; k < e; ++k) job.y[k * job.y_stride + r] = res[k - t];
          }
        } else {
          const VecDotFn dot = vec_dot_fn(w.dtype, v);
          for (int64_t r = task.r0; r < task.r1; ++r) {
            const uint8_t* wr = w.data + r * w.row_bytes;
            for (int k = t; k < e; ++k) job.y[k * job.y_stride + r] = dot(w.n_cols, wr, x.row(k));
          }
        }
        t = e;
      }
    }
  });
}

void matmul_f32(const WeightMatrix& w, const float* x, int n_tokens, size_t x_stride, float* y, size_t y_stride,
                ThreadPool& pool) {
  QuantizedRows q;
  quantize_rows(w.dtype, x, n_tokens, w.n_cols, x_stride, &q, pool);
  MatmulJob job{&w, &q, y, y_stride};
  matmul(std::span<const MatmulJob>(&job, 1), pool);
}

void matmul_reference(const WeightMatrix& w, const QuantizedRows& x, float* y, size_t y_stride) {
  std::vector<float> wr(w.n_cols), xr(w.n_cols);
  for (int64_t r = 0; r < w.n_rows; ++r) {
    dequantize_row(w.dtype, w.data + r * w.row_bytes, wr.data(), w.n_cols);
    if (w.dtype == DType::kF8_E4M3)
      for (int64_t c = 0; c < w.n_cols; ++c)
        wr[c] *= w.fp8_scales[(r / w.fp8_block_rows) * w.fp8_scale_cols + c / fp8_group_cols(w)];
    for (int t = 0; t < x.n_rows; ++t) {
      dequantize_row(x.act, x.row(t), xr.data(), w.n_cols);
      double s = 0;
      for (int64_t c = 0; c < w.n_cols; ++c) s += static_cast<double>(wr[c]) * xr[c];
      y[t * y_stride + r] = static_cast<float>(s);
    }
  }
}

}  // namespace duet
