// libFuzzer target for the GGUF reader (formats/gguf.h). GgufFile::parse must return a Status for
// any bytes: no crash, hang, over-read or allocation the input cannot back, and a failure is one
// non-empty line. A successful parse has everything it exposes touched, so the sanitizers check
// every pointer and value. Seeds: tests/fuzz/corpus/fuzz_gguf; run with scripts/fuzz.sh.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "formats/gguf.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = duet::GgufFile::parse(data, size, "fuzz.gguf");
  if (!r.is_ok()) {
    duet::fuzz::check_one_line(r.status());
    return 0;
  }
  const duet::GgufFile& g = *r.value();
  size_t sink = 0;
  for (const auto& [key, value] : g.metadata()) {
    sink += value.to_display().size();
    if (g.find(key) == nullptr) __builtin_trap();
    sink +=
        static_cast<size_t>(value.as_int()) + value.as_string().size() + value.as_array().size();
  }
  (void)g.get_string("general.architecture");
  (void)g.get_int("general.alignment", 0);
  (void)g.get_float("general.alignment", 0);
  sink += g.architecture().size();
  std::vector<std::pair<const uint8_t*, const uint8_t*>> spans;
  for (const auto& t : g.tensors()) {
    if (g.find_tensor(t.name) != &t) __builtin_trap();
    auto rb = duet::row_bytes(t.dtype, t.n_elements);  // whole tensor as one row: same byte count
    if (!rb || *rb != t.n_bytes) __builtin_trap();
    const uintptr_t off = reinterpret_cast<uintptr_t>(t.data) - reinterpret_cast<uintptr_t>(data);
    if (t.data < data || off > size || t.n_bytes > size - off)
      __builtin_trap();                                        // inside the input
    if (t.n_bytes) sink += t.data[0] + t.data[t.n_bytes - 1];  // ASan checks both ends
    if (t.n_bytes) spans.emplace_back(t.data, t.data + t.n_bytes);
  }
  // Oracle independent of the parser's own check: accepted tensors never share a byte.
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) __builtin_trap();
  volatile size_t keep = sink;
  (void)keep;
  return 0;
}
