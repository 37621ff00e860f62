// Shared by the libFuzzer targets: the parsers' error contract, checked on every failure.
#pragma once

#include <string>

#include "base/status.h"

namespace duet::fuzz {

// A failure is one non-empty line; anything else stops the fuzzer (a finding).
inline void check_one_line(const Status& s) {
  const std::string& m = s.message();
  if (m.empty() || m.find('\n') != std::string::npos) __builtin_trap();
}

}  // namespace duet::fuzz
