// `duet perplexity -m MODEL -f TEXT [-c 512] [-b BATCH] [--chunks N] [-t THREADS] [--json]
//  [--save-logits FILE] [--kl-base FILE]`
// Perplexity the way llama.cpp's llama-perplexity measures it: the text is tokenized (BOS first
// when the model adds one), cut into non-overlapping chunks of c tokens whose first token is
// replaced by BOS (when the model adds one), and only the second half of each chunk is scored;
// PPL = exp(mean NLL) with the standard error of the mean propagated. --save-logits writes the
// scored positions' log-probabilities (F16, with each position's exact top-1 token) so that a later run, e.g. of a quantized model, can
// report KL divergence and top-1 agreement against it with --kl-base. Runs on the calling
// thread plus the model's pool.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/log.h"
#include "formats/gguf_tokenizer.h"
#include "model/model.h"
#include "tools/backend.h"
#include "model/session.h"
#include "tensor/half.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/tokenizer.h"

namespace duet {

int run_perplexity(int argc, char** argv);

namespace {

constexpr char kLogitsMagic[8] = {'D', 'U', 'E', 'T', 'K', 'L', 'D', '2'};

int fail(const std::string& msg) {
  std::fprintf(stderr, "duet perplexity: %s\n", msg.c_str());
  return 1;
}

// Log-softmax of one row in double: returns log p[target]; fills lp (if given) with all of them.
double log_softmax(const float* logits, int64_t n, int32_t target, std::vector<double>* lp) {
  float mx = logits[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = std::log(sum);
  if (lp) {
    lp->resize(n);
    for (int64_t i = 0; i < n; ++i) (*lp)[i] = static_cast<double>(logits[i]) - mx - lse;
  }
  return static_cast<double>(logits[target]) - mx - lse;
}

struct LogitsHeader {
  uint32_t n_vocab = 0, n_ctx = 0, n_chunks = 0, first = 0, n_tokens = 0;
};

// A --save-logits file: header, the text's tokens, then per scored position its top-1 token
// (int32, from the F32 logits: F16 rounding can tie the leaders) and its F16 log-probs.
class BaseLogits {
 public:
  Status open(const std::string& path) {
    f_.open(path, std::ios::binary);
    if (!f_) return io_error("cannot open '" + path + "'");
    f_.seekg(0, std::ios::end);
    const uint64_t size = static_cast<uint64_t>(f_.tellg());
    f_.seekg(0);
    char magic[8];
    uint32_t h[5];
    if (!f_.read(magic, 8) || std::memcmp(magic, kLogitsMagic, 8) != 0 || !f_.read(reinterpret_cast<char*>(h), sizeof h))
      return invalid_argument("'" + path + "' is not a duet --save-logits file");
    hdr_ = {h[0], h[1], h[2], h[3], h[4]};
    if (hdr_.n_vocab == 0 || hdr_.n_vocab > (1u << 24) || hdr_.n_ctx < 2 || hdr_.first >= hdr_.n_ctx - 1 ||
        hdr_.n_tokens > (1u << 28))
      return invalid_argument("'" + path + "': header out of range");
    uint64_t per_chunk = 0, expect = 0;
    if (!checked_mul(uint64_t{hdr_.n_ctx - 1 - hdr_.first}, 2ull * hdr_.n_vocab + 4, &per_chunk) ||
        !checked_mul(per_chunk, hdr_.n_chunks, &expect) || !checked_add(expect, 8 + sizeof h + 4ull * hdr_.n_tokens, &expect) ||
        expect != size)
      return invalid_argument("'" + path + "' holds " + std::to_string(size) + " bytes, its header describes " +
                              std::to_string(expect));
    tokens_.resize(hdr_.n_tokens);
    if (!f_.read(reinterpret_cast<char*>(tokens_.data()), 4ll * hdr_.n_tokens)) return io_error("short read of " + path);
    return Status::ok();
  }
  const LogitsHeader& header() const { return hdr_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Next scored position's top-1 token and log-probs.
  Status next(int32_t* top1, std::vector<float>* lp) {
    row_.resize(hdr_.n_vocab);
    if (!f_.read(reinterpret_cast<char*>(top1), 4) || !f_.read(reinterpret_cast<char*>(row_.data()), 2ll * hdr_.n_vocab))
      return io_error("short read of the base logits");
    if (*top1 < 0 || static_cast<uint32_t>(*top1) >= hdr_.n_vocab) return invalid_argument("base top-1 token out of range");
    lp->resize(hdr_.n_vocab);
    for (uint32_t i = 0; i < hdr_.n_vocab; ++i) (*lp)[i] = f16_to_f32(row_[i]);
    return Status::ok();
  }

 private:
  std::ifstream f_;
  LogitsHeader hdr_;
  std::vector<int32_t> tokens_;
  std::vector<uint16_t> row_;
};

}  // namespace

int run_perplexity(int argc, char** argv) {
  CLI::App app{"Perplexity of a text (llama.cpp's method), optionally KL divergence against a saved run",
               "duet perplexity"};
  std::string model_path, text_path, save_path, base_path;
  int n_ctx = 512, n_batch = 0, n_chunks = -1;
  BackendOptions bo;
  bool json = false;
  app.add_option("-m,--model", model_path, "GGUF file, or safetensors file/directory")->required();
  app.add_option("-f,--file", text_path, "text file")->required();
  app.add_option("-c,--ctx", n_ctx, "tokens per chunk (default 512)");
  app.add_option("-b,--batch", n_batch, "tokens per forward pass (default: the chunk)");
  app.add_option("--chunks", n_chunks, "score at most this many chunks (default: all)");
  app.add_flag("--json", json, "print one JSON object with the results");
  app.add_option("--save-logits", save_path, "write the scored positions' log-probs to this file");
  app.add_option("--kl-base", base_path, "compare with log-probs saved by --save-logits: KL divergence, top-1 agreement");
  add_backend_options(app, bo);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (n_ctx < 4 || n_ctx > (1 << 20) || n_batch < 0) {
    std::fprintf(stderr, "duet perplexity: -c must be in 4..2^20 and -b >= 0\n");
    return 2;
  }
  if (n_batch == 0 || n_batch > n_ctx) n_batch = n_ctx;

  auto weights = load_model_weights(model_path);
  if (!weights.is_ok()) return fail(weights.status().message());
  auto tok = load_model_tokenizer(weights.value(), model_path);
  if (!tok.is_ok()) return fail("tokenizer: " + tok.status().message());
  std::ifstream tf(text_path, std::ios::binary);
  if (!tf) return fail("cannot open '" + text_path + "'");
  const std::string text((std::istreambuf_iterator<char>(tf)), std::istreambuf_iterator<char>());
  const std::vector<int32_t> tokens = tok.value()->encode(text, EncodeOptions{/*add_special=*/true, /*parse_special=*/false});
  const bool add_bos = tok.value()->add_bos() && tok.value()->valid_id(tok.value()->bos_id());
  const int max_chunks = static_cast<int>(tokens.size() / n_ctx);
  const int chunks = n_chunks < 0 ? max_chunks : std::min(n_chunks, max_chunks);
  if (chunks < 1)
    return fail("the text has " + std::to_string(tokens.size()) + " tokens, fewer than one chunk of " + std::to_string(n_ctx));

  bo.max_context = static_cast<uint32_t>(n_ctx);
  bo.max_batch_tokens = static_cast<uint32_t>(n_batch > 0 ? n_batch : n_ctx);
  auto model_r = open_backend(std::move(weights.value()), bo);
  if (!model_r.is_ok()) return fail(model_r.status().message());
  ForwardModel& model = *model_r.value();
  const int64_t vocab = model.hparams().vocab_size;
  const int first = n_ctx / 2;
  const int scored_per_chunk = n_ctx - 1 - first;

  std::unique_ptr<BaseLogits> base;
  if (!base_path.empty()) {
    base = std::make_unique<BaseLogits>();
    Status st = base->open(base_path);
    if (!st.is_ok()) return fail(st.message());
    const LogitsHeader& h = base->header();
    if (h.n_vocab != vocab || h.n_ctx != static_cast<uint32_t>(n_ctx) || h.first != static_cast<uint32_t>(first) ||
        h.n_chunks < static_cast<uint32_t>(chunks) || base->tokens() != tokens)
      return fail("--kl-base file was made with another vocabulary, -c, text or fewer chunks");
  }
  std::FILE* save = nullptr;
  if (!save_path.empty()) {
    save = std::fopen(save_path.c_str(), "wb");
    if (!save) return fail("cannot write '" + save_path + "'");
    const uint32_t h[5] = {static_cast<uint32_t>(vocab), static_cast<uint32_t>(n_ctx), static_cast<uint32_t>(chunks),
                           static_cast<uint32_t>(first), static_cast<uint32_t>(tokens.size())};
    std::fwrite(kLogitsMagic, 1, 8, save);
    std::fwrite(h, sizeof h, 1, save);
    std::fwrite(tokens.data(), 4, tokens.size(), save);
  }

  Session session(model, static_cast<uint32_t>(n_batch));
  const int seq = session.add_sequence();
  double nll = 0, nll2 = 0, kl_sum = 0, kl2_sum = 0, kl_max = 0;
  int64_t count = 0, top1_same = 0;
  std::vector<double> chunk_ppl;
  std::vector<float> logits, base_lp;
  std::vector<double> lp;
  std::vector<uint16_t> half_row(save ? vocab : 0);
  const double t0 = now_seconds();
  for (int c = 0; c < chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + static_cast<int64_t>(c) * n_ctx, tokens.begin() + static_cast<int64_t>(c + 1) * n_ctx);
    if (add_bos) chunk[0] = tok.value()->bos_id();
    session.clear(seq);
    Status st = session.eval_from(seq, chunk, static_cast<size_t>(first), &logits);
    if (!st.is_ok()) return fail(st.message());
    for (int j = 0; j < scored_per_chunk; ++j) {
      const float* row = logits.data() + static_cast<size_t>(j) * vocab;
      const bool need_all = save || base;
      const double l = log_softmax(row, vocab, chunk[first + j + 1], need_all ? &lp : nullptr);
      nll -= l;
      nll2 += l * l;
      ++count;
      const int32_t arg_cur = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
      if (save) {
        for (int64_t v = 0; v < vocab; ++v) half_row[v] = f32_to_f16(static_cast<float>(lp[v]));
        std::fwrite(&arg_cur, 4, 1, save);
        std::fwrite(half_row.data(), 2, vocab, save);
      }
      if (base) {
        int32_t arg_base = 0;
        st = base->next(&arg_base, &base_lp);
        if (!st.is_ok()) return fail(st.message());
        double kl = 0;
        for (int64_t v = 0; v < vocab; ++v) {
          const double pb = std::exp(static_cast<double>(base_lp[v]));
          kl += pb * (static_cast<double>(base_lp[v]) - lp[v]);
        }
        kl_sum += kl;
        kl2_sum += kl * kl;
        kl_max = std::max(kl_max, kl);
        top1_same += arg_base == arg_cur;
      }
    }
    chunk_ppl.push_back(std::exp(nll / count));
    const double elapsed = now_seconds() - t0;
    std::fprintf(stderr, "[%d]%.4f%s", c + 1, chunk_ppl.back(), c + 1 == chunks ? "\n" : ",");
    if (c == 0 && chunks > 1)
      std::fprintf(stderr, " (%.2f s per chunk, ~%.0f s total) ", elapsed, elapsed * chunks);
    std::fflush(stderr);
  }
  if (save) std::fclose(save);
  const double seconds = now_seconds() - t0;
  const double mean = nll / count;
  const double ppl = std::exp(mean);
  const double var = nll2 / count - mean * mean;
  const double se = var > 0 && count > 1 ? std::sqrt(var / (count - 1)) * ppl : 0.0;
  const double tok_s = static_cast<double>(chunks) * n_ctx / seconds;
  nlohmann::json j = {{"model", model_path}, {"n_ctx", n_ctx}, {"n_chunks", chunks}, {"n_tokens", tokens.size()},
                      {"n_scored", count}, {"ppl", ppl}, {"ppl_se", se}, {"chunk_ppl", chunk_ppl},
                      {"seconds", seconds}, {"tok_s", tok_s}, {"device", model.device_name()}};
  if (base) {
    const double kl_mean = kl_sum / count;
    const double kl_var = kl2_sum / count - kl_mean * kl_mean;
    j["kl"] = {{"mean", kl_mean}, {"se", kl_var > 0 && count > 1 ? std::sqrt(kl_var / (count - 1)) : 0.0},
               {"max", kl_max}, {"top1_agreement", static_cast<double>(top1_same) / count}};
  }
  if (json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("Final estimate: PPL = %.4f +/- %.5f (%d chunks of %d tokens, %lld scored, %.1f tok/s)\n", ppl, se,
                chunks, n_ctx, static_cast<long long>(count), tok_s);
    if (base)
      std::printf("KL divergence vs base: mean %.6f +/- %.6f, max %.6f; top-1 agreement %.4f\n",
                  j["kl"]["mean"].get<double>(), j["kl"]["se"].get<double>(), kl_max,
                  j["kl"]["top1_agreement"].get<double>());
  }
  return 0;
}

}  // namespace duet
