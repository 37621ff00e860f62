// `duet synth --arch A --shape S --type T -o OUT`: random N(0, 0.02) weights with the exact
// tensor shapes of a real model and a real tokenizer, as GGUF (any file type) or as a
// safetensors directory (st-bf16 / fp8-*). Used to benchmark where real checkpoints can't go.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "base/log.h"
#include "formats/arch.h"
#include "formats/convert.h"
#include "tools/commands.h"
#include "tools/tool_util.h"

namespace duet {

int run_synth(int argc, char** argv) {
  CLI::App app{"Write a random-weight model with the shapes of a real one", "duet synth"};
  std::string arch, shape, type, out, tokenizer, tokenizer_from, pre;
  uint64_t seed = 1;
  int threads = 0, layers = 0;
  bool quiet = false;
  std::string shapes_help = "named shape:";
  for (const auto& n : hparams_preset_names()) shapes_help += " " + n;
  app.add_option("--arch", arch, "qwen2 | qwen3 | llama | gemma3")->required();
  app.add_option("--shape", shape, shapes_help)->required();
  app.add_option("-t,--type", type, "GGUF file type (Q4_K_M, Q8_0, F16, BF16, ...) or st-bf16 / fp8-channel / fp8-tensor / fp8-block")->required();
  app.add_option("-o,--output", out, "output .gguf file, or directory for safetensors types")->required();
  app.add_option("--seed", seed, "random seed");
  app.add_option("--threads", threads, "worker threads (default: all cores)");
  app.add_option("--layers", layers, "override the number of layers (smaller test models)");
  app.add_option("--tokenizer", tokenizer, "tokenizer name under shared/tokenizers (qwen3, llama3, deepseek_v3) or a directory with tokenizer.json");
  app.add_option("--tokenizer-from", tokenizer_from, "copy tokenizer.* metadata from this GGUF instead");
  app.add_option("--tokenizer-pre", pre, "GGUF tokenizer.ggml.pre (default by architecture)");
  app.add_flag("-q,--quiet", quiet, "no progress output");
  CLI11_PARSE(app, argc, argv);
  auto hp = hparams_preset(shape);
  if (!hp) return tool_error("synth", "unknown --shape '" + shape + "' (" + shapes_help + ")");
  if (arch_name(hp->arch) != arch)
    return tool_error("synth", "shape '" + shape + "' is a " + arch_name(hp->arch) + " model, not " + arch);
  if (layers > 0) hp->n_layers = static_cast<uint32_t>(layers);
  ConvertOptions opt{threads, quiet};
  double t0 = now_seconds();
  TensorSourceSet src = random_tensor_source(*hp, seed);

  if (auto st = safetensors_out_type(type)) {
    for (auto& t : src.tensors) {
      auto hf = hf_name_from_gguf(t.name, hp->arch);
      if (!hf) return tool_error("synth", "no HF name for tensor " + t.name);
      t.name = *hf;
    }
    std::string tok_dir;
    if (tokenizer_from.empty()) {
      std::string name = tokenizer.empty() ? (hp->arch == Arch::kLlama || hp->arch == Arch::kGemma3 ? "llama3" : "qwen3") : tokenizer;
      if (auto d = find_tokenizer_dir(name)) tok_dir = *d;
    }
    Status s = write_safetensors_dir(src, *st, hparams_to_hf_config(*hp), tok_dir, out, opt);
    if (!s.is_ok()) return tool_error("synth", s.message());
  } else {
    auto ft = file_type_from_name(type);
    if (!ft) return tool_error("synth", "unknown --type '" + type + "'");
    GgufWriter w;
    hparams_to_gguf(*hp, w);
    w.set("general.name", GgufValue::str("duet-synth-" + shape));
    std::string tok_dir;
    if (tokenizer_from.empty()) {
      std::string name = tokenizer.empty() ? (hp->arch == Arch::kLlama || hp->arch == Arch::kGemma3 ? "llama3" : "qwen3") : tokenizer;
      auto d = find_tokenizer_dir(name);
      if (!d) return tool_error("synth", "tokenizer '" + name + "' not found (give --tokenizer DIR or set DUET_TOKENIZERS)");
      tok_dir = *d;
    }
    Status s = add_tokenizer(w, *hp, tokenizer_from, tok_dir, pre);
    if (!s.is_ok()) return tool_error("synth", s.message());
    MixModelInfo mix{static_cast<int>(hp->n_layers), static_cast<int>(hp->n_heads), static_cast<int>(hp->n_kv_heads), true};
    s = write_gguf(src, w, *ft, mix, out, opt);
    if (!s.is_ok()) return tool_error("synth", s.message());
  }
  if (!quiet) std::fprintf(stderr, "duet synth: wrote %s in %.1f s\n", out.c_str(), now_seconds() - t0);
  return 0;
}

}  // namespace duet
