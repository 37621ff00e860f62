// `duet inspect FILE|DIR [--json] [--tensors]`: headers only, never the tensor data.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "formats/model_summary.h"
#include "tools/commands.h"

namespace duet {

int run_inspect(int argc, char** argv) {
  CLI::App app{"Show what a model file holds (reads headers only)", "duet inspect"};
  std::string path;
  bool json = false, tensors = false;
  app.add_option("model", path, "GGUF file, safetensors file, or HF model directory")->required();
  app.add_flag("--json", json, "print JSON");
  app.add_flag("--tensors", tensors, "list every tensor");
  CLI11_PARSE(app, argc, argv);
  Result<ModelSummary> s = summarize_model(path);
  if (!s.is_ok()) {
    std::fprintf(stderr, "duet inspect: %s\n", s.status().message().c_str());
    return 1;
  }
  if (json) std::printf("%s\n", summary_to_json(*s, tensors).dump(2).c_str());
  else std::printf("%s", summary_to_text(*s, tensors).c_str());
  return 0;
}

}  // namespace duet
