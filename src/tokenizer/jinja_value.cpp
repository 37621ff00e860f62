// Jinja values (see jinja_value.h): budget accounting, Python str/repr/==/<, tojson, JSON bridge.
#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "tokenizer/jinja_text.h"

namespace duet::jinja {

namespace {

thread_local Budget* g_budget = nullptr;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint32_t max_depth() {
  Budget* b = current_budget();
  return b ? b->limits().max_nesting_depth : 1024;
}

uint32_t depth_of(const Value& v) {
  if (v.is_list()) return v.list().depth;
  if (v.is_dict()) return v.dict().depth;
  return 0;
}

}  // namespace

void fail(ErrorKind kind, std::string message) { throw JinjaError(kind, std::move(message)); }

Budget::Budget(const Limits& limits) : limits_(limits) {
  deadline_ns_ = now_ns() + static_cast<int64_t>(limits.max_time_ms) * 1000000;
  next_check_ = std::min<uint64_t>(4096, limits.max_steps);
}

void Budget::charge(size_t bytes) {
  live_ += bytes;
  if (live_ > limits_.max_memory_bytes)
    fail(ErrorKind::kLimit, "template memory limit exceeded: more than " +
                                std::to_string(limits_.max_memory_bytes) + " bytes live");
}

void Budget::check_string(size_t bytes) const {
  if (bytes > limits_.max_output_bytes)
    fail(ErrorKind::kLimit, "string of " + std::to_string(bytes) + " bytes exceeds the limit of " +
                                std::to_string(limits_.max_output_bytes));
}

void Budget::check_slow() {
  if (steps_ > limits_.max_steps)
    fail(ErrorKind::kLimit, "template step limit exceeded (" + std::to_string(limits_.max_steps) + " steps)");
  next_check_ = std::min<uint64_t>(steps_ + 4096, limits_.max_steps);
  if (now_ns() > deadline_ns_)
    fail(ErrorKind::kLimit, "template time limit exceeded (" + std::to_string(limits_.max_time_ms) + " ms)");
}

Budget* current_budget() { return g_budget; }
BudgetScope::BudgetScope(Budget* b) : prev_(g_budget) { g_budget = b; }
BudgetScope::~BudgetScope() { g_budget = prev_; }

Object::Object() : budget_(g_budget) {}
Object::~Object() {
  if (budget_) budget_->release(charged_);
}
void Object::account(size_t bytes) {
  charged_ += bytes;
  if (budget_) budget_->charge(bytes);
}

StringObj::StringObj(std::string str, bool is_markup) : s(std::move(str)), markup(is_markup) {
  account(sizeof(StringObj) + s.capacity());
}

ListObj::ListObj(std::vector<Value> v, ListFlavor f) : items(std::move(v)), flavor(f) {
  account(sizeof(ListObj) + items.capacity() * sizeof(Value));
  uint32_t d = 0;
  for (const Value& x : items) d = std::max(d, depth_of(x));
  depth = d + 1;
  if (depth > max_depth())
    fail(ErrorKind::kLimit, "value nesting deeper than " + std::to_string(max_depth()));
}

IterObj::IterObj(std::vector<Value> v, std::string name) : items(std::move(v)), type_name(std::move(name)) {
  account(sizeof(IterObj) + items.capacity() * sizeof(Value));
}

const Value* DictObj::find(const std::string& key) const {
  auto it = str_index.find(key);
  return it == str_index.end() ? nullptr : &entries[it->second].second;
}

const Value* DictObj::find(const Value& key) const {
  if (key.is_string()) return find(key.str());
  for (const auto& [k, v] : entries)
    if (!k.is_string() && equals(k, key)) return &v;
  return nullptr;
}

void DictObj::set(Value key, Value value) {
  uint32_t d = depth_of(value) + 1;
  if (d > max_depth()) fail(ErrorKind::kLimit, "value nesting deeper than " + std::to_string(max_depth()));
  depth = std::max(depth, d);
  if (key.is_string()) {
    auto it = str_index.find(key.str());
    if (it != str_index.end()) {
      entries[it->second].second = std::move(value);
      return;
    }
    account(2 * sizeof(Value) + 48 + key.str().size());
    str_index.emplace(key.str(), entries.size());
  } else {
    for (auto& [k, v] : entries) {
      if (!k.is_string() && equals(k, key)) {
        v = std::move(value);
        return;
      }
    }
    account(2 * sizeof(Value));
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string hint, ErrorKind kind) {
  Value v(Kind::kUndefined);
  if (!hint.empty() || kind != ErrorKind::kUndefined) v.obj_ = std::make_shared<UndefObj>(std::move(hint), kind);
  return v;
}

Value Value::string(std::string s, bool markup) {
  if (Budget* b = current_budget()) b->check_string(s.size());
  Value v(Kind::kString);
  v.obj_ = std::make_shared<StringObj>(std::move(s), markup);
  return v;
}

Value Value::list(std::vector<Value> items, ListFlavor flavor) {
  Value v(Kind::kList);
  v.obj_ = std::make_shared<ListObj>(std::move(items), flavor);
  return v;
}

Value Value::dict(std::shared_ptr<DictObj> d) {
  Value v(Kind::kDict);
  v.obj_ = std::move(d);
  return v;
}

Value Value::iterator(std::vector<Value> items, std::string type_name) {
  Value v(Kind::kIterator);
  v.obj_ = std::make_shared<IterObj>(std::move(items), std::move(type_name));
  return v;
}

const std::string& Value::str() const { return static_cast<StringObj&>(*obj_).s; }
bool Value::is_markup() const { return kind_ == Kind::kString && static_cast<StringObj&>(*obj_).markup; }
ListObj& Value::list() const { return static_cast<ListObj&>(*obj_); }
ListFlavor Value::flavor() const { return list().flavor; }
DictObj& Value::dict() const { return static_cast<DictObj&>(*obj_); }
IterObj& Value::iter() const { return static_cast<IterObj&>(*obj_); }
NamespaceObj& Value::ns() const { return static_cast<NamespaceObj&>(*obj_); }
const UndefObj* Value::undef() const { return static_cast<const UndefObj*>(obj_.get()); }

void fail_undefined(const Value& v) {
  const UndefObj* u = v.undef();
  if (u && !u->hint.empty()) fail(u->error_kind, u->hint);
  fail(ErrorKind::kUndefined, "value is undefined");
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool:
    case Kind::kInt: return v.as_int() != 0;
    case Kind::kFloat: return v.as_double() != 0.0;
    case Kind::kString: return !v.str().empty();
    case Kind::kList: return !v.list().items.empty();
    case Kind::kDict: return v.dict().size() != 0;
    default: return true;  // generators, namespaces, callables: objects are true
  }
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return v.is_markup() ? "Markup" : "str";
    case Kind::kList:
      switch (v.flavor()) {
        case ListFlavor::kList: return "list";
        case ListFlavor::kTuple: return "tuple";
        case ListFlavor::kRange: return "range";
        case ListFlavor::kDictKeys: return "dict_keys";
        case ListFlavor::kDictValues: return "dict_values";
        case ListFlavor::kDictItems: return "dict_items";
      }
      return "list";
    case Kind::kDict: return "dict";
    case Kind::kIterator: return v.iter().type_name;
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return "function";
    case Kind::kLoop: return "LoopContext";
  }
  return "object";
}

namespace {

void check_out(const std::string& out) {
  if (Budget* b = current_budget()) {
    b->check_string(out.size());
    b->tick(1);
  }
}

void check_depth(int depth) {
  if (depth > static_cast<int>(max_depth()) + 8)
    fail(ErrorKind::kLimit, "value nesting deeper than " + std::to_string(max_depth()));
}

void append_repr(std::string* out, const Value& v, int depth);

void append_items(std::string* out, const std::vector<Value>& items, int depth) {
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) out->append(", ");
    append_repr(out, items[k], depth + 1);
    check_out(*out);
  }
}

void append_dict(std::string* out, const DictObj& d, int depth) {
  out->push_back('{');
  for (size_t k = 0; k < d.entries.size(); ++k) {
    if (k) out->append(", ");
    append_repr(out, d.entries[k].first, depth + 1);
    out->append(": ");
    append_repr(out, d.entries[k].second, depth + 1);
    check_out(*out);
  }
  out->push_back('}');
}

void append_value(std::string* out, const Value& v, int depth, bool as_repr) {
  check_depth(depth);
  switch (v.kind()) {
    case Kind::kUndefined:
      if (as_repr) out->append("Undefined");
      return;
    case Kind::kNone: out->append("None"); return;
    case Kind::kBool: out->append(v.as_bool() ? "True" : "False"); return;
    case Kind::kInt: out->append(std::to_string(v.as_int())); return;
    case Kind::kFloat: out->append(py_float_repr(v.as_double())); return;
    case Kind::kString:
      tick(v.str().size() / 1024);
      if (!as_repr) {
        out->append(v.str());
      } else if (v.is_markup()) {
        out->append("Markup(" + py_str_repr(v.str()) + ")");
      } else {
        out->append(py_str_repr(v.str()));
      }
      return;
    case Kind::kList: {
      const ListObj& l = v.list();
      switch (l.flavor) {
        case ListFlavor::kList:
          out->push_back('[');
          append_items(out, l.items, depth);
          out->push_back(']');
          return;
        case ListFlavor::kTuple:
          out->push_back('(');
          append_items(out, l.items, depth);
          if (l.items.size() == 1) out->push_back(',');
          out->push_back(')');
          return;
        case ListFlavor::kRange:
          out->append("range(" + std::to_string(l.range_start) + ", " + std::to_string(l.range_stop));
          if (l.range_step != 1) out->append(", " + std::to_string(l.range_step));
          out->push_back(')');
          return;
        case ListFlavor::kDictKeys:
        case ListFlavor::kDictValues:
        case ListFlavor::kDictItems:
          out->append(type_name(v) + "([");
          append_items(out, l.items, depth);
          out->append("])");
          return;
      }
      return;
    }
    case Kind::kDict: append_dict(out, v.dict(), depth); return;
    case Kind::kIterator: out->append("<" + v.iter().type_name + " object>"); return;
    case Kind::kNamespace:
      out->append("<Namespace ");
      append_dict(out, v.ns().attrs, depth);
      out->push_back('>');
      return;
    case Kind::kCallable:
    case Kind::kLoop: out->append(v.obj()->repr_text()); return;
  }
}

void append_repr(std::string* out, const Value& v, int depth) { append_value(out, v, depth, true); }

bool num_equals(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) return a.as_int() == b.as_int();
  if (a.is_float() && b.is_float()) return a.as_double() == b.as_double();
  const Value& f = a.is_float() ? a : b;
  const Value& i = a.is_float() ? b : a;
  double x = f.as_double();
  if (!(x == std::floor(x)) || std::fabs(x) > 9.2e18) return false;
  return static_cast<int64_t>(x) == i.as_int();
}

bool num_less(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) return a.as_int() < b.as_int();
  return a.as_double() < b.as_double();
}

bool equals_impl(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  tick(1);
  if (a.is_number() && b.is_number()) return num_equals(a, b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: tick(a.str().size() / 1024); return a.str() == b.str();
    case Kind::kList: {
      if (a.flavor() != b.flavor()) return false;
      const auto& x = a.list().items;
      const auto& y = b.list().items;
      if (x.size() != y.size()) return false;
      for (size_t k = 0; k < x.size(); ++k)
        if (!equals_impl(x[k], y[k], depth + 1)) return false;
      return true;
    }
    case Kind::kDict: {
      const DictObj& x = a.dict();
      const DictObj& y = b.dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* w = y.find(k);
        if (!w || !equals_impl(v, *w, depth + 1)) return false;
      }
      return true;
    }
    default: return a.obj() == b.obj();
  }
}

bool less_impl(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  tick(1);
  if (a.is_number() && b.is_number()) return num_less(a, b);
  if (a.is_string() && b.is_string()) {
    tick(std::min(a.str().size(), b.str().size()) / 1024);
    return a.str() < b.str();
  }
  if (a.is_list() && b.is_list() && a.flavor() == b.flavor() &&
      (a.flavor() == ListFlavor::kList || a.flavor() == ListFlavor::kTuple)) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    size_t n = std::min(x.size(), y.size());
    for (size_t k = 0; k < n; ++k) {
      if (!equals_impl(x[k], y[k], depth + 1)) return less_impl(x[k], y[k], depth + 1);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined() || b.is_undefined()) fail_undefined(a.is_undefined() ? a : b);
  type_error("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::string hash_key_impl(const Value& v, int depth) {
  check_depth(depth);
  tick(1 + (v.is_string() ? v.str().size() / 1024 : 0));
  switch (v.kind()) {
    case Kind::kNone: return "N";
    case Kind::kUndefined: return "U";
    case Kind::kBool:
    case Kind::kInt: return "I" + std::to_string(v.as_int());
    case Kind::kFloat: {
      double x = v.as_double();
      if (x == std::floor(x) && std::fabs(x) < 9.2e18) return "I" + std::to_string(static_cast<int64_t>(x));
      return "F" + py_float_repr(x);
    }
    case Kind::kString: return "S" + v.str();
    case Kind::kList:
      if (v.flavor() == ListFlavor::kTuple) {
        std::string k = "T(";
        for (const Value& x : v.list().items) k += hash_key_impl(x, depth + 1) + "\x1f";
        return k + ")";
      }
      type_error("unhashable type: '" + type_name(v) + "'");
    case Kind::kDict: type_error("unhashable type: 'dict'");
    default: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "O%p", static_cast<const void*>(v.obj().get()));
      return buf;
    }
  }
}

void json_impl(std::string* out, const Value& v, const JsonOptions& o, int level, int depth) {
  check_depth(depth);
  check_out(*out);
  switch (v.kind()) {
    case Kind::kNone: out->append("null"); return;
    case Kind::kBool: out->append(v.as_bool() ? "true" : "false"); return;
    case Kind::kInt: out->append(std::to_string(v.as_int())); return;
    case Kind::kFloat: out->append(py_float_repr(v.as_double(), true)); return;
    case Kind::kString:
      tick(v.str().size() / 1024);
      json_quote(out, v.str(), o.ensure_ascii);
      return;
    case Kind::kList: {
      if (v.flavor() != ListFlavor::kList && v.flavor() != ListFlavor::kTuple) break;
      const auto& items = v.list().items;
      if (items.empty()) {
        out->append("[]");
        return;
      }
      out->push_back('[');
      std::string nl;
      if (o.has_indent) {
        nl = "\n";
        for (int k = 0; k <= level; ++k) nl += o.indent;
        out->append(nl);
      }
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) {
          out->append(o.item_sep);
          out->append(nl);
        }
        json_impl(out, items[k], o, level + 1, depth + 1);
      }
      if (o.has_indent) {
        out->push_back('\n');
        for (int k = 0; k < level; ++k) out->append(o.indent);
      }
      out->push_back(']');
      return;
    }
    case Kind::kDict: {
      const DictObj& d = v.dict();
      if (d.entries.empty()) {
        out->append("{}");
        return;
      }
      std::vector<const std::pair<Value, Value>*> order;
      for (const auto& e : d.entries) order.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(order.begin(), order.end(),
                         [](const auto* x, const auto* y) { return less(x->first, y->first); });
      }
      out->push_back('{');
      std::string nl;
      if (o.has_indent) {
        nl = "\n";
        for (int k = 0; k <= level; ++k) nl += o.indent;
        out->append(nl);
      }
      bool first = true;
      for (const auto* e : order) {
        if (!first) {
          out->append(o.item_sep);
          out->append(nl);
        }
        first = false;
        const Value& k = e->first;
        if (k.is_string()) {
          json_quote(out, k.str(), o.ensure_ascii);
        } else if (k.is_float()) {
          json_quote(out, py_float_repr(k.as_double(), true), o.ensure_ascii);
        } else if (k.is_bool()) {
          out->append(k.as_bool() ? "\"true\"" : "\"false\"");
        } else if (k.is_none()) {
          out->append("\"null\"");
        } else if (k.is_int()) {
          out->append("\"" + std::to_string(k.as_int()) + "\"");
        } else {
          type_error("keys must be str, int, float, bool or None, not " + type_name(k));
        }
        out->append(o.key_sep);
        json_impl(out, e->second, o, level + 1, depth + 1);
      }
      if (o.has_indent) {
        out->push_back('\n');
        for (int k = 0; k < level; ++k) out->append(o.indent);
      }
      out->push_back('}');
      return;
    }
    default: break;
  }
  type_error("Object of type " + type_name(v) + " is not JSON serializable");
}

}  // namespace

std::string to_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  append_value(&out, v, 0, false);
  return out;
}

void append_str(std::string* out, const Value& v) {
  if (v.is_string()) {
    out->append(v.str());
  } else {
    append_value(out, v, 0, false);
  }
}

std::string repr(const Value& v) {
  std::string out;
  append_value(&out, v, 0, true);
  return out;
}

bool equals(const Value& a, const Value& b) { return equals_impl(a, b, 0); }
bool less(const Value& a, const Value& b) { return less_impl(a, b, 0); }
std::string hash_key(const Value& v) { return hash_key_impl(v, 0); }

const std::vector<Value>& Items::vec() const { return list_.list().items; }

TempCharge::TempCharge(size_t bytes) : budget_(current_budget()), bytes_(bytes) {
  if (budget_) {
    try {
      budget_->charge(bytes_);
    } catch (...) {
      budget_->release(bytes_);
      throw;
    }
  }
}
TempCharge::~TempCharge() {
  if (budget_) budget_->release(bytes_);
}

Items iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return Items(Value::list({}));
    case Kind::kString: {
      const std::string& s = v.str();
      tick(s.size() / 16 + 1);
      // Charge the Value slots up front: a long string makes many one-character values.
      TempCharge pending(utf8_length(s) * sizeof(Value));
      std::vector<Value> out;
      out.reserve(utf8_length(s));
      size_t i = 0;
      while (i < s.size()) {
        size_t start = i;
        utf8_next(s, &i);
        out.push_back(Value::string(s.substr(start, i - start)));
      }
      return Items(Value::list(std::move(out)));
    }
    case Kind::kList: return Items(v);
    case Kind::kDict: {
      TempCharge pending(v.dict().size() * sizeof(Value));
      std::vector<Value> out;
      out.reserve(v.dict().size());
      for (const auto& e : v.dict().entries) out.push_back(e.first);
      tick(out.size() / 16 + 1);
      return Items(Value::list(std::move(out)));
    }
    case Kind::kIterator: {
      IterObj& it = v.iter();
      TempCharge pending((it.items.size() - it.pos) * sizeof(Value));
      std::vector<Value> out(it.items.begin() + static_cast<std::ptrdiff_t>(it.pos), it.items.end());
      it.pos = it.items.size();
      return Items(Value::list(std::move(out)));
    }
    default: type_error("'" + type_name(v) + "' object is not iterable");
  }
}

size_t py_len(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return 0;
    case Kind::kString: tick(v.str().size() / 1024); return utf8_length(v.str());
    case Kind::kList: return v.list().items.size();
    case Kind::kDict: return v.dict().size();
    case Kind::kNamespace: break;
    default: break;
  }
  type_error("object of type '" + type_name(v) + "' has no len()");
}

std::string to_json(const Value& v, const JsonOptions& opts) {
  std::string out;
  json_impl(&out, v, opts, 0, 0);
  return out;
}

Value from_json(const nlohmann::ordered_json& j, uint32_t max_depth_allowed) {
  if (max_depth_allowed == 0) fail(ErrorKind::kLimit, "JSON value nested too deeply");
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value::boolean(j.get<bool>());
    case T::number_integer: return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(ErrorKind::kType, "integer " + std::to_string(u) + " does not fit in 64 bits");
      return Value::integer(static_cast<int64_t>(u));
    }
    case T::number_float: return Value::number(j.get<double>());
    case T::string: return Value::string(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x, max_depth_allowed - 1));
      return Value::list(std::move(items));
    }
    case T::object: {
      auto d = std::make_shared<DictObj>();
      for (auto it = j.begin(); it != j.end(); ++it)
        d->set(Value::string(it.key()), from_json(it.value(), max_depth_allowed - 1));
      return Value::dict(std::move(d));
    }
    default: fail(ErrorKind::kType, "unsupported JSON value in the template context");
  }
}

}  // namespace duet::jinja
