// `duet tokenize`: encode stdin text to token ids or decode ids to text with a tokenizer.json or
// a GGUF model's tokenizer; batch (--jsonl) and timing (--bench) modes for tests and benchmarks.
#pragma once

namespace duet {

int run_tokenize(int argc, char** argv);

}  // namespace duet
