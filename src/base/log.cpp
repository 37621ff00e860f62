// Logging and progress implementation (see log.h).
#include "base/log.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <mutex>

namespace duet {
namespace {
LogLevel g_level = LogLevel::kInfo;
std::mutex g_mu;
}  // namespace

void set_log_level(LogLevel level) { g_level = level; }

void log_msg(LogLevel level, const char* fmt, ...) {
  if (level < g_level) return;
  static const char* kNames[] = {"debug", "info", "warn", "error"};
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "duet %s: %s\n", kNames[static_cast<int>(level)], buf);
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  double b = static_cast<double>(bytes);
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

Progress::Progress(std::string label, uint64_t total, bool quiet)
    : label_(std::move(label)), total_(total ? total : 1), quiet_(quiet),
      tty_(isatty(STDERR_FILENO) != 0), start_s_(now_seconds()) {}

Progress::~Progress() { finish(); }

void Progress::update(uint64_t done, const std::string& detail) {
  if (quiet_ || finished_) return;
  double now = now_seconds();
  double frac = static_cast<double>(done) / static_cast<double>(total_);
  if (frac > 1) frac = 1;
  int decile = static_cast<int>(frac * 10);
  if (tty_) {
    if (now - last_draw_s_ < 0.1 && done < total_) return;
  } else if (decile == last_decile_) {
    return;
  }
  last_draw_s_ = now;
  last_decile_ = decile;
  char bar[21];
  int filled = static_cast<int>(frac * 20);
  for (int i = 0; i < 20; ++i) bar[i] = i < filled ? '#' : ' ';
  bar[20] = 0;
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "%s%s [%s] %3d%% %s %.1f s%s", tty_ ? "\r" : "", label_.c_str(), bar,
               static_cast<int>(frac * 100), detail.c_str(), now - start_s_, tty_ ? "\033[K" : "\n");
  std::fflush(stderr);
}

void Progress::finish() {
  if (quiet_ || finished_) return;
  update(total_);
  finished_ = true;
  if (tty_) std::fprintf(stderr, "\n");
}

}  // namespace duet
