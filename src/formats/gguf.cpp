// GGUF reader and writer (see gguf.h). The reader is a bounds-checked cursor over the mapping:
// every read names the byte offset and the field on failure, and counts read from the file are
// checked against the bytes left before anything is allocated for them.
#include "formats/gguf.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <set>

#include "base/check.h"
#include "base/text.h"

namespace duet {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian

std::string hex_offset(uint64_t off) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, off);
  return buf;
}

// Size in bytes of a fixed-width scalar type, 0 for string/array/unknown.
uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    default: return 0;
  }
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  Status error(const std::string& what) const {
    return invalid_argument(name_ + ": " + what + " (at byte " + hex_offset(pos_) + ")");
  }
  template <typename T>
  Status read(T* out, const char* field) {
    if (left() < sizeof(T))
      return error(std::string("file truncated reading ") + field + ": need " +
                   std::to_string(sizeof(T)) + " bytes, " + std::to_string(left()) + " left");
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }
  Status read_string(std::string* out, const char* field, uint64_t max_len) {
    uint64_t len;
    DUET_RETURN_IF_ERROR(read(&len, field));
    if (len > left())
      return error(std::string(field) + " length " + std::to_string(len) + " runs past end of file (" +
                   std::to_string(left()) + " bytes left)");
    if (len > max_len)
      return error(std::string(field) + " length " + std::to_string(len) + " exceeds limit " +
                   std::to_string(max_len));
    out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return Status::ok();
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  const std::string& name_;
  uint64_t pos_ = 0;
};

Status read_scalar(Cursor& c, GgufType t, GgufValue* out) {
  out->type = t;
  switch (t) {
    case GgufType::kUint8: { uint8_t v; DUET_RETURN_IF_ERROR(c.read(&v, "uint8 value")); out->v = int64_t{v}; break; }
    case GgufType::kInt8: { int8_t v; DUET_RETURN_IF_ERROR(c.read(&v, "int8 value")); out->v = int64_t{v}; break; }
    case GgufType::kBool: { uint8_t v; DUET_RETURN_IF_ERROR(c.read(&v, "bool value"));
      if (v > 1) return c.error("bool value " + std::to_string(v) + " is not 0 or 1");
      out->v = int64_t{v}; break; }
    case GgufType::kUint16: { uint16_t v; DUET_RETURN_IF_ERROR(c.read(&v, "uint16 value")); out->v = int64_t{v}; break; }
    case GgufType::kInt16: { int16_t v; DUET_RETURN_IF_ERROR(c.read(&v, "int16 value")); out->v = int64_t{v}; break; }
    case GgufType::kUint32: { uint32_t v; DUET_RETURN_IF_ERROR(c.read(&v, "uint32 value")); out->v = int64_t{v}; break; }
    case GgufType::kInt32: { int32_t v; DUET_RETURN_IF_ERROR(c.read(&v, "int32 value")); out->v = int64_t{v}; break; }
    case GgufType::kUint64: { uint64_t v; DUET_RETURN_IF_ERROR(c.read(&v, "uint64 value")); out->v = static_cast<int64_t>(v); break; }
    case GgufType::kInt64: { int64_t v; DUET_RETURN_IF_ERROR(c.read(&v, "int64 value")); out->v = v; break; }
    case GgufType::kFloat32: { float v; DUET_RETURN_IF_ERROR(c.read(&v, "float32 value")); out->v = double{v}; break; }
    case GgufType::kFloat64: { double v; DUET_RETURN_IF_ERROR(c.read(&v, "float64 value")); out->v = v; break; }
    default: return c.error("internal: not a scalar type");
  }
  return Status::ok();
}

Status read_value(Cursor& c, GgufType t, GgufValue* out, const GgufLimits& lim, uint32_t depth);

Status read_array(Cursor& c, GgufValue* out, const GgufLimits& lim, uint32_t depth) {
  if (depth >= lim.max_array_depth)
    return c.error("arrays nested deeper than " + std::to_string(lim.max_array_depth));
  uint32_t et;
  DUET_RETURN_IF_ERROR(c.read(&et, "array element type"));
  if (!valid_type(et)) return c.error("unknown array element type " + std::to_string(et));
  uint64_t n;
  DUET_RETURN_IF_ERROR(c.read(&n, "array length"));
  GgufType etype = static_cast<GgufType>(et);
  // Every element takes at least this many bytes, so a count the file cannot hold is caught
  // before any allocation.
  uint64_t min_elem = scalar_size(etype);
  if (etype == GgufType::kString) min_elem = 8;
  if (etype == GgufType::kArray) min_elem = 12;
  uint64_t need;
  if (!checked_mul(n, min_elem, &need) || need > c.left())
    return c.error("array of " + std::to_string(n) + " " + gguf_type_name(etype) +
                   " elements runs past end of file (" + std::to_string(c.left()) + " bytes left)");
  if (n > lim.max_array_items)
    return c.error("array length " + std::to_string(n) + " exceeds limit " +
                   std::to_string(lim.max_array_items));
  GgufArray a;
  a.elem_type = etype;
  if (etype == GgufType::kString) {
    a.strings.resize(n);
    for (uint64_t i = 0; i < n; ++i)
      DUET_RETURN_IF_ERROR(c.read_string(&a.strings[i], "array string", lim.max_string_bytes));
  } else if (etype == GgufType::kArray) {
    a.arrays.resize(n);
    for (uint64_t i = 0; i < n; ++i) DUET_RETURN_IF_ERROR(read_array(c, &a.arrays[i], lim, depth + 1));
  } else if (etype == GgufType::kFloat32 || etype == GgufType::kFloat64) {
    a.floats.resize(n);
    GgufValue tmp;
    for (uint64_t i = 0; i < n; ++i) {
      DUET_RETURN_IF_ERROR(read_scalar(c, etype, &tmp));
      a.floats[i] = std::get<double>(tmp.v);
    }
  } else {
    a.ints.resize(n);
    GgufValue tmp;
    for (uint64_t i = 0; i < n; ++i) {
      DUET_RETURN_IF_ERROR(read_scalar(c, etype, &tmp));
      a.ints[i] = std::get<int64_t>(tmp.v);
    }
  }
  *out = GgufValue::array(std::move(a));
  return Status::ok();
}

Status read_value(Cursor& c, GgufType t, GgufValue* out, const GgufLimits& lim, uint32_t depth) {
  if (t == GgufType::kString) {
    std::string s;
    DUET_RETURN_IF_ERROR(c.read_string(&s, "string value", lim.max_string_bytes));
    *out = GgufValue::str(std::move(s));
    return Status::ok();
  }
  if (t == GgufType::kArray) return read_array(c, out, lim, depth);
  return read_scalar(c, t, out);
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* kNames[] = {"uint8", "int8",   "uint16", "int16", "uint32", "int32", "float32",
                                 "bool",  "string", "array",  "uint64", "int64", "float64"};
  uint32_t i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "unknown";
}

GgufValue GgufValue::array(GgufArray a) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.v = std::make_shared<GgufArray>(std::move(a));
  return v;
}

int64_t GgufValue::as_int() const {
  if (auto p = std::get_if<int64_t>(&v)) return *p;
  if (auto p = std::get_if<double>(&v)) {
    // Saturate: casting a NaN or out-of-range double (from an untrusted file) to int64 is UB.
    if (std::isnan(*p)) return 0;
    if (*p >= 9223372036854775808.0) return INT64_MAX;
    if (*p < -9223372036854775808.0) return INT64_MIN;
    return static_cast<int64_t>(*p);
  }
  return 0;
}
double GgufValue::as_float() const {
  if (auto p = std::get_if<double>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v))
    return type == GgufType::kUint64 ? static_cast<double>(static_cast<uint64_t>(*p))
                                     : static_cast<double>(*p);
  return 0;
}
const std::string& GgufValue::as_string() const {
  static const std::string kEmpty;
  auto p = std::get_if<std::string>(&v);
  return p ? *p : kEmpty;
}
const GgufArray& GgufValue::as_array() const {
  static const GgufArray kEmpty;
  auto p = std::get_if<std::shared_ptr<GgufArray>>(&v);
  return p && *p ? **p : kEmpty;
}

size_t GgufArray::size() const {
  switch (elem_type) {
    case GgufType::kString: return strings.size();
    case GgufType::kArray: return arrays.size();
    case GgufType::kFloat32: case GgufType::kFloat64: return floats.size();
    default: return ints.size();
  }
}

std::string GgufValue::to_display(size_t max_items) const {
  char buf[64];
  switch (type) {
    case GgufType::kString: {
      std::string s = as_string();
      if (s.size() > 80) s = s.substr(0, 77) + "...";
      std::string out = "\"";
      for (char ch : s) out += (ch == '\n') ? std::string("\\n") : std::string(1, ch);
      return out + "\"";
    }
    case GgufType::kBool: return as_int() ? "true" : "false";
    case GgufType::kFloat32: case GgufType::kFloat64:
      std::snprintf(buf, sizeof buf, "%g", as_float());
      return buf;
    case GgufType::kUint64:
      return std::to_string(static_cast<uint64_t>(as_int()));
    case GgufType::kArray: {
      const GgufArray& a = as_array();
      std::string out = std::string("[") + gguf_type_name(a.elem_type) + " x " + std::to_string(a.size()) + ": ";
      size_t n = std::min(a.size(), max_items);
      for (size_t i = 0; i < n; ++i) {
        if (i) out += ", ";
        GgufValue e;
        e.type = a.elem_type;
        if (a.elem_type == GgufType::kString) e.v = a.strings[i];
        else if (a.elem_type == GgufType::kArray) e = a.arrays[i];
        else if (a.elem_type == GgufType::kFloat32 || a.elem_type == GgufType::kFloat64) e.v = a.floats[i];
        else e.v = a.ints[i];
        out += e.to_display(2);
      }
      if (a.size() > n) out += ", ...";
      return out + "]";
    }
    default: return std::to_string(as_int());
  }
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path, const GgufLimits& limits) {
  DUET_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mf, MappedFile::open(path));
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->data_ = mf->data();
  g->size_ = mf->size();
  g->name_ = path;
  g->file_ = std::move(mf);
  DUET_RETURN_IF_ERROR(g->parse_impl(limits));
  return g;
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, uint64_t size,
                                                  const std::string& name, const GgufLimits& limits) {
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->data_ = data;
  g->size_ = size;
  g->name_ = name;
  DUET_RETURN_IF_ERROR(g->parse_impl(limits));
  return g;
}

Status GgufFile::parse_impl(const GgufLimits& lim) {
  Cursor c(data_, size_, name_);
  uint32_t magic;
  DUET_RETURN_IF_ERROR(c.read(&magic, "magic"));
  if (magic != kGgufMagic) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "bad magic 0x%08x, expected 0x%08x (\"GGUF\")", magic, kGgufMagic);
    return invalid_argument(name_ + ": not a GGUF file: " + buf);
  }
  DUET_RETURN_IF_ERROR(c.read(&version_, "version"));
  if (version_ != 2 && version_ != 3)
    return c.error("unsupported GGUF version " + std::to_string(version_) + " (expected 2 or 3)");
  uint64_t n_tensors, n_kv;
  DUET_RETURN_IF_ERROR(c.read(&n_tensors, "tensor count"));
  DUET_RETURN_IF_ERROR(c.read(&n_kv, "metadata count"));
  // A key-value pair needs >= 12 bytes (key length + type), a tensor info >= 24.
  uint64_t need_kv, need_t, need;
  if (!checked_mul(n_kv, 12, &need_kv) || !checked_mul(n_tensors, 24, &need_t) ||
      !checked_add(need_kv, need_t, &need) || need > c.left())
    return c.error("header claims " + std::to_string(n_tensors) + " tensors and " +
                   std::to_string(n_kv) + " metadata entries, more than the " +
                   std::to_string(c.left()) + " bytes left can hold");
  if (n_tensors > lim.max_tensors) return c.error("tensor count " + std::to_string(n_tensors) + " exceeds limit");
  if (n_kv > lim.max_kv) return c.error("metadata count " + std::to_string(n_kv) + " exceeds limit");

  kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    DUET_RETURN_IF_ERROR(c.read_string(&key, "metadata key", 65536));
    if (key.empty()) return c.error("metadata entry " + std::to_string(i) + " has an empty key");
    uint32_t t;
    DUET_RETURN_IF_ERROR(c.read(&t, "metadata value type"));
    if (!valid_type(t))
      return c.error("metadata '" + printable(key) + "' has unknown value type " + std::to_string(t));
    GgufValue v;
    DUET_RETURN_IF_ERROR(read_value(c, static_cast<GgufType>(t), &v, lim, 0));
    if (kv_index_.count(key)) return c.error("duplicate metadata key '" + printable(key) + "'");
    kv_index_[key] = kv_.size();
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::kUint32)
      return invalid_argument(name_ + ": general.alignment has type " + gguf_type_name(a->type) +
                              ", expected uint32");
    int64_t al = a->as_int();
    if (al <= 0 || (al & (al - 1)) != 0)
      return invalid_argument(name_ + ": general.alignment " + std::to_string(al) +
                              " is not a power of two");
    alignment_ = static_cast<uint64_t>(al);
  }

  tensors_.resize(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo& ti = tensors_[i];
    DUET_RETURN_IF_ERROR(c.read_string(&ti.name, "tensor name", 65536));
    if (ti.name.empty()) return c.error("tensor " + std::to_string(i) + " has an empty name");
    uint32_t n_dims;
    DUET_RETURN_IF_ERROR(c.read(&n_dims, "tensor n_dims"));
    if (n_dims == 0 || n_dims > lim.max_dims)
      return c.error("tensor '" + printable(ti.name) + "' has " + std::to_string(n_dims) +
                     " dimensions (expected 1.." + std::to_string(lim.max_dims) + ")");
    ti.shape.resize(n_dims);
    uint64_t ne = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      DUET_RETURN_IF_ERROR(c.read(&ti.shape[d], "tensor dimension"));
      if (ti.shape[d] > static_cast<uint64_t>(INT64_MAX) || !checked_mul(ne, ti.shape[d], &ne) ||
          ne > static_cast<uint64_t>(INT64_MAX))
        return c.error("tensor '" + printable(ti.name) + "': element count overflows (dimension " +
                       std::to_string(d) + " = " + std::to_string(ti.shape[d]) + ")");
    }
    ti.n_elements = ne;
    uint32_t t;
    DUET_RETURN_IF_ERROR(c.read(&t, "tensor type"));
    auto info = dtype_info(t);
    if (!info || !info->in_gguf)
      return c.error("tensor '" + printable(ti.name) + "' has unknown or unsupported type " + std::to_string(t));
    ti.dtype = info->dtype;
    if (ti.shape[0] % info->block_size != 0)
      return c.error("tensor '" + printable(ti.name) + "': row of " + std::to_string(ti.shape[0]) +
                     " elements is not a multiple of the " + std::string(info->name) +
                     " block size " + std::to_string(info->block_size));
    ti.n_bytes = ne / info->block_size * info->type_size;  // ne < 2^63, type_size small: no overflow
    if (ne / info->block_size > UINT64_MAX / info->type_size)
      return c.error("tensor '" + printable(ti.name) + "': byte size overflows");
    DUET_RETURN_IF_ERROR(c.read(&ti.offset, "tensor offset"));
    if (ti.offset % alignment_ != 0)
      return c.error("tensor '" + printable(ti.name) + "': offset " + std::to_string(ti.offset) +
                     " is not a multiple of the alignment " + std::to_string(alignment_));
    if (tensor_index_.count(ti.name)) return c.error("duplicate tensor name '" + printable(ti.name) + "'");
    tensor_index_[ti.name] = i;
  }

  uint64_t pos = c.pos();
  data_offset_ = (pos + alignment_ - 1) / alignment_ * alignment_;
  if (n_tensors > 0 && data_offset_ > size_)
    return invalid_argument(name_ + ": file truncated: data section would start at byte " +
                            std::to_string(data_offset_) + " but the file has " +
                            std::to_string(size_) + " bytes");
  uint64_t data_size = size_ >= data_offset_ ? size_ - data_offset_ : 0;
  std::vector<size_t> order(n_tensors);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (auto& ti : tensors_) {
    uint64_t end;
    if (!checked_add(ti.offset, ti.n_bytes, &end) || end > data_size)
      return invalid_argument(name_ + ": tensor '" + printable(ti.name) + "' data [" + std::to_string(ti.offset) +
                              ", +" + std::to_string(ti.n_bytes) + ") lies outside the data section of " +
                              std::to_string(data_size) + " bytes (file truncated or offset corrupt)");
    ti.data = data_ + data_offset_ + ti.offset;
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  // Compare each non-empty tensor with the non-empty one ending furthest so far, not just with
  // its sorted neighbour: a zero-byte tensor placed inside another must not hide an overlap.
  const GgufTensorInfo* furthest = nullptr;
  for (size_t k = 0; k < order.size(); ++k) {
    const auto& cur = tensors_[order[k]];
    if (cur.n_bytes == 0) continue;
    if (furthest && furthest->offset + furthest->n_bytes > cur.offset) {
      const auto& prev = *furthest;
      return invalid_argument(name_ + ": tensor '" + printable(cur.name) + "' at data offset " +
                              std::to_string(cur.offset) + " overlaps tensor '" + printable(prev.name) +
                              "' [" + std::to_string(prev.offset) + ", " +
                              std::to_string(prev.offset + prev.n_bytes) + ")");
    }
    if (!furthest || cur.offset + cur.n_bytes > furthest->offset + furthest->n_bytes) furthest = &cur;
  }
  return Status::ok();
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::string> GgufFile::get_string(const std::string& key, const std::string& def) const {
  const GgufValue* v = find(key);
  if (!v) return def;
  if (!v->is_string())
    return invalid_argument(name_ + ": metadata '" + key + "' has type " + gguf_type_name(v->type) +
                            ", expected string");
  return v->as_string();
}

Result<int64_t> GgufFile::get_int(const std::string& key, int64_t def) const {
  const GgufValue* v = find(key);
  if (!v) return def;
  if (!v->is_int() && v->type != GgufType::kBool)
    return invalid_argument(name_ + ": metadata '" + key + "' has type " + gguf_type_name(v->type) +
                            ", expected an integer");
  return v->as_int();
}

Result<double> GgufFile::get_float(const std::string& key, double def) const {
  const GgufValue* v = find(key);
  if (!v) return def;
  if (!v->is_float() && !v->is_int())
    return invalid_argument(name_ + ": metadata '" + key + "' has type " + gguf_type_name(v->type) +
                            ", expected a number");
  return v->as_float();
}

std::string GgufFile::architecture() const {
  const GgufValue* v = find("general.architecture");
  return v && v->is_string() ? v->as_string() : "";
}

// ---- writer ----

namespace {

void put_bytes(std::string& out, const void* p, size_t n) {
  out.append(static_cast<const char*>(p), n);
}
template <typename T>
void put(std::string& out, T v) {
  put_bytes(out, &v, sizeof v);
}
void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

void put_scalar(std::string& out, GgufType t, int64_t i, double f) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kBool: put<uint8_t>(out, static_cast<uint8_t>(i)); break;
    case GgufType::kInt8: put<int8_t>(out, static_cast<int8_t>(i)); break;
    case GgufType::kUint16: put<uint16_t>(out, static_cast<uint16_t>(i)); break;
    case GgufType::kInt16: put<int16_t>(out, static_cast<int16_t>(i)); break;
    case GgufType::kUint32: put<uint32_t>(out, static_cast<uint32_t>(i)); break;
    case GgufType::kInt32: put<int32_t>(out, static_cast<int32_t>(i)); break;
    case GgufType::kUint64: put<uint64_t>(out, static_cast<uint64_t>(i)); break;
    case GgufType::kInt64: put<int64_t>(out, i); break;
    case GgufType::kFloat32: put<float>(out, static_cast<float>(f)); break;
    case GgufType::kFloat64: put<double>(out, f); break;
    default: DUET_CHECK(false);
  }
}

void put_array(std::string& out, const GgufArray& a) {
  put<uint32_t>(out, static_cast<uint32_t>(a.elem_type));
  put<uint64_t>(out, a.size());
  if (a.elem_type == GgufType::kString) {
    for (const auto& s : a.strings) put_string(out, s);
  } else if (a.elem_type == GgufType::kArray) {
    for (const auto& e : a.arrays) put_array(out, e.as_array());
  } else if (a.elem_type == GgufType::kFloat32 || a.elem_type == GgufType::kFloat64) {
    for (double f : a.floats) put_scalar(out, a.elem_type, 0, f);
  } else {
    for (int64_t i : a.ints) put_scalar(out, a.elem_type, i, 0);
  }
}

void put_value(std::string& out, const GgufValue& v) {
  put<uint32_t>(out, static_cast<uint32_t>(v.type));
  if (v.type == GgufType::kString) put_string(out, v.as_string());
  else if (v.type == GgufType::kArray) put_array(out, v.as_array());
  else put_scalar(out, v.type, v.is_float() ? 0 : v.as_int(), v.as_float());
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

GgufWriter::~GgufWriter() {
  if (f_) std::fclose(f_);
}

void GgufWriter::set(const std::string& key, GgufValue value) {
  if (key == "general.alignment") alignment_ = static_cast<uint64_t>(value.as_int());
  for (auto& kv : kv_)
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::remove(const std::string& key) {
  kv_.erase(std::remove_if(kv_.begin(), kv_.end(), [&](const auto& kv) { return kv.first == key; }),
            kv_.end());
}

Status GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<uint64_t> shape) {
  const DTypeInfo& info = dtype_info(dtype);
  if (!info.in_gguf) return invalid_argument("type " + std::string(info.name) + " cannot be stored in GGUF");
  if (shape.empty() || shape.size() > 4) return invalid_argument("tensor '" + name + "' needs 1..4 dims");
  if (shape[0] % info.block_size != 0)
    return invalid_argument("tensor '" + name + "': row of " + std::to_string(shape[0]) +
                            " not a multiple of " + std::string(info.name) + " block size " +
                            std::to_string(info.block_size));
  for (const auto& t : tensors_)
    if (t.name == name) return invalid_argument("duplicate tensor name '" + name + "'");
  GgufTensorInfo ti;
  ti.name = name;
  ti.dtype = dtype;
  ti.shape = std::move(shape);
  ti.n_elements = 1;
  for (uint64_t d : ti.shape) ti.n_elements *= d;
  ti.n_bytes = ti.n_elements / info.block_size * info.type_size;
  ti.offset = tensors_.empty() ? 0 : align_up(tensors_.back().offset + tensors_.back().n_bytes, alignment_);
  tensors_.push_back(std::move(ti));
  return Status::ok();
}

std::string GgufWriter::header_bytes() const {
  std::string header;
  put<uint32_t>(header, kGgufMagic);
  put<uint32_t>(header, 3);
  put<uint64_t>(header, tensors_.size());
  put<uint64_t>(header, kv_.size());
  for (const auto& kv : kv_) {
    put_string(header, kv.first);
    put_value(header, kv.second);
  }
  for (const auto& t : tensors_) {
    put_string(header, t.name);
    put<uint32_t>(header, static_cast<uint32_t>(t.shape.size()));
    for (uint64_t d : t.shape) put<uint64_t>(header, d);
    put<uint32_t>(header, static_cast<uint32_t>(t.dtype));
    put<uint64_t>(header, t.offset);
  }
  header.resize(align_up(header.size(), alignment_), '\0');
  return header;
}

uint64_t GgufWriter::total_bytes() const {
  uint64_t data = tensors_.empty() ? 0 : tensors_.back().offset + tensors_.back().n_bytes;
  return header_bytes().size() + align_up(data, alignment_);
}

Status GgufWriter::open(const std::string& path) {
  // Offsets were computed with the alignment at add_tensor time; recompute in case it changed.
  uint64_t off = 0;
  for (auto& t : tensors_) {
    t.offset = off;
    off = align_up(off + t.n_bytes, alignment_);
  }
  const std::string header = header_bytes();
  path_ = path;
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) return io_error(path + ": cannot open for writing: " + std::strerror(errno));
  if (std::fwrite(header.data(), 1, header.size(), f_) != header.size())
    return io_error(path + ": write failed");
  next_tensor_ = 0;
  written_data_ = 0;
  return Status::ok();
}

Status GgufWriter::write_tensor(size_t index, const void* data, uint64_t n_bytes) {
  if (index < tensors_.size() && n_bytes != tensors_[index].n_bytes)
    return invalid_argument("GgufWriter: tensor '" + tensors_[index].name + "' has " +
                            std::to_string(tensors_[index].n_bytes) + " bytes, got " + std::to_string(n_bytes));
  return append_tensor(index, data, n_bytes);
}

Status GgufWriter::append_tensor(size_t index, const void* data, uint64_t n_bytes) {
  if (!f_) return io_error("GgufWriter: write before open");
  if (index != next_tensor_ || index >= tensors_.size())
    return invalid_argument("GgufWriter: tensor " + std::to_string(index) + " written out of order (expected " +
                            std::to_string(next_tensor_) + ")");
  const GgufTensorInfo& t = tensors_[index];
  if (partial_ + n_bytes > t.n_bytes)
    return invalid_argument("GgufWriter: tensor '" + t.name + "' has " + std::to_string(t.n_bytes) +
                            " bytes, got more");
  if (partial_ == 0) {
    static const char kZeros[256] = {};
    uint64_t pad = t.offset - written_data_;
    while (pad > 0) {
      uint64_t k = pad < sizeof kZeros ? pad : sizeof kZeros;
      if (std::fwrite(kZeros, 1, k, f_) != k) return io_error(path_ + ": write failed");
      pad -= k;
    }
  }
  if (n_bytes && std::fwrite(data, 1, n_bytes, f_) != n_bytes) return io_error(path_ + ": write failed");
  partial_ += n_bytes;
  if (partial_ == t.n_bytes) {
    written_data_ = t.offset + t.n_bytes;
    partial_ = 0;
    ++next_tensor_;
  }
  return Status::ok();
}

Status GgufWriter::finish() {
  if (!f_) return io_error("GgufWriter: finish before open");
  if (next_tensor_ != tensors_.size())
    return invalid_argument("GgufWriter: only " + std::to_string(next_tensor_) + " of " +
                            std::to_string(tensors_.size()) + " tensors written");
  // Pad the last tensor like every other, as ggml's writer does.
  static const char kZeros[256] = {};
  uint64_t pad = align_up(written_data_, alignment_) - written_data_;
  if (pad && std::fwrite(kZeros, 1, pad, f_) != pad) return io_error(path_ + ": write failed");
  int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) return io_error(path_ + ": close failed");
  return Status::ok();
}

}  // namespace duet
