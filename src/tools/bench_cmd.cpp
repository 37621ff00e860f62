// `duet bench -m MODEL [-p 512] [-n 128] [-r 3] [-d 0,4096] [-b 1,8,32] [--json] [--device D] [-t N]`
// Offline speed of one model on one backend: prompt (pp) and decode (tg) tokens/s of a single
// sequence the way llama-bench measures them, at one or more context depths (tokens already in
// the cache, llama-bench's -d: "tg128 @ d4096"), and optionally the time of one decode step of B
// sequences at once. On a GPU each figure is printed beside its fraction of the H200 roofline
// (decode: matrix bytes plus the K/V cache bytes read per token / 4.3 TB/s; prompt: FLOPs / 790
// TFLOP/s BF16, 1580 FP8).
// Each evaluation ends as generation does, with the greedy choice of the next token (on the GPU
// only the ids come back); --logits reads the logits rows back instead, as llama-bench does.
#include <CLI/CLI.hpp>
#include <algorithm>
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

// A comma-separated list of integers in [lo, hi] for option `opt` (what: their meaning).
Result<std::vector<int>> parse_list(const std::string& s, const char* opt, const char* what, int lo, int hi) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty() || item.size() > 7 || item.find_first_not_of("0123456789") != std::string::npos)
      return invalid_argument(std::string(opt) + " " + s + ": expected a comma-separated list of " + what);
    v.push_back(std::stoi(item));
    if (v.back() < lo || v.back() > hi)
      return invalid_argument(std::string(opt) + ": " + what + " must be in " + std::to_string(lo) + ".." +
                              std::to_string(hi));
  }
  if (v.empty()) return invalid_argument(std::string(opt) + ": expected a comma-separated list of " + what);
  return v;
}

// Keys attention reads for one token at context ctx, summed over the layers (sliding-window
// layers at most their window).
double keys_read(const HParams& hp, const std::vector<uint8_t>& sliding, double ctx) {
  double keys = 0;
  for (uint32_t l = 0; l < hp.n_layers; ++l) {
    const bool swa = l < sliding.size() && sliding[l] != 0 && hp.sliding_window > 0;
    keys += swa ? std::min(ctx, double(hp.sliding_window)) : ctx;
  }
  return keys;
}

}  // namespace

int run_bench_cmd(int argc, char** argv) {
  CLI::App app{"Prompt and decode speed of a model (llama-bench's pp/tg tests)", "duet bench"};
  std::string model_path, batches, depths_arg = "0";
  int n_pp = 512, n_tg = 128, reps = 3, ctx_short = 128;
  bool json = false, logits = false;
  BackendOptions bo;
  app.add_option("-m,--model", model_path, "GGUF file, or safetensors file/directory")->required();
  app.add_option("-p,--n-prompt", n_pp, "prompt tokens (default 512; 0 skips)");
  app.add_option("-n,--n-gen", n_tg, "decode tokens (default 128; 0 skips)");
  app.add_option("-r,--reps", reps, "repetitions, best kept (default 3)");
  app.add_option("-d,--depth", depths_arg,
                 "context depths: tokens already in the cache before each pp/tg test, e.g. 0,4096 (default 0)");
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
    auto r = parse_list(batches, "-b", "sequence counts", 1, 1024);
    if (!r.is_ok()) {
      std::fprintf(stderr, "duet bench: %s\n", r.status().message().c_str());
      return 2;
    }
    bs = r.value();
  }
  auto depths_r = parse_list(depths_arg, "-d", "depths", 0, 1 << 20);
  if (!depths_r.is_ok()) {
    std::fprintf(stderr, "duet bench: %s\n", depths_r.status().message().c_str());
    return 2;
  }
  const std::vector<int> depths = depths_r.value();
  const int max_depth = *std::max_element(depths.begin(), depths.end());
  auto weights = load_model_weights(model_path);
  if (!weights.is_ok()) {
    std::fprintf(stderr, "duet bench: %s\n", weights.status().message().c_str());
    return 1;
  }
  const WeightStats ws = weight_stats(weights.value());
  const HParams hp = weights->hp;
  const std::vector<uint8_t> sliding = weights->sliding;
  bo.max_context = static_cast<uint32_t>(
      std::max({max_depth + std::max(n_pp, n_tg + 2), bs.empty() ? 0 : ctx_short + n_tg + 8}) + 16);
  bo.max_seqs = 1;
  for (int b : bs) bo.max_seqs = std::max<uint32_t>(bo.max_seqs, b);
  // Depths are prefilled in batches of max(n_pp, 512) tokens (run_bench).
  bo.max_batch_tokens = static_cast<uint32_t>(std::max({n_pp, ctx_short, max_depth > 0 ? 512 : 1}));
  auto model = open_backend(std::move(weights.value()), bo);
  if (!model.is_ok()) {
    std::fprintf(stderr, "duet bench: %s\n", model.status().message().c_str());
    return 1;
  }
  ForwardModel& fm = *model.value();
  const bool gpu = fm.device_name() != "cpu";
  const double t0 = now_seconds();
  // One run_bench per depth; the batch steps with the first.
  struct DepthResult {
    int depth;
    BenchResult r;
    double pp_roof, tg_roof;
  };
  std::vector<DepthResult> res;
  // Roofline fractions (GPU): decode moves the matrix bytes (decode_bytes) and the K/V cache bytes
  // of its context (mean over the tg test) per token; a prompt token at position p costs 2 * macs
  // FLOPs in the matrices plus 2 * 2 * q_dim * (p + 1) per layer in attention (QK^T and PV; sliding
  // layers at most their window), i.e. the mean over the pp test's positions.
  const double qd = double(hp.n_heads) * hp.head_dim;
  const double kv_elem = bo.kv_f32 ? 4.0 : 2.0;  // the GPU's K/V cache: F16 unless --kv-f32
  const double peak = ws.main_dtype == DType::kF8_E4M3 ? kFp8FlopPerS : kBf16FlopPerS;
  for (size_t i = 0; i < depths.size(); ++i) {
    const int d = depths[i];
    if (depths.size() > 1 && !json) std::fprintf(stderr, "duet bench: depth %d (%zu of %zu)\n", d, i + 1, depths.size());
    auto r = run_bench(fm, n_pp, n_tg, reps, i == 0 ? bs : std::vector<int>{}, ctx_short, logits, d);
    if (!r.is_ok()) {
      std::fprintf(stderr, "duet bench: %s\n", r.status().message().c_str());
      return 1;
    }
    const double pp_flops_per_tok = 2.0 * ws.macs_per_token + 4.0 * qd * keys_read(hp, sliding, d + (n_pp + 1) / 2.0);
    const double kv_bytes_per_key = 2.0 * hp.n_kv_heads * hp.head_dim * kv_elem;  // K and V
    const double tg_bytes = ws.decode_bytes + kv_bytes_per_key * keys_read(hp, sliding, d + (n_tg + 1) / 2.0);
    res.push_back({d, r.value(), r->pp_tok_s * pp_flops_per_tok / peak, r->tg_tok_s * tg_bytes / kHbmBytesPerS});
  }
  const DepthResult& r0 = res[0];
  if (json) {
    nlohmann::json j = {{"model", model_path}, {"device", fm.device_name()}, {"dtype", std::string(dtype_name(ws.main_dtype))},
                        {"decode_weight_bytes", ws.decode_bytes}, {"depth", r0.depth}, {"pp", n_pp},
                        {"pp_tok_s", r0.r.pp_tok_s}, {"tg", n_tg}, {"tg_tok_s", r0.r.tg_tok_s}};
    if (!gpu) j["simd"] = simd_level_name(cpu_features().level);
    if (gpu) j["pp_roofline"] = r0.pp_roof, j["tg_roofline"] = r0.tg_roof;
    j["eval_output"] = logits ? "logits" : "greedy";  // what each evaluation hands back (--logits)
    nlohmann::json steps = nlohmann::json::array();
    for (auto [b, ms] : r0.r.batch_step_ms) steps.push_back({{"seqs", b}, {"step_ms", ms}, {"tok_s", b * 1e3 / ms}});
    j["batch_steps"] = steps;
    if (res.size() > 1) {  // every depth, the first one included
      nlohmann::json by = nlohmann::json::array();
      for (const DepthResult& e : res) {
        nlohmann::json o = {{"depth", e.depth}, {"pp_tok_s", e.r.pp_tok_s}, {"tg_tok_s", e.r.tg_tok_s}};
        if (gpu) o["pp_roofline"] = e.pp_roof, o["tg_roofline"] = e.tg_roof;
        by.push_back(o);
      }
      j["by_depth"] = by;
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model   %s (%s, decode reads %.2f GB/token of weights)\n", model_path.c_str(),
              std::string(dtype_name(ws.main_dtype)).c_str(), ws.decode_bytes / 1e9);
  std::printf("device  %s\n", fm.device_name().c_str());
  std::printf("%-15s %12s %12s\n", "test", "tok/s", gpu ? "roofline" : "");
  auto roof = [&](double f) { return gpu ? std::to_string(static_cast<int>(f * 1000 + 0.5) / 10.0).substr(0, 5) + "%" : std::string(); };
  for (const DepthResult& e : res) {
    const std::string at = e.depth > 0 ? " @ d" + std::to_string(e.depth) : "";
    if (n_pp > 0)
      std::printf("%-15s %12.1f %12s\n", ("pp" + std::to_string(n_pp) + at).c_str(), e.r.pp_tok_s, roof(e.pp_roof).c_str());
    if (n_tg > 0)
      std::printf("%-15s %12.1f %12s\n", ("tg" + std::to_string(n_tg) + at).c_str(), e.r.tg_tok_s, roof(e.tg_roof).c_str());
  }
  for (auto [b, ms] : r0.r.batch_step_ms)
    std::printf("step x%-4d %9.3f ms %8.1f tok/s\n", b, ms, b * 1e3 / ms);
  std::fprintf(stderr, "duet bench: %.1f s\n", now_seconds() - t0);
  if (std::string prof = fm.profile_report(); !prof.empty()) std::printf("%s", prof.c_str());
  return 0;
}

}  // namespace duet
