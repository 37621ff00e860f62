// `duet tokenize --tokenizer FILE | -m MODEL [--json] [--jsonl] [--no-special] [--add-bos]
//  [--add-special] [--decode [--skip-special] [--stream]] [--bench N]`
// Reads UTF-8 text (or ids with --decode) from stdin and writes ids (or text) to stdout.
// --jsonl: one JSON string (or id list) per input line, one JSON result per output line.
// --bench N: encodes stdin N times single-threaded and prints the best time (load excluded).
#include "tools/tokenize_cmd.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/gguf_tokenizer.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace duet {
namespace {

using json = nlohmann::json;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_directory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path,
                                                  const std::string& config) {
  Result<TokenizerSpec> spec = invalid_argument("no tokenizer");
  if (ends_with(path, ".gguf")) {
    auto f = GgufFile::open(path);
    if (!f.is_ok()) return f.status();
    spec = tokenizer_spec_from_gguf(*f.value());
  } else {
    std::string p = path;
    if (is_directory(p)) p += "/tokenizer.json";
    spec = tokenizer_spec_from_hf_json(p, config);
  }
  if (!spec.is_ok()) return spec.status();
  return Tokenizer::create(std::move(spec.value()));
}

std::string read_all_stdin() {
  std::ios::sync_with_stdio(false);
  std::string s((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  return s;
}

// Ids separated by whitespace, commas or brackets (so a JSON list works too).
Result<std::vector<int32_t>> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == '[' || c == ']') {
      ++i;
      continue;
    }
    size_t j = i;
    if (s[j] == '-') ++j;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j == i || (j == i + 1 && s[i] == '-') || j - i > 11) {
      return invalid_argument("expected a token id at byte " + std::to_string(i) + " of the input");
    }
    long long v = std::stoll(s.substr(i, j - i));
    if (v < INT32_MIN || v > INT32_MAX)
      return invalid_argument("token id " + s.substr(i, j - i) + " out of range");
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  return ids;
}

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(ids[i]);
  }
  return out + "]";
}

std::string ids_plain(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  return out;
}

// Decodes with the streaming detokenizer, checking that every chunk is valid UTF-8.
Result<std::string> decode_streaming(const Tokenizer& tok, const std::vector<int32_t>& ids,
                                     const DecodeOptions& opts) {
  IncrementalDetokenizer detok(tok, opts);
  std::string all, chunk;
  for (int32_t id : ids) {
    chunk.clear();
    detok.push(id, &chunk);
    if (!tok::utf8_is_valid(chunk))
      return Status(StatusCode::kInternal, "streamed chunk is not valid UTF-8");
    all += chunk;
  }
  chunk = detok.finish();
  if (!tok::utf8_is_valid(chunk))
    return Status(StatusCode::kInternal, "final chunk is not valid UTF-8");
  return all + chunk;
}

}  // namespace

int run_tokenize(int argc, char** argv) {
  CLI::App app{"Encode stdin text to token ids, or decode ids to text", "duet tokenize"};
  std::string tokenizer_path, model_path, config_path;
  bool as_json = false, jsonl = false, no_special = false, add_bos = false, add_special = false;
  bool decode = false, skip_special = false, stream = false;
  int bench = 0;
  app.add_option("--tokenizer", tokenizer_path,
                 "tokenizer.json, a directory holding one, or a .gguf file");
  app.add_option("-m,--model", model_path, "GGUF model whose tokenizer to use");
  app.add_option("--config", config_path,
                 "tokenizer_config.json (default: next to tokenizer.json)");
  app.add_flag("--json", as_json, "print a JSON list (decode: a JSON string)");
  app.add_flag("--jsonl", jsonl, "batch: one JSON string (decode: id list) per input line");
  app.add_flag("--no-special", no_special,
               "treat special tokens written in the text as plain text");
  app.add_flag("--add-bos", add_bos, "prepend the BOS token");
  app.add_flag("--add-special", add_special, "add BOS/EOS as the tokenizer's metadata says");
  app.add_flag("--decode", decode, "read token ids and print text");
  app.add_flag("--skip-special", skip_special, "decode: drop special tokens");
  app.add_flag("--stream", stream, "decode: use the incremental (streaming) detokenizer");
  app.add_option("--bench", bench, "encode stdin N times and print the best time (load excluded)");
  CLI11_PARSE(app, argc, argv);
  if (tokenizer_path.empty() == model_path.empty()) {
    std::fprintf(stderr, "duet tokenize: give exactly one of --tokenizer FILE or -m MODEL\n");
    return 2;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto tok = load_tokenizer(tokenizer_path.empty() ? model_path : tokenizer_path, config_path);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "duet tokenize: %s\n", tok.status().message().c_str());
    return 1;
  }
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Tokenizer& t = *tok.value();
  EncodeOptions eopts;
  eopts.parse_special = !no_special;
  eopts.add_special = add_special;
  DecodeOptions dopts;
  dopts.skip_special = skip_special;

  auto encode = [&](const std::string& text) {
    std::vector<int32_t> ids;
    if (add_bos && t.bos_id() >= 0 && !(add_special && t.add_bos())) ids.push_back(t.bos_id());
    t.encode(text, eopts, &ids);
    return ids;
  };
  auto decode_ids = [&](const std::vector<int32_t>& ids) -> Result<std::string> {
    if (stream) return decode_streaming(t, ids, dopts);
    return t.decode(ids, dopts);
  };

  std::string input = read_all_stdin();
  if (bench > 0) {
    std::vector<int32_t> ids;
    double best = 1e30;
    for (int r = 0; r < bench; ++r) {
      ids.clear();
      auto a = std::chrono::steady_clock::now();
      t.encode(input, eopts, &ids);
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
    json j = {{"bytes", input.size()}, {"n_tokens", ids.size()},
              {"best_s", best},        {"mb_per_s", input.size() / best / 1e6},
              {"load_s", load_s},      {"runs", bench}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }

  if (jsonl) {
    std::istringstream lines(input);
    std::string line, out;
    size_t lineno = 0;
    while (std::getline(lines, line)) {
      ++lineno;
      if (line.empty()) continue;
      json v = json::parse(line, nullptr, false);
      if (decode) {
        if (v.is_discarded() || !v.is_array()) {
          std::fprintf(stderr, "duet tokenize: line %zu: expected a JSON list of ids\n", lineno);
          return 1;
        }
        std::vector<int32_t> ids;
        for (const json& x : v) {
          if (!x.is_number_integer()) {
            std::fprintf(stderr, "duet tokenize: line %zu: non-integer id\n", lineno);
            return 1;
          }
          ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
        }
        auto text = decode_ids(ids);
        if (!text.is_ok()) {
          std::fprintf(stderr, "duet tokenize: line %zu: %s\n", lineno,
                       text.status().message().c_str());
          return 1;
        }
        out += json(text.value()).dump(-1, ' ', false, json::error_handler_t::replace);
      } else {
        if (v.is_discarded() || !v.is_string()) {
          std::fprintf(stderr, "duet tokenize: line %zu: expected a JSON string\n", lineno);
          return 1;
        }
        out += ids_json(encode(v.get<std::string>()));
      }
      out += '\n';
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }

  if (decode) {
    auto ids = parse_ids(input);
    if (!ids.is_ok()) {
      std::fprintf(stderr, "duet tokenize: %s\n", ids.status().message().c_str());
      return 1;
    }
    auto text = decode_ids(ids.value());
    if (!text.is_ok()) {
      std::fprintf(stderr, "duet tokenize: %s\n", text.status().message().c_str());
      return 1;
    }
    if (as_json)
      std::printf("%s\n", json(text.value()).dump().c_str());
    else
      std::fwrite(text.value().data(), 1, text.value().size(), stdout);
    return 0;
  }
  std::vector<int32_t> ids = encode(input);
  std::printf("%s\n", as_json ? ids_json(ids).c_str() : ids_plain(ids).c_str());
  return 0;
}

}  // namespace duet
