// libFuzzer target for the safetensors reader (formats/safetensors.h). SafetensorsModel::parse
// must return a Status for any bytes (deeply nested JSON included): no crash, hang, over-read or
// unbounded allocation, and a failure is one non-empty line. A successful parse has every tensor
// span and metadata entry touched. Seeds: tests/fuzz/corpus/fuzz_safetensors; scripts/fuzz.sh.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "formats/safetensors.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = duet::SafetensorsModel::parse(data, size, "fuzz.safetensors");
  if (!r.is_ok()) {
    duet::fuzz::check_one_line(r.status());
    return 0;
  }
  const duet::SafetensorsModel& st = *r.value();
  size_t sink = st.total_bytes() + st.fp8().n_fp8_tensors;
  std::vector<std::pair<const uint8_t*, const uint8_t*>> spans;
  for (const auto& t : st.tensors()) {
    if (st.find(t.name) != &t) __builtin_trap();
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
  for (const auto& [k, v] : st.metadata()) sink += k.size() + v.size();
  volatile size_t keep = sink;
  (void)keep;
  return 0;
}
