// libFuzzer target for the Hugging Face tokenizer loader (tokenizer/hf_tokenizer_json.h) and the
// tokenizer it builds: a model directory's tokenizer.json is untrusted. Loading must return a
// Status for any bytes (no crash, hang or unbounded allocation), a failure is one non-empty
// line, and a tokenizer that loads must encode and decode a fixed text (plain words, digits,
// non-ASCII, invalid UTF-8 and every added token's text) without crashing, with every id it
// returns inside its vocabulary. Seeds: tests/fuzz/corpus/fuzz_tokenizer_json; scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  auto spec = duet::tokenizer_spec_from_hf_json_text(json, "");
  if (!spec.is_ok()) {
    duet::fuzz::check_one_line(spec.status());
    return 0;
  }
  std::string text = "Hello, world! 12345 caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xff\xfe  tabs\tand\nnewlines";
  for (const auto& a : spec.value().added_tokens) text += a.content.substr(0, 64) + " x";
  auto tok = duet::Tokenizer::create(std::move(spec.value()));
  if (!tok.is_ok()) {
    duet::fuzz::check_one_line(tok.status());
    return 0;
  }
  duet::EncodeOptions opt;
  opt.add_special = true;
  opt.parse_special = true;
  const duet::Tokenizer& t = *tok.value();
  const std::vector<int32_t> ids = t.encode(text, opt);
  for (int32_t id : ids)
    if (!t.valid_id(id)) __builtin_trap();  // every id names a token
  (void)t.decode(ids);
  return 0;
}
