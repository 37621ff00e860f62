// Jinja evaluator: renders a parsed Template against a context of values, with Jinja's scoping
// (per-iteration for scopes, macro closures, namespaces), Python operator semantics, and the
// filters, tests, globals and str/dict/list methods chat templates use (jinja_builtins.cpp).
// Internal to the tokenizer module: chat_template.h is the public API. One Interp renders once,
// on one thread; every step, byte and call is counted against the Limits of its Budget.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_value.h"

namespace duet::jinja {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;
};
using ScopePtr = std::shared_ptr<Scope>;

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

enum class CallType : uint8_t { kMacro, kBuiltin, kMethod };

struct CallableObj final : Object {
  CallType type = CallType::kBuiltin;
  std::string name;
  Value self;                     // kMethod: the bound object
  const Node* macro = nullptr;    // kMacro: the macro or call-block node
  ScopePtr closure;               // kMacro: the scope the macro was defined in
  std::string repr_text() const override;
};

struct LoopObj final : Object {
  Value list;  // the items being iterated (a list value, shared)
  const std::vector<Value>& items() const { return list.list().items; }
  size_t index0 = 0;
  Value last_changed;
  bool has_last_changed = false;
  std::string repr_text() const override;
};

struct RenderOptions {
  // strftime_now() time, seconds since the epoch; < 0 means the real clock. Tests fix it.
  int64_t now_epoch_s = -1;
};

class Interp {
 public:
  Interp(const Template& tmpl, Budget* budget, const RenderOptions& options);
  ~Interp();
  Interp(const Interp&) = delete;
  Interp& operator=(const Interp&) = delete;

  // Renders with the top-level variables of `context` (a dict value).
  std::string render(const Value& context);

  // Used by builtins.
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value call(const Value& callee, Args& args);
  Value call_filter(const std::string& name, const Value& v, Args& args);
  bool call_test(const std::string& name, const Value& v, Args& args);
  Value call_method(const Value& self, const std::string& name, Args& args);
  static bool has_method(const Value& self, const std::string& name);
  Value make_callable(CallType type, std::string name, Value self = {});
  void register_namespace(const Value& ns);
  int64_t now_epoch_s() const;

 private:
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };

  class Output {
   public:
    explicit Output(Budget* b) : budget_(b) {}
    ~Output() { budget_->release(charged_); }
    void append(std::string_view s);
    std::string take();
    const std::string& str() const { return s_; }

   private:
    Budget* budget_;
    std::string s_;
    size_t charged_ = 0;
  };

  Flow exec_body(const Body& body, const ScopePtr& scope, Output& out);
  Flow exec(const Node& n, const ScopePtr& scope, Output& out);
  Flow exec_for(const Node& n, const ScopePtr& scope, Output& out);
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_call(const Expr& e, const ScopePtr& scope);
  void eval_args(const Expr& e, const ScopePtr& scope, Args* args);
  Value eval_compare(const Expr& e, const ScopePtr& scope);
  Value lookup(const std::string& name, const ScopePtr& scope);
  void assign(const Target& t, const Value& v, const ScopePtr& scope);
  Value invoke_macro(const CallableObj& m, Args& args, const Value* caller);
  Value render_body_to_string(const Body& body, const ScopePtr& scope);
  Value apply_filter_chain(const Expr* chain, Value v, const ScopePtr& scope);
  Value builtin_global(const std::string& name, Args& args);

  const Template& tmpl_;
  Budget* budget_;
  RenderOptions options_;
  uint32_t call_depth_ = 0;
  uint32_t eval_depth_ = 0;
  uintptr_t stack_base_ = 0;
  std::vector<std::weak_ptr<Object>> namespaces_;  // cycles are broken when the render ends
  std::vector<std::weak_ptr<Scope>> closures_;
};

// Value operators with Python semantics (also used by filters).
Value binary_op(BinOp op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
Value py_format(const std::string& fmt, const Value& args);  // "fmt % args"

}  // namespace duet::jinja
