// Jinja parser (see jinja_parser.h). Recursive descent mirroring jinja2/parser.py; every
// recursion point and every built tree node is checked against the nesting limit so that
// neither parsing nor evaluating nor destroying a tree can exhaust the stack.
#include "tokenizer/jinja_parser.h"

#include <algorithm>

#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_text.h"

namespace duet::jinja {

namespace {

class Parser {
 public:
  Parser(std::vector<Token> toks, const Limits& limits)
      : toks_(std::move(toks)), limits_(limits), stack_base_(stack_position()) {}

  std::unique_ptr<Template> parse() {
    auto t = std::make_unique<Template>();
    t->body = subparse({});
    if (cur().type != Tok::kEof) fail_here("unexpected '" + describe(cur()) + "'");
    check_names(t->body, false);
    return t;
  }

 private:
  // ---- token stream ----
  const Token& cur() const { return toks_[pos_]; }
  const Token& look() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::kData: return "template data";
      case Tok::kVarBegin: return "{{";
      case Tok::kVarEnd: return "end of print statement";
      case Tok::kBlockBegin: return "{%";
      case Tok::kBlockEnd: return "end of statement block";
      case Tok::kEof: return "end of template";
      default: return t.text;
    }
  }
  [[noreturn]] void fail_here(const std::string& msg) const {
    JinjaError e(ErrorKind::kSyntax, msg + " (line " + std::to_string(cur().line) + ")");
    e.line = cur().line;
    throw e;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail_here(std::string("expected '") + op + "', got '" + describe(cur()) + "'");
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) fail_here("expected a name, got '" + describe(cur()) + "'");
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd) fail_here("expected end of statement block, got '" + describe(cur()) + "'");
    advance();
  }

  // ---- nesting guard ----
  struct Guard {
    explicit Guard(Parser* p) : p_(p) {
      // Several parser functions guard each syntactic level (a parenthesis costs about four).
      if (++p_->depth_ > 4 * p_->limits_.max_nesting_depth)
        p_->fail_limit("template nesting deeper than " + std::to_string(p_->limits_.max_nesting_depth) + " levels");
      check_stack(p_->stack_base_, p_->limits_.max_stack_bytes);
    }
    ~Guard() { --p_->depth_; }
    Parser* p_;
  };
  [[noreturn]] void fail_limit(const std::string& msg) const { fail(ErrorKind::kLimit, msg); }

  ExprPtr node(ExprKind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = cur().line;
    return e;
  }
  // Computes the depth of a finished node from its children and enforces the limit.
  ExprPtr finish(ExprPtr e) {
    uint32_t d = 0;
    auto see = [&](const ExprPtr& x) {
      if (x) d = std::max(d, x->depth);
    };
    see(e->a), see(e->b), see(e->c), see(e->dyn_args), see(e->dyn_kwargs);
    for (const auto& x : e->items) see(x);
    for (const auto& kv : e->kwargs) see(kv.second);
    e->depth = d + 1;
    // Left-deep chains (a + b + c ...) build depth without parser recursion; evaluation recurses
    // once per level, so they get a few times the recursion limit.
    if (e->depth > 4 * limits_.max_nesting_depth)
      fail_limit("expression nesting deeper than " + std::to_string(4 * limits_.max_nesting_depth));
    return e;
  }

  // ---- statements ----
  bool at_end_token(const std::vector<const char*>& ends) const {
    if (cur().type != Tok::kName) return false;
    for (const char* e : ends)
      if (cur().text == e) return true;
    return false;
  }

  Body subparse(const std::vector<const char*>& ends) {
    Guard g(this);
    Body body;
    while (cur().type != Tok::kEof) {
      const Token& t = cur();
      if (t.type == Tok::kData) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::kText;
        n->line = t.line;
        n->text = t.text;
        body.push_back(std::move(n));
        advance();
      } else if (t.type == Tok::kVarBegin) {
        advance();
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::kEmit;
        n->line = t.line;
        n->expr = parse_tuple(false, true, {});
        if (cur().type != Tok::kVarEnd) fail_here("expected end of print statement, got '" + describe(cur()) + "'");
        advance();
        body.push_back(std::move(n));
      } else if (t.type == Tok::kBlockBegin) {
        advance();
        if (!ends.empty() && at_end_token(ends)) return body;
        parse_statement(&body);
        expect_block_end();
      } else {
        fail_here("unexpected '" + describe(t) + "'");
      }
    }
    if (!ends.empty()) {
      std::string want;
      for (const char* e : ends) want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
      fail_here("unexpected end of template; Jinja was looking for " + want);
    }
    return body;
  }

  // Body until one of `ends`; leaves the end name as the current token (or drops it).
  Body parse_statements(const std::vector<const char*>& ends, bool drop_needle) {
    skip_op(":");
    expect_block_end();
    Body b = subparse(ends);
    if (drop_needle) advance();
    return b;
  }

  NodePtr make_node(NodeKind k, int line) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = line;
    return n;
  }

  void parse_statement(Body* out) {
    if (cur().type != Tok::kName) fail_here("tag name expected");
    const std::string tag = cur().text;
    const int line = cur().line;
    if (tag == "for") {
      out->push_back(parse_for());
    } else if (tag == "if") {
      out->push_back(parse_if());
    } else if (tag == "set") {
      out->push_back(parse_set());
    } else if (tag == "macro") {
      out->push_back(parse_macro());
    } else if (tag == "call") {
      out->push_back(parse_call_block());
    } else if (tag == "filter") {
      advance();
      auto n = make_node(NodeKind::kFilterBlock, line);
      n->filter = parse_filter(nullptr, true);
      n->body = parse_statements({"endfilter"}, true);
      out->push_back(std::move(n));
    } else if (tag == "with") {
      advance();
      auto n = make_node(NodeKind::kWith, line);
      while (cur().type != Tok::kBlockEnd) {
        if (!n->assigns.empty()) expect_op(",");
        Target t = parse_assign_target(true, false, {});
        expect_op("=");
        n->assigns.emplace_back(std::move(t), parse_expression(true));
      }
      n->body = parse_statements({"endwith"}, true);
      out->push_back(std::move(n));
    } else if (tag == "break" || tag == "continue") {
      advance();
      if (loop_depth_ == 0) fail_here("'" + tag + "' outside of a loop");
      out->push_back(make_node(tag == "break" ? NodeKind::kBreak : NodeKind::kContinue, line));
    } else if (tag == "print") {
      advance();
      bool first = true;
      while (cur().type != Tok::kBlockEnd) {
        if (!first) expect_op(",");
        first = false;
        auto n = make_node(NodeKind::kEmit, line);
        n->expr = parse_expression(true);
        out->push_back(std::move(n));
      }
    } else if (tag == "generation" || tag == "block") {
      advance();
      std::string end = "end" + tag;
      if (tag == "block") {
        std::string name = expect_name();
        skip_name("scoped");
        skip_name("required");
        end_names_.push_back(end);
        auto n = make_node(NodeKind::kScope, line);
        n->body = parse_statements({end_names_.back().c_str()}, true);
        end_names_.pop_back();
        if (is_name(name.c_str())) advance();
        out->push_back(std::move(n));
      } else {
        auto n = make_node(NodeKind::kScope, line);
        n->body = parse_statements({"endgeneration"}, true);
        out->push_back(std::move(n));
      }
    } else if (tag == "autoescape") {
      advance();
      ExprPtr e = parse_expression(true);
      auto n = make_node(NodeKind::kScope, line);
      n->body = parse_statements({"endautoescape"}, true);
      if (!(e->kind == ExprKind::kConst && !truthy(e->value))) {
        n->kind = NodeKind::kUnsupported;
        n->text = "autoescape blocks are not supported";
      }
      out->push_back(std::move(n));
    } else if (tag == "include" || tag == "import" || tag == "extends" || tag == "from") {
      fail(ErrorKind::kUnsupported,
           "'" + tag + "' is not allowed: chat templates cannot load other templates (line " +
               std::to_string(line) + ")");
    } else {
      fail_here("Encountered unknown tag '" + tag + "'");
    }
  }

  NodePtr parse_for() {
    const int line = cur().line;
    advance();
    auto n = make_node(NodeKind::kFor, line);
    n->target = parse_assign_target(true, false, {"in"});
    if (!skip_name("in")) fail_here("expected 'in'");
    n->expr = parse_tuple(false, false, {"recursive"});
    if (skip_name("if")) n->cond = parse_expression(true);
    if (skip_name("recursive")) fail(ErrorKind::kUnsupported, "recursive for loops are not supported");
    ++loop_depth_;
    n->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    const bool has_else = is_name("else");
    advance();
    // break/continue in a for's else belong to an outer loop, if any.
    if (has_else) n->else_body = parse_statements({"endfor"}, true);
    return n;
  }

  NodePtr parse_if() {
    const int line = cur().line;
    advance();
    auto head = make_node(NodeKind::kIf, line);
    Node* cur_node = head.get();
    while (true) {
      cur_node->expr = parse_tuple(false, false, {});
      cur_node->body = parse_statements({"elif", "else", "endif"}, false);
      const std::string which = cur().text;
      advance();
      if (which == "elif") {
        head->elifs.push_back(make_node(NodeKind::kIf, cur().line));
        cur_node = head->elifs.back().get();
        continue;
      }
      if (which == "else") head->else_body = parse_statements({"endif"}, true);
      break;
    }
    return head;
  }

  NodePtr parse_set() {
    const int line = cur().line;
    advance();
    Target t = parse_assign_target(true, false, {}, true);
    if (skip_op("=")) {
      auto n = make_node(NodeKind::kSet, line);
      n->target = std::move(t);
      n->expr = parse_tuple(false, true, {});
      return n;
    }
    auto n = make_node(NodeKind::kSetBlock, line);
    if (t.kind == Target::Kind::kTuple) fail_here("can't assign a block to a tuple");
    n->target = std::move(t);
    n->filter = parse_filter(nullptr, false);
    n->body = parse_statements({"endset"}, true);
    return n;
  }

  void parse_signature(Node* n) {
    expect_op("(");
    while (!is_op(")")) {
      if (!n->params.empty()) expect_op(",");
      n->params.push_back(expect_name());
      if (skip_op("=")) {
        n->defaults.push_back(parse_expression(true));
      } else if (!n->defaults.empty()) {
        fail_here("non-default argument follows default argument");
      }
    }
    expect_op(")");
  }

  NodePtr parse_macro() {
    const int line = cur().line;
    advance();
    auto n = make_node(NodeKind::kMacro, line);
    n->text = expect_name();
    parse_signature(n.get());
    const int saved = loop_depth_;
    loop_depth_ = 0;
    n->body = parse_statements({"endmacro"}, true);
    loop_depth_ = saved;
    scan_special_names(n.get());
    return n;
  }

  NodePtr parse_call_block() {
    const int line = cur().line;
    advance();
    auto n = make_node(NodeKind::kCallBlock, line);
    if (is_op("(")) parse_signature(n.get());
    n->expr = parse_expression(true);
    if (n->expr->kind != ExprKind::kCall) fail_here("expected call");
    const int saved = loop_depth_;
    loop_depth_ = 0;
    n->body = parse_statements({"endcall"}, true);
    loop_depth_ = saved;
    scan_special_names(n.get());
    return n;
  }

  static void scan_expr(const Expr* e, Node* n) {
    if (!e) return;
    if (e->kind == ExprKind::kName) {
      if (e->name == "caller") n->uses_caller = true;
      if (e->name == "varargs") n->uses_varargs = true;
      if (e->name == "kwargs") n->uses_kwargs = true;
    }
    scan_expr(e->a.get(), n), scan_expr(e->b.get(), n), scan_expr(e->c.get(), n);
    scan_expr(e->dyn_args.get(), n), scan_expr(e->dyn_kwargs.get(), n);
    for (const auto& x : e->items) scan_expr(x.get(), n);
    for (const auto& kv : e->kwargs) scan_expr(kv.second.get(), n);
  }
  static void scan_body(const Body& body, Node* n) {
    for (const auto& s : body) {
      scan_expr(s->expr.get(), n), scan_expr(s->cond.get(), n), scan_expr(s->filter.get(), n);
      for (const auto& d : s->defaults) scan_expr(d.get(), n);
      for (const auto& a : s->assigns) scan_expr(a.second.get(), n);
      scan_body(s->body, n), scan_body(s->else_body, n);
      for (const auto& el : s->elifs) {
        scan_expr(el->expr.get(), n);
        scan_body(el->body, n);
      }
    }
  }
  static void scan_special_names(Node* n) { scan_body(n->body, n); }

  // ---- assignment targets ----
  Target parse_assign_target(bool with_tuple, bool name_only, const std::vector<const char*>& extra_end,
                             bool with_namespace = false) {
    Guard g(this);
    if (name_only) {
      Target t;
      t.name = expect_name();
      return t;
    }
    auto primary = [&]() -> Target {
      Target t;
      if (cur().type == Tok::kName) {
        const std::string& v = cur().text;
        if (v == "true" || v == "false" || v == "True" || v == "False" || v == "none" || v == "None")
          fail_here("can't assign to const");
        t.name = v;
        advance();
        if (with_namespace && is_op(".")) {
          advance();
          t.kind = Target::Kind::kNsRef;
          t.attr = expect_name();
        }
        return t;
      }
      if (skip_op("(")) {
        Target inner = parse_assign_target(true, false, {}, false);
        expect_op(")");
        return inner;
      }
      fail_here("can't assign to '" + describe(cur()) + "'");
    };
    if (!with_tuple) return primary();
    Target tuple;
    tuple.kind = Target::Kind::kTuple;
    bool is_tuple = false;
    while (true) {
      if (!tuple.items.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      tuple.items.push_back(primary());
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (tuple.items.empty()) fail_here("expected an assignment target");
      return std::move(tuple.items[0]);
    }
    for (const auto& it : tuple.items)
      if (it.kind == Target::Kind::kNsRef) fail_here("can't assign to a namespace attribute in a tuple");
    return tuple;
  }

  bool tuple_end(const std::vector<const char*>& extra_end) const {
    if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || is_op(")")) return true;
    if (cur().type == Tok::kName)
      for (const char* e : extra_end)
        if (cur().text == e) return true;
    return false;
  }

  // ---- expressions ----
  ExprPtr parse_tuple(bool explicit_parens, bool with_condexpr, const std::vector<const char*>& extra_end) {
    Guard g(this);
    const int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      args.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail_here("Expected an expression, got '" + describe(cur()) + "'");
    }
    auto t = node(ExprKind::kTuple);
    t->line = line;
    t->items = std::move(args);
    return finish(std::move(t));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    Guard g(this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      auto c = node(ExprKind::kCond);
      c->a = parse_or();  // test
      c->b = std::move(expr1);
      if (skip_name("else")) {
        Guard g(this);
        c->c = parse_condexpr();
      }
      expr1 = finish(std::move(c));
    }
    return expr1;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (skip_name("or")) {
      auto n = node(ExprKind::kOr);
      n->a = std::move(left);
      n->b = parse_and();
      left = finish(std::move(n));
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (skip_name("and")) {
      auto n = node(ExprKind::kAnd);
      n->a = std::move(left);
      n->b = parse_not();
      left = finish(std::move(n));
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Guard g(this);
      auto n = node(ExprKind::kNot);
      advance();
      n->a = parse_not();
      return finish(std::move(n));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr expr = parse_math1();
    std::vector<CmpOp> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      if (cur().type == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                     cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        const std::string& o = cur().text;
        ops.push_back(o == "==" ? CmpOp::kEq : o == "!=" ? CmpOp::kNe : o == "<" ? CmpOp::kLt
                      : o == "<=" ? CmpOp::kLe : o == ">" ? CmpOp::kGt : CmpOp::kGe);
        advance();
      } else if (is_name("in")) {
        advance();
        ops.push_back(CmpOp::kIn);
      } else if (is_name("not") && look().type == Tok::kName && look().text == "in") {
        advance();
        advance();
        ops.push_back(CmpOp::kNotIn);
      } else {
        break;
      }
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return expr;
    auto n = node(ExprKind::kCompare);
    n->a = std::move(expr);
    n->items = std::move(operands);
    n->cmp_ops = std::move(ops);
    return finish(std::move(n));
  }

  ExprPtr binary(BinOp op, ExprPtr l, ExprPtr r) {
    auto n = node(ExprKind::kBinary);
    n->op = op;
    n->a = std::move(l);
    n->b = std::move(r);
    return finish(std::move(n));
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      BinOp op = is_op("+") ? BinOp::kAdd : BinOp::kSub;
      advance();
      left = binary(op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto n = node(ExprKind::kConcat);
    n->items.push_back(std::move(first));
    while (skip_op("~")) n->items.push_back(parse_math2());
    return finish(std::move(n));
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      BinOp op = is_op("*") ? BinOp::kMul : is_op("/") ? BinOp::kDiv : is_op("//") ? BinOp::kFloorDiv : BinOp::kMod;
      advance();
      left = binary(op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) left = binary(BinOp::kPow, std::move(left), parse_unary(true));
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    Guard g(this);
    ExprPtr n;
    if (is_op("-") || is_op("+")) {
      n = node(is_op("-") ? ExprKind::kNeg : ExprKind::kPos);
      advance();
      n->a = parse_unary(false);
      n = finish(std::move(n));
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    if (with_filter) n = parse_filter_expr(std::move(n));
    return n;
  }

  ExprPtr parse_primary() {
    Guard g(this);
    const Token& t = cur();
    if (t.type == Tok::kName) {
      auto n = node(ExprKind::kConst);
      if (t.text == "true" || t.text == "True") {
        n->value = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        n->value = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        n->value = Value::none();
      } else {
        n->kind = ExprKind::kName;
        n->name = t.text;
      }
      advance();
      return n;
    }
    if (t.type == Tok::kString) {
      auto n = node(ExprKind::kConst);
      std::string s;
      while (cur().type == Tok::kString) {
        s += cur().text;
        advance();
      }
      if (s.size() > limits_.max_output_bytes) fail_limit("string literal too long");
      n->value = Value::string(std::move(s));
      return n;
    }
    if (t.type == Tok::kInt || t.type == Tok::kFloat) {
      auto n = node(ExprKind::kConst);
      n->value = t.type == Tok::kInt ? Value::integer(t.ival) : Value::number(t.fval);
      advance();
      return n;
    }
    if (is_op("(")) {
      advance();
      ExprPtr n = parse_tuple(true, true, {});
      expect_op(")");
      return n;
    }
    if (is_op("[")) {
      auto n = node(ExprKind::kList);
      advance();
      while (!is_op("]")) {
        if (!n->items.empty()) expect_op(",");
        if (is_op("]")) break;
        n->items.push_back(parse_expression(true));
      }
      expect_op("]");
      return finish(std::move(n));
    }
    if (is_op("{")) {
      auto n = node(ExprKind::kDict);
      advance();
      while (!is_op("}")) {
        if (!n->items.empty()) expect_op(",");
        if (is_op("}")) break;
        n->items.push_back(parse_expression(true));
        expect_op(":");
        n->items.push_back(parse_expression(true));
      }
      expect_op("}");
      return finish(std::move(n));
    }
    fail_here("unexpected '" + describe(t) + "'");
  }

  ExprPtr parse_postfix(ExprPtr n) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        n = parse_subscript(std::move(n));
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        break;
      }
    }
    return n;
  }

  ExprPtr parse_filter_expr(ExprPtr n) {
    while (true) {
      if (is_op("|")) {
        n = parse_filter(std::move(n), false);
      } else if (is_name("is")) {
        n = parse_test(std::move(n));
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        break;
      }
    }
    return n;
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    Guard g(this);
    if (skip_op(".")) {
      if (cur().type == Tok::kName) {
        auto n = node(ExprKind::kGetattr);
        n->a = std::move(obj);
        n->name = cur().text;
        advance();
        return finish(std::move(n));
      }
      if (cur().type != Tok::kInt) fail_here("expected name or number");
      auto n = node(ExprKind::kGetitem);
      n->a = std::move(obj);
      auto k = node(ExprKind::kConst);
      k->value = Value::integer(cur().ival);
      advance();
      n->b = std::move(k);
      return finish(std::move(n));
    }
    expect_op("[");
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto n = node(ExprKind::kGetitem);
    n->a = std::move(obj);
    if (args.size() == 1) {
      n->b = std::move(args[0]);
    } else {
      auto t = node(ExprKind::kTuple);
      t->items = std::move(args);
      n->b = finish(std::move(t));
    }
    return finish(std::move(n));
  }

  ExprPtr parse_subscribed() {
    auto sl = node(ExprKind::kSlice);
    if (is_op(":")) {
      advance();
    } else {
      ExprPtr e = parse_expression(true);
      if (!is_op(":")) return e;
      advance();
      sl->a = std::move(e);
      sl->slice_has[0] = true;
    }
    if (!is_op(":") && !is_op("]") && !is_op(",")) {
      sl->b = parse_expression(true);
      sl->slice_has[1] = true;
    }
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) {
        sl->c = parse_expression(true);
        sl->slice_has[2] = true;
      }
    }
    return finish(std::move(sl));
  }

  void parse_call_args(Expr* n) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        if (n->dyn_args || n->dyn_kwargs) fail_here("invalid syntax for function call expression");
        advance();
        n->dyn_args = parse_expression(true);
      } else if (is_op("**")) {
        if (n->dyn_kwargs) fail_here("invalid syntax for function call expression");
        advance();
        n->dyn_kwargs = parse_expression(true);
      } else if (cur().type == Tok::kName && look().type == Tok::kOp && look().text == "=") {
        if (n->dyn_kwargs) fail_here("invalid syntax for function call expression");
        std::string key = cur().text;
        advance();
        advance();
        n->kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (n->dyn_args || n->dyn_kwargs || !n->kwargs.empty())
          fail_here("invalid syntax for function call expression");
        n->items.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    Guard g(this);
    auto n = node(ExprKind::kCall);
    n->a = std::move(callee);
    parse_call_args(n.get());
    return finish(std::move(n));
  }

  ExprPtr parse_filter(ExprPtr base, bool start_inline) {
    while (is_op("|") || start_inline) {
      Guard g(this);
      if (!start_inline) advance();
      start_inline = false;
      auto n = node(ExprKind::kFilter);
      n->name = expect_name();
      while (skip_op(".")) {
        n->name.push_back('.');
        n->name += expect_name();
      }
      if (is_op("(")) parse_call_args(n.get());
      n->a = std::move(base);
      base = finish(std::move(n));
    }
    return base;
  }

  ExprPtr parse_test(ExprPtr base) {
    Guard g(this);
    advance();  // "is"
    const bool negated = skip_name("not");
    auto n = node(ExprKind::kTest);
    n->name = expect_name();
    while (skip_op(".")) {
      n->name.push_back('.');
      n->name += expect_name();
    }
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(n.get());
    } else if ((t.type == Tok::kName || t.type == Tok::kString || t.type == Tok::kInt || t.type == Tok::kFloat ||
                is_op("(") || is_op("[") || is_op("{")) &&
               !(t.type == Tok::kName && (t.text == "else" || t.text == "or" || t.text == "and"))) {
      if (is_name("is")) fail_here("You cannot chain multiple tests with is");
      ExprPtr arg = parse_primary();
      n->items.push_back(parse_postfix(std::move(arg)));
    }
    n->a = std::move(base);
    ExprPtr result = finish(std::move(n));
    if (negated) {
      auto nn = node(ExprKind::kNot);
      nn->a = std::move(result);
      result = finish(std::move(nn));
    }
    return result;
  }

  // Jinja's compiler rejects unknown filter and test names up front, except directly inside an
  // {% if %} or a conditional expression ("soft" frames), where the error waits for the call.
  static bool known_filter(const std::string& n) {
    static const char* const kNames[] = {
        "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
        "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent", "int", "join", "last",
        "length", "list", "lower", "items", "map", "min", "max", "pprint", "random", "reject", "rejectattr",
        "replace", "reverse", "round", "safe", "select", "selectattr", "slice", "sort", "string", "striptags",
        "sum", "title", "trim", "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap",
        "xmlattr", "tojson"};
    for (const char* k : kNames)
      if (n == k) return true;
    return false;
  }
  static bool known_test(const std::string& n) {
    static const char* const kNames[] = {
        "odd", "even", "divisibleby", "defined", "undefined", "filter", "test", "none", "boolean", "false", "true",
        "integer", "float", "lower", "upper", "string", "mapping", "number", "sequence", "iterable", "callable",
        "sameas", "escaped", "in", "==", "eq", "equalto", "!=", "ne", ">", "gt", "greaterthan", "ge", ">=", "<",
        "lt", "lessthan", "<=", "le"};
    for (const char* k : kNames)
      if (n == k) return true;
    return false;
  }
  static void check_expr(const Expr* e, bool soft) {
    if (!e) return;
    if (!soft && e->kind == ExprKind::kFilter && !known_filter(e->name)) {
      JinjaError err(ErrorKind::kSyntax, "No filter named '" + e->name + "'. (line " + std::to_string(e->line) + ")");
      err.line = e->line;
      throw err;
    }
    if (!soft && e->kind == ExprKind::kTest && !known_test(e->name)) {
      JinjaError err(ErrorKind::kSyntax, "No test named '" + e->name + "'. (line " + std::to_string(e->line) + ")");
      err.line = e->line;
      throw err;
    }
    if (e->kind == ExprKind::kCond) soft = true;
    check_expr(e->a.get(), soft), check_expr(e->b.get(), soft), check_expr(e->c.get(), soft);
    check_expr(e->dyn_args.get(), soft), check_expr(e->dyn_kwargs.get(), soft);
    for (const auto& x : e->items) check_expr(x.get(), soft);
    for (const auto& kv : e->kwargs) check_expr(kv.second.get(), soft);
  }
  static void check_names(const Body& body, bool soft) {
    for (const auto& n : body) {
      switch (n->kind) {
        case NodeKind::kIf:
          check_expr(n->expr.get(), true);
          check_names(n->body, true);
          for (const auto& el : n->elifs) {
            check_expr(el->expr.get(), true);
            check_names(el->body, true);
          }
          check_names(n->else_body, true);
          break;
        case NodeKind::kFor:
          check_expr(n->expr.get(), soft);
          check_expr(n->cond.get(), false);
          check_names(n->body, false);
          check_names(n->else_body, false);
          break;
        case NodeKind::kWith:
          for (const auto& a : n->assigns) check_expr(a.second.get(), soft);
          check_names(n->body, false);
          break;
        case NodeKind::kCallBlock:
          check_expr(n->expr.get(), soft);
          for (const auto& d : n->defaults) check_expr(d.get(), false);
          check_names(n->body, false);
          break;
        case NodeKind::kMacro:
          for (const auto& d : n->defaults) check_expr(d.get(), false);
          check_names(n->body, false);
          break;
        case NodeKind::kSetBlock:
        case NodeKind::kFilterBlock:
          check_expr(n->filter.get(), false);
          check_names(n->body, false);
          break;
        case NodeKind::kScope:
        case NodeKind::kUnsupported: check_names(n->body, false); break;
        default: check_expr(n->expr.get(), soft);
      }
    }
  }

  std::vector<Token> toks_;
  const Limits& limits_;
  uintptr_t stack_base_;
  size_t pos_ = 0;
  uint32_t depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::string> end_names_;
};

}  // namespace

std::unique_ptr<Template> parse_template(std::string_view source, const Limits& limits) {
  if (source.size() > limits.max_template_bytes)
    fail(ErrorKind::kLimit, "template of " + std::to_string(source.size()) + " bytes exceeds the limit of " +
                                std::to_string(limits.max_template_bytes));
  if (!utf8_valid(source)) fail(ErrorKind::kSyntax, "template is not valid UTF-8");
  return Parser(lex(source), limits).parse();
}

}  // namespace duet::jinja
