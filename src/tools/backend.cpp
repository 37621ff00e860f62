// Backend selection (see backend.h).
#include "tools/backend.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>

#include "base/log.h"
#include "formats/gguf_tokenizer.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "model/model.h"
#include "model/session.h"
#ifdef DUET_WITH_CUDA
#include "runner/cuda_model.h"
#include "runtime/device.h"
#endif

namespace duet {

void add_backend_options(CLI::App& app, BackendOptions& o) {
  app.add_option("--device", o.device, "auto (GPU when present), cpu, cuda or cuda:N (default auto)");
  app.add_option("--fp8", o.fp8, "FP8 checkpoints on CUDA: auto, native (FP8 tensor cores; decode on sm_90/sm_100 multiplies as weight-only) or weight-only");
  app.add_flag("--no-graphs", o.no_graphs, "CUDA: run decode steps eagerly instead of replaying CUDA graphs");
  app.add_option("-t,--threads", o.n_threads, "CPU threads (default: all cores)");
  app.add_flag("--kv-f32", o.kv_f32, "keep the KV cache in F32 instead of F16");
}

Result<std::unique_ptr<Tokenizer>> load_model_tokenizer(const ModelWeights& w, const std::string& path) {
  Result<TokenizerSpec> spec = invalid_argument("no tokenizer");
  if (w.gguf) {
    spec = tokenizer_spec_from_gguf(*w.gguf);
  } else {
    std::error_code ec;
    const std::string dir =
        std::filesystem::is_directory(path, ec) ? path : std::filesystem::path(path).parent_path().string();
    spec = tokenizer_spec_from_hf_json(dir + "/tokenizer.json");
    if (spec.is_ok()) tokenizer_spec_add_default_eog_ids(&spec.value());
  }
  if (!spec.is_ok()) return spec.status();
  return Tokenizer::create(std::move(spec.value()));
}

Result<std::unique_ptr<ForwardModel>> open_backend(ModelWeights weights, const BackendOptions& o) {
  std::string dev = o.device;
  int ordinal = 0;
  if (dev.rfind("cuda:", 0) == 0) {
    const std::string num = dev.substr(5);
    if (num.empty() || num.size() > 3 || num.find_first_not_of("0123456789") != std::string::npos)
      return invalid_argument("--device " + o.device + ": expected cuda:N");
    ordinal = std::stoi(num);
    dev = "cuda";
  }
  if (dev != "auto" && dev != "cpu" && dev != "cuda")
    return invalid_argument("--device " + o.device + ": expected auto, cpu, cuda or cuda:N");
  if (o.fp8 != "auto" && o.fp8 != "native" && o.fp8 != "weight-only")
    return invalid_argument("--fp8 " + o.fp8 + ": expected auto, native or weight-only");
#ifdef DUET_WITH_CUDA
  if (dev == "cuda" || (dev == "auto" && cuda::device_count() > 0)) {
    cuda::CudaModelOptions co;
    co.device = ordinal;
    co.kv_dtype = o.kv_f32 ? DType::kF32 : DType::kF16;
    co.max_context = o.max_context;
    co.max_seqs = o.max_seqs;
    co.max_batch_tokens = o.max_batch_tokens;
    co.fp8 = o.fp8 == "native" ? cuda::Fp8Mode::kNative : o.fp8 == "weight-only" ? cuda::Fp8Mode::kWeightOnly : cuda::Fp8Mode::kAuto;
    co.cuda_graphs = !o.no_graphs;
    co.verbose = o.verbose;
    DUET_ASSIGN_OR_RETURN(auto m, cuda::CudaModel::create(std::move(weights), co));
    return std::unique_ptr<ForwardModel>(std::move(m));
  }
#else
  (void)ordinal;
  if (dev == "cuda") return invalid_argument("--device cuda: this duet was built without CUDA (cmake -DDUET_CUDA=ON)");
#endif
  ModelOptions mo;
  mo.n_threads = o.n_threads;
  mo.kv_dtype = o.kv_f32 ? DType::kF32 : DType::kF16;
  mo.max_context = o.max_context;
  mo.max_seqs = o.max_seqs;
  DUET_ASSIGN_OR_RETURN(auto m, Model::create(std::move(weights), mo));
  return std::unique_ptr<ForwardModel>(std::move(m));
}

WeightStats weight_stats(const ModelWeights& w) {
  WeightStats s;
  std::map<DType, uint64_t> by_type;
  auto add = [&](const WeightMatrix& m) {
    const uint64_t b = static_cast<uint64_t>(m.n_rows) * m.row_bytes;
    s.decode_bytes += b;
    s.macs_per_token += static_cast<uint64_t>(m.n_rows) * m.n_cols;
    by_type[m.dtype] += b;
  };
  for (const LayerWeights& L : w.layers)
    for (const WeightMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) add(*m);
  add(w.output);
  uint64_t best = 0;
  for (auto [t, b] : by_type)
    if (b > best) best = b, s.main_dtype = t;
  return s;
}

}  // namespace duet
