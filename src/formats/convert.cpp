// Streaming conversion (see convert.h). Per tensor: the rows are cut into chunks of ~1M
// elements; a batch of chunks is read + quantized in parallel by worker threads, then written
// in order by this thread. Peak memory ~ 2 x n_threads chunks, whatever the model size.
#include "formats/convert.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "base/check.h"
#include "base/log.h"
#include "base/text.h"
#include "tensor/half.h"
#include "tensor/quantize.h"

namespace duet {
namespace {

int resolve_threads(int n) {
  if (n > 0) return n;
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? static_cast<int>(hc) : 1;
}

// Runs fn(i) for i in [0, n) on up to n_threads threads.
void parallel_for(int n, int n_threads, const std::function<void(int)>& fn) {
  if (n_threads <= 1 || n <= 1) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int> next{0};
  std::vector<std::thread> th;
  int k = std::min(n, n_threads);
  for (int t = 0; t < k; ++t)
    th.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  for (auto& x : th) x.join();
}

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Standard normal samples by the Box-Muller transform over a splitmix64 stream.
void fill_gaussian(uint64_t seed, float mean, float std, float* dst, uint64_t n) {
  uint64_t s = seed;
  for (uint64_t i = 0; i < n; i += 2) {
    double u1 = (static_cast<double>(splitmix64(s) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = static_cast<double>(splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
    double r = std::sqrt(-2.0 * std::log(u1));
    double a = 6.283185307179586 * u2;
    dst[i] = static_cast<float>(mean + std * r * std::cos(a));
    if (i + 1 < n) dst[i + 1] = static_cast<float>(mean + std * r * std::sin(a));
  }
}

// Reads element (row, col) span of a row-major HF tensor as floats.
void convert_span(DType t, const uint8_t* src, float* dst, uint64_t n) {
  dequantize_row(t, src, dst, static_cast<int64_t>(n));
}

}  // namespace

Result<TensorSourceSet> gguf_tensor_source(const std::string& path, std::shared_ptr<GgufFile>* file_out) {
  DUET_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> g, GgufFile::open(path));
  std::shared_ptr<GgufFile> file(std::move(g));
  TensorSourceSet set;
  for (const auto& ti : file->tensors()) {
    if (!can_dequantize(ti.dtype))
      return unsupported(path + ": tensor '" + ti.name + "' has type " + std::string(dtype_name(ti.dtype)) + ", which duet cannot convert");
    SourceTensor st;
    st.name = ti.name;
    st.shape = ti.shape;
    st.src_dtype = ti.dtype;
    const uint64_t rb = *row_bytes(ti.dtype, ti.shape[0]);
    const uint8_t* base = ti.data;
    const uint64_t ncols = ti.shape[0];
    const DType dt = ti.dtype;
    st.read_rows = [base, rb, ncols, dt](uint64_t r0, uint64_t n, float* dst) {
      for (uint64_t r = 0; r < n; ++r) dequantize_row(dt, base + (r0 + r) * rb, dst + r * ncols, ncols);
    };
    const GgufFile* gf = file.get();
    const uint64_t off = file->data_offset() + ti.offset, len = ti.n_bytes;
    st.release = [gf, off, len] {
      if (gf->mapping()) gf->mapping()->release(off, len);
    };
    set.tensors.push_back(std::move(st));
  }
  set.keep_alive.push_back(file);
  if (file_out) *file_out = file;
  return set;
}

namespace {

// Builds a row reader for a row-major 2-D (or 1-D) HF tensor, applying FP8 scales if present.
Result<std::function<void(uint64_t, uint64_t, float*)>> hf_row_reader(const SafetensorsModel& m,
                                                                      const SafetensorsTensor& t) {
  const uint64_t ncols = t.shape.empty() ? 1 : t.shape.back();
  const uint64_t esz = dtype_info(t.dtype).type_size;
  const uint8_t* base = t.data;
  const DType dt = t.dtype;
  if (!can_dequantize(dt)) return unsupported("tensor '" + printable(t.name) + "' has dtype " + std::string(dtype_name(dt)) + ", not a float type");
  if (dt != DType::kF8_E4M3) {
    return std::function<void(uint64_t, uint64_t, float*)>([=](uint64_t r0, uint64_t n, float* dst) {
      convert_span(dt, base + r0 * ncols * esz, dst, n * ncols);
    });
  }
  std::string stem = t.name.substr(0, t.name.size() - std::strlen("weight"));
  const Fp8Info& fp8 = m.fp8();
  const uint64_t nrows = t.shape.size() >= 2 ? t.shape[0] : 1;
  if (fp8.layout == Fp8ScaleLayout::kBlock) {
    const SafetensorsTensor* s = m.find(stem + "weight_scale_inv");
    if (!s) return invalid_argument("FP8 tensor '" + printable(t.name) + "' has no weight_scale_inv");
    const uint64_t br = fp8.block_rows, bc = fp8.block_cols;
    const uint64_t sr = (nrows + br - 1) / br, sc = (ncols + bc - 1) / bc;
    if (s->n_elements != sr * sc)
      return invalid_argument("'" + printable(s->name) + "' has " + std::to_string(s->n_elements) + " scales, expected " + std::to_string(sr * sc));
    std::shared_ptr<std::vector<float>> scales = std::make_shared<std::vector<float>>(s->n_elements);
    dequantize_row(s->dtype, s->data, scales->data(), static_cast<int64_t>(s->n_elements));
    return std::function<void(uint64_t, uint64_t, float*)>([=](uint64_t r0, uint64_t n, float* dst) {
      for (uint64_t r = 0; r < n; ++r) {
        const uint64_t row = r0 + r;
        for (uint64_t c = 0; c < ncols; ++c)
          dst[r * ncols + c] = fp8_e4m3_to_f32(base[row * ncols + c]) * (*scales)[(row / br) * sc + c / bc];
      }
    });
  }
  const SafetensorsTensor* s = m.find(stem + "weight_scale");
  if (!s) return invalid_argument("FP8 tensor '" + printable(t.name) + "' has no weight_scale");
  if (s->n_elements != 1 && s->n_elements != nrows)
    return invalid_argument("'" + printable(s->name) + "' has " + std::to_string(s->n_elements) + " scales, expected 1 or " + std::to_string(nrows));
  std::shared_ptr<std::vector<float>> scales = std::make_shared<std::vector<float>>(s->n_elements);
  dequantize_row(s->dtype, s->data, scales->data(), static_cast<int64_t>(s->n_elements));
  const bool per_row = s->n_elements == nrows && nrows > 1;
  return std::function<void(uint64_t, uint64_t, float*)>([=](uint64_t r0, uint64_t n, float* dst) {
    for (uint64_t r = 0; r < n; ++r) {
      const float sc = (*scales)[per_row ? r0 + r : 0];
      for (uint64_t c = 0; c < ncols; ++c) dst[r * ncols + c] = fp8_e4m3_to_f32(base[(r0 + r) * ncols + c]) * sc;
    }
  });
}

bool is_scale_tensor(const std::string& n) {
  return ends_with(n, ".weight_scale") || ends_with(n, ".weight_scale_inv") || ends_with(n, ".input_scale");
}

}  // namespace

Result<TensorSourceSet> safetensors_tensor_source_gguf_names(std::shared_ptr<SafetensorsModel> m, const HParams& hp) {
  TensorSourceSet set;
  for (const auto& t : m->tensors()) {
    if (is_scale_tensor(t.name)) continue;
    int permute_heads = 0;
    float shift = 0;
    auto name = gguf_name_from_hf(t.name, hp.arch, &permute_heads, hp, &shift);
    if (!name) {
      if (ends_with(t.name, "rotary_emb.inv_freq")) continue;
      return unsupported("tensor '" + printable(t.name) + "' has no GGUF counterpart for architecture " + arch_name(hp.arch));
    }
    if (t.shape.empty() || t.shape.size() > 2)
      return invalid_argument("tensor '" + printable(t.name) + "' has " + std::to_string(t.shape.size()) + " dims, expected 1 or 2");
    SourceTensor st;
    st.name = *name;
    st.shape.assign(t.shape.rbegin(), t.shape.rend());
    st.src_dtype = t.dtype;
    st.release = [mp = m.get(), &t] { mp->release(t); };
    DUET_ASSIGN_OR_RETURN(auto reader, hf_row_reader(*m, t));
    const uint64_t ncols = st.shape[0];
    const uint64_t nrows = st.n_rows();
    if (permute_heads > 0) {
      if (nrows % (2 * static_cast<uint64_t>(permute_heads)) != 0)
        return invalid_argument("tensor '" + printable(t.name) + "': " + std::to_string(nrows) + " rows do not split into " +
                                std::to_string(permute_heads) + " heads of even size");
      // GGML's RoPE rotates adjacent pairs; HF rotates halves. Output row (h, i, j) takes input
      // row (h, j, i) within each head of hd rows, half = hd / 2.
      const uint64_t hd = nrows / permute_heads, half = hd / 2;
      st.read_rows = [reader, hd, half, ncols](uint64_t r0, uint64_t n, float* dst) {
        for (uint64_t r = 0; r < n; ++r) {
          const uint64_t out = r0 + r, h = out / hd, w = out % hd, i = w / 2, j = w % 2;
          reader(h * hd + j * half + i, 1, dst + r * ncols);
        }
      };
    } else if (shift != 0.0f) {
      st.read_rows = [reader, shift, ncols](uint64_t r0, uint64_t n, float* dst) {
        reader(r0, n, dst);
        for (uint64_t k = 0; k < n * ncols; ++k) dst[k] += shift;
      };
    } else {
      st.read_rows = reader;
    }
    set.tensors.push_back(std::move(st));
  }
  // llama.cpp's file order: token_embd, then blocks in layer order, then output_norm/output.
  auto rank = [](const std::string& n) -> std::pair<int, long> {
    if (n == "token_embd.weight") return {0, 0};
    if (n.rfind("blk.", 0) == 0) return {1, std::strtol(n.c_str() + 4, nullptr, 10)};
    return {2, 0};
  };
  std::stable_sort(set.tensors.begin(), set.tensors.end(),
                   [&](const SourceTensor& a, const SourceTensor& b) { return rank(a.name) < rank(b.name); });
  set.keep_alive.push_back(m);
  return set;
}

Result<TensorSourceSet> safetensors_tensor_source_hf_names(std::shared_ptr<SafetensorsModel> m) {
  TensorSourceSet set;
  for (const auto& t : m->tensors()) {
    if (is_scale_tensor(t.name)) continue;
    SourceTensor st;
    st.name = t.name;
    st.shape.assign(t.shape.rbegin(), t.shape.rend());
    if (st.shape.empty()) st.shape = {1};
    st.src_dtype = t.dtype;
    st.release = [mp = m.get(), &t] { mp->release(t); };
    DUET_ASSIGN_OR_RETURN(st.read_rows, hf_row_reader(*m, t));
    set.tensors.push_back(std::move(st));
  }
  set.keep_alive.push_back(m);
  return set;
}

TensorSourceSet random_tensor_source(const HParams& hp, uint64_t seed, float std) {
  TensorSourceSet set;
  uint64_t idx = 0;
  for (const TensorDecl& d : arch_tensors(hp)) {
    SourceTensor st;
    st.name = d.name;
    st.shape = d.shape;
    st.src_dtype = DType::kF32;
    const uint64_t ncols = d.shape[0];
    const bool is_1d = d.shape.size() == 1;
    uint64_t tseed = seed ^ (0x632be59bd9b4e019ull * ++idx);
    st.read_rows = [tseed, ncols, is_1d, std](uint64_t r0, uint64_t n, float* dst) {
      for (uint64_t r = 0; r < n; ++r) {
        uint64_t s = tseed + (r0 + r) * 0x9e3779b97f4a7c15ull;
        fill_gaussian(splitmix64(s), is_1d ? 1.0f : 0.0f, std, dst + r * ncols, ncols);
      }
    };
    set.tensors.push_back(std::move(st));
  }
  return set;
}

namespace {

// Reads + converts one tensor in parallel chunks and hands each finished chunk (in order) to
// sink(bytes, n). out_row_bytes(ncols) gives the output size of one row.
Status stream_tensor(const SourceTensor& t, DType out, int n_threads,
                     const std::function<Status(const uint8_t*, uint64_t)>& sink,
                     const std::function<void(uint64_t)>& on_rows) {
  const uint64_t ncols = t.shape[0];
  const uint64_t nrows = t.n_rows();
  auto rb_opt = row_bytes(out, ncols);
  if (!rb_opt) return invalid_argument("tensor '" + printable(t.name) + "': row of " + std::to_string(ncols) + " is not a multiple of the " +
                                       std::string(dtype_name(out)) + " block size");
  const uint64_t rb = *rb_opt;
  const uint64_t chunk_rows = std::max<uint64_t>(1, (1u << 20) / std::max<uint64_t>(ncols, 1));
  const uint64_t n_chunks = (nrows + chunk_rows - 1) / chunk_rows;
  const int batch = std::max(1, n_threads * 2);
  std::vector<std::vector<float>> fbuf(batch);
  std::vector<std::vector<uint8_t>> qbuf(batch);
  std::vector<uint64_t> over(batch);  // F16 output: finite values past its range, per chunk
  for (uint64_t c0 = 0; c0 < n_chunks; c0 += batch) {
    const int nb = static_cast<int>(std::min<uint64_t>(batch, n_chunks - c0));
    parallel_for(nb, n_threads, [&](int k) {
      const uint64_t r0 = (c0 + k) * chunk_rows;
      const uint64_t nr = std::min(chunk_rows, nrows - r0);
      fbuf[k].resize(nr * ncols);
      qbuf[k].resize(nr * rb);
      t.read_rows(r0, nr, fbuf[k].data());
      over[k] = 0;
      if (out == DType::kF16)
        for (float v : fbuf[k]) over[k] += f16_overflows(v);
      for (uint64_t r = 0; r < nr; ++r)
        quantize_row(out, fbuf[k].data() + r * ncols, qbuf[k].data() + r * rb, static_cast<int64_t>(ncols));
    });
    uint64_t n_over = 0;
    for (int k = 0; k < nb; ++k) n_over += over[k];
    if (n_over > 0)
      return invalid_argument("tensor '" + printable(t.name) + "': " + std::to_string(n_over) +
                              " value(s) beyond F16's range (|x| > 65504) would become infinite in F16: choose "
                              "BF16 or F32 (or a quantized type) for this file");
    for (int k = 0; k < nb; ++k) {
      DUET_RETURN_IF_ERROR(sink(qbuf[k].data(), qbuf[k].size()));
      on_rows(std::min(chunk_rows, nrows - (c0 + k) * chunk_rows));
    }
  }
  return Status::ok();
}

}  // namespace

Status write_gguf(const TensorSourceSet& src, GgufWriter& w, FileType ft, const MixModelInfo& mix_in,
                  const std::string& out_path, const ConvertOptions& opt) {
  const int n_threads = resolve_threads(opt.n_threads);
  MixModelInfo mix = mix_in;
  int n_attn_v = 0;
  mix.has_output = false;
  for (const auto& t : src.tensors) {
    if (t.name.find("attn_v.weight") != std::string::npos || t.name.find("attn_qkv.weight") != std::string::npos) ++n_attn_v;
    if (t.name == "output.weight") mix.has_output = true;
  }
  QuantMixPlanner planner(ft, mix, n_attn_v);
  std::vector<DType> out_types;
  uint64_t total_elems = 0;
  for (const auto& t : src.tensors) {
    // Non-quantized tensors (norms, biases) are stored as F32, as llama.cpp's converter does.
    DType keep = DType::kF32;
    DType ty = planner.choose(t.name, t.shape, keep);
    out_types.push_back(ty);
    DUET_RETURN_IF_ERROR(w.add_tensor(t.name, ty, t.shape));
    total_elems += t.n_rows() * t.shape[0];
  }
  w.set("general.file_type", GgufValue::u32(static_cast<uint32_t>(ft)));
  w.set("general.quantization_version", GgufValue::u32(2));
  DUET_RETURN_IF_ERROR(w.open(out_path));
  Progress prog("writing " + out_path, total_elems, opt.quiet);
  uint64_t done = 0;
  for (size_t i = 0; i < src.tensors.size(); ++i) {
    const SourceTensor& t = src.tensors[i];
    Status st = stream_tensor(
        t, out_types[i], n_threads,
        [&](const uint8_t* p, uint64_t n) { return w.append_tensor(i, p, n); },
        [&](uint64_t rows) {
          done += rows * t.shape[0];
          prog.update(done, t.name);
        });
    if (!st.is_ok()) {
      std::remove(out_path.c_str());  // leave no half-written file behind
      return st;
    }
    if (t.release) t.release();
  }
  prog.finish();
  Status st = w.finish();
  if (!st.is_ok()) std::remove(out_path.c_str());
  return st;
}

nlohmann::json fp8_quantization_config(SafetensorsOutType type) {
  if (type == SafetensorsOutType::kFP8Block)
    return {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
  const char* strategy = type == SafetensorsOutType::kFP8PerChannel ? "channel" : "tensor";
  nlohmann::json weights = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", strategy}, {"dynamic", false}};
  nlohmann::json acts = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "token"}, {"dynamic", true}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", acts}}}}},
          {"ignore", {"lm_head"}}};
}

namespace {

bool is_fp8_target(const std::string& hf_name) {
  return hf_name.find("model.layers.") != std::string::npos && ends_with(hf_name, "_proj.weight");
}

}  // namespace

Status write_safetensors(const TensorSourceSet& src, SafetensorsOutType type, const std::string& out_file,
                         const ConvertOptions& opt) {
  const int n_threads = resolve_threads(opt.n_threads);
  SafetensorsWriter w;
  struct Plan {
    size_t src;
    bool fp8;
    bool scale;  // this entry is the scale tensor of src
  };
  std::vector<Plan> plan;
  uint64_t total_elems = 0;
  for (size_t i = 0; i < src.tensors.size(); ++i) {
    const SourceTensor& t = src.tensors[i];
    std::vector<uint64_t> hf_shape(t.shape.rbegin(), t.shape.rend());
    const bool fp8 = type != SafetensorsOutType::kBF16 && is_fp8_target(t.name) && t.shape.size() == 2;
    total_elems += t.n_rows() * t.shape[0];
    DUET_RETURN_IF_ERROR(w.add_tensor(t.name, fp8 ? DType::kF8_E4M3 : DType::kBF16, hf_shape));
    plan.push_back({i, fp8, false});
    if (!fp8) continue;
    const std::string stem = t.name.substr(0, t.name.size() - std::strlen("weight"));
    const uint64_t rows = t.shape[1], cols = t.shape[0];
    if (type == SafetensorsOutType::kFP8Block)
      DUET_RETURN_IF_ERROR(w.add_tensor(stem + "weight_scale_inv", DType::kF32, {(rows + 127) / 128, (cols + 127) / 128}));
    else if (type == SafetensorsOutType::kFP8PerChannel)
      DUET_RETURN_IF_ERROR(w.add_tensor(stem + "weight_scale", DType::kF32, {rows, 1}));
    else
      DUET_RETURN_IF_ERROR(w.add_tensor(stem + "weight_scale", DType::kF32, {1}));
    plan.push_back({i, true, true});
  }
  w.set_metadata("format", "pt");
  DUET_RETURN_IF_ERROR(w.open(out_file));
  Progress prog("writing " + out_file, total_elems, opt.quiet);
  uint64_t done = 0;
  size_t widx = 0;
  for (size_t p = 0; p < plan.size(); ++p) {
    if (plan[p].scale) continue;
    const SourceTensor& t = src.tensors[plan[p].src];
    const uint64_t ncols = t.shape[0], nrows = t.n_rows();
    if (!plan[p].fp8) {
      std::vector<uint8_t> out;
      out.reserve(nrows * ncols * 2);
      DUET_RETURN_IF_ERROR(stream_tensor(
          t, DType::kBF16, n_threads,
          [&](const uint8_t* d, uint64_t n) { out.insert(out.end(), d, d + n); return Status::ok(); },
          [&](uint64_t rows) { done += rows * ncols; prog.update(done, t.name); }));
      DUET_RETURN_IF_ERROR(w.write_tensor(widx++, out.data(), out.size()));
      if (t.release) t.release();
      continue;
    }
    // FP8: the whole tensor is needed to pick per-tensor / block scales; weights are read once
    // into F32 (bounded by the largest tensor), scaled, and converted.
    std::vector<float> x(nrows * ncols);
    parallel_for(static_cast<int>((nrows + 255) / 256), n_threads, [&](int k) {
      uint64_t r0 = static_cast<uint64_t>(k) * 256, nr = std::min<uint64_t>(256, nrows - r0);
      t.read_rows(r0, nr, x.data() + r0 * ncols);
    });
    std::vector<uint8_t> q(nrows * ncols);
    std::vector<float> scales;
    auto amax_of = [&](uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1) {
      float a = 0;
      for (uint64_t r = r0; r < r1; ++r)
        for (uint64_t c = c0; c < c1; ++c) a = std::max(a, std::fabs(x[r * ncols + c]));
      return a;
    };
    auto scale_of = [](float amax) { return amax > 0 ? amax / 448.0f : 1.0f; };
    if (type == SafetensorsOutType::kFP8Block) {
      const uint64_t sr = (nrows + 127) / 128, sc = (ncols + 127) / 128;
      scales.resize(sr * sc);
      parallel_for(static_cast<int>(sr), n_threads, [&](int bi) {
        for (uint64_t bj = 0; bj < sc; ++bj) {
          uint64_t r0 = bi * 128ull, r1 = std::min<uint64_t>(r0 + 128, nrows), c0 = bj * 128, c1 = std::min<uint64_t>(c0 + 128, ncols);
          float s = scale_of(amax_of(r0, r1, c0, c1));
          scales[bi * sc + bj] = s;
          for (uint64_t r = r0; r < r1; ++r)
            for (uint64_t c = c0; c < c1; ++c) q[r * ncols + c] = f32_to_fp8_e4m3(x[r * ncols + c] / s);
        }
      });
    } else if (type == SafetensorsOutType::kFP8PerChannel) {
      scales.resize(nrows);
      parallel_for(static_cast<int>(nrows), n_threads, [&](int r) {
        float s = scale_of(amax_of(r, r + 1, 0, ncols));
        scales[r] = s;
        for (uint64_t c = 0; c < ncols; ++c) q[r * ncols + c] = f32_to_fp8_e4m3(x[r * ncols + c] / s);
      });
    } else {
      float s = scale_of(amax_of(0, nrows, 0, ncols));
      scales.assign(1, s);
      parallel_for(static_cast<int>(nrows), n_threads, [&](int r) {
        for (uint64_t c = 0; c < ncols; ++c) q[r * ncols + c] = f32_to_fp8_e4m3(x[r * ncols + c] / s);
      });
    }
    DUET_RETURN_IF_ERROR(w.write_tensor(widx++, q.data(), q.size()));
    DUET_RETURN_IF_ERROR(w.write_tensor(widx++, scales.data(), scales.size() * 4));
    if (t.release) t.release();
    done += nrows * ncols;
    prog.update(done, t.name);
  }
  prog.finish();
  return w.finish();
}

}  // namespace duet
