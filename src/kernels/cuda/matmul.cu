// matmul.h: uploading weight matrices into the device layouts of quant_types.cuh, and the
// MatmulContext that picks a path per call: decode kernels for n_tokens <= 8 (quant_matvec.cu;
// matvec_mma.cu for FP8, and F16/BF16 from 2 rows, on sm_80+), the quantized MMA kernel for 2-64
// rows of K-quant / Q8_0 weights on sm_80+ (quant_mma.cu), otherwise cuBLAS GEMMs on F16/BF16
// (weights dequantized into a workspace in row chunks), F32 (TF32 on the native path), or cuBLASLt FP8 (E4M3 x E4M3, per-token
// activation and per-tensor or per-row weight scales).
// Host code; everything it launches goes on the caller's stream.
#include "kernels/cuda/matmul.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/env.h"
#include "kernels/cuda/matvec_mma.h"
#include "kernels/cuda/quant_kernels.cuh"
#include "kernels/cuda/quant_mma.h"
#include "runtime/cuda_check.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace duet::cuda {
namespace {

constexpr size_t kBlasWorkspaceBytes = 32u << 20;
constexpr size_t kLtWorkspaceBytes = 64u << 20;
constexpr int64_t kDequantCapElems = int64_t{128} << 20;  // F16 weight rows: at most 256 MiB

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Block-quantized types whose F16 d moves to region D (quant_types.cuh): A bytes and d offset.
bool split_layout(DType t, int* a_bytes, int* d_offset) {
  switch (t) {
    case DType::kQ4_0: *a_bytes = 16; *d_offset = 0; return true;
    case DType::kQ5_0: *a_bytes = 20; *d_offset = 0; return true;
    case DType::kQ8_0: *a_bytes = 32; *d_offset = 0; return true;
    case DType::kQ3_K: *a_bytes = 108; *d_offset = 108; return true;
    case DType::kQ6_K: *a_bytes = 208; *d_offset = 208; return true;
    default: return false;
  }
}

bool is_float_type(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF8_E4M3;
}

Status alloc(DeviceBuffer* b, size_t bytes, const char* what) {
  size_t free_b = 0, total_b = 0;
  DUET_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (bytes + (64u << 20) > free_b)
    return out_of_range(std::string("upload_matrix: ") + what + " needs " + std::to_string(bytes) +
                        " bytes, device has " + std::to_string(free_b) + " free");
  b->resize(bytes);
  return Status::ok();
}

bool fp8_row_scales_only(const DeviceMatrix& w) { return w.fp8_block_cols >= w.n_cols; }

// DUET_MATMUL_MMA=0: batches of 9-64 rows take the dequantize + cuBLAS path and batches of 2-8
// rows the matrix-vector kernels (benchmark knob).
bool mma_disabled() { return !env_flag("DUET_MATMUL_MMA", true); }

// The fewest rows of a batch that the quantized tensor-core kernel takes: kMmaMinTokens, or
// DUET_MMA_MIN_TOKENS (MatmulContext::mma_min_tokens). H200, qwen2-7b Q4_K_M (2026-12-01, same
// run, two rounds), decode step of 2 / 4 / 8 sequences at 128 keys: 2.41 / 2.48 / 2.56 ms from 2
// rows on, against 2.95 / 4.35-4.40 / 7.48-7.50 with the matrix-vector kernels up to 8 rows (9);
// one and 16-32 sequences unchanged. At 8 rows the int8 matrix-vector kernels reach 12-18% of HBM
// bandwidth on the 7B shapes.
constexpr int kMmaMinTokens = 2;

// DUET_MMA_ACC=0: the quantized tensor-core kernel's batches neither add into y (the residual
// add then runs apart) nor have the input's conversion zero y (a memset does, in the kernel's
// launcher): the path before both (A/B knob, read once). H200, qwen2-7b Q4_K_M 32-sequence
// step 4.41 / 4.42 ms against 4.60 / 4.59 with it off (2026-11-30, same run; 8-warp MMA CTAs,
// two to an SM, a configuration measured no faster and dropped).
bool mma_accumulates() {
  static const bool on = env_flag("DUET_MMA_ACC", true);
  return on;
}

// The quantized tensor-core kernel (batches of 2-64 rows) is launched programmatically where
// MatmulContext::pdl() allows, unless DUET_MMA_PDL=0 (A/B knob, read once).
bool mma_pdl_enabled() {
  static const bool on = env_flag("DUET_MMA_PDL", true);
  return on;
}

// The native FP8 GEMMs accumulate in cuBLASLt's fast mode (Hopper: partial sums promoted to
// float less often): qwen2-7b FP8 pp2048 55.0-55.7k tok/s against 51.5-52.4k without, and the
// parity table's native FP8 bound (5e-2) holds (H200, 2026-11-30). DUET_LT_FAST_ACCUM=0: off.
bool fp8_fast_accum() {
  static const bool on = env_flag("DUET_LT_FAST_ACCUM", true);
  return on;
}

// Which float-type decode products the tensor-core decode kernel (matvec_mma.cu) takes, by
// DUET_MATVEC_MMA (benchmark knob, read once): unset or "all": FP8, F16 and BF16 at every row
// count; "2": F16/BF16 from 2 rows on; "fp8": FP8 only; "0": none (the float kernels of
// quant_matvec.cu). Measured on the H200 (2026-11-30, % of 4.3 TB/s, BF16 18944 x 3584, n = 1 / 2 /
// 4 / 8): float kernel 93.5 / 71.9 / 39.1 / 21.2, the classic tensor-core kernel 76.3 / 74.8 /
// 72.0 / 67.6; FP8 weight-only 54.3 / 46.1 / 28.3 / 11.4 against 66.5 / 65.5 / 62.7 / 55.5. Its
// streaming form with stream-K and the zero side jobs (since 2026-12-02) takes one row of BF16
// better in the whole model: qwen2-7b BF16 one-token step 4.185-4.189 ms against 4.493-4.494 with
// the float kernels, tg128 240.0-240.1 against 234.3 tok/s (H200, perf.md session 25).
// DUET_MATVEC_FP8_CVT=sw: the software E4M3 conversion even where the hardware has one.
// One-row F16/BF16 products of more than DUET_MATVEC_MMA_ROWS rows (default 65536: the output
// products of vocabulary size, e.g. FP8 files' BF16 lm_head) stay on the float kernels: FP8 decode
// was measured with its BF16 output product there (perf.md session 25, call 4), and the eager
// per-op profile of qwen2-7b BF16 put that product at 243.5 us on the float kernel against 272.9 on
// the streaming one (graph replays not measured yet).
enum class MmaDecodeSet { kNone, kFp8, kFromTwoRows, kAll };
int64_t mma_one_row_max_rows() {
  static const int64_t rows = [] {
    const char* e = std::getenv("DUET_MATVEC_MMA_ROWS");
    const long long v = e != nullptr ? std::atoll(e) : 0;
    return v > 0 ? static_cast<int64_t>(v) : int64_t{65536};
  }();
  return rows;
}
MmaDecodeSet mma_decode_set() {
  static const MmaDecodeSet set = [] {
    const char* e = std::getenv("DUET_MATVEC_MMA");
    if (e == nullptr || std::strcmp(e, "all") == 0) return MmaDecodeSet::kAll;
    if (std::strcmp(e, "fp8") == 0) return MmaDecodeSet::kFp8;
    if (std::strcmp(e, "2") == 0) return MmaDecodeSet::kFromTwoRows;
    return MmaDecodeSet::kNone;
  }();
  return set;
}
// Native FP8 decode's kernel: the E4M3 x E4M3 mma.sync kind where that is one FP8 tensor-core
// instruction (sm_89, sm_120+); on sm_90 / sm_100, where ptxas turns it into conversions of both
// operands and F16 HMMA (40 conversions and 8 HMMA a 2 KB warp chunk against the weight-only
// kind's 32 + 8 packs and 8 HMMA, perf.md session 33), the weight-only kind (F16 activations,
// more exact too). Prompts keep cuBLASLt's FP8 GEMM. DUET_FP8_NATIVE_DECODE=e4m3 forces the E4M3
// kind on any FP8 card (for measuring it), =f16 the weight-only kind.
bool native_decode_e4m3(const DeviceInfo& dev) {
  static const int forced = [] {
    const char* e = std::getenv("DUET_FP8_NATIVE_DECODE");
    if (e == nullptr || *e == 0) return -1;
    if (std::strcmp(e, "e4m3") == 0) return 1;
    if (std::strcmp(e, "f16") == 0) return 0;
    std::fprintf(stderr, "duet: DUET_FP8_NATIVE_DECODE='%s' ignored (e4m3 or f16)\n", e);
    return -1;
  }();
  return forced >= 0 ? forced == 1 : dev.has_fp8_mma_sync;
}
bool fp8_soft_cvt_forced() {
  static const bool forced = [] {
    const char* e = std::getenv("DUET_MATVEC_FP8_CVT");
    return e != nullptr && std::strcmp(e, "sw") == 0;
  }();
  return forced;
}

}  // namespace

Result<DeviceWeight> upload_matrix(const WeightMatrix& w, const DeviceInfo& dev, Fp8Mode /*fp8*/) {
  const DType t = w.dtype;
  if (!kernels::is_block_quant(t) && !is_float_type(t))
    return unsupported("upload_matrix: no GPU matmul for weight type " + std::string(dtype_name(t)));
  if (w.data == nullptr || w.n_rows <= 0 || w.n_cols <= 0)
    return invalid_argument("upload_matrix: empty matrix (" + std::to_string(w.n_rows) + " x " +
                            std::to_string(w.n_cols) + ")");
  if (w.n_rows > (int64_t{1} << 31) - 1 || w.n_cols > (int64_t{1} << 31) - 1)
    return invalid_argument("upload_matrix: " + std::to_string(w.n_rows) + " x " + std::to_string(w.n_cols) +
                            " exceeds 2^31 - 1 rows or columns");
  const auto rb = row_bytes(t, static_cast<uint64_t>(w.n_cols));
  if (!rb)
    return invalid_argument("upload_matrix: " + std::to_string(w.n_cols) + " columns are not a multiple of the " +
                            std::string(dtype_name(t)) + " block (" + std::to_string(dtype_info(t).block_size) + ")");
  if (w.row_bytes < *rb)
    return invalid_argument("upload_matrix: row_bytes " + std::to_string(w.row_bytes) + " < " + std::to_string(*rb) +
                            " needed by " + std::to_string(w.n_cols) + " " + std::string(dtype_name(t)) + " values");
  const int64_t rows = w.n_rows, cols = w.n_cols;

  DeviceWeight out;
  out.m.dtype = t;
  out.m.n_rows = rows;
  out.m.n_cols = cols;

  if (kernels::is_block_quant(t)) {
    const size_t rbytes = *rb;
    out.m.row_bytes = rbytes;
    DUET_RETURN_IF_ERROR(alloc(&out.data, rbytes * rows, "weights"));
    int a_bytes = 0, d_off = 0;
    if (t == DType::kQ4_K) {  // the file's blocks with their qs reordered (repack_q4_K_for_gpu)
      const int64_t bytes = dtype_info(t).type_size, bpr = cols / dtype_info(t).block_size;
      std::vector<uint8_t> host(rbytes * rows);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < bpr; ++b)
          repack_q4_K_for_gpu(w.data + r * w.row_bytes + b * bytes,
                              host.data() + r * rbytes + b * bytes);
      DUET_CUDA_CHECK(
          cudaMemcpy(out.data.data(), host.data(), host.size(), cudaMemcpyHostToDevice));
    } else if (!split_layout(t, &a_bytes, &d_off)) {
      DUET_CUDA_CHECK(cudaMemcpy2D(out.data.data(), rbytes, w.data, w.row_bytes, rbytes, rows, cudaMemcpyHostToDevice));
    } else {
      // Region A (blocks without d, row after row), then region D (the d's in the same order).
      const int bytes = static_cast<int>(dtype_info(t).type_size);
      const int64_t bpr = cols / dtype_info(t).block_size;
      std::vector<uint8_t> host(rbytes * rows);
      uint8_t* a = host.data();
      uint8_t* d = host.data() + static_cast<size_t>(rows * bpr) * a_bytes;
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* src = w.data + r * w.row_bytes;
        for (int64_t b = 0; b < bpr; ++b, src += bytes, a += a_bytes, d += 2) {
          std::memcpy(d, src + d_off, 2);
          if (d_off == 0) std::memcpy(a, src + 2, a_bytes);
          else std::memcpy(a, src, a_bytes);
        }
      }
      DUET_CUDA_CHECK(cudaMemcpy(out.data.data(), host.data(), host.size(), cudaMemcpyHostToDevice));
    }
    out.m.data = out.data.data();
    return Result<DeviceWeight>(std::move(out));
  }

  // Plain float types: rows padded to 16 bytes with zeros; BF16 becomes F16 where BF16 is off.
  const bool to_f16 = t == DType::kBF16 && !dev.use_bf16();
  const DType dt = to_f16 ? DType::kF16 : t;
  const size_t es = dtype_info(dt).type_size;
  const size_t prow = static_cast<size_t>(round_up(static_cast<int64_t>(cols * es), 16));
  out.m.dtype = dt;
  out.m.row_bytes = prow;
  DUET_RETURN_IF_ERROR(alloc(&out.data, prow * rows, "weights"));
  DUET_CUDA_CHECK(cudaMemset(out.data.data(), 0, prow * rows));
  if (to_f16) {
    std::vector<uint16_t> host(static_cast<size_t>(cols) * rows);
    size_t overflow = 0;
    for (int64_t r = 0; r < rows; ++r)
      overflow += bf16_to_f16_n(w.data + r * w.row_bytes, host.data() + r * cols, static_cast<size_t>(cols));
    // A weight past F16's range would turn into an infinity and every output it touches into NaN:
    // refuse the file on this path instead of computing garbage.
    if (overflow > 0)
      return invalid_argument("BF16 matrix of " + std::to_string(rows) + " x " + std::to_string(cols) + " holds " +
                              std::to_string(overflow) + " weight(s) beyond F16's range (|w| > 65504), and this " +
                              "device runs BF16 weights as F16: run the model on the CPU (--device cpu) or on a " +
                              "card with BF16 (sm_80+, native kernels)");
    DUET_CUDA_CHECK(cudaMemcpy2D(out.data.data(), prow, host.data(), cols * 2, cols * 2, rows, cudaMemcpyHostToDevice));
  } else {
    DUET_CUDA_CHECK(cudaMemcpy2D(out.data.data(), prow, w.data, w.row_bytes, cols * es, rows, cudaMemcpyHostToDevice));
  }
  out.m.data = out.data.data();

  if (t == DType::kF8_E4M3) {
    if (w.fp8_scales == nullptr) return invalid_argument("upload_matrix: FP8 matrix without scales");
    const int64_t br = w.fp8_block_rows > 0 ? std::min(w.fp8_block_rows, rows) : rows;
    const int64_t bc = w.fp8_block_cols > 0 ? std::min(w.fp8_block_cols, cols) : cols;
    const int64_t need_cols = (cols + bc - 1) / bc;
    const int64_t sc_cols = w.fp8_scale_cols > 0 ? w.fp8_scale_cols : need_cols;
    if (sc_cols < need_cols)
      return invalid_argument("upload_matrix: FP8 scale_cols " + std::to_string(sc_cols) + " < " +
                              std::to_string(need_cols) + " blocks of " + std::to_string(bc) + " columns");
    if (bc < cols && bc % 16 != 0)
      return unsupported("upload_matrix: FP8 scale blocks of " + std::to_string(bc) +
                         " columns (the GPU kernels need a multiple of 16, or whole rows)");
    const int64_t sc_rows = (rows + br - 1) / br;
    const size_t n_scales = static_cast<size_t>(sc_rows * sc_cols);
    DUET_RETURN_IF_ERROR(alloc(&out.scales, n_scales * sizeof(float), "FP8 scales"));
    DUET_CUDA_CHECK(cudaMemcpy(out.scales.data(), w.fp8_scales, n_scales * sizeof(float), cudaMemcpyHostToDevice));
    out.m.fp8_scales = out.scales.as<float>();
    // Whole-row blocks are stored as one column block of n_cols, which the kernels rely on.
    out.m.fp8_block_rows = br;
    out.m.fp8_block_cols = bc >= cols ? cols : bc;
    out.m.fp8_scale_cols = sc_cols;
  }
  return Result<DeviceWeight>(std::move(out));
}

// --- MatmulContext ---

struct MatmulContext::Impl {
  DeviceInfo dev;
  Fp8Mode mode = Fp8Mode::kWeightOnly;
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  DeviceBuffer blas_ws, lt_ws;
  DeviceBuffer xq, xm, xs;  // decode activations (int8 + block meta, or staged float)
  DeviceBuffer xe, xes;     // FP8 decode activations staged for the streaming kernel (matvec_mma_stages)
  DeviceBuffer xh;          // prompt activations: F16 / BF16 / E4M3
  DeviceBuffer wdeq;        // F16 weight rows for the prompt GEMM
  // Device scalars, each 256 bytes apart (cuBLASLt wants aligned scale pointers): activation
  // amax, activation FP8 scale, and a constant 1.
  DeviceBuffer scalars;
  float* amax_ptr() const { return scalars.as<float>(); }
  float* xscale_ptr() const { return scalars.as<float>() + 64; }
  float* one_ptr() const { return scalars.as<float>() + 128; }
  int max_tokens = 0;
  int64_t max_cols = 0, max_rows = 0;
  int64_t wdeq_elems = 0;

  // One cuBLASLt FP8 product shape: C/D either float32 straight into y (kF32) or BF16 into the
  // wdeq workspace, converted into y afterwards (kBf16). Candidates from the heuristic are tried
  // in order at the first call; the first that runs is kept.
  enum class LtOut { kF32, kBf16 };
  // Where the FP8 scales go: none (applied afterwards), scalars for W and x, or one scale per
  // token of x (cuBLASLt's outer-vector mode) with one per row of W (kRowTok) or one for W
  // (kTensorTok).
  enum class LtScales { kNone, kScalar, kRowTok, kTensorTok };
  struct LtPlan {
    bool ok = false;
    int chosen = -1;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algos[8] = {};
    int n_algos = 0;
  };
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int, int>, LtPlan> plans;
  DeviceBuffer xscales;  // native FP8 prompt path: one activation scale per token
  bool outer_ran = false;  // a product with per-token activation scales (variant 0) has run
  // First FP8 cuBLASLt variant worth trying (see fp8_native); DUET_MATMUL_FP8_OUTER=0 starts at
  // 1, the per-tensor activation scale (benchmark knob).
  int lt_variant = [] {
    const char* e = std::getenv("DUET_MATMUL_FP8_OUTER");
    return e != nullptr && e[0] == '0' ? 1 : 0;
  }();

  ~Impl() {
    for (auto& [k, p] : plans) {
      if (p.op) cublasLtMatmulDescDestroy(p.op);
      if (p.a) cublasLtMatrixLayoutDestroy(p.a);
      if (p.b) cublasLtMatrixLayoutDestroy(p.b);
      if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    }
    if (lt) cublasLtDestroy(lt);
    if (blas) cublasDestroy(blas);
  }

  // Batches of mma_min_tokens()-64 rows of K-quant / Q8_0 weights on sm_80+ native paths: the
  // quantized tensor-core kernel (kernels/cuda/quant_mma.h), which can also add into y.
  bool takes_mma(const DeviceMatrix& w, int n) const {
    return dev.path == KernelPath::kNative && dev.sm >= 80 && n >= MatmulContext::mma_min_tokens() &&
           n <= kernels::kMmaMaxTokens && kernels::mma_supported(w.dtype) && !mma_disabled();
  }

  // FP8 weight-only decode batches (hardware E4M3 conversion, 2-8 rows) on the streaming kernel:
  // their F16 input, staged as the kernel reads it, can come from the producer (matmul_f16). Not
  // one row, which the kernel multiplies faster from float input (qwen2-7b weight-only on the
  // H200, session 24, two rounds: tg128 369.5 / 372.9 tok/s with the producers' F16, 368.6 /
  // 370.4 staged by a launch, 381.5 / 380.7 from float; the 8-sequence step 2.967-2.978 ms with
  // the producers', 2.988-3.009 by a launch, 3.150-3.156 from float).
  bool takes_staged_f16(const DeviceMatrix& w, int n) const {
    kernels::MatvecMmaKind kind;
    return w.dtype == DType::kF8_E4M3 && n >= kernels::matvec_mma_producers_min_tokens() &&
           n <= kernels::kDecodeMaxTokens && mma_decode_kind(w, n, &kind) && kind == kernels::MatvecMmaKind::kFp8Hw &&
           kernels::matvec_mma_producers_stage();
  }

  // The tensor-core decode kernel for w (native path, sm_80+), or false: the float kernels.
  bool mma_decode_kind(const DeviceMatrix& w, int n, kernels::MatvecMmaKind* kind) const {
    using K = kernels::MatvecMmaKind;
    const MmaDecodeSet set = mma_decode_set();
    if (set == MmaDecodeSet::kNone || dev.path != KernelPath::kNative || dev.sm < 80) return false;
    switch (w.dtype) {
      case DType::kF8_E4M3:
        *kind = mode == Fp8Mode::kNative && dev.use_fp8() && native_decode_e4m3(dev) ? K::kFp8Native
                : dev.use_fp8() && !fp8_soft_cvt_forced() ? K::kFp8Hw
                                                          : K::kFp8Soft;
        break;
      case DType::kF16:
      case DType::kBF16:
        *kind = w.dtype == DType::kF16 ? K::kF16 : K::kBf16;
        if (set == MmaDecodeSet::kFp8 || (set == MmaDecodeSet::kFromTwoRows && n < 2)) return false;
        if (n < 2 && w.n_rows > mma_one_row_max_rows()) return false;
        break;
      default: return false;
    }
    return kernels::matvec_mma_fits(w, *kind);
  }

  // y [n][ldy] (float) = W x^T with W [rows][k] (ldw) and x [n][k] (ldx), both of type `ab`.
  void gemm(const void* w, cudaDataType ab, int64_t ldw, const void* x, int64_t ldx, int64_t rows, int n, int64_t k,
            float* y, int64_t ldy, cublasComputeType_t compute, cudaStream_t s) {
    const float alpha = 1.f, beta = 0.f;
    DUET_CUBLAS_CHECK(cublasSetStream(blas, s));
    DUET_CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), n, static_cast<int>(k),
                                   &alpha, w, ab, static_cast<int>(ldw), x, ab, static_cast<int>(ldx), &beta, y,
                                   CUDA_R_32F, static_cast<int>(ldy), compute, CUBLAS_GEMM_DEFAULT));
  }

  // Prompt path through F16: x -> F16, W dequantized row chunk by row chunk into wdeq.
  void dequant_gemm(const DeviceMatrix& w, const float* x, int64_t ldx, int n, float* y, int64_t ldy, cudaStream_t s) {
    const int64_t k = w.n_cols;
    const int64_t ldh = round_up(k, 16);
    kernels::launch_convert_act(x, ldx, n, k, xh.data(), ldh, false, s);
    const int64_t ldo = w.dtype == DType::kF8_E4M3 ? static_cast<int64_t>(w.row_bytes) : round_up(k, 8);
    // Equal row chunks, each a multiple of 128 rows (the GEMM tile) where the workspace allows.
    const int64_t cap = wdeq_elems / ldo;
    DUET_CHECK_MSG(cap > 0, "matmul: workspace holds no row of %lld columns (reserve())", (long long)k);
    const int64_t n_chunks = (w.n_rows + cap - 1) / cap;
    int64_t chunk_rows = round_up((w.n_rows + n_chunks - 1) / n_chunks, 128);
    if (chunk_rows > cap) chunk_rows = (w.n_rows + n_chunks - 1) / n_chunks;
    for (int64_t r0 = 0; r0 < w.n_rows; r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, w.n_rows - r0);
      kernels::launch_dequant_f16(w, r0, nr, wdeq.data(), ldo, s);
      gemm(wdeq.data(), CUDA_R_16F, ldo, xh.data(), ldh, nr, n, k, y + r0, ldy, CUBLAS_COMPUTE_32F, s);
    }
  }

  // accumulate only keys the plan apart (beta is a run-time scalar): a candidate that fails with
  // beta = 1 then cannot disable the plan the plain products use.
  LtPlan& fp8_plan(LtOut out, LtScales scales, int64_t rows, int n, int64_t kp, int64_t ldw, void* d, int64_t ldd,
                   bool accumulate = false) {
    const int64_t es = out == LtOut::kF32 ? 4 : 2;
    int align = 16;
    while (align > 2 && ((reinterpret_cast<uintptr_t>(d) % align) != 0 || (ldd * es) % align != 0)) align /= 2;
    auto key = std::make_tuple(rows, static_cast<int64_t>(n), kp, ldd, align,
                               (static_cast<int>(out) * 4 + static_cast<int>(scales)) * 2 + (accumulate ? 1 : 0));
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    LtPlan& p = plans[key];
    DUET_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    DUET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    DUET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (fp8_fast_accum()) {  // Hopper's FP8 "fast accumulation" (fewer promotions of the partial sums)
      const int8_t on = 1;
      DUET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &on, sizeof(on)));
    }
    if (scales != LtScales::kNone) {
      const float* one = one_ptr();
      DUET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &one, sizeof(one)));
      DUET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &one, sizeof(one)));
    }
    if (scales == LtScales::kRowTok || scales == LtScales::kTensorTok) {
#if CUBLAS_VERSION < 120900  // no per-vector scale modes before cuBLAS 12.9 (e.g. CUDA 11.8's)
      return p;  // ok stays false: fp8_native falls back to per-tensor activation scales
#else
      const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      const int32_t a_mode = scales == LtScales::kRowTok ? outer : CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
      if (cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)) !=
              CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer, sizeof(outer)) !=
              CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "duet: cuBLASLt has no outer-vector FP8 scales here\n");
        return p;  // ok stays false
      }
#endif
    }
    DUET_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, kp, rows, ldw));
    DUET_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, kp, n, kp));
    DUET_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out == LtOut::kF32 ? CUDA_R_32F : CUDA_R_16BF, rows, n, ldd));
    cublasLtMatmulPreference_t pref = nullptr;
    DUET_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = kLtWorkspaceBytes;
    DUET_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const uint32_t al = static_cast<uint32_t>(align);
    DUET_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof(al)));
    DUET_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof(al)));
    cublasLtMatmulHeuristicResult_t res[8] = {};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.c, p.c, pref, 8, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS)
      for (int i = 0; i < found; ++i)
        if (res[i].state == CUBLAS_STATUS_SUCCESS) p.algos[p.n_algos++] = res[i].algo;
    p.ok = p.n_algos > 0;
    if (!p.ok)
      std::fprintf(stderr, "duet: cuBLASLt FP8 heuristic (%s out) for %lld x %d x %lld: %s, %d results\n",
                   out == LtOut::kF32 ? "f32" : "bf16", (long long)rows, n, (long long)kp, cublasGetStatusString(st),
                   found);
    return p;
  }

  // Runs plan p (trying its candidates at the first call); false when none runs.
  bool lt_run(LtPlan& p, const char* what, const void* a, const void* b, void* d, const float* a_scale,
              const float* b_scale, cudaStream_t s, float beta = 0.f) {
    if (!p.ok) return false;
    if (a_scale) {  // null: the plan has no scale attributes (scales applied afterwards)
      DUET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
      DUET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
    }
    const float alpha = 1.f;
    auto run = [&](int i) {
      return cublasLtMatmul(lt, p.op, &alpha, a, p.a, b, p.b, &beta, d, p.c, d, p.c, &p.algos[i], lt_ws.data(),
                            kLtWorkspaceBytes, s);
    };
    const int first = p.chosen >= 0 ? p.chosen : 0;
    const int last = p.chosen >= 0 ? p.chosen + 1 : p.n_algos;
    cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = first; i < last; ++i) {
      st = run(i);
      if (st == CUBLAS_STATUS_SUCCESS) {
        p.chosen = i;
        return true;
      }
    }
    std::fprintf(stderr, "duet: cuBLASLt FP8 (%s out): %d candidates, none runs (%s)\n", what, p.n_algos,
                 cublasGetStatusString(st));
    p.ok = false;
    return false;
  }

  // The product on activations already quantized per row into xh / xscales (variant 0 only).
  bool fp8_rows(const DeviceMatrix& w, int n, float* y, int64_t ldy, cudaStream_t s, bool accumulate) {
    const int64_t kp = round_up(w.n_cols, 16);
    const bool per_tensor = w.fp8_block_rows >= w.n_rows;
    LtPlan& p = fp8_plan(LtOut::kF32, per_tensor ? LtScales::kTensorTok : LtScales::kRowTok, w.n_rows, n, kp,
                         static_cast<int64_t>(w.row_bytes), y, ldy, accumulate);
    return p.ok && lt_run(p, accumulate ? "f32, outer-vector scales, accumulating" : "f32, outer-vector scales", w.data,
                          xh.data(), y, w.fp8_scales, xscales.as<float>(), s, accumulate ? 1.f : 0.f);
  }

  // Native FP8 prompt path; false when cuBLASLt runs no kernel (the caller falls back). Tries, in
  // order: (0) x quantized per token row, the per-token and per-row (or per-tensor) scales inside
  // the GEMM (outer-vector scale mode), float32 out; then with one activation scale for the
  // batch: (1) float32 out with scale pointers, (2) float32 out without them (scales applied by
  // a second kernel), (3) BF16 out tiles with scale pointers. The first that runs is kept
  // (lt_variant).
  bool fp8_native(const DeviceMatrix& w, const float* x, int64_t ldx, int n, float* y, int64_t ldy, cudaStream_t s) {
    if (lt_variant < 0) return false;
    const int64_t kp = round_up(w.n_cols, 16);
    float* amax = amax_ptr();
    float* xscale = xscale_ptr();
    const bool per_tensor = w.fp8_block_rows >= w.n_rows;
    const float* a_scale = per_tensor ? w.fp8_scales : one_ptr();
    const float* row_scales = per_tensor ? nullptr : w.fp8_scales;
    const int64_t ldw = static_cast<int64_t>(w.row_bytes);
    const bool row_or_tensor = per_tensor || w.fp8_block_rows == 1;  // one scale per row or one in all
    bool tensor_quantized = false;
    bool v0_failed = false;  // variant 0 was tried and cuBLASLt ran nothing
    auto quantize_per_tensor = [&] {  // one activation scale for the whole batch (variants 1-3)
      if (tensor_quantized) return;
      DUET_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), s));
      kernels::launch_act_amax(x, ldx, n, w.n_cols, amax, s);
      kernels::launch_quantize_act_fp8(x, ldx, n, w.n_cols, amax, xh.as<uint8_t>(), kp, xscale, s);
      tensor_quantized = true;
    };
    for (int v = lt_variant; v < 4; ++v) {
      bool ok = false;
      if (v == 0) {
        // Per-token activation scales and per-row (or per-tensor) weight scales inside the GEMM:
        // one quantizing pass over x, no pass over y.
        if (!row_or_tensor) continue;
        const LtScales mode = per_tensor ? LtScales::kTensorTok : LtScales::kRowTok;
        LtPlan& p = fp8_plan(LtOut::kF32, mode, w.n_rows, n, kp, ldw, y, ldy);
        if (p.ok) {
          kernels::launch_quantize_act_fp8_rows(x, ldx, n, w.n_cols, xh.as<uint8_t>(), kp, xscales.as<float>(), s);
          ok = lt_run(p, "f32, outer-vector scales", w.data, xh.data(), y, w.fp8_scales, xscales.as<float>(), s);
        }
        v0_failed = !ok;
        outer_ran = outer_ran || ok;
      } else if (v == 1) {
        quantize_per_tensor();
        LtPlan& p = fp8_plan(LtOut::kF32, LtScales::kScalar, w.n_rows, n, kp, ldw, y, ldy);
        ok = lt_run(p, "f32", w.data, xh.data(), y, a_scale, xscale, s);
        if (ok && row_scales) kernels::launch_scale_rows(y, ldy, n, w.n_rows, row_scales, w.fp8_block_rows, nullptr, s);
      } else if (v == 2) {
        quantize_per_tensor();
        LtPlan& p = fp8_plan(LtOut::kF32, LtScales::kNone, w.n_rows, n, kp, ldw, y, ldy);
        ok = lt_run(p, "f32, unscaled", w.data, xh.data(), y, nullptr, nullptr, s);
        if (ok)
          kernels::launch_scale_rows(y, ldy, n, w.n_rows, w.fp8_scales, per_tensor ? w.n_rows : w.fp8_block_rows,
                                     xscale, s);
      } else {
        quantize_per_tensor();
        const int64_t chunk_rows = std::min<int64_t>(w.n_rows, wdeq_elems / n / 16 * 16);
        ok = chunk_rows > 0;
        for (int64_t r0 = 0; ok && r0 < w.n_rows; r0 += chunk_rows) {
          const int64_t nr = std::min(chunk_rows, w.n_rows - r0);
          LtPlan& q = fp8_plan(LtOut::kBf16, LtScales::kScalar, nr, n, kp, ldw, wdeq.data(), nr);
          ok = lt_run(q, "bf16", static_cast<const uint8_t*>(w.data) + r0 * ldw, xh.data(), wdeq.data(), a_scale,
                      xscale, s);
          if (ok)
            kernels::launch_store_rows_bf16(wdeq.data(), nr, n, nr, y + r0, ldy, row_scales, w.fp8_block_rows, r0, s);
        }
      }
      if (ok) {
        // Variant 0 is tried for every matrix until it fails once (a matrix with row blocks of > 1
        // row skips it); the later ones are fallbacks kept once one runs.
        if (v > 0 && lt_variant != v && (lt_variant > 0 || v0_failed)) {
          std::fprintf(stderr, "duet: cuBLASLt FP8 prompt path: variant %d\n", v);
          lt_variant = v;
        }
        return true;
      }
    }
    return false;
  }
};

MatmulContext::MatmulContext(const DeviceInfo& dev, Fp8Mode fp8) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.dev = dev;
  m.mode = fp8 == Fp8Mode::kWeightOnly ? Fp8Mode::kWeightOnly
                                       : (dev.use_fp8() ? Fp8Mode::kNative : Fp8Mode::kWeightOnly);
  DUET_CUDA_CHECK(cudaSetDevice(dev.ordinal));
  DUET_CUBLAS_CHECK(cublasCreate(&m.blas));
  DUET_CUBLAS_CHECK(cublasLtCreate(&m.lt));
  m.blas_ws.resize(kBlasWorkspaceBytes);
  // Our own workspace, so that cuBLAS never allocates while a graph is being captured.
  DUET_CUBLAS_CHECK(cublasSetWorkspace(m.blas, m.blas_ws.data(), kBlasWorkspaceBytes));
  if (m.mode == Fp8Mode::kNative) m.lt_ws.resize(kLtWorkspaceBytes);
  std::vector<float> init(192, 0.f);
  init[64] = init[128] = 1.f;
  m.scalars.resize(init.size() * sizeof(float));
  DUET_CUDA_CHECK(cudaMemcpy(m.scalars.data(), init.data(), init.size() * sizeof(float), cudaMemcpyHostToDevice));
}

MatmulContext::~MatmulContext() = default;

void MatmulContext::reserve(int max_tokens, int64_t max_cols, int64_t max_rows) {
  Impl& m = *impl_;
  DUET_CHECK(max_tokens >= 1 && max_cols >= 1 && max_rows >= 1);
  m.max_tokens = std::max(m.max_tokens, max_tokens);
  m.max_cols = std::max(m.max_cols, max_cols);
  m.max_rows = std::max(m.max_rows, max_rows);
  const int64_t kq = round_up(m.max_cols, 32), kp = round_up(m.max_cols, 16);
  const int nd = kernels::kDecodeMaxTokens;
  m.xq.reserve(static_cast<size_t>(nd * kq));
  m.xm.reserve(static_cast<size_t>(nd * (kq / 32)) * sizeof(float4));
  m.xs.reserve(static_cast<size_t>(nd * kp) * sizeof(float));
  const kernels::MatvecMmaStage st = kernels::matvec_mma_stage_size(static_cast<int>(nd), m.max_cols);
  if (st.xs_bytes > m.xe.bytes()) {  // zeroed once: the padding past the staged rows is read, never used
    m.xe.reserve(st.xs_bytes);
    m.xes.reserve(st.xsc_floats * sizeof(float));
    DUET_CUDA_CHECK(cudaMemset(m.xe.data(), 0, m.xe.bytes()));
    DUET_CUDA_CHECK(cudaMemset(m.xes.data(), 0, m.xes.bytes()));
  }
  if (m.max_tokens >= 2) m.xh.reserve(static_cast<size_t>(m.max_tokens) * kp * 2);  // F16 input of mma batches
  if (m.max_tokens > nd) {
    m.xscales.reserve(static_cast<size_t>(m.max_tokens) * sizeof(float));
    const int64_t want = std::min<int64_t>(m.max_rows, std::max<int64_t>(64, kDequantCapElems / kp)) * kp;
    if (want > m.wdeq_elems) {
      m.wdeq.reserve(static_cast<size_t>(want) * 2);
      m.wdeq_elems = want;
    }
  }
}

bool MatmulContext::pdl() const {  // programmatic dependent launch: Hopper's, so the native path only
  return impl_->dev.path == KernelPath::kNative && impl_->dev.sm >= 90;
}

bool MatmulContext::can_accumulate(int n_tokens) { return n_tokens >= 1 && n_tokens <= kernels::kDecodeMaxTokens; }

bool MatmulContext::accumulates(const DeviceMatrix& w, int n_tokens) const {
  if (impl_->takes_mma(w, n_tokens)) return mma_accumulates();
  return can_accumulate(n_tokens);
}

bool MatmulContext::takes_f16(const DeviceMatrix& w, int n_tokens) const {
  const Impl& m = *impl_;
  return n_tokens <= m.max_tokens && w.n_cols <= m.max_cols &&
         ((m.takes_mma(w, n_tokens) && mma_accumulates()) || m.takes_staged_f16(w, n_tokens));
}

// FP8 weight-only: the streaming kernel's staged F16 rows (64-column chunks: ld = n_cols rounded
// up to 64, launch_stage_act_mma's layout for kFp8Hw).
MatmulContext::F16Input MatmulContext::f16_input(const DeviceMatrix& w) const {
  if (w.dtype == DType::kF8_E4M3) return F16Input{impl_->xe.as<__half>(), round_up(w.n_cols, 64)};
  return F16Input{impl_->xh.as<__half>(), round_up(w.n_cols, 16)};
}

void MatmulContext::matmul_f16(const DeviceMatrix& w, int n_tokens, float* y, int64_t ldy, cudaStream_t stream,
                               float* zero, int64_t zero_n) {
  DUET_CHECK_MSG(takes_f16(w, n_tokens), "matmul_f16: no F16-input product for %d tokens of %s", n_tokens,
                 std::string(dtype_name(w.dtype)).c_str());
  if (w.dtype == DType::kF8_E4M3) {
    kernels::launch_matvec_mma_staged(w, kernels::MatvecMmaKind::kFp8Hw, impl_->xe.data(), nullptr, n_tokens, y, ldy,
                                      /*accumulate=*/true, pdl(), stream, zero, zero_n);
    return;
  }
  kernels::launch_matmul_mma(w, impl_->xh.as<__half>(), round_up(w.n_cols, 16), n_tokens, y, ldy, stream,
                             /*accumulate=*/true, pdl() && mma_pdl_enabled(), kernels::ZeroJob{zero, zero_n});
}

bool MatmulContext::takes_q8(const DeviceMatrix& w, int n_tokens) const {
  return can_accumulate(n_tokens) && kernels::is_block_quant(w.dtype) && w.n_cols % 32 == 0 &&
         !impl_->takes_mma(w, n_tokens);
}

// kMmaMinTokens, or DUET_MMA_MIN_TOKENS (2-9, read once; 9 is the earlier rule of matrix-vector
// kernels up to 8 rows; A/B knob).
int MatmulContext::mma_min_tokens() {
  static const int v = [] {
    const char* e = std::getenv("DUET_MMA_MIN_TOKENS");
    const int x = e && *e ? std::atoi(e) : kMmaMinTokens;
    return std::clamp(x, 2, kernels::kDecodeMaxTokens + 1);
  }();
  return v;
}

bool MatmulContext::takes_mma(const DeviceMatrix& w, int n_tokens) const {
  return impl_->takes_mma(w, n_tokens) && n_tokens <= impl_->max_tokens;
}

MatmulContext::Q8Input MatmulContext::q8_input() const {
  return Q8Input{impl_->xq.as<int8_t>(), impl_->xm.as<float4>()};
}

void MatmulContext::matmul_q8(const DeviceMatrix& w, int n_tokens, float* y, int64_t ldy, cudaStream_t stream,
                              bool accumulate) {
  Impl& m = *impl_;
  DUET_CHECK_MSG(takes_q8(w, n_tokens) && w.n_cols <= m.max_cols, "matmul_q8: %s x %d tokens has no int8 decode path",
                 dtype_name(w.dtype).data(), n_tokens);
  kernels::launch_matvec_q8(w, m.xq.as<int8_t>(), m.xm.as<float4>(), n_tokens, y, ldy, accumulate, pdl(), stream);
}

bool MatmulContext::matmul_q8_pair(const DeviceMatrix& w1, float* y1, const DeviceMatrix& w2, float* y2, int64_t ldy,
                                   int n_tokens, cudaStream_t stream) {
  Impl& m = *impl_;
  if (!takes_q8(w1, n_tokens) || !takes_q8(w2, n_tokens) || w1.n_cols > m.max_cols) return false;
  return kernels::launch_matvec_q8_pair(w1, y1, w2, y2, ldy, m.xq.as<int8_t>(), m.xm.as<float4>(), n_tokens, pdl(),
                                        stream);
}

bool MatmulContext::streams_decode(const DeviceMatrix& w, int n_tokens) const {
  kernels::MatvecMmaKind kind;
  return n_tokens >= 1 && n_tokens <= kernels::kDecodeMaxTokens && !kernels::is_block_quant(w.dtype) &&
         !impl_->takes_mma(w, n_tokens) && impl_->mma_decode_kind(w, n_tokens, &kind) && kernels::matvec_mma_zeroes();
}

void MatmulContext::matmul(const DeviceMatrix& w, const float* x, int64_t ldx, int n_tokens, float* y, int64_t ldy,
                           cudaStream_t stream, bool accumulate, float* zero, int64_t zero_n) {
  if (zero_n > 0 && !streams_decode(w, n_tokens)) {
    matmul(w, x, ldx, n_tokens, y, ldy, stream, accumulate);
    DUET_CUDA_CHECK(cudaMemsetAsync(zero, 0, static_cast<size_t>(zero_n) * sizeof(float), stream));
    return;
  }
  Impl& m = *impl_;
  DUET_CHECK_MSG(n_tokens >= 1 && n_tokens <= m.max_tokens && w.n_cols <= m.max_cols,
                 "matmul: %d tokens x %lld columns beyond reserve(%d, %lld)", n_tokens, (long long)w.n_cols,
                 m.max_tokens, (long long)m.max_cols);
  DUET_CHECK_MSG(!accumulate || accumulates(w, n_tokens), "matmul: no accumulating product for %d tokens of %s",
                 n_tokens, std::string(dtype_name(w.dtype)).c_str());
  const int64_t k = w.n_cols;
  if (n_tokens <= kernels::kDecodeMaxTokens && !m.takes_mma(w, n_tokens)) {
    const bool pdl_ok = pdl();
    if (kernels::is_block_quant(w.dtype)) {
      kernels::launch_quantize_act_q8(x, ldx, n_tokens, k, m.xq.as<int8_t>(), m.xm.as<float4>(), pdl_ok, stream);
      kernels::launch_matvec_q8(w, m.xq.as<int8_t>(), m.xm.as<float4>(), n_tokens, y, ldy, accumulate, pdl_ok, stream);
    } else {
      // x is read in place when its rows are 16-byte aligned and W's rows carry no padding (the
      // kernel reads row_bytes / element-size values of x); otherwise staged, zero-padded.
      const size_t es = dtype_info(w.dtype).type_size;
      const float* xr = x;
      int64_t ldr = ldx;
      if (static_cast<size_t>(k) * es != w.row_bytes || ldx % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) {
        ldr = round_up(k, 16);
        kernels::launch_stage_act_f32(x, ldx, n_tokens, k, m.xs.as<float>(), ldr, stream);
        xr = m.xs.as<float>();
      }
      kernels::MatvecMmaKind kind;
      if (!m.mma_decode_kind(w, n_tokens, &kind)) {
        kernels::launch_matvec_float(w, xr, ldr, n_tokens, y, ldy, m.dev.use_fp8(), accumulate, pdl_ok, stream);
      } else if (kernels::matvec_mma_stages(kind, n_tokens)) {
        kernels::launch_stage_act_mma(w, kind, xr, ldr, n_tokens, m.xe.data(), m.xes.as<float>(), pdl_ok, stream);
        kernels::launch_matvec_mma_staged(w, kind, m.xe.data(), m.xes.as<float>(), n_tokens, y, ldy, accumulate,
                                          pdl_ok, stream, zero, zero_n);
      } else {
        kernels::launch_matvec_mma(w, kind, xr, ldr, n_tokens, y, ldy, accumulate, pdl_ok, stream, zero, zero_n);
      }
    }
    return;
  }
  const bool native = m.dev.path == KernelPath::kNative;
  switch (w.dtype) {
    case DType::kF32:
      m.gemm(w.data, CUDA_R_32F, static_cast<int64_t>(w.row_bytes / 4), x, ldx, w.n_rows, n_tokens, k, y, ldy,
             native ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, stream);
      return;
    case DType::kF16:
    case DType::kBF16: {
      const bool bf16 = w.dtype == DType::kBF16;
      DUET_CHECK_MSG(!bf16 || m.dev.use_bf16(), "matmul: BF16 weights on a path without BF16 (upload converts them)");
      const int64_t ldh = round_up(k, 16);
      kernels::launch_convert_act(x, ldx, n_tokens, k, m.xh.data(), ldh, bf16, stream);
      m.gemm(w.data, bf16 ? CUDA_R_16BF : CUDA_R_16F, static_cast<int64_t>(w.row_bytes / 2), m.xh.data(), ldh,
             w.n_rows, n_tokens, k, y, ldy, CUBLAS_COMPUTE_32F, stream);
      return;
    }
    case DType::kF8_E4M3:
      if (m.mode == Fp8Mode::kNative && m.dev.use_fp8() && fp8_row_scales_only(w) &&
          m.fp8_native(w, x, ldx, n_tokens, y, ldy, stream))
        return;
      m.dequant_gemm(w, x, ldx, n_tokens, y, ldy, stream);
      return;
    default:
      // Batched decode (mma_min_tokens()-64 rows): the quantized tensor-core kernel reads the blocks directly,
      // where the dequantize-then-cuBLAS path would write and re-read an F16 copy of W each call.
      if (m.takes_mma(w, n_tokens)) {
        // The kernel adds into y: the input's conversion zeroes y first unless the caller adds
        // into it (one launch before the product, where a memset would be a second).
        const int64_t ldh = round_up(k, 16);
        const bool mma_pdl = pdl() && mma_pdl_enabled();
        if (!mma_accumulates()) {
          kernels::launch_convert_act(x, ldx, n_tokens, k, m.xh.data(), ldh, false, stream);
          kernels::launch_matmul_mma(w, m.xh.as<__half>(), ldh, n_tokens, y, ldy, stream, false, mma_pdl);
          return;
        }
        if (accumulate)
          kernels::launch_convert_act(x, ldx, n_tokens, k, m.xh.data(), ldh, false, stream);
        else
          kernels::launch_convert_act_zero(x, ldx, n_tokens, k, m.xh.as<__half>(), ldh, y, ldy, w.n_rows, stream);
        kernels::launch_matmul_mma(w, m.xh.as<__half>(), ldh, n_tokens, y, ldy, stream, /*accumulate=*/true, mma_pdl);
        return;
      }
      m.dequant_gemm(w, x, ldx, n_tokens, y, ldy, stream);
      return;
  }
}

void MatmulContext::get_rows(const DeviceMatrix& w, const int32_t* rows, int n, float scale, float* out,
                             cudaStream_t stream) {
  kernels::launch_get_rows(w, rows, n, scale, out, stream);
}

bool MatmulContext::takes_fp8_rows(const DeviceMatrix& w, int n_tokens) const {
  const Impl& m = *impl_;
  return w.dtype == DType::kF8_E4M3 && n_tokens > kernels::kDecodeMaxTokens && n_tokens <= m.max_tokens &&
         w.n_cols <= m.max_cols && m.mode == Fp8Mode::kNative && m.dev.use_fp8() && fp8_row_scales_only(w) &&
         (w.fp8_block_rows == 1 || w.fp8_block_rows >= w.n_rows) && m.lt_variant == 0 && m.outer_ran;
}

MatmulContext::Fp8RowsInput MatmulContext::fp8_rows_input(const DeviceMatrix& w) const {
  return Fp8RowsInput{impl_->xh.as<uint8_t>(), impl_->xscales.as<float>(), round_up(w.n_cols, 16)};
}

bool MatmulContext::matmul_fp8_rows(const DeviceMatrix& w, int n_tokens, float* y, int64_t ldy, cudaStream_t stream,
                                    bool accumulate) {
  DUET_CHECK_MSG(takes_fp8_rows(w, n_tokens), "matmul_fp8_rows: %s x %d tokens has no per-row FP8 path",
                 dtype_name(w.dtype).data(), n_tokens);
  return impl_->fp8_rows(w, n_tokens, y, ldy, stream, accumulate);
}

const DeviceInfo& MatmulContext::device() const { return impl_->dev; }

MatmulContext::DecodeInput MatmulContext::decode_input(const DeviceMatrix& w, int n_tokens) const {
  if (kernels::is_block_quant(w.dtype)) return impl_->takes_mma(w, n_tokens) ? DecodeInput::kF16 : DecodeInput::kInt8;
  kernels::MatvecMmaKind kind;
  if (!impl_->mma_decode_kind(w, n_tokens, &kind)) return DecodeInput::kFloat;
  switch (kind) {
    case kernels::MatvecMmaKind::kBf16: return DecodeInput::kBf16;
    case kernels::MatvecMmaKind::kFp8Native: return DecodeInput::kE4M3;
    default: return DecodeInput::kF16;
  }
}
Fp8Mode MatmulContext::fp8_mode() const { return impl_->mode; }

}  // namespace duet::cuda
