// safetensors reader/writer (see safetensors.h). The JSON header is parsed with nlohmann::json
// inside this file only (its exceptions are caught here and turned into Status).
#include "formats/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "base/check.h"
#include "base/text.h"

namespace duet {
namespace {

std::string dirname_of(const std::string& p) {
  size_t k = p.find_last_of('/');
  return k == std::string::npos ? "." : p.substr(0, k);
}

// Parses JSON text and reports the first key that repeats within one object. nlohmann keeps only
// the last of duplicate keys, which would silently pick one of two conflicting tensor entries;
// the callback sees every key before that happens. Parsing stays iterative (no deep recursion).
nlohmann::json parse_json_no_dups(const char* begin, const char* end, std::string* dup_key) {
  using Event = nlohmann::json::parse_event_t;
  std::vector<std::set<std::string>> open_objects;  // keys seen in each object being parsed
  auto cb = [&](int /*depth*/, Event ev, nlohmann::json& parsed) {
    if (ev == Event::object_start) {
      open_objects.emplace_back();
    } else if (ev == Event::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (ev == Event::key && !open_objects.empty() && parsed.is_string()) {
      if (!open_objects.back().insert(parsed.get<std::string>()).second && dup_key->empty())
        *dup_key = parsed.get<std::string>().empty() ? std::string("\"\"") : parsed.get<std::string>();
    }
    return true;
  };
  return nlohmann::json::parse(begin, end, cb, /*allow_exceptions=*/false);
}

// reject_dups: true for files that decide what is loaded (the shard index); config files keep
// JSON's usual last-key-wins reading, as transformers' json.load does.
Result<nlohmann::json> read_json_file(const std::string& path, bool reject_dups) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::string dup;
  nlohmann::json j = parse_json_no_dups(text.data(), text.data() + text.size(), &dup);
  if (j.is_discarded()) return invalid_argument(path + ": invalid JSON");
  if (reject_dups && !dup.empty())
    return invalid_argument(path + ": duplicate JSON key '" + printable(dup) + "'");
  return j;
}

}  // namespace

const char* fp8_layout_name(Fp8ScaleLayout l) {
  switch (l) {
    case Fp8ScaleLayout::kNone: return "none";
    case Fp8ScaleLayout::kPerTensor: return "per-tensor";
    case Fp8ScaleLayout::kPerChannel: return "per-channel";
    case Fp8ScaleLayout::kBlock: return "block";
  }
  return "?";
}

std::optional<DType> safetensors_dtype(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  if (s == "F8_E4M3") return DType::kF8_E4M3;
  if (s == "F64") return DType::kF64;
  if (s == "I8") return DType::kI8;
  if (s == "I16") return DType::kI16;
  if (s == "I32") return DType::kI32;
  if (s == "I64") return DType::kI64;
  if (s == "U8") return DType::kI8;  // byte-sized; duet never interprets U8 numerically
  return std::nullopt;
}

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8_E4M3: return "F8_E4M3";
    case DType::kF64: return "F64";
    case DType::kI8: return "I8";
    case DType::kI16: return "I16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    default: return nullptr;
  }
}

Result<std::unique_ptr<SafetensorsModel>> SafetensorsModel::parse(const uint8_t* data, uint64_t size,
                                                                  const std::string& name,
                                                                  const SafetensorsLimits& limits) {
  std::unique_ptr<SafetensorsModel> m(new SafetensorsModel());
  m->shard_paths_.push_back(name);
  DUET_RETURN_IF_ERROR(m->add_shard(data, size, name, 0, limits));
  Status st = m->detect_fp8();
  if (!st.is_ok()) return Status(st.code(), name + ": " + st.message());  // say which file
  return m;
}

Result<std::unique_ptr<SafetensorsModel>> SafetensorsModel::open(const std::string& path_in,
                                                                 const SafetensorsLimits& limits) {
  std::unique_ptr<SafetensorsModel> m(new SafetensorsModel());
  std::string path = path_in;
  std::vector<std::string> shards;
  if (is_dir(path)) {
    m->dir_ = path;
    if (is_file(path + "/model.safetensors.index.json")) path = path + "/model.safetensors.index.json";
    else if (is_file(path + "/model.safetensors")) path = path + "/model.safetensors";
    else return not_found(path_in + ": no model.safetensors or model.safetensors.index.json");
  } else {
    m->dir_ = dirname_of(path);
  }
  if (path.size() >= 5 && path.substr(path.size() - 5) == ".json") {
    DUET_ASSIGN_OR_RETURN(nlohmann::json idx, read_json_file(path, /*reject_dups=*/true));
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      return invalid_argument(path + ": index has no \"weight_map\" object");
    std::set<std::string> seen;
    for (auto& [tensor, file] : idx["weight_map"].items()) {
      if (!file.is_string())
        return invalid_argument(path + ": weight_map['" + printable(tensor) + "'] is not a string");
      std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "..")
        return invalid_argument(path + ": weight_map['" + printable(tensor) + "'] names an unsafe path '" +
                                printable(f) + "'");
      if (seen.insert(f).second) shards.push_back(f);
    }
    std::sort(shards.begin(), shards.end());
    for (auto& s : shards) s = m->dir_ + "/" + s;
  } else {
    shards.push_back(path);
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    DUET_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mf, MappedFile::open(shards[i]));
    m->shard_paths_.push_back(shards[i]);
    DUET_RETURN_IF_ERROR(m->add_shard(mf->data(), mf->size(), shards[i], i, limits));
    m->files_.push_back(std::move(mf));
  }
  for (const char* cfg : {"config.json", "generation_config.json"}) {
    std::string p = m->dir_ + "/" + cfg;
    if (!is_file(p)) continue;
    DUET_ASSIGN_OR_RETURN(nlohmann::json j, read_json_file(p, /*reject_dups=*/false));
    if (!j.is_object()) return invalid_argument(p + ": expected a JSON object");
    (std::string(cfg) == "config.json" ? m->config_ : m->gen_config_) = std::move(j);
  }
  Status st = m->detect_fp8();
  if (!st.is_ok()) return Status(st.code(), path_in + ": " + st.message());  // say which model
  return m;
}

Status SafetensorsModel::add_shard(const uint8_t* data, uint64_t size, const std::string& name,
                                   size_t shard, const SafetensorsLimits& limits) {
  if (size < 8)
    return invalid_argument(name + ": file of " + std::to_string(size) + " bytes is too short for a safetensors header");
  uint64_t hlen;
  std::memcpy(&hlen, data, 8);
  if (hlen > size - 8)
    return invalid_argument(name + ": header length " + std::to_string(hlen) + " runs past end of file (" +
                            std::to_string(size - 8) + " bytes after the length)");
  if (hlen > limits.max_header_bytes)
    return invalid_argument(name + ": header length " + std::to_string(hlen) + " exceeds limit " +
                            std::to_string(limits.max_header_bytes));
  const char* hp = reinterpret_cast<const char*>(data + 8);
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore whatever follows it;
  // raw NUL is never valid JSON, so reject it (as the reference Rust reader does).
  if (const void* nul = std::memchr(hp, 0, hlen))
    return invalid_argument(name + ": header has a NUL byte at offset " +
                            std::to_string(static_cast<const char*>(nul) - hp + 8) + " (not valid JSON)");
  std::string dup;
  nlohmann::json h = parse_json_no_dups(hp, hp + hlen, &dup);
  if (h.is_discarded()) return invalid_argument(name + ": header is not valid JSON");
  if (!dup.empty())
    return invalid_argument(name + ": header has duplicate key '" + printable(dup) +
                            "' (entries would silently replace each other)");
  if (!h.is_object()) return invalid_argument(name + ": header is not a JSON object");
  const uint64_t data_start = 8 + hlen;
  const uint64_t data_size = size - data_start;
  struct Span { uint64_t b, e; std::string n; };
  std::vector<Span> spans;
  for (auto& [key, val] : h.items()) {
    if (key == "__metadata__") {
      if (!val.is_object()) return invalid_argument(name + ": __metadata__ is not an object");
      for (auto& [mk, mv] : val.items()) {
        if (!mv.is_string())
          return invalid_argument(name + ": __metadata__['" + printable(mk) + "'] is not a string");
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = name + ": tensor '" + printable(key) + "'";
    if (!val.is_object()) return invalid_argument(where + ": entry is not an object");
    if (!val.contains("dtype") || !val["dtype"].is_string())
      return invalid_argument(where + ": missing string \"dtype\"");
    if (!val.contains("shape") || !val["shape"].is_array())
      return invalid_argument(where + ": missing array \"shape\"");
    if (!val.contains("data_offsets") || !val["data_offsets"].is_array() || val["data_offsets"].size() != 2)
      return invalid_argument(where + ": \"data_offsets\" must be an array of two integers");
    std::string ds = val["dtype"].get<std::string>();
    auto dt = safetensors_dtype(ds);
    if (!dt) return invalid_argument(where + ": unsupported dtype '" + printable(ds) + "'");
    SafetensorsTensor t;
    t.name = key;
    t.dtype = *dt;
    t.shard = shard;
    if (val["shape"].size() > limits.max_dims)
      return invalid_argument(where + ": " + std::to_string(val["shape"].size()) + " dimensions exceed limit");
    uint64_t ne = 1;
    for (auto& d : val["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        return invalid_argument(where + ": shape entries must be non-negative integers");
      uint64_t dv = d.get<uint64_t>();
      if (!checked_mul(ne, dv, &ne)) return invalid_argument(where + ": element count overflows");
      t.shape.push_back(dv);
    }
    t.n_elements = ne;
    uint64_t nbytes;
    if (!checked_mul(ne, dtype_info(t.dtype).type_size, &nbytes))
      return invalid_argument(where + ": byte size overflows");
    auto& off = val["data_offsets"];
    for (int k = 0; k < 2; ++k)
      if (!off[k].is_number_unsigned() && !(off[k].is_number_integer() && off[k].get<int64_t>() >= 0))
        return invalid_argument(where + ": data_offsets must be non-negative integers");
    uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (e < b) return invalid_argument(where + ": data_offsets end " + std::to_string(e) + " < begin " + std::to_string(b));
    if (e > data_size)
      return invalid_argument(where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
                              ") past the " + std::to_string(data_size) + " data bytes (file truncated?)");
    if (e - b != nbytes)
      return invalid_argument(where + ": " + std::to_string(e - b) + " data bytes but shape and dtype " + ds +
                              " need " + std::to_string(nbytes));
    t.n_bytes = nbytes;
    t.data = data + data_start + b;
    if (index_.count(key)) return invalid_argument(where + ": duplicate tensor name");
    spans.push_back({b, e, key});
    index_[key] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.b < b.b; });
  // Compare each non-empty span with the non-empty one ending furthest so far, not just with its
  // sorted neighbour: a zero-byte tensor placed inside another must not hide an overlap.
  const Span* furthest = nullptr;
  for (const Span& cur : spans) {
    if (cur.e == cur.b) continue;
    if (furthest && cur.b < furthest->e)
      return invalid_argument(name + ": tensor '" + printable(cur.n) + "' [" + std::to_string(cur.b) + ", " +
                              std::to_string(cur.e) + ") overlaps tensor '" + printable(furthest->n) + "' [" +
                              std::to_string(furthest->b) + ", " + std::to_string(furthest->e) + ")");
    if (!furthest || cur.e > furthest->e) furthest = &cur;
  }
  return Status::ok();
}

const SafetensorsTensor* SafetensorsModel::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsModel::release(const SafetensorsTensor& t) const {
  if (t.shard >= files_.size()) return;
  const MappedFile& f = *files_[t.shard];
  f.release(static_cast<uint64_t>(t.data - f.data()), t.n_bytes);
}

uint64_t SafetensorsModel::total_bytes() const {
  uint64_t s = 0;
  for (const auto& t : tensors_) s += t.n_bytes;
  return s;
}

Status SafetensorsModel::detect_fp8() {
  fp8_ = Fp8Info{};
  bool any_weight_scale = false, any_scale_inv = false, any_input_scale = false;
  for (const auto& t : tensors_) {
    if (t.dtype == DType::kF8_E4M3) ++fp8_.n_fp8_tensors;
    auto ends = [&](const char* s) {
      size_t n = std::strlen(s);
      return t.name.size() > n && t.name.compare(t.name.size() - n, n, s) == 0;
    };
    if (ends(".weight_scale")) any_weight_scale = true;
    if (ends(".weight_scale_inv")) any_scale_inv = true;
    if (ends(".input_scale")) any_input_scale = true;
  }
  if (fp8_.n_fp8_tensors == 0) return Status::ok();
  const nlohmann::json* qc = nullptr;
  if (config_.contains("quantization_config") && config_["quantization_config"].is_object())
    qc = &config_["quantization_config"];
  if (qc && qc->contains("quant_method") && (*qc)["quant_method"].is_string())
    fp8_.quant_method = (*qc)["quant_method"].get<std::string>();
  if (any_scale_inv) {
    fp8_.layout = Fp8ScaleLayout::kBlock;
    fp8_.block_rows = fp8_.block_cols = 128;
    if (qc && qc->contains("weight_block_size")) {
      const auto& bs = (*qc)["weight_block_size"];
      if (!bs.is_array() || bs.size() != 2 || !bs[0].is_number_unsigned() || !bs[1].is_number_unsigned() ||
          bs[0].get<uint64_t>() == 0 || bs[1].get<uint64_t>() == 0 || bs[0].get<uint64_t>() > 65536 ||
          bs[1].get<uint64_t>() > 65536)
        return invalid_argument("quantization_config.weight_block_size must be two positive integers");
      fp8_.block_rows = bs[0].get<uint32_t>();
      fp8_.block_cols = bs[1].get<uint32_t>();
    }
  } else if (any_weight_scale) {
    // compressed-tensors: the scale's shape tells per-tensor ([] or [1]) from per-channel ([out, 1]).
    fp8_.layout = Fp8ScaleLayout::kPerTensor;
    for (const auto& t : tensors_) {
      if (t.name.size() < 13 || t.name.compare(t.name.size() - 13, 13, ".weight_scale") != 0) continue;
      if (t.n_elements > 1) fp8_.layout = Fp8ScaleLayout::kPerChannel;
    }
    fp8_.static_input_scale = any_input_scale;
  } else {
    return invalid_argument("checkpoint has " + std::to_string(fp8_.n_fp8_tensors) +
                            " FP8 tensors but no weight_scale or weight_scale_inv tensors");
  }
  return Status::ok();
}

// ---- writer ----

SafetensorsWriter::~SafetensorsWriter() {
  if (f_) std::fclose(f_);
}

Status SafetensorsWriter::add_tensor(const std::string& name, DType dtype, std::vector<uint64_t> shape) {
  if (!safetensors_dtype_name(dtype))
    return invalid_argument("type " + std::string(dtype_name(dtype)) + " cannot be stored in safetensors");
  uint64_t ne = 1;
  for (uint64_t d : shape) ne *= d;
  uint64_t begin = tensors_.empty() ? 0 : tensors_.back().end;
  tensors_.push_back({name, dtype, std::move(shape), begin, begin + ne * dtype_info(dtype).type_size});
  return Status::ok();
}

Status SafetensorsWriter::open(const std::string& path) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json md = nlohmann::ordered_json::object();
    for (auto& [k, v] : metadata_) md[k] = v;
    h["__metadata__"] = md;
  }
  for (const auto& t : tensors_)
    h[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  std::string s = h.dump();
  while ((8 + s.size()) % 8 != 0) s += ' ';  // keep the data section 8-byte aligned
  path_ = path;
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) return io_error(path + ": cannot open for writing");
  uint64_t n = s.size();
  if (std::fwrite(&n, 8, 1, f_) != 1 || std::fwrite(s.data(), 1, s.size(), f_) != s.size())
    return io_error(path + ": write failed");
  next_ = 0;
  return Status::ok();
}

Status SafetensorsWriter::write_tensor(size_t index, const void* data, uint64_t n_bytes) {
  if (!f_ || index != next_) return invalid_argument("SafetensorsWriter: tensor written out of order");
  const Entry& e = tensors_[index];
  if (n_bytes != e.end - e.begin)
    return invalid_argument("SafetensorsWriter: tensor '" + e.name + "' needs " + std::to_string(e.end - e.begin) +
                            " bytes, got " + std::to_string(n_bytes));
  if (n_bytes && std::fwrite(data, 1, n_bytes, f_) != n_bytes) return io_error(path_ + ": write failed");
  ++next_;
  return Status::ok();
}

Status SafetensorsWriter::finish() {
  if (!f_) return io_error("SafetensorsWriter: finish before open");
  if (next_ != tensors_.size()) return invalid_argument("SafetensorsWriter: not every tensor written");
  int rc = std::fclose(f_);
  f_ = nullptr;
  return rc == 0 ? Status::ok() : io_error(path_ + ": close failed");
}

}  // namespace duet
