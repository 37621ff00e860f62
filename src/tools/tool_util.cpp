// Shared helpers of the conversion commands (see tool_util.h).
#include "tools/tool_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "base/text.h"
#include "formats/hf_tokenizer_gguf.h"

namespace duet {

int tool_error(const char* cmd, const std::string& msg) {
  std::fprintf(stderr, "duet %s: %s\n", cmd, msg.c_str());
  return 1;
}

bool is_gguf_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char m[4] = {};
  size_t n = std::fread(m, 1, 4, f);
  std::fclose(f);
  return n == 4 && m[0] == 'G' && m[1] == 'G' && m[2] == 'U' && m[3] == 'F';
}

std::string basename_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t k = p.find_last_of('/');
  return k == std::string::npos ? p : p.substr(k + 1);
}

std::optional<SafetensorsOutType> safetensors_out_type(const std::string& name) {
  if (name == "st-bf16") return SafetensorsOutType::kBF16;
  if (name == "fp8-channel") return SafetensorsOutType::kFP8PerChannel;
  if (name == "fp8-tensor") return SafetensorsOutType::kFP8PerTensor;
  if (name == "fp8-block") return SafetensorsOutType::kFP8Block;
  return std::nullopt;
}

namespace {
std::string exe_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = 0;
  std::string p(buf);
  return p.substr(0, p.find_last_of('/'));
}
}  // namespace

std::optional<std::string> find_tokenizer_dir(const std::string& name) {
  if (is_dir(name) && is_file(name + "/tokenizer.json")) return name;
  std::vector<std::string> roots;
  if (const char* e = std::getenv("DUET_TOKENIZERS")) roots.push_back(e);
  roots.push_back("shared/tokenizers");
  roots.push_back("../shared/tokenizers");
  roots.push_back(exe_dir() + "/../../shared/tokenizers");
  roots.push_back(exe_dir() + "/../shared/tokenizers");
  for (const auto& r : roots)
    if (is_file(r + "/" + name + "/tokenizer.json")) return r + "/" + name;
  return std::nullopt;
}

Status add_tokenizer(GgufWriter& w, const HParams& hp, const std::string& tokenizer_from, const std::string& hf_dir,
                     const std::string& pre_in) {
  if (!tokenizer_from.empty()) {
    auto g = GgufFile::open(tokenizer_from);
    if (!g.is_ok()) return g.status();
    return copy_gguf_tokenizer(**g, w);
  }
  std::string pre = pre_in;
  if (pre.empty()) pre = hp.arch == Arch::kLlama ? "llama-bpe" : (hp.arch == Arch::kGemma3 ? "llama-bpe" : "qwen2");
  return hf_tokenizer_to_gguf(hf_dir, pre, hp.vocab_size, w);
}

Status write_safetensors_dir(const TensorSourceSet& src, SafetensorsOutType type, nlohmann::json config,
                             const std::string& src_dir, const std::string& out_dir, const ConvertOptions& opt) {
  if (!is_dir(out_dir) && mkdir(out_dir.c_str(), 0755) != 0) return io_error(out_dir + ": cannot create directory");
  DUET_RETURN_IF_ERROR(write_safetensors(src, type, out_dir + "/model.safetensors", opt));
  if (!config.is_object()) config = nlohmann::json::object();
  config.erase("quantization_config");
  if (type != SafetensorsOutType::kBF16) config["quantization_config"] = fp8_quantization_config(type);
  config["torch_dtype"] = "bfloat16";
  {
    std::ofstream o(out_dir + "/config.json");
    o << config.dump(2) << "\n";
    if (!o) return io_error(out_dir + "/config.json: write failed");
  }
  for (const char* f : {"generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    std::string from = src_dir + "/" + f;
    if (src_dir.empty() || !is_file(from)) continue;
    std::ifstream i(from, std::ios::binary);
    std::ofstream o(out_dir + "/" + f, std::ios::binary);
    o << i.rdbuf();
  }
  return Status::ok();
}

}  // namespace duet
