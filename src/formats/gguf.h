// GGUF v2/v3 reader and streaming writer. Owns the parsed header (metadata + tensor infos) and the
// file mapping; tensor data stays in the mmap and is never copied. Every size, count, offset and
// string length read from a file is validated before use (the file is untrusted input).
// Used from one thread at a time; tensor data pointers may be shared read-only across threads.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"
#include "formats/mmap_file.h"
#include "tensor/dtype.h"

namespace duet {

enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* gguf_type_name(GgufType t);

struct GgufArray;

// One metadata value. Integers of every width are held as int64_t (uint64 keeps its bit
// pattern), floats as double, bool as int64_t 0/1; `type` remembers the on-disk type so that a
// value read and written back is byte-identical.
struct GgufValue {
  GgufType type = GgufType::kUint32;
  std::variant<int64_t, double, std::string, std::shared_ptr<GgufArray>> v;

  static GgufValue u32(uint32_t x) { return {GgufType::kUint32, int64_t{x}}; }
  static GgufValue i32(int32_t x) { return {GgufType::kInt32, int64_t{x}}; }
  static GgufValue u64(uint64_t x) { return {GgufType::kUint64, static_cast<int64_t>(x)}; }
  static GgufValue f32(float x) { return {GgufType::kFloat32, double{x}}; }
  static GgufValue boolean(bool x) { return {GgufType::kBool, int64_t{x ? 1 : 0}}; }
  static GgufValue str(std::string s) { return {GgufType::kString, std::move(s)}; }
  static GgufValue array(GgufArray a);

  bool is_int() const { return std::holds_alternative<int64_t>(v) && type != GgufType::kBool; }
  bool is_float() const { return std::holds_alternative<double>(v); }
  bool is_string() const { return type == GgufType::kString; }
  bool is_array() const { return type == GgufType::kArray; }
  int64_t as_int() const;          // ints, bools; floats truncated and saturated (NaN -> 0)
  double as_float() const;         // floats and ints
  const std::string& as_string() const;
  const GgufArray& as_array() const;
  std::string to_display(size_t max_items = 8) const;  // short human-readable form
};

// A homogeneous array. Exactly one of the vectors is used, chosen by elem_type.
struct GgufArray {
  GgufType elem_type = GgufType::kUint32;
  std::vector<int64_t> ints;         // all integer widths and bool
  std::vector<double> floats;        // float32 / float64
  std::vector<std::string> strings;  // string
  std::vector<GgufValue> arrays;     // nested arrays (elem_type == kArray)
  size_t size() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> shape;  // GGML order: shape[0] is the contiguous (row) dimension
  DType dtype = DType::kF32;
  uint64_t offset = 0;          // relative to the start of the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping (reader only)
};

struct GgufLimits {
  uint64_t max_string_bytes = 64ull << 20;   // one metadata string
  uint64_t max_array_items = 64ull << 20;    // items of one array
  uint32_t max_array_depth = 4;
  uint64_t max_tensors = 1ull << 20;
  uint64_t max_kv = 1ull << 20;
  uint32_t max_dims = 4;                     // GGML_MAX_DIMS
};

class GgufFile {
 public:
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path,
                                                const GgufLimits& limits = {});
  // Parses a buffer the caller keeps alive (fuzzing, tests). `name` appears in errors.
  static Result<std::unique_ptr<GgufFile>> parse(const uint8_t* data, uint64_t size,
                                                 const std::string& name = "<memory>",
                                                 const GgufLimits& limits = {});

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }
  const std::string& path() const { return name_; }
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  const MappedFile* mapping() const { return file_.get(); }

  // Typed getters: nullopt-like defaults when absent; error when present with a wrong type.
  Result<std::string> get_string(const std::string& key, const std::string& def = "") const;
  Result<int64_t> get_int(const std::string& key, int64_t def) const;
  Result<double> get_float(const std::string& key, double def) const;
  std::string architecture() const;  // "general.architecture" or ""

 private:
  GgufFile() = default;
  Status parse_impl(const GgufLimits& limits);

  std::unique_ptr<MappedFile> file_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Streaming writer: declare metadata and tensor infos, then write_header(), then each tensor's
// bytes in declaration order. Memory use is independent of the model size.
class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}
  ~GgufWriter();
  void set(const std::string& key, GgufValue value);  // replaces an existing key in place
  void remove(const std::string& key);
  Status add_tensor(const std::string& name, DType dtype, std::vector<uint64_t> shape);
  size_t n_tensors() const { return tensors_.size(); }
  const GgufTensorInfo& tensor(size_t i) const { return tensors_[i]; }

  Status open(const std::string& path);  // writes header, metadata, tensor infos, padding
  Status write_tensor(size_t index, const void* data, uint64_t n_bytes);  // in order
  // The same in pieces: consecutive calls for one tensor until its n_bytes are written.
  Status append_tensor(size_t index, const void* data, uint64_t n_bytes);
  Status finish();                       // checks every tensor was written; closes
  uint64_t total_bytes() const;          // predicted file size

 private:
  std::string header_bytes() const;      // header + metadata + tensor infos, padded
  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::FILE* f_ = nullptr;
  std::string path_;
  size_t next_tensor_ = 0;
  uint64_t written_data_ = 0;
  uint64_t partial_ = 0;  // bytes of tensor next_tensor_ written so far
};

}  // namespace duet
