// `duet run -m MODEL (-p PROMPT | --prompt-ids IDS) [-n N] [--chat [--system S]]
//  [--temp T --top-p P --top-k K --seed S] [--json] [-t THREADS] [-c CTX] [--kv-f32]
//  [--ignore-eos] [--device auto|cpu|cuda[:N]] [--bench [--bench-pp N --bench-tg N --bench-reps R]]`
// Generates a continuation of one prompt on the CPU or a GPU (tools/backend.h): tokenizes (the model's tokenizer, or the
// model's chat template with --chat), prefills, samples token by token and streams the text to
// stdout (or prints one JSON object with --json), then reports prefill and decode speed on
// stderr. --bench measures prefill of --bench-pp random tokens and decode of --bench-tg tokens
// instead, the way llama-bench's pp/tg tests do. Runs on the calling thread plus the model's pool.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "formats/gguf_tokenizer.h"
#include "kernels/cpu/sampling.h"
#include "model/model.h"
#include "model/session.h"
#include "tools/backend.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/tokenizer.h"

namespace duet {

int run_run(int argc, char** argv);

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "duet run: %s\n", msg.c_str());
  return 1;
}

// The model's own tokenizer: GGUF metadata, or tokenizer.json beside a safetensors checkpoint.
Result<std::vector<int32_t>> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ',' || s[i] == ' ' || s[i] == '[' || s[i] == ']' || s[i] == '\n') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j == i || j - i > 9) return invalid_argument("--prompt-ids: expected token ids at byte " + std::to_string(i));
    ids.push_back(static_cast<int32_t>(std::stol(s.substr(i, j - i))));
    i = j;
  }
  return ids;
}

// The prompt as token ids: rendered through the chat template with --chat, BOS added when the
// tokenizer adds one and the text does not start with it.
Result<std::vector<int32_t>> prompt_tokens(const Tokenizer& tok, const std::string& prompt, bool chat,
                                           const std::string& system) {
  if (!chat) return tok.encode(prompt, EncodeOptions{/*add_special=*/true, /*parse_special=*/false});
  if (tok.chat_template().empty()) return not_found("the model has no chat template (run without --chat)");
  ChatTemplateInputs in;
  if (!system.empty()) in.messages.push_back({{"role", "system"}, {"content", system}});
  in.messages.push_back({{"role", "user"}, {"content", prompt}});
  in.add_generation_prompt = true;
  if (tok.valid_id(tok.bos_id())) in.bos_token = tok.token_text(tok.bos_id());
  if (tok.valid_id(tok.eos_id())) in.eos_token = tok.token_text(tok.eos_id());
  DUET_ASSIGN_OR_RETURN(std::string text, render_chat_template(tok.chat_template(), build_chat_template_context(in)));
  std::vector<int32_t> ids = tok.encode(text, EncodeOptions{/*add_special=*/false, /*parse_special=*/true});
  if (tok.add_bos() && tok.valid_id(tok.bos_id()) && (ids.empty() || ids[0] != tok.bos_id()))
    ids.insert(ids.begin(), tok.bos_id());
  return ids;
}

}  // namespace

int run_run(int argc, char** argv) {
  CLI::App app{"Generate text from a prompt (CPU or GPU)", "duet run"};
  std::string model_path, prompt, prompt_ids, system;
  int n_predict = 64, ctx = 0, top_k = 0, bench_pp = 512, bench_tg = 128, bench_reps = 3;
  float temp = 0.0f, top_p = 1.0f;
  uint64_t seed = 0;
  bool chat = false, json = false, ignore_eos = false, do_bench = false;
  BackendOptions bo;
  app.add_option("-m,--model", model_path, "GGUF file, or safetensors file/directory")->required();
  app.add_option("-p,--prompt", prompt, "prompt text");
  app.add_option("--prompt-ids", prompt_ids, "prompt as token ids (comma separated), bypassing the tokenizer");
  app.add_option("-n,--n-predict", n_predict, "tokens to generate (default 64)");
  app.add_flag("--chat", chat, "wrap the prompt as a user message in the model's chat template");
  app.add_option("--system", system, "system message (with --chat)");
  app.add_option("--temp", temp, "sampling temperature; 0 = greedy (default)");
  app.add_option("--top-p", top_p, "nucleus sampling mass (default 1 = off)");
  app.add_option("--top-k", top_k, "keep the k most likely tokens (default 0 = off)");
  app.add_option("--seed", seed, "random seed (default 0)");
  app.add_flag("--json", json, "print one JSON object instead of streaming text");
  app.add_option("-c,--ctx", ctx, "context length to allocate KV cache for (default: prompt + n, at most the model's)");
  app.add_flag("--ignore-eos", ignore_eos, "do not stop at end-of-generation tokens");
  app.add_flag("--bench", do_bench, "measure prefill and decode speed instead of generating");
  app.add_option("--bench-pp", bench_pp, "prefill tokens for --bench (default 512)");
  app.add_option("--bench-tg", bench_tg, "decode tokens for --bench (default 128)");
  app.add_option("--bench-reps", bench_reps, "repetitions for --bench, best is kept (default 3)");
  add_backend_options(app, bo);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!do_bench && prompt.empty() == prompt_ids.empty()) {
    std::fprintf(stderr, "duet run: give exactly one of -p/--prompt and --prompt-ids\n");
    return 2;
  }
  if (n_predict < 0 || n_predict > 1 << 20 || bench_pp < 0 || bench_tg < 0 || bench_reps < 1 || top_k < 0 ||
      !(top_p > 0.0f && top_p <= 1.0f) || !(temp >= 0.0f)) {
    std::fprintf(stderr, "duet run: option out of range\n");
    return 2;
  }

  // Size the cache after the prompt is known; load the weights first.
  auto weights = load_model_weights(model_path);
  if (!weights.is_ok()) return fail(weights.status().message());
  const uint32_t model_ctx = weights->hp.context_length ? weights->hp.context_length : 4096;

  if (do_bench) {
    bo.max_context = std::min<uint32_t>(model_ctx, static_cast<uint32_t>(std::max(bench_pp, bench_tg + 1) + 16));
    bo.max_batch_tokens = static_cast<uint32_t>(std::max(bench_pp, 1));
    auto model = open_backend(std::move(weights.value()), bo);
    if (!model.is_ok()) return fail(model.status().message());
    const double t0 = now_seconds();
    auto r = run_bench(*model.value(), bench_pp, bench_tg, bench_reps, {});
    if (!r.is_ok()) return fail(r.status().message());
    const std::string device = model.value()->device_name();
    const int threads = device == "cpu" ? static_cast<Model&>(*model.value()).pool().n_threads() : 0;
    if (json) {
      nlohmann::json j = {{"model", model_path}, {"device", device}, {"threads", threads},
                          {"simd", simd_level_name(cpu_features().level)},
                          {"pp", bench_pp}, {"pp_tok_s", r->pp_tok_s}, {"tg", bench_tg}, {"tg_tok_s", r->tg_tok_s}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%s on %s: %d threads, %s: pp%d %.1f tok/s, tg%d %.1f tok/s (%.1f s)\n", model_path.c_str(),
                  device.c_str(), threads, simd_level_name(cpu_features().level).c_str(), bench_pp, r->pp_tok_s, bench_tg,
                  r->tg_tok_s, now_seconds() - t0);
    }
    return 0;
  }

  // The tokenizer: required for text prompts, optional (no text output) with --prompt-ids.
  std::unique_ptr<Tokenizer> tok;
  if (auto t = load_model_tokenizer(weights.value(), model_path); t.is_ok()) {
    tok = std::move(t.value());
  } else if (prompt_ids.empty()) {
    return fail("tokenizer: " + t.status().message());
  }
  std::vector<int32_t> ids;
  if (!prompt_ids.empty()) {
    auto p = parse_ids(prompt_ids);
    if (!p.is_ok()) return fail(p.status().message());
    ids = std::move(p.value());
  } else {
    auto p = prompt_tokens(*tok, prompt, chat, system);
    if (!p.is_ok()) return fail(p.status().message());
    ids = std::move(p.value());
  }
  if (ids.empty()) return fail("the prompt is empty after tokenization");

  const uint64_t need = ids.size() + static_cast<uint64_t>(n_predict);
  bo.max_context = static_cast<uint32_t>(std::min<uint64_t>(ctx > 0 ? static_cast<uint64_t>(ctx) : need, model_ctx));
  if (need > bo.max_context)
    return fail("prompt (" + std::to_string(ids.size()) + " tokens) + " + std::to_string(n_predict) +
                " new tokens exceed the context of " + std::to_string(bo.max_context));
  bo.max_batch_tokens = 512;
  auto model_r = open_backend(std::move(weights.value()), bo);
  if (!model_r.is_ok()) return fail(model_r.status().message());
  ForwardModel& model = *model_r.value();
  const std::string device = model.device_name();
  const int64_t vocab = model.hparams().vocab_size;

  Session session(model);
  const int seq = session.add_sequence();
  std::vector<float> logits;
  const double t0 = now_seconds();
  Status st = session.eval(seq, ids, false, &logits);
  if (!st.is_ok()) return fail(st.message());
  const double t_prefill = now_seconds() - t0;

  SamplingConfig sc;
  sc.temperature = temp;
  sc.top_k = top_k;
  sc.top_p = top_p;
  sc.seed = seed;
  Sampler sampler(sc);
  std::unique_ptr<IncrementalDetokenizer> detok;
  if (tok) detok = std::make_unique<IncrementalDetokenizer>(*tok);
  std::vector<int32_t> out;
  std::string text;
  const char* stop = "length";
  // Greedy decoding asks the backend for the ids only (on the GPU the logits stay there); the
  // Sampler's greedy choice is the same argmax.
  const bool greedy = sc.greedy();
  const double t1 = now_seconds();
  int32_t next = sampler.sample(logits.data(), vocab);  // from the prompt's logits
  for (int i = 0; i < n_predict; ++i) {
    if (!ignore_eos && tok && tok->is_eog(next)) {
      stop = "eog";
      break;
    }
    out.push_back(next);
    if (detok) {
      std::string piece = detok->push(next);
      text += piece;
      if (!json) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
    }
    if (i + 1 == n_predict) break;
    const int32_t fed = next;
    st = greedy ? session.eval_greedy(seq, std::span<const int32_t>(&fed, 1), &next)
                : session.eval(seq, std::span<const int32_t>(&fed, 1), false, &logits);
    if (!st.is_ok()) return fail(st.message());
    if (!greedy) next = sampler.sample(logits.data(), vocab);
  }
  if (detok) {
    std::string tail = detok->finish();
    text += tail;
    if (!json) std::fwrite(tail.data(), 1, tail.size(), stdout);
  }
  const double t_decode = now_seconds() - t1;
  const double prefill_tok_s = ids.size() / std::max(t_prefill, 1e-9);
  const double decode_tok_s = out.size() > 1 ? (out.size() - 1) / std::max(t_decode, 1e-9) : 0.0;
  if (json) {
    nlohmann::json j = {{"prompt_tokens", ids}, {"tokens", out}, {"text", text}, {"stop", stop},
                        {"n_prompt", ids.size()}, {"n_generated", out.size()},
                        {"prefill_ms", t_prefill * 1e3}, {"decode_ms", t_decode * 1e3},
                        {"prefill_tok_s", prefill_tok_s}, {"decode_tok_s", decode_tok_s},
                        {"device", device}, {"simd", simd_level_name(cpu_features().level)}};
    if (device == "cpu") j["threads"] = static_cast<Model&>(model).pool().n_threads();
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("\n");
    std::fprintf(stderr, "duet run: prompt %zu tokens in %.1f ms (%.1f tok/s), generated %zu tokens (%.1f tok/s), stop: %s\n",
                 ids.size(), t_prefill * 1e3, prefill_tok_s, out.size(), decode_tok_s, stop);
  }
  return 0;
}

}  // namespace duet
