// Minimal leveled logging to stderr and a terminal progress line for long work.
// Thread-safe for whole lines; progress is meant for the main thread of a tool.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <string>

namespace duet {

enum class LogLevel { kDebug, kInfo, kWarn, kError };
void set_log_level(LogLevel level);
void log_msg(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

#define DUET_LOG_INFO(...) ::duet::log_msg(::duet::LogLevel::kInfo, __VA_ARGS__)
#define DUET_LOG_WARN(...) ::duet::log_msg(::duet::LogLevel::kWarn, __VA_ARGS__)
#define DUET_LOG_ERROR(...) ::duet::log_msg(::duet::LogLevel::kError, __VA_ARGS__)
#define DUET_LOG_DEBUG(...) ::duet::log_msg(::duet::LogLevel::kDebug, __VA_ARGS__)

// Progress prints "label [#####     ] 42% 1.2 GB/2.9 GB 3.1 s" on stderr, redrawn in place on a
// terminal and once every ~10% otherwise. Disabled by quiet=true.
class Progress {
 public:
  Progress(std::string label, uint64_t total, bool quiet = false);
  ~Progress();
  void update(uint64_t done, const std::string& detail = "");
  void finish();

 private:
  std::string label_;
  uint64_t total_;
  bool quiet_;
  bool tty_;
  bool finished_ = false;
  int last_decile_ = -1;
  double start_s_;
  double last_draw_s_ = 0;
};

double now_seconds();
std::string format_bytes(uint64_t bytes);

}  // namespace duet
