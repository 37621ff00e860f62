// `duet bench -m MODEL [-p 512] [-n 128] [-r 3] [-b 1,8,32] [--json] [--device D] [-t N]`
// Offline speed of one model on one backend: prompt (pp) and decode (tg) tokens/s of a single
// sequence the way llama-bench measures them, and optionally the time of one decode step of B
// sequences at once. On a GPU each figure is printed beside its fraction of the H200 roofline
// (decode: matrix bytes read per token / 4.3 TB/s; prompt: FLOPs / 790 TFLOP/s BF16, 1580 FP8).
// Each evaluation ends as generation does, with the greedy choice of the next token (on the GPU
// only the ids come back); --logits reads the logits rows back instead, as llama-bench does.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "kernels/cpu/cpu_features.h"
#include "tools/backend.h"
#include "tools/commands.h"

namespace duet {
namespace {

constexpr double kHbmBytesPerS = 4.3e12;     // H200, ../shared/BENCHMARKS.md
constexpr double kBf16FlopPerS = 790e12;
constexpr double kFp8FlopPerS = 1580e12;

Result<std::vector<int>> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty() || item.size() > 4 || item.find_first_not_of("0123456789") != std::string::npos)
      return invalid_argument("-b " + s + ": expected a comma-separated list of sequence counts");
    v.push_back(std::stoi(item));
    if (v.back() < 1 || v.back() > 1024) return invalid_argument("-b: sequence counts must be in 1..1024");
  }
  return v;
}

}  // namespace

int run_bench_cmd(int argc, char** argv) {
  CLI::App app{"Prompt and decode speed of a model (llama-bench's pp/tg tests)", "duet bench"};
  std::string model_path, batches;
  int n_pp = 512, n_tg = 128, reps = 3, ctx_short = 128;
  bool json = false, logits = false;
  BackendOptions bo;
  app.add_option("-m,--model", model_path, "GGUF file, or safetensors file/directory")->required();
  app.add_option("-p,--n-prompt", n_pp, "prompt tokens (default 512; 0 skips)");
  app.add_option("-n,--n-gen", n_tg, "decode tokens (default 128; 0 skips)");
  app.add_option("-r,--reps", reps, "repetitions, best kept (default 3)");
  app.add_option("-b,--batch-seqs", batches, "also time one decode step of B sequences, e.g. 1,8,32");
  app.add_option("--batch-ctx", ctx_short, "context of each sequence for -b (default 128)");
  app.add_flag("--json", json, "print one JSON object");
  app.add_flag("--logits", logits,
               "end each evaluation by reading the logits back to the host (as llama-bench does) instead of "
               "sampling the next token greedily (on the GPU: only the ids come back)");
  add_backend_options(app, bo);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (n_pp < 0 || n_pp > 65536 || n_tg < 0 || n_tg > 65536 || reps < 1 || reps > 100 || ctx_short < 1 || ctx_short > 65536) {
    std::fprintf(stderr, "duet bench: option out of range\n");
    return 2;
  }
  std::vector<int> bs;
  if (!batches.empty()) {
    auto r = parse_list(batches);
    if (!r.is_ok()) {
      std::fprintf(stderr, "duet bench: %s\n", r.status().message().c_str());
      return 2;
    }
    bs = r.value();
  }
  auto weights = load_model_weights(model_path);
  if (!weights.is_ok()) {
    std::fprintf(stderr, "duet bench: %s\n", weights.status().message().c_str());
    return 1;
  }
  const WeightStats ws = weight_stats(weights.value());
  const HParams hp = weights->hp;
  bo.max_context = static_cast<uint32_t>(std::max({n_pp, n_tg + 2, bs.empty() ? 0 : ctx_short + n_tg + 8}) + 16);
  bo.max_seqs = 1;
  for (int b : bs) bo.max_seqs = std::max<uint32_t>(bo.max_seqs, b);
  bo.max_batch_tokens = static_cast<uint32_t>(std::max({n_pp, ctx_short, 1}));
  auto model = open_backend(std::move(weights.value()), bo);
  if (!model.is_ok()) {
    std::fprintf(stderr, "duet bench: %s\n", model.status().message().c_str());
    return 1;
  }
  ForwardModel& fm = *model.value();
  const bool gpu = fm.device_name() != "cpu";
  const double t0 = now_seconds();
  auto r = run_bench(fm, n_pp, n_tg, reps, bs, ctx_short, logits);
  if (!r.is_ok()) {
    std::fprintf(stderr, "duet bench: %s\n", r.status().message().c_str());
    return 1;
  }
  // Roofline fractions (GPU): decode moves decode_bytes per token; a prompt of n tokens costs
  // 2 * macs * n FLOPs in the matrices plus 2 * 2 * q_dim * n^2 / 2 per layer in attention.
  const double qd = double(hp.n_heads) * hp.head_dim;
  const double pp_flops_per_tok = 2.0 * ws.macs_per_token + 2.0 * qd * n_pp * hp.n_layers;
  const double peak = ws.main_dtype == DType::kF8_E4M3 ? kFp8FlopPerS : kBf16FlopPerS;
  const double tg_roof = r->tg_tok_s * ws.decode_bytes / kHbmBytesPerS;
  const double pp_roof = r->pp_tok_s * pp_flops_per_tok / peak;
  if (json) {
    nlohmann::json j = {{"model", model_path}, {"device", fm.device_name()}, {"dtype", std::string(dtype_name(ws.main_dtype))},
                        {"decode_weight_bytes", ws.decode_bytes}, {"pp", n_pp}, {"pp_tok_s", r->pp_tok_s},
                        {"tg", n_tg}, {"tg_tok_s", r->tg_tok_s}};
    if (!gpu) j["simd"] = simd_level_name(cpu_features().level);
    if (gpu) j["pp_roofline"] = pp_roof, j["tg_roofline"] = tg_roof;
    j["eval_output"] = logits ? "logits" : "greedy";  // what each evaluation hands back (--logits)
    nlohmann::json steps = nlohmann::json::array();
    for (auto [b, ms] : r->batch_step_ms) steps.push_back({{"seqs", b}, {"step_ms", ms}, {"tok_s", b * 1e3 / ms}});
    j["batch_steps"] = steps;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model   %s (%s, decode reads %.2f GB/token)\n", model_path.c_str(), std::string(dtype_name(ws.main_dtype)).c_str(),
              ws.decode_bytes / 1e9);
  std::printf("device  %s\n", fm.device_name().c_str());
  std::printf("%-8s %12s %12s\n", "test", "tok/s", gpu ? "roofline" : "");
  auto roof = [&](double f) { return gpu ? std::to_string(static_cast<int>(f * 1000 + 0.5) / 10.0).substr(0, 5) + "%" : std::string(); };
  if (n_pp > 0) std::printf("pp%-6d %12.1f %12s\n", n_pp, r->pp_tok_s, roof(pp_roof).c_str());
  if (n_tg > 0) std::printf("tg%-6d %12.1f %12s\n", n_tg, r->tg_tok_s, roof(tg_roof).c_str());
  for (auto [b, ms] : r->batch_step_ms)
    std::printf("step x%-4d %9.3f ms %8.1f tok/s\n", b, ms, b * 1e3 / ms);
  std::fprintf(stderr, "duet bench: %.1f s\n", now_seconds() - t0);
  if (std::string prof = fm.profile_report(); !prof.empty()) std::printf("%s", prof.c_str());
  return 0;
}

}  // namespace duet
