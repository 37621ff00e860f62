// Values of the sandboxed Jinja interpreter and the budget that bounds one render. Owns the
// value model (Python-like none/bool/int/float/str/list/tuple/dict plus Jinja's Undefined,
// namespace, generators), Python's str()/repr()/==/< semantics, tojson as transformers writes
// it, and the JSON bridge. Does not parse or evaluate templates (jinja_parser, jinja_interp).
// One render runs on one thread; the Budget of that render is reached through a thread-local.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace duet::jinja {

// Limits of one parse + render. A hostile template ends with a kLimit error, never a crash.
struct Limits {
  size_t max_template_bytes = 1u << 20;   // template source
  size_t max_output_bytes = 8u << 20;     // rendered text, and any single string value
  size_t max_memory_bytes = 24u << 20;    // live strings, lists, dicts, output buffers, context
  uint64_t max_steps = 2'000'000;         // evaluation steps (nodes, iterations, per-KB work)
  uint32_t max_call_depth = 64;           // nested macro / caller() calls
  uint32_t max_nesting_depth = 128;       // syntax nesting in the parser, and value nesting
  uint32_t max_range = 100000;            // items of one range(), as Jinja's sandbox MAX_RANGE
  uint32_t max_time_ms = 800;             // wall-clock backstop, checked every few thousand steps
  size_t max_stack_bytes = 1u << 20;      // native stack used by parse/render recursion (the
                                          // calling thread needs at least twice this)
};

enum class ErrorKind { kSyntax, kType, kUndefined, kRaised, kLimit, kSecurity, kUnsupported };

// Thrown inside the parser/interpreter only; chat_template.cpp turns it into a Status.
class JinjaError : public std::exception {
 public:
  JinjaError(ErrorKind kind, std::string message) : kind_(kind), message_(std::move(message)) {}
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  const char* what() const noexcept override { return message_.c_str(); }
  int line = 0;

 private:
  ErrorKind kind_;
  std::string message_;
};

[[noreturn]] void fail(ErrorKind kind, std::string message);

// Guards native recursion by bytes of stack used since `base` (stacks grow down on every
// platform duet supports). Frames are much larger under sanitizers, so depth counts alone
// cannot bound stack use.
inline uintptr_t stack_position() { return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)); }
inline void check_stack(uintptr_t base, size_t max_bytes) {
  const uintptr_t here = stack_position();
  if (base > here && base - here > max_bytes)
    fail(ErrorKind::kLimit, "template recursion uses more than " + std::to_string(max_bytes) + " bytes of stack");
}
[[noreturn]] inline void type_error(std::string message) { fail(ErrorKind::kType, std::move(message)); }

// Live-memory, step and time accounting of one render.
class Budget {
 public:
  explicit Budget(const Limits& limits);
  const Limits& limits() const { return limits_; }
  void charge(size_t bytes);  // throws kLimit when live bytes exceed max_memory_bytes
  void release(size_t bytes) { live_ -= bytes < live_ ? bytes : live_; }
  void tick(uint64_t n = 1) {
    steps_ += n;
    if (steps_ > next_check_) check_slow();
  }
  void check_string(size_t bytes) const;  // throws when a string would exceed max_output_bytes
  uint64_t steps() const { return steps_; }
  size_t live_bytes() const { return live_; }

 private:
  void check_slow();
  Limits limits_;
  size_t live_ = 0;
  uint64_t steps_ = 0;
  uint64_t next_check_ = 4096;
  int64_t deadline_ns_ = 0;
};

// The budget of the render running on this thread (nullptr outside a render: parse-time
// constants are not accounted).
Budget* current_budget();
class BudgetScope {
 public:
  explicit BudgetScope(Budget* b);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  Budget* prev_;
};
inline void tick(uint64_t n = 1) {
  if (Budget* b = current_budget()) b->tick(n);
}

enum class Kind : uint8_t {
  kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kIterator, kNamespace,
  kCallable, kLoop,
};
// Lists that print or index differently: tuples, range objects and dict views.
enum class ListFlavor : uint8_t { kList, kTuple, kRange, kDictKeys, kDictValues, kDictItems };

// Heap objects charge their bytes to the render's budget and give them back when destroyed.
class Object {
 public:
  Object();
  virtual ~Object();
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;
  void account(size_t bytes);
  virtual std::string repr_text() const { return "<object>"; }  // str() of opaque objects

 private:
  Budget* budget_;
  size_t charged_ = 0;
};

class Value;
struct StringObj;
struct ListObj;
struct DictObj;
struct IterObj;
struct NamespaceObj;
struct UndefObj;

class Value {
 public:
  Value() = default;
  static Value undefined(std::string hint = {}, ErrorKind kind = ErrorKind::kUndefined);
  static Value none() { return Value(Kind::kNone); }
  static Value boolean(bool b) {
    Value v(Kind::kBool);
    v.i_ = b ? 1 : 0;
    return v;
  }
  static Value integer(int64_t i) {
    Value v(Kind::kInt);
    v.i_ = i;
    return v;
  }
  static Value number(double f) {
    Value v(Kind::kFloat);
    v.f_ = f;
    return v;
  }
  static Value string(std::string s, bool markup = false);
  static Value list(std::vector<Value> items, ListFlavor flavor = ListFlavor::kList);
  static Value tuple(std::vector<Value> items) { return list(std::move(items), ListFlavor::kTuple); }
  static Value dict(std::shared_ptr<DictObj> d);
  static Value iterator(std::vector<Value> items, std::string type_name);
  static Value object(Kind kind, std::shared_ptr<Object> obj) {
    Value v(kind);
    v.obj_ = std::move(obj);
    return v;
  }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }  // not bool
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }  // incl. tuples, ranges, dict views
  bool is_dict() const { return kind_ == Kind::kDict; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }  // int or bool
  double as_double() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(i_); }
  const std::string& str() const;  // kString only
  bool is_markup() const;
  ListObj& list() const;
  ListFlavor flavor() const;
  DictObj& dict() const;
  IterObj& iter() const;
  NamespaceObj& ns() const;
  const UndefObj* undef() const;
  const std::shared_ptr<Object>& obj() const { return obj_; }
  template <typename T>
  T& as() const {
    return static_cast<T&>(*obj_);
  }

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::kUndefined;
  union {
    int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<Object> obj_;
};

struct StringObj final : Object {
  StringObj(std::string str, bool is_markup);
  std::string s;
  bool markup;
};

struct ListObj final : Object {
  ListObj(std::vector<Value> v, ListFlavor f);
  std::vector<Value> items;
  ListFlavor flavor;
  uint32_t depth = 1;
  int64_t range_start = 0, range_stop = 0, range_step = 1;  // kRange only, for repr
};

// Ordered dict with Python key equality (1 == 1.0 == True). String keys are indexed.
struct DictObj final : Object {
  DictObj() = default;
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(Value key, Value value);  // keeps the first position of an existing key
  size_t size() const { return entries.size(); }
  std::vector<std::pair<Value, Value>> entries;
  std::unordered_map<std::string, size_t> str_index;
  uint32_t depth = 1;
};

// A one-pass iterator (Python generator): select/map/... results. Iterating consumes it.
struct IterObj final : Object {
  IterObj(std::vector<Value> v, std::string name);
  std::vector<Value> items;
  size_t pos = 0;
  std::string type_name;
};

struct NamespaceObj final : Object {
  DictObj attrs;
};

struct UndefObj final : Object {
  UndefObj(std::string h, ErrorKind k) : hint(std::move(h)), error_kind(k) {}
  std::string hint;      // the error raised when the undefined value is used
  ErrorKind error_kind;  // kUndefined, or kSecurity for unsafe attributes
};

// Raises the error an Undefined carries (using it as a number, calling it, indexing it...).
[[noreturn]] void fail_undefined(const Value& v);

// Python semantics.
bool truthy(const Value& v);
std::string to_str(const Value& v);   // str(v); Undefined -> ""
std::string repr(const Value& v);     // repr(v)
void append_str(std::string* out, const Value& v);
bool equals(const Value& a, const Value& b);
bool less(const Value& a, const Value& b);  // a < b; throws kType when unordered
std::string type_name(const Value& v);        // Python type name, for messages
std::string hash_key(const Value& v);         // set/dict identity; throws for unhashable

// Items of an iterable as Python's iter() gives them: list items, dict keys, string chars.
// Lists are shared, not copied; anything else is materialized as a new list, charged to the
// budget like any value. Consumes generators. Undefined iterates as empty; throws kType for
// non-iterables.
class Items {
 public:
  explicit Items(Value list) : list_(std::move(list)) {}
  const std::vector<Value>& vec() const;
  std::vector<Value>::const_iterator begin() const { return vec().begin(); }
  std::vector<Value>::const_iterator end() const { return vec().end(); }
  size_t size() const { return vec().size(); }
  bool empty() const { return vec().empty(); }
  const Value& operator[](size_t k) const { return vec()[k]; }
  const Value& back() const { return vec().back(); }
  const Value& list_value() const { return list_; }

 private:
  Value list_;
};
Items iterate(const Value& v);

// Charges a transient buffer (sort keys, a copy being built) to the render's budget while alive.
class TempCharge {
 public:
  explicit TempCharge(size_t bytes);
  ~TempCharge();
  TempCharge(const TempCharge&) = delete;
  TempCharge& operator=(const TempCharge&) = delete;

 private:
  Budget* budget_;
  size_t bytes_;
};
size_t py_len(const Value& v);  // len(); throws kType when there is none

struct JsonOptions {
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string indent;  // used when has_indent
  bool has_indent = false;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
};
// json.dumps(v, ...): throws kType for values JSON cannot hold (Undefined, namespaces...).
std::string to_json(const Value& v, const JsonOptions& opts);

Value from_json(const nlohmann::ordered_json& j, uint32_t max_depth);

}  // namespace duet::jinja
