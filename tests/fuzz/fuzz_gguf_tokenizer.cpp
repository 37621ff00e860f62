// libFuzzer target for the tokenizer of a GGUF file (formats/gguf_tokenizer.h): the vocabulary,
// merges, scores, token types and special ids are untrusted metadata. Parsing the file, building
// the TokenizerSpec and the Tokenizer must return a Status for any bytes (no crash, hang or
// unbounded allocation), a failure is one non-empty line, and a tokenizer that loads must encode
// and decode a fixed text (with special tokens parsed) to ids inside its vocabulary. Seeds:
// tests/fuzz/corpus/fuzz_gguf_tokenizer (a gpt2/qwen2 BPE and a llama SPM vocabulary, written
// with the gguf package); run with scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/gguf_tokenizer.h"
#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = duet::GgufFile::parse(data, size, "fuzz.gguf");
  if (!file.is_ok()) {
    duet::fuzz::check_one_line(file.status());
    return 0;
  }
  auto spec = duet::tokenizer_spec_from_gguf(*file.value());
  if (!spec.is_ok()) {
    duet::fuzz::check_one_line(spec.status());
    return 0;
  }
  auto tok = duet::Tokenizer::create(std::move(spec.value()));
  if (!tok.is_ok()) {
    duet::fuzz::check_one_line(tok.status());
    return 0;
  }
  const duet::Tokenizer& t = *tok.value();
  duet::EncodeOptions opt;
  opt.add_special = true;
  opt.parse_special = true;
  const std::vector<int32_t> ids =
      t.encode("Hello world! 12345 caf\xc3\xa9 \xff <s></s><|im_start|>x<|im_end|>\n\t end", opt);
  for (int32_t id : ids)
    if (!t.valid_id(id)) __builtin_trap();  // every id names a token
  (void)t.decode(ids);
  return 0;
}
