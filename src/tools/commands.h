// Entry points of the duet subcommands; main.cpp dispatches argv[1] to one of these.
// Each returns the process exit code (0 ok, 1 runtime error, 2 usage error).
#pragma once

namespace duet {

int run_inspect(int argc, char** argv);
int run_quantize(int argc, char** argv);
int run_synth(int argc, char** argv);
int run_run(int argc, char** argv);         // tools/run_cmd.cpp
int run_perplexity(int argc, char** argv);  // tools/perplexity_cmd.cpp
int run_bench_cmd(int argc, char** argv);   // tools/bench_cmd.cpp

}  // namespace duet
