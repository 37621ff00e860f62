// DeviceBuffer: one cudaMalloc'd allocation with RAII ownership (plain device memory, never
// managed memory). Typed views are the caller's; the buffer only knows bytes. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "runtime/cuda_check.h"

namespace duet::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { resize(bytes); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }

  // Drops the contents; a no-op when the size is already at least `bytes`.
  void reserve(size_t bytes) {
    if (bytes > bytes_) resize(bytes);
  }
  void resize(size_t bytes) {
    release();
    if (bytes) DUET_CUDA_CHECK(cudaMalloc(&p_, bytes));
    bytes_ = bytes;
  }
  void release() {
    if (p_) DUET_CUDA_CHECK(cudaFree(p_));
    p_ = nullptr;
    bytes_ = 0;
  }

  void* data() const { return p_; }
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace duet::cuda
