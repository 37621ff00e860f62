// Benchmark knobs from the environment (DUET_* A/B switches of the CUDA kernels and runner; each
// documented where it is read). Header-only, no state: callers that read a knob once cache the
// value themselves (`static const bool on = env_flag(..)`).
#pragma once

#include <cstdlib>

namespace duet {

// A switch that is `dflt` when unset or empty, off when its value starts with '0' and on
// otherwise ("1", "on", ...).
inline bool env_flag(const char* name, bool dflt) {
  const char* e = std::getenv(name);
  if (e == nullptr || e[0] == '\0') return dflt;
  return e[0] != '0';
}

// An integer knob: its value when set to a decimal number in [lo, hi], else -1.
inline int env_int(const char* name, int lo, int hi) {
  const char* e = std::getenv(name);
  if (e == nullptr || e[0] < '0' || e[0] > '9') return -1;
  const int v = std::atoi(e);
  return v >= lo && v <= hi ? v : -1;
}

}  // namespace duet
