// Jinja parser: tokens -> syntax tree, following jinja2/parser.py (precedence, tuples, slices,
// filters, tests, calls); owns the tree types. Statements: if, for (else, inline if), set (block,
// namespace attributes), macro, call, filter, with, break/continue, raw, print, block,
// generation. include/import/extends/from are rejected (no file access). Nesting is bounded by
// Limits (depth and native stack); unknown filter/test names fail as Jinja's compiler fails.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace duet::jinja {

enum class ExprKind : uint8_t {
  kConst, kName, kList, kTuple, kDict, kGetattr, kGetitem, kSlice, kCall, kFilter, kTest,
  kNot, kNeg, kPos, kBinary, kAnd, kOr, kConcat, kCompare, kCond,
};
enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kConst;
  int line = 0;
  uint32_t depth = 1;
  Value value;       // kConst
  std::string name;  // kName; kGetattr attribute; kFilter / kTest name
  ExprPtr a, b, c;   // operands: object / left / test, index / right, slice step / else
  std::vector<ExprPtr> items;  // list/tuple items, dict keys+values interleaved, call args,
                               // concat parts, compare operands
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;  // *args / **kwargs in calls
  BinOp op = BinOp::kAdd;
  std::vector<CmpOp> cmp_ops;
  bool slice_has[3] = {false, false, false};  // kSlice: start, stop, step present
};

// Assignment targets: a name, a (nested) tuple of names, or a namespace attribute.
struct Target {
  enum class Kind : uint8_t { kName, kTuple, kNsRef } kind = Kind::kName;
  std::string name;  // name, or the namespace variable of kNsRef
  std::string attr;  // kNsRef attribute
  std::vector<Target> items;
};

enum class NodeKind : uint8_t {
  kText, kEmit, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kWith, kBreak,
  kContinue, kScope, kUnsupported,
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  NodeKind kind = NodeKind::kText;
  int line = 0;
  std::string text;  // kText; kMacro name; kUnsupported message
  ExprPtr expr;      // kEmit value; kSet value; kFor iterable; kCallBlock call; kIf condition
  ExprPtr cond;      // kFor inline filter
  ExprPtr filter;    // kSetBlock / kFilterBlock: filter chain applied to the body (base null)
  Target target;     // kFor / kSet / kSetBlock
  Body body, else_body;
  std::vector<NodePtr> elifs;  // kIf: further kIf nodes tried in order
  // kMacro / kCallBlock signature.
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  bool uses_caller = false, uses_varargs = false, uses_kwargs = false;
  std::vector<std::pair<Target, ExprPtr>> assigns;  // kWith
};

struct Template {
  Body body;
};

std::unique_ptr<Template> parse_template(std::string_view source, const Limits& limits);

}  // namespace duet::jinja
