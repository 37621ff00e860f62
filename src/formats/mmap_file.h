// MappedFile: a read-only memory map of a whole file. Owns the mapping; pages are touched only
// when read, so opening a large model costs no RSS. Not thread-affine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace duet {

class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Hint that [offset, offset+len) will not be read again (drops pages from RSS).
  void release(uint64_t offset, uint64_t len) const;

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::string path_;
};

}  // namespace duet
