// Jinja evaluator core (see jinja_interp.h): statements, expressions, scoping, macros,
// attribute/item access and Python operators. Filters, tests, globals and methods live in
// jinja_builtins.cpp.
#include "tokenizer/jinja_interp.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>

#include "tokenizer/jinja_text.h"

namespace duet::jinja {

namespace {

constexpr uint32_t kMaxEvalDepth = 3000;

struct DepthGuard {
  DepthGuard(uint32_t* d, uint32_t max, const char* what) : d_(d) {
    if (++*d_ > max) fail(ErrorKind::kLimit, std::string(what) + " nested deeper than " + std::to_string(max));
  }
  ~DepthGuard() { --*d_; }
  uint32_t* d_;
};

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

int64_t checked(bool overflow, int64_t v) {
  if (overflow) fail(ErrorKind::kLimit, "integer overflow (duet integers are 64-bit)");
  return v;
}

Value num_result(const Value& a, const Value& b, int64_t (*iop)(int64_t, int64_t), double (*fop)(double, double)) {
  if (!a.is_float() && !b.is_float()) return Value::integer(iop(a.as_int(), b.as_int()));
  return Value::number(fop(a.as_double(), b.as_double()));
}

[[noreturn]] void unsupported_operands(const char* op, const Value& a, const Value& b) {
  type_error(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
             type_name(b) + "'");
}

double py_fmod(double vx, double wx, double* floordiv_out) {
  if (wx == 0.0) type_error("float modulo by zero");
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  if (floordiv_out) *floordiv_out = floordiv;
  return mod;
}

Value repeat_seq(const Value& seq, int64_t n) {
  if (n <= 0) {
    if (seq.is_string()) return Value::string("", seq.is_markup());
    return Value::list({}, seq.flavor() == ListFlavor::kTuple ? ListFlavor::kTuple : ListFlavor::kList);
  }
  Budget* b = current_budget();
  const size_t max = b ? b->limits().max_output_bytes : (16u << 20);
  if (seq.is_string()) {
    const std::string& s = seq.str();
    if (!s.empty() && static_cast<uint64_t>(n) > max / s.size())
      fail(ErrorKind::kLimit, "string repetition result exceeds " + std::to_string(max) + " bytes");
    TempCharge pending(s.size() * static_cast<size_t>(n));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) out += s;
    tick(out.size() / 1024 + 1);
    return Value::string(std::move(out), seq.is_markup());
  }
  const auto& items = seq.list().items;
  if (!items.empty() && static_cast<uint64_t>(n) > max / (items.size() * sizeof(Value)))
    fail(ErrorKind::kLimit, "list repetition result too large");
  TempCharge pending(items.size() * static_cast<size_t>(n) * sizeof(Value));
  std::vector<Value> out;
  out.reserve(items.size() * static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), items.begin(), items.end());
  tick(out.size() / 64 + 1);
  return Value::list(std::move(out), seq.flavor() == ListFlavor::kTuple ? ListFlavor::kTuple : ListFlavor::kList);
}

// Python slice.indices + the indices it selects.
struct SliceBounds {
  int64_t lo = 0, hi = 0, step = 1;
};

std::vector<size_t> slice_positions(int64_t len, const Value* start, const Value* stop, const Value* step,
                                    SliceBounds* bounds = nullptr) {
  auto as_index = [](const Value* v, bool* present) -> int64_t {
    *present = v && !v->is_none();
    if (!*present) return 0;
    if (!(v->is_int() || v->is_bool())) type_error("slice indices must be integers or None");
    return v->as_int();
  };
  bool has_start, has_stop, has_step;
  int64_t st = as_index(step, &has_step);
  if (!has_step) st = 1;
  if (st == 0) type_error("slice step cannot be zero");
  int64_t lo = as_index(start, &has_start);
  int64_t hi = as_index(stop, &has_stop);
  auto clamp = [&](int64_t v, bool present, int64_t dflt) {
    if (!present) return dflt;
    if (v < 0) {
      v += len;
      if (v < 0) v = st < 0 ? -1 : 0;
    } else if (v >= len) {
      v = st < 0 ? len - 1 : len;
    }
    return v;
  };
  lo = clamp(lo, has_start, st < 0 ? len - 1 : 0);
  hi = clamp(hi, has_stop, st < 0 ? -1 : len);
  if (bounds) *bounds = SliceBounds{lo, hi, st};
  std::vector<size_t> out;
  if (st > 0) {
    for (int64_t k = lo; k < hi; k += st) out.push_back(static_cast<size_t>(k));
  } else {
    for (int64_t k = lo; k > hi; k += st) out.push_back(static_cast<size_t>(k));
  }
  return out;
}

Value do_slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  if (obj.is_string()) {
    const std::string& s = obj.str();
    tick(s.size() / 1024);
    if (is_ascii(s)) {
      auto pos = slice_positions(static_cast<int64_t>(s.size()), start, stop, step);
      std::string out;
      out.reserve(pos.size());
      for (size_t p : pos) out.push_back(s[p]);
      tick(out.size() / 256 + 1);
      return Value::string(std::move(out));
    }
    auto cps = utf8_decode(s);
    auto pos = slice_positions(static_cast<int64_t>(cps.size()), start, stop, step);
    std::string out;
    for (size_t p : pos) utf8_append(&out, cps[p]);
    tick(out.size() / 256 + 1);
    return Value::string(std::move(out));
  }
  if (obj.is_list()) {
    ListFlavor f = obj.flavor();
    if (f != ListFlavor::kList && f != ListFlavor::kTuple && f != ListFlavor::kRange)
      return Value::undefined("'" + type_name(obj) + "' object is not subscriptable");
    const auto& items = obj.list().items;
    SliceBounds sb;
    auto pos = slice_positions(static_cast<int64_t>(items.size()), start, stop, step, &sb);
    std::vector<Value> out;
    out.reserve(pos.size());
    for (size_t p : pos) out.push_back(items[p]);
    tick(out.size() / 64 + 1);
    if (f == ListFlavor::kRange) {
      // range(a, b, s)[i:j:k] is range(a + i*s, a + j*s, s*k), as Python prints it.
      const ListObj& r = obj.list();
      Value v = Value::list(std::move(out), ListFlavor::kRange);
      v.list().range_start = r.range_start + sb.lo * r.range_step;
      v.list().range_stop = r.range_start + sb.hi * r.range_step;
      v.list().range_step = r.range_step * sb.step;
      return v;
    }
    return Value::list(std::move(out), f == ListFlavor::kTuple ? ListFlavor::kTuple : ListFlavor::kList);
  }
  if (obj.is_undefined()) fail_undefined(obj);
  return Value::undefined("'" + type_name(obj) + "' object is not subscriptable");
}

}  // namespace

// ---------------------------------------------------------------- operators

Value binary_op(BinOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool nums = a.is_number() && b.is_number();
  switch (op) {
    case BinOp::kAdd:
      if (nums)
        return num_result(
            a, b,
            [](int64_t x, int64_t y) {
              int64_t r;
              const bool overflow = __builtin_add_overflow(x, y, &r);
              return checked(overflow, r);
            },
            [](double x, double y) { return x + y; });
      if (a.is_string() && b.is_string()) {
        const bool markup = a.is_markup() || b.is_markup();
        std::string x = a.is_markup() || !markup ? a.str() : html_escape(a.str());
        const std::string y = b.is_markup() || !markup ? b.str() : html_escape(b.str());
        if (Budget* bud = current_budget()) bud->check_string(x.size() + y.size());
        x += y;
        tick(x.size() / 1024 + 1);
        return Value::string(std::move(x), markup);
      }
      if (a.is_list() && b.is_list() && a.flavor() == b.flavor() &&
          (a.flavor() == ListFlavor::kList || a.flavor() == ListFlavor::kTuple)) {
        TempCharge pending((a.list().items.size() + b.list().items.size()) * sizeof(Value));
        std::vector<Value> out = a.list().items;
        out.insert(out.end(), b.list().items.begin(), b.list().items.end());
        tick(out.size() / 64 + 1);
        return Value::list(std::move(out), a.flavor());
      }
      if (a.is_string())
        type_error("can only concatenate str (not \"" + type_name(b) + "\") to str");
      if (a.is_list() && a.flavor() == ListFlavor::kList)
        type_error("can only concatenate list (not \"" + type_name(b) + "\") to list");
      unsupported_operands("+", a, b);
    case BinOp::kSub:
      if (nums)
        return num_result(
            a, b,
            [](int64_t x, int64_t y) {
              int64_t r;
              const bool overflow = __builtin_sub_overflow(x, y, &r);
              return checked(overflow, r);
            },
            [](double x, double y) { return x - y; });
      unsupported_operands("-", a, b);
    case BinOp::kMul:
      if (nums)
        return num_result(
            a, b,
            [](int64_t x, int64_t y) {
              int64_t r;
              const bool overflow = __builtin_mul_overflow(x, y, &r);
              return checked(overflow, r);
            },
            [](double x, double y) { return x * y; });
      if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) {
        if (a.is_list() && a.flavor() != ListFlavor::kList && a.flavor() != ListFlavor::kTuple)
          unsupported_operands("*", a, b);
        return repeat_seq(a, b.as_int());
      }
      if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) {
        if (b.is_list() && b.flavor() != ListFlavor::kList && b.flavor() != ListFlavor::kTuple)
          unsupported_operands("*", a, b);
        return repeat_seq(b, a.as_int());
      }
      if (a.is_string() || b.is_string() || a.is_list() || b.is_list())
        type_error("can't multiply sequence by non-int of type '" + type_name(a.is_number() ? a : b) + "'");
      unsupported_operands("*", a, b);
    case BinOp::kDiv:
      if (nums) {
        if (b.as_double() == 0.0) type_error("division by zero");
        return Value::number(a.as_double() / b.as_double());
      }
      unsupported_operands("/", a, b);
    case BinOp::kFloorDiv:
      if (nums) {
        if (!a.is_float() && !b.is_float()) {
          int64_t x = a.as_int(), y = b.as_int();
          if (y == 0) type_error("integer division or modulo by zero");
          if (x == std::numeric_limits<int64_t>::min() && y == -1) checked(true, 0);
          int64_t q = x / y;
          if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
          return Value::integer(q);
        }
        if (b.as_double() == 0.0) type_error("float floor division by zero");
        double fd;
        py_fmod(a.as_double(), b.as_double(), &fd);
        return Value::number(fd);
      }
      unsupported_operands("//", a, b);
    case BinOp::kMod:
      if (a.is_string()) {
        tick(a.str().size() / 1024);
        return py_format(a.str(), b);
      }
      if (nums) {
        if (!a.is_float() && !b.is_float()) {
          int64_t x = a.as_int(), y = b.as_int();
          if (y == 0) type_error("integer division or modulo by zero");
          if (y == -1) return Value::integer(0);
          int64_t r = x % y;
          if (r != 0 && ((r < 0) != (y < 0))) r += y;
          return Value::integer(r);
        }
        return Value::number(py_fmod(a.as_double(), b.as_double(), nullptr));
      }
      unsupported_operands("%", a, b);
    case BinOp::kPow:
      if (nums) {
        if (!a.is_float() && !b.is_float() && b.as_int() >= 0) {
          int64_t base = a.as_int(), e = b.as_int(), r = 1;
          while (e > 0) {
            tick(1);
            if (e & 1) checked(__builtin_mul_overflow(r, base, &r), 0);
            e >>= 1;
            if (e) checked(__builtin_mul_overflow(base, base, &base), 0);
          }
          return Value::integer(r);
        }
        double x = a.as_double(), y = b.as_double();
        if (x == 0.0 && y < 0) type_error("0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y)) type_error("negative number raised to a fractional power is complex");
        double r = std::pow(x, y);
        if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) fail(ErrorKind::kType, "(34, 'Numerical result out of range')");
        return Value::number(r);
      }
      unsupported_operands("** or pow()", a, b);
  }
  type_error("bad operator");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined: return false;
    case Kind::kString:
      if (!item.is_string())
        type_error("'in <string>' requires string as left operand, not " + type_name(item));
      tick(container.str().size() / 1024 + 1);
      return container.str().find(item.str()) != std::string::npos;
    case Kind::kList:
      for (const Value& x : container.list().items)
        if (equals(x, item)) return true;
      return false;
    case Kind::kDict:
      if (item.is_list() && item.flavor() != ListFlavor::kTuple) type_error("unhashable type: '" + type_name(item) + "'");
      if (item.is_dict()) type_error("unhashable type: 'dict'");
      return container.dict().find(item) != nullptr;
    case Kind::kIterator: {
      IterObj& it = container.iter();
      while (it.pos < it.items.size()) {
        if (equals(it.items[it.pos++], item)) return true;
      }
      return false;
    }
    default: type_error("argument of type '" + type_name(container) + "' is not iterable");
  }
}

// ---------------------------------------------------------------- objects

std::string CallableObj::repr_text() const {
  if (type == CallType::kMacro) return "<Macro '" + name + "'>";
  if (type == CallType::kMethod) return "<built-in method " + name + " of " + type_name(self) + " object>";
  return "<function " + name + ">";
}

std::string LoopObj::repr_text() const {
  return "<LoopContext " + std::to_string(index0 + 1) + "/" + std::to_string(items().size()) + ">";
}

void Interp::Output::append(std::string_view s) {
  if (s.empty()) return;
  const Limits& l = budget_->limits();
  if (s_.size() + s.size() > l.max_output_bytes)
    fail(ErrorKind::kLimit, "rendered output exceeds " + std::to_string(l.max_output_bytes) + " bytes");
  charged_ += s.size();
  budget_->charge(s.size());
  budget_->tick(1 + s.size() / 1024);
  s_.append(s);
}

std::string Interp::Output::take() {
  std::string s = std::move(s_);
  s_.clear();
  budget_->release(charged_);
  charged_ = 0;
  return s;
}

// ---------------------------------------------------------------- interpreter

Interp::Interp(const Template& tmpl, Budget* budget, const RenderOptions& options)
    : tmpl_(tmpl), budget_(budget), options_(options) {}

Interp::~Interp() {
  // Namespaces and macro closures can reference themselves; clear them so that every object
  // is freed (and un-charged) before the budget goes away.
  for (auto& w : namespaces_)
    if (auto o = w.lock()) static_cast<NamespaceObj&>(*o).attrs.entries.clear();
  for (auto& w : closures_)
    if (auto s = w.lock()) s->vars.clear();
}

int64_t Interp::now_epoch_s() const {
  if (options_.now_epoch_s >= 0) return options_.now_epoch_s;
  return static_cast<int64_t>(std::time(nullptr));
}

void Interp::register_namespace(const Value& ns) {
  budget_->charge(64);
  namespaces_.push_back(ns.obj());
}

Value Interp::make_callable(CallType type, std::string name, Value self) {
  auto c = std::make_shared<CallableObj>();
  c->type = type;
  c->name = std::move(name);
  c->self = std::move(self);
  return Value::object(Kind::kCallable, std::move(c));
}

std::string Interp::render(const Value& context) {
  stack_base_ = stack_position();
  auto root = std::make_shared<Scope>();
  if (context.is_dict())
    for (const auto& [k, v] : context.dict().entries)
      if (k.is_string()) root->vars[k.str()] = v;
  Output out(budget_);
  exec_body(tmpl_.body, root, out);
  return out.take();
}

Interp::Flow Interp::exec_body(const Body& body, const ScopePtr& scope, Output& out) {
  for (const auto& n : body) {
    Flow f = exec(*n, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Value Interp::render_body_to_string(const Body& body, const ScopePtr& scope) {
  Output buf(budget_);
  exec_body(body, scope, buf);
  return Value::string(buf.take());
}

Value Interp::apply_filter_chain(const Expr* chain, Value v, const ScopePtr& scope) {
  if (!chain) return v;
  if (chain->kind != ExprKind::kFilter) return v;
  v = apply_filter_chain(chain->a.get(), std::move(v), scope);
  Args args;
  eval_args(*chain, scope, &args);
  return call_filter(chain->name, v, args);
}

Interp::Flow Interp::exec(const Node& n, const ScopePtr& scope, Output& out) {
  budget_->tick();
  check_stack(stack_base_, budget_->limits().max_stack_bytes);
  try {
    switch (n.kind) {
      case NodeKind::kText: out.append(n.text); return Flow::kNormal;
      case NodeKind::kEmit: {
        Value v = eval(*n.expr, scope);
        if (v.is_string()) {
          out.append(v.str());
        } else if (!v.is_undefined()) {
          out.append(to_str(v));
        }
        return Flow::kNormal;
      }
      case NodeKind::kIf: {
        if (truthy(eval(*n.expr, scope))) return exec_body(n.body, scope, out);
        for (const auto& el : n.elifs)
          if (truthy(eval(*el->expr, scope))) return exec_body(el->body, scope, out);
        return exec_body(n.else_body, scope, out);
      }
      case NodeKind::kFor: return exec_for(n, scope, out);
      case NodeKind::kSet: assign(n.target, eval(*n.expr, scope), scope); return Flow::kNormal;
      case NodeKind::kSetBlock: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        Value v = render_body_to_string(n.body, inner);
        assign(n.target, apply_filter_chain(n.filter.get(), std::move(v), scope), scope);
        return Flow::kNormal;
      }
      case NodeKind::kMacro: {
        Value m = make_callable(CallType::kMacro, n.text);
        auto& c = m.as<CallableObj>();
        c.macro = &n;
        c.closure = scope;
        budget_->charge(64);
        closures_.push_back(scope);
        scope->vars[n.text] = std::move(m);
        return Flow::kNormal;
      }
      case NodeKind::kCallBlock: {
        Value caller = make_callable(CallType::kMacro, "caller");
        auto& c = caller.as<CallableObj>();
        c.macro = &n;
        c.closure = scope;
        budget_->charge(64);
        closures_.push_back(scope);
        const Expr& call_expr = *n.expr;
        Args args;
        eval_args(call_expr, scope, &args);
        args.kw.emplace_back("caller", caller);
        Value callee;
        if (call_expr.a->kind == ExprKind::kGetattr) {
          callee = getattr(eval(*call_expr.a->a, scope), call_expr.a->name);
        } else {
          callee = eval(*call_expr.a, scope);
        }
        Value r = call(callee, args);
        if (!r.is_undefined()) out.append(to_str(r));
        return Flow::kNormal;
      }
      case NodeKind::kFilterBlock: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        Value v = render_body_to_string(n.body, inner);
        Value r = apply_filter_chain(n.filter.get(), std::move(v), scope);
        out.append(to_str(r));
        return Flow::kNormal;
      }
      case NodeKind::kWith: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        std::vector<Value> vals;
        for (const auto& [t, e] : n.assigns) vals.push_back(eval(*e, scope));
        for (size_t k = 0; k < vals.size(); ++k) assign(n.assigns[k].first, vals[k], inner);
        return exec_body(n.body, inner, out);
      }
      case NodeKind::kScope: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        return exec_body(n.body, inner, out);
      }
      case NodeKind::kBreak: return Flow::kBreak;
      case NodeKind::kContinue: return Flow::kContinue;
      case NodeKind::kUnsupported: fail(ErrorKind::kUnsupported, n.text);
    }
  } catch (JinjaError& e) {
    if (e.line == 0) e.line = n.line;
    throw;
  }
  return Flow::kNormal;
}

Interp::Flow Interp::exec_for(const Node& n, const ScopePtr& scope, Output& out) {
  Value iterable = eval(*n.expr, scope);
  Value list;  // iterated by reference: lists are immutable
  if (iterable.kind() == Kind::kLoop) {
    list = iterable.as<LoopObj>().list;
  } else {
    if (iterable.is_none() || iterable.is_number() || iterable.kind() == Kind::kCallable ||
        iterable.kind() == Kind::kNamespace)
      type_error("'" + type_name(iterable) + "' object is not iterable");
    list = iterate(iterable).list_value();
  }
  if (n.cond) {
    std::vector<Value> kept;
    for (const Value& item : list.list().items) {
      budget_->tick();
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      assign(n.target, item, probe);
      if (truthy(eval(*n.cond, probe))) kept.push_back(item);
    }
    list = Value::list(std::move(kept));
  }
  if (list.list().items.empty()) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    return exec_body(n.else_body, inner, out);
  }
  auto loop = std::make_shared<LoopObj>();
  loop->list = list;
  Value loop_value = Value::object(Kind::kLoop, loop);
  const std::vector<Value>& items = loop->items();
  for (size_t k = 0; k < items.size(); ++k) {
    budget_->tick();
    loop->index0 = k;
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    inner->vars["loop"] = loop_value;
    assign(n.target, items[k], inner);
    Flow f = exec_body(n.body, inner, out);
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Interp::assign(const Target& t, const Value& v, const ScopePtr& scope) {
  switch (t.kind) {
    case Target::Kind::kName: scope->vars[t.name] = v; return;
    case Target::Kind::kNsRef: {
      Value ns = lookup(t.name, scope);
      if (ns.kind() != Kind::kNamespace) type_error("cannot assign attribute on non-namespace object");
      ns.ns().attrs.set(Value::string(t.attr), v);
      return;
    }
    case Target::Kind::kTuple: {
      if (v.is_undefined()) fail_undefined(v);
      Items items = iterate(v);
      if (items.size() > t.items.size())
        type_error("too many values to unpack (expected " + std::to_string(t.items.size()) + ")");
      if (items.size() < t.items.size())
        type_error("not enough values to unpack (expected " + std::to_string(t.items.size()) + ", got " +
                   std::to_string(items.size()) + ")");
      for (size_t k = 0; k < items.size(); ++k) assign(t.items[k], items[k], scope);
      return;
    }
  }
}

Value Interp::lookup(const std::string& name, const ScopePtr& scope) {
  for (const Scope* s = scope.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  static const char* const kGlobals[] = {"range", "dict", "namespace", "raise_exception", "strftime_now",
                                         "lipsum", "cycler", "joiner"};
  for (const char* g : kGlobals)
    if (name == g) return make_callable(CallType::kBuiltin, name);
  return Value::undefined("'" + name + "' is undefined");
}

Value Interp::getattr(const Value& obj, const std::string& name) {
  budget_->tick();
  if (obj.is_undefined()) fail_undefined(obj);
  if (!name.empty() && name[0] == '_')
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.",
                            ErrorKind::kSecurity);
  switch (obj.kind()) {
    case Kind::kDict: {
      if (has_method(obj, name)) return make_callable(CallType::kMethod, name, obj);
      static const char* const kMutating[] = {"pop", "popitem", "setdefault", "update", "clear"};
      for (const char* m : kMutating)
        if (name == m)
          return Value::undefined("access to attribute '" + name + "' of 'dict' object is unsafe.",
                                  ErrorKind::kSecurity);
      if (const Value* v = obj.dict().find(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Kind::kNamespace: {
      if (const Value* v = obj.ns().attrs.find(name)) return *v;
      return Value::undefined("'Namespace object' has no attribute '" + name + "'");
    }
    case Kind::kLoop: {
      const LoopObj& l = obj.as<LoopObj>();
      const int64_t n = static_cast<int64_t>(l.items().size());
      const int64_t i0 = static_cast<int64_t>(l.index0);
      if (name == "index") return Value::integer(i0 + 1);
      if (name == "index0") return Value::integer(i0);
      if (name == "revindex") return Value::integer(n - i0);
      if (name == "revindex0") return Value::integer(n - i0 - 1);
      if (name == "first") return Value::boolean(i0 == 0);
      if (name == "last") return Value::boolean(i0 == n - 1);
      if (name == "length") return Value::integer(n);
      if (name == "depth") return Value::integer(1);
      if (name == "depth0") return Value::integer(0);
      if (name == "previtem")
        return i0 == 0 ? Value::undefined("there is no previous item") : l.items()[static_cast<size_t>(i0 - 1)];
      if (name == "nextitem")
        return i0 + 1 >= n ? Value::undefined("there is no next item") : l.items()[static_cast<size_t>(i0 + 1)];
      if (name == "cycle" || name == "changed") return make_callable(CallType::kMethod, name, obj);
      return Value::undefined("'LoopContext object' has no attribute '" + name + "'");
    }
    default:
      if (has_method(obj, name)) return make_callable(CallType::kMethod, name, obj);
      if (obj.is_list()) {
        static const char* const kMutating[] = {"append", "extend", "insert", "pop", "remove", "reverse",
                                                "sort", "clear"};
        for (const char* m : kMutating)
          if (name == m)
            return Value::undefined("access to attribute '" + name + "' of 'list' object is unsafe.",
                                    ErrorKind::kSecurity);
      }
      return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
  }
}

Value Interp::getitem(const Value& obj, const Value& key) {
  budget_->tick();
  if (obj.is_undefined()) fail_undefined(obj);
  switch (obj.kind()) {
    case Kind::kDict: {
      if (key.is_list() && key.flavor() != ListFlavor::kTuple) break;
      if (const Value* v = obj.dict().find(key)) return *v;
      break;
    }
    case Kind::kList: {
      ListFlavor f = obj.flavor();
      if (f != ListFlavor::kList && f != ListFlavor::kTuple && f != ListFlavor::kRange) break;
      if (key.is_int() || key.is_bool()) {
        const auto& items = obj.list().items;
        int64_t i = key.as_int();
        const int64_t n = static_cast<int64_t>(items.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined(type_name(obj) + " index out of range");
        return items[static_cast<size_t>(i)];
      }
      break;
    }
    case Kind::kString: {
      if (key.is_int() || key.is_bool()) {
        const std::string& s = obj.str();
        tick(s.size() / 1024);
        int64_t i = key.as_int();
        if (is_ascii(s)) {
          const int64_t n = static_cast<int64_t>(s.size());
          if (i < 0) i += n;
          if (i < 0 || i >= n) return Value::undefined("string index out of range");
          return Value::string(std::string(1, s[static_cast<size_t>(i)]));
        }
        auto cps = utf8_decode(s);
        const int64_t n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined("string index out of range");
        std::string out;
        utf8_append(&out, cps[static_cast<size_t>(i)]);
        return Value::string(std::move(out));
      }
      break;
    }
    default: break;
  }
  // Jinja falls back to attribute lookup for string keys.
  if (key.is_string()) {
    if (obj.kind() == Kind::kDict) {
      if (has_method(obj, key.str())) return make_callable(CallType::kMethod, key.str(), obj);
      return Value::undefined("'dict object' has no attribute '" + key.str() + "'");
    }
    return getattr(obj, key.str());
  }
  return Value::undefined("'" + type_name(obj) + " object' has no attribute " + repr(key));
}

Value Interp::eval(const Expr& e, const ScopePtr& scope) {
  DepthGuard g(&eval_depth_, kMaxEvalDepth, "evaluation");
  budget_->tick();
  check_stack(stack_base_, budget_->limits().max_stack_bytes);
  switch (e.kind) {
    case ExprKind::kConst: return e.value;
    case ExprKind::kName: return lookup(e.name, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const auto& x : e.items) items.push_back(eval(*x, scope));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple ? ListFlavor::kTuple : ListFlavor::kList);
    }
    case ExprKind::kDict: {
      auto d = std::make_shared<DictObj>();
      for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
        Value key = eval(*e.items[k], scope);
        hash_key(key);  // unhashable keys are a TypeError
        d->set(std::move(key), eval(*e.items[k + 1], scope));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetattr: return getattr(eval(*e.a, scope), e.name);
    case ExprKind::kGetitem: {
      Value obj = eval(*e.a, scope);
      const Expr& k = *e.b;
      if (k.kind == ExprKind::kSlice) {
        if (obj.is_undefined()) fail_undefined(obj);
        Value s[3];
        const Value* p[3] = {nullptr, nullptr, nullptr};
        const Expr* parts[3] = {k.a.get(), k.b.get(), k.c.get()};
        for (int j = 0; j < 3; ++j)
          if (k.slice_has[j]) s[j] = eval(*parts[j], scope), p[j] = &s[j];
        for (int j = 0; j < 3; ++j)
          if (p[j] && !p[j]->is_none() && !p[j]->is_int() && !p[j]->is_bool())
            type_error("slice indices must be integers or None or have an __index__ method");
        return do_slice(obj, p[0], p[1], p[2]);
      }
      return getitem(obj, eval(k, scope));
    }
    case ExprKind::kSlice: type_error("slice outside of a subscript");
    case ExprKind::kCall: return eval_call(e, scope);
    case ExprKind::kFilter: {
      Value v = e.a ? eval(*e.a, scope) : Value();
      Args args;
      eval_args(e, scope, &args);
      return call_filter(e.name, v, args);
    }
    case ExprKind::kTest: {
      Value v = eval(*e.a, scope);
      Args args;
      eval_args(e, scope, &args);
      return Value::boolean(call_test(e.name, v, args));
    }
    case ExprKind::kNot: return Value::boolean(!truthy(eval(*e.a, scope)));
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      Value v = eval(*e.a, scope);
      if (v.is_undefined()) fail_undefined(v);
      if (v.is_float()) return Value::number(e.kind == ExprKind::kNeg ? -v.as_double() : v.as_double());
      if (v.is_int() || v.is_bool()) {
        if (e.kind == ExprKind::kPos) return Value::integer(v.as_int());
        if (v.as_int() == std::numeric_limits<int64_t>::min()) checked(true, 0);
        return Value::integer(-v.as_int());
      }
      type_error(std::string("bad operand type for unary ") + (e.kind == ExprKind::kNeg ? "-" : "+") + ": '" +
                 type_name(v) + "'");
    }
    case ExprKind::kBinary: {
      Value a = eval(*e.a, scope);
      Value b = eval(*e.b, scope);
      return binary_op(e.op, a, b);
    }
    case ExprKind::kAnd: {
      Value a = eval(*e.a, scope);
      return truthy(a) ? eval(*e.b, scope) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.a, scope);
      return truthy(a) ? a : eval(*e.b, scope);
    }
    case ExprKind::kConcat: {
      std::string out;
      for (const auto& x : e.items) {
        append_str(&out, eval(*x, scope));
        budget_->check_string(out.size());
      }
      tick(out.size() / 1024);
      return Value::string(std::move(out));
    }
    case ExprKind::kCompare: return eval_compare(e, scope);
    case ExprKind::kCond: {
      if (truthy(eval(*e.a, scope))) return eval(*e.b, scope);
      if (e.c) return eval(*e.c, scope);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
    }
  }
  type_error("bad expression");
}

Value Interp::eval_compare(const Expr& e, const ScopePtr& scope) {
  Value left = eval(*e.a, scope);
  for (size_t k = 0; k < e.cmp_ops.size(); ++k) {
    Value right = eval(*e.items[k], scope);
    bool r = false;
    switch (e.cmp_ops[k]) {
      case CmpOp::kEq: r = equals(left, right); break;
      case CmpOp::kNe: r = !equals(left, right); break;
      case CmpOp::kLt: r = less(left, right); break;
      case CmpOp::kGt: r = less(right, left); break;
      case CmpOp::kLe: r = less(left, right) || equals(left, right); break;
      case CmpOp::kGe: r = less(right, left) || equals(left, right); break;
      case CmpOp::kIn: r = contains(right, left); break;
      case CmpOp::kNotIn: r = !contains(right, left); break;
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

void Interp::eval_args(const Expr& e, const ScopePtr& scope, Args* args) {
  for (const auto& x : e.items) args->pos.push_back(eval(*x, scope));
  for (const auto& [k, x] : e.kwargs) args->kw.emplace_back(k, eval(*x, scope));
  if (e.dyn_args) {
    Value v = eval(*e.dyn_args, scope);
    Items items = iterate(v);
    tick(items.size() / 16 + 1);
    for (const Value& x : items) args->pos.push_back(x);
  }
  if (e.dyn_kwargs) {
    Value v = eval(*e.dyn_kwargs, scope);
    if (!v.is_dict()) type_error("argument after ** must be a mapping, not " + type_name(v));
    tick(v.dict().size() / 16 + 1);
    for (const auto& [k, x] : v.dict().entries) {
      if (!k.is_string()) type_error("keywords must be strings");
      args->kw.emplace_back(k.str(), x);
    }
  }
}

Value Interp::eval_call(const Expr& e, const ScopePtr& scope) {
  const Expr& callee = *e.a;
  if (callee.kind == ExprKind::kGetattr) {
    Value obj = eval(*callee.a, scope);
    if (obj.is_undefined()) fail_undefined(obj);
    if (callee.name[0] != '_' && has_method(obj, callee.name)) {
      Args args;
      eval_args(e, scope, &args);
      return call_method(obj, callee.name, args);
    }
    Value f = getattr(obj, callee.name);
    Args args;
    eval_args(e, scope, &args);
    return call(f, args);
  }
  Value f = eval(callee, scope);
  Args args;
  eval_args(e, scope, &args);
  return call(f, args);
}

Value Interp::call(const Value& callee, Args& args) {
  budget_->tick();
  if (callee.is_undefined()) fail_undefined(callee);
  if (callee.kind() != Kind::kCallable) type_error("'" + type_name(callee) + "' object is not callable");
  const CallableObj& c = callee.as<CallableObj>();
  switch (c.type) {
    case CallType::kMacro: return invoke_macro(c, args, nullptr);
    case CallType::kBuiltin: return builtin_global(c.name, args);
    case CallType::kMethod: return call_method(c.self, c.name, args);
  }
  type_error("bad callable");
}

Value Interp::invoke_macro(const CallableObj& m, Args& args, const Value*) {
  DepthGuard g(&call_depth_, budget_->limits().max_call_depth, "macro calls");
  const Node& n = *m.macro;
  auto scope = std::make_shared<Scope>();
  scope->parent = m.closure;
  const size_t n_params = n.params.size();
  std::vector<std::optional<Value>> bound(n_params);
  for (size_t k = 0; k < n_params && k < args.pos.size(); ++k) bound[k] = args.pos[k];
  auto take_kw = [&](const std::string& name) -> std::optional<Value> {
    for (auto it = args.kw.begin(); it != args.kw.end(); ++it) {
      if (it->first == name) {
        Value v = std::move(it->second);
        args.kw.erase(it);
        return v;
      }
    }
    return std::nullopt;
  };
  for (size_t k = args.pos.size(); k < n_params; ++k) bound[k] = take_kw(n.params[k]);
  if (n.uses_caller) {
    std::optional<Value> caller = take_kw("caller");
    scope->vars["caller"] = caller ? *caller : Value::undefined("No caller defined");
  }
  if (n.uses_kwargs) {
    auto d = std::make_shared<DictObj>();
    for (auto& [k, v] : args.kw) d->set(Value::string(k), v);
    scope->vars["kwargs"] = Value::dict(std::move(d));
  } else if (!args.kw.empty()) {
    if (args.kw.front().first == "caller")
      type_error("macro '" + n.text + "' was invoked with two values for the special caller argument.");
    type_error("macro '" + n.text + "' takes no keyword argument '" + args.kw.front().first + "'");
  }
  if (n.uses_varargs) {
    std::vector<Value> extra;
    for (size_t k = n_params; k < args.pos.size(); ++k) extra.push_back(args.pos[k]);
    scope->vars["varargs"] = Value::tuple(std::move(extra));
  } else if (args.pos.size() > n_params) {
    type_error("macro '" + n.text + "' takes not more than " + std::to_string(n_params) + " argument(s)");
  }
  const size_t first_default = n_params - n.defaults.size();
  for (size_t k = 0; k < n_params; ++k) {
    if (bound[k]) {
      scope->vars[n.params[k]] = *bound[k];
    } else if (k >= first_default) {
      scope->vars[n.params[k]] = eval(*n.defaults[k - first_default], scope);
    } else {
      scope->vars[n.params[k]] = Value::undefined("parameter '" + n.params[k] + "' was not provided");
    }
  }
  return render_body_to_string(n.body, scope);
}

}  // namespace duet::jinja
