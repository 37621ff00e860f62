// `duet quantize IN OUT --type T`: GGUF or HF safetensors in; GGUF of any file type out (K-quant
// mixes included), or an FP8/BF16 safetensors directory out. Streams tensor by tensor.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>

#include "base/log.h"
#include "formats/arch.h"
#include "formats/convert.h"
#include "formats/hf_tokenizer_gguf.h"
#include "tools/commands.h"
#include "tools/tool_util.h"

namespace duet {

int run_quantize(int argc, char** argv) {
  CLI::App app{"Convert a model to GGUF of any type, or to FP8/BF16 safetensors", "duet quantize"};
  std::string in, out, type, tokenizer_from, pre;
  int threads = 0;
  bool quiet = false;
  app.add_option("input", in, "GGUF file, or HF safetensors file/directory")->required();
  app.add_option("output", out, "output .gguf file, or a directory for safetensors types")->required();
  app.add_option("-t,--type", type,
                 "GGUF file type (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M "
                 "Q5_K_S Q5_K_M Q6_K) or safetensors type (st-bf16 fp8-channel fp8-tensor fp8-block)")
      ->required();
  app.add_option("--threads", threads, "worker threads (default: all cores)");
  app.add_option("--tokenizer-from", tokenizer_from, "copy tokenizer.* metadata from this GGUF");
  app.add_option("--tokenizer-pre", pre, "GGUF tokenizer.ggml.pre for an HF tokenizer (default by architecture)");
  app.add_flag("-q,--quiet", quiet, "no progress output");
  CLI11_PARSE(app, argc, argv);
  ConvertOptions opt{threads, quiet};
  double t0 = now_seconds();

  auto st_type = safetensors_out_type(type);
  auto ft = file_type_from_name(type);
  if (!st_type && !ft) return tool_error("quantize", "unknown --type '" + type + "'");
  const bool in_gguf = is_gguf_file(in);

  if (st_type) {
    if (in_gguf) return tool_error("quantize", "safetensors output needs a safetensors input (got a GGUF file)");
    auto m = SafetensorsModel::open(in);
    if (!m.is_ok()) return tool_error("quantize", m.status().message());
    std::shared_ptr<SafetensorsModel> model(std::move(m).value());
    auto src = safetensors_tensor_source_hf_names(model);
    if (!src.is_ok()) return tool_error("quantize", src.status().message());
    Status s = write_safetensors_dir(*src, *st_type, model->config(), model->dir(), out, opt);
    if (!s.is_ok()) return tool_error("quantize", s.message());
  } else if (in_gguf) {
    std::shared_ptr<GgufFile> g;
    auto src = gguf_tensor_source(in, &g);
    if (!src.is_ok()) return tool_error("quantize", src.status().message());
    GgufWriter w(g->alignment());
    for (const auto& [k, v] : g->metadata())
      if (k != "general.file_type" && k != "general.quantization_version") w.set(k, v);
    MixModelInfo mix;
    auto hp = hparams_from_gguf(*g);
    if (hp.is_ok()) mix = {static_cast<int>(hp->n_layers), static_cast<int>(hp->n_heads), static_cast<int>(hp->n_kv_heads), true};
    else DUET_LOG_WARN("%s; K-quant mix uses defaults", hp.status().message().c_str());
    Status s = write_gguf(*src, w, *ft, mix, out, opt);
    if (!s.is_ok()) return tool_error("quantize", s.message());
  } else {
    auto m = SafetensorsModel::open(in);
    if (!m.is_ok()) return tool_error("quantize", m.status().message());
    std::shared_ptr<SafetensorsModel> model(std::move(m).value());
    auto hp = hparams_from_hf_config(model->config());
    if (!hp.is_ok()) return tool_error("quantize", model->dir() + "/config.json: " + hp.status().message());
    auto src = safetensors_tensor_source_gguf_names(model, *hp);
    if (!src.is_ok()) return tool_error("quantize", src.status().message());
    GgufWriter w;
    hparams_to_gguf(*hp, w);
    w.set("general.name", GgufValue::str(basename_of(model->dir())));
    Status s = add_tokenizer(w, *hp, tokenizer_from, model->dir(), pre);
    if (!s.is_ok()) return tool_error("quantize", s.message());
    MixModelInfo mix{static_cast<int>(hp->n_layers), static_cast<int>(hp->n_heads), static_cast<int>(hp->n_kv_heads), true};
    s = write_gguf(*src, w, *ft, mix, out, opt);
    if (!s.is_ok()) return tool_error("quantize", s.message());
  }
  if (!quiet) std::fprintf(stderr, "duet quantize: wrote %s in %.1f s\n", out.c_str(), now_seconds() - t0);
  return 0;
}

}  // namespace duet
