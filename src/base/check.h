// DUET_CHECK: aborts loudly on a broken internal invariant (never for bad input: use Status).
// Also overflow-safe arithmetic helpers used by every parser of untrusted sizes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define DUET_CHECK(cond)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "duet: CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

#define DUET_CHECK_MSG(cond, ...)                                                    \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "duet: CHECK failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                             \
      std::fprintf(stderr, "\n");                                                    \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

namespace duet {

// Returns false on overflow; *out is only meaningful when true.
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
inline bool checked_add(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

}  // namespace duet
