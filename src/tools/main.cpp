// duet: one binary, many subcommands. Only dispatch lives here; each command is its own file.
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/commands.h"
#include "tools/template_cmd.h"
#include "tools/tokenize_cmd.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* help;
};

const Command kCommands[] = {
    {"inspect", duet::run_inspect, "show a model file's architecture, types, tokens (GGUF or safetensors)"},
    {"quantize", duet::run_quantize, "convert safetensors/GGUF to GGUF of any type, or to FP8 safetensors"},
    {"synth", duet::run_synth, "write a random-weight model with the exact shapes of a real one"},
    {"run", duet::run_run, "generate text from a prompt on the CPU or GPU (greedy or sampled, --chat)"},
    {"bench", duet::run_bench_cmd, "prompt and decode speed (llama-bench's tests), with roofline fractions"},
    {"perplexity", duet::run_perplexity, "perplexity of a text file, llama.cpp's method (--save-logits / --kl-base)"},
    {"template", duet::run_template, "render a model's chat template for a conversation (JSON messages)"},
    {"tokenize", duet::run_tokenize, "text -> token ids (or ids -> text with --decode) with a model's tokenizer"},
};

void usage() {
  std::printf("usage: duet <command> [options]\n\ncommands:\n");
  for (const auto& c : kCommands) std::printf("  %-10s %s\n", c.name, c.help);
  std::printf("\nRun 'duet <command> --help' for a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : kCommands)
    if (!std::strcmp(argv[1], c.name)) return c.fn(argc - 1, argv + 1);
  std::fprintf(stderr, "duet: unknown command '%s'\n", argv[1]);
  usage();
  return 2;
}
