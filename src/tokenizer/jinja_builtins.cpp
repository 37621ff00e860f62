// Jinja builtins for the evaluator (see jinja_interp.h): filters, tests, globals (range,
// namespace, dict, raise_exception, strftime_now) and the str/dict/list methods chat templates
// call, plus Python's printf-style "%" and str.format. Semantics follow jinja2/filters.py and
// jinja2/tests.py with transformers' tojson override (json.dumps, ensure_ascii=False).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_text.h"

namespace duet::jinja {

namespace {

// ---------------------------------------------------------------- argument binding

class Bound {
 public:
  Bound(const char* fn, const Args& a, std::initializer_list<const char*> names) : slots_(names.size()) {
    std::vector<const char*> n(names);
    if (a.pos.size() > n.size())
      type_error(std::string(fn) + "() takes at most " + std::to_string(n.size()) + " argument(s) (" +
                 std::to_string(a.pos.size()) + " given)");
    for (size_t k = 0; k < a.pos.size(); ++k) slots_[k] = a.pos[k];
    for (const auto& [key, v] : a.kw) {
      size_t k = 0;
      while (k < n.size() && key != n[k]) ++k;
      if (k == n.size()) type_error(std::string(fn) + "() got an unexpected keyword argument '" + key + "'");
      if (slots_[k]) type_error(std::string(fn) + "() got multiple values for argument '" + key + "'");
      slots_[k] = v;
    }
  }
  const Value* get(size_t k) const { return slots_[k] ? &*slots_[k] : nullptr; }
  Value get_or(size_t k, Value d) const { return slots_[k] ? *slots_[k] : std::move(d); }

 private:
  std::vector<std::optional<Value>> slots_;
};

void no_args(const char* fn, const Args& a) {
  if (!a.pos.empty() || !a.kw.empty()) type_error(std::string(fn) + "() takes no arguments");
}

int64_t to_index(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  type_error(std::string("'") + type_name(v) + "' object cannot be interpreted as an integer (" + what + ")");
}

// A run of ASCII digits as an index; huge values are a kType error, not an exception escaping.
int64_t digits_to_int(const std::string& digits) {
  if (digits.size() > 18) type_error("index " + digits + " is too large");
  return std::strtoll(digits.c_str(), nullptr, 10);
}

// soft_str: str() of any value, Undefined -> "".
std::string sstr(const Value& v) { return to_str(v); }

Value str_value(std::string s) { return Value::string(std::move(s)); }

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 16);
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

// Python str.splitlines().
std::vector<std::string> splitlines(const std::string& s, bool keepends) {
  std::vector<std::string> out;
  size_t i = 0, start = 0;
  while (i < s.size()) {
    size_t j = i;
    uint32_t cp = utf8_next(s, &j);
    bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
               cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!brk) {
      i = j;
      continue;
    }
    size_t end_line = i;
    if (cp == '\r' && j < s.size() && s[j] == '\n') ++j;
    out.push_back(s.substr(start, (keepends ? j : end_line) - start));
    start = i = j;
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

size_t cp_index_of_byte(const std::string& s, size_t byte_pos) { return utf8_length(std::string_view(s).substr(0, byte_pos)); }

// Byte offsets of code point positions start/end (Python slice-style clamping of negatives).
void cp_range(const std::string& s, const Value* start, const Value* end, size_t* b0, size_t* b1) {
  const int64_t n = static_cast<int64_t>(utf8_length(s));
  auto norm = [&](const Value* v, int64_t dflt) {
    if (!v || v->is_none()) return dflt;
    int64_t x = to_index(*v, "slice");
    if (x < 0) x = std::max<int64_t>(0, x + n);
    return std::min(x, n);
  };
  int64_t a = norm(start, 0), b = norm(end, n);
  auto byte_of = [&](int64_t cp) {
    size_t i = 0;
    for (int64_t k = 0; k < cp && i < s.size(); ++k) utf8_next(s, &i);
    return i;
  };
  *b0 = byte_of(a);
  *b1 = std::max(*b0, byte_of(b));
}

std::string pad_to(const std::string& s, int64_t width, char align, const std::string& fill) {
  const int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return s;
  Budget* b = current_budget();
  if (b) b->check_string(static_cast<size_t>(width) * std::max<size_t>(fill.size(), 1));
  const int64_t total = width - len;
  int64_t left = 0;
  if (align == '>') left = total;
  if (align == '^') left = total / 2;
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += fill;
  out += s;
  for (int64_t k = 0; k < total - left; ++k) out += fill;
  return out;
}

// ---------------------------------------------------------------- printf-style formatting

std::string pad_number(const std::string& body, const std::string& flags, int width) {
  if (width < 0 || static_cast<int>(body.size()) >= width) return body;
  const size_t pad = static_cast<size_t>(width) - body.size();
  if (flags.find('-') != std::string::npos) return body + std::string(pad, ' ');
  if (flags.find('0') != std::string::npos) {
    size_t sign = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
    if (body.size() >= sign + 2 && body[sign] == '0' && (body[sign + 1] | 0x20) != '0' &&
        std::strchr("xXoO", body[sign + 1]))
      sign += 2;
    return body.substr(0, sign) + std::string(pad, '0') + body.substr(sign);
  }
  return std::string(pad, ' ') + body;
}

// One printf-style conversion of a number, Python flavour (signed hex/octal, "inf"/"nan").
std::string format_number_c(const std::string& flags, int width, int prec, char conv, const Value& v) {
  if (Budget* b = current_budget()) b->check_string(static_cast<size_t>(std::max(width, 0)) + static_cast<size_t>(std::max(prec, 0)));
  std::string f = "%";
  for (char c : flags)
    if (c != '-' && c != '0') f.push_back(c);
  if (prec >= 0) f += "." + std::to_string(prec);
  std::string buf(static_cast<size_t>(std::max(prec, 0)) + 400, '\0');
  if (conv == 'd' || conv == 'i' || conv == 'u' || conv == 'x' || conv == 'X' || conv == 'o') {
    const int64_t x = v.as_int();
    std::string body;
    if (conv == 'd' || conv == 'i' || conv == 'u') {
      int n = std::snprintf(buf.data(), buf.size(), (f + "lld").c_str(), static_cast<long long>(x));
      body = buf.substr(0, static_cast<size_t>(n));
    } else {
      const unsigned long long mag = x < 0 ? 0ull - static_cast<unsigned long long>(x) : static_cast<unsigned long long>(x);
      std::string g = "%";
      if (flags.find('#') != std::string::npos) g += "#";
      if (prec >= 0) g += "." + std::to_string(prec);
      int n = std::snprintf(buf.data(), buf.size(), (g + "ll" + conv).c_str(), mag);
      body = buf.substr(0, static_cast<size_t>(n));
      if (conv == 'o' && flags.find('#') != std::string::npos) body = "0o" + body.substr(body[0] == '0' && body.size() > 1 ? 1 : 0);
      const char* sign = x < 0 ? "-" : flags.find('+') != std::string::npos ? "+" : flags.find(' ') != std::string::npos ? " " : "";
      body = sign + body;
    }
    return pad_number(body, flags, width);
  }
  double x = v.as_double();
  if (std::isnan(x) || std::isinf(x)) {
    std::string s = std::isnan(x) ? "nan" : (x < 0 ? "-inf" : (flags.find('+') != std::string::npos ? "+inf" : "inf"));
    if (conv >= 'A' && conv <= 'Z') std::transform(s.begin(), s.end(), s.begin(), ::toupper);
    std::string fl = flags;
    fl.erase(std::remove(fl.begin(), fl.end(), '0'), fl.end());
    return pad_number(s, fl, width);
  }
  int n = std::snprintf(buf.data(), buf.size(), (f + conv).c_str(), x);
  return pad_number(buf.substr(0, static_cast<size_t>(n)), flags, width);
}

}  // namespace

Value py_format(const std::string& fmt, const Value& args) {
  std::vector<Value> values;
  const DictObj* mapping = nullptr;
  bool tuple_args = false;
  if (args.is_list() && args.flavor() == ListFlavor::kTuple) {
    values = args.list().items;
    tuple_args = true;
  } else if (args.is_dict()) {
    mapping = &args.dict();
    values.push_back(args);
  } else {
    values.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  size_t i = 0;
  while (i < fmt.size()) {
    char c = fmt[i];
    if (c != '%') {
      out.push_back(c);
      ++i;
      continue;
    }
    ++i;
    if (i >= fmt.size()) type_error("incomplete format");
    const Value* arg = nullptr;
    Value keyed;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos) type_error("incomplete format key");
      if (!mapping) type_error("format requires a mapping");
      const Value* v = mapping->find(fmt.substr(i + 1, close - i - 1));
      if (!v) type_error("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      keyed = *v;
      arg = &keyed;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::strchr("-+ 0#", fmt[i])) flags.push_back(fmt[i++]);
    int width = -1, prec = -1;
    while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
      width = (width < 0 ? 0 : width) * 10 + (fmt[i++] - '0');
      if (width > 1000000) fail(ErrorKind::kLimit, "format width too large");
    }
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      prec = 0;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
        prec = prec * 10 + (fmt[i++] - '0');
        if (prec > 1000000) fail(ErrorKind::kLimit, "format precision too large");
      }
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) type_error("incomplete format");
    char conv = fmt[i++];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (!arg) {
      if (mapping) {
        arg = &values[0];
        used_mapping = true;
      } else {
        if (next >= values.size()) type_error("not enough arguments for format string");
        arg = &values[next++];
      }
    }
    const Value& v = *arg;
    const bool left = flags.find('-') != std::string::npos;
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = conv == 's' ? to_str(v) : repr(v);
        if (prec >= 0) {
          auto cps = utf8_decode(s);
          if (static_cast<size_t>(prec) < cps.size()) s = utf8_encode(cps, 0, static_cast<size_t>(prec));
        }
        out += pad_to(s, width, left ? '<' : '>', " ");
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        if (v.is_float() && conv != 'x' && conv != 'X' && conv != 'o') {
          double d = v.as_double();
          if (!std::isfinite(d)) type_error("cannot convert float to integer");
          out += format_number_c(flags, width, prec, conv, Value::integer(static_cast<int64_t>(d)));
        } else if (v.is_int() || v.is_bool()) {
          out += format_number_c(flags, width, prec, conv, v);
        } else {
          type_error(std::string("%") + conv + " format: a real number is required, not " + type_name(v));
        }
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G':
        if (!v.is_number()) type_error(std::string("must be real number, not ") + type_name(v));
        out += format_number_c(flags, width, prec, conv, Value::number(v.as_double()));
        break;
      case 'c': {
        std::string s;
        if (v.is_int()) {
          if (v.as_int() < 0 || v.as_int() > 0x10FFFF) type_error("%c arg not in range(0x110000)");
          utf8_append(&s, static_cast<uint32_t>(v.as_int()));
        } else if (v.is_string() && utf8_length(v.str()) == 1) {
          s = v.str();
        } else {
          type_error("%c requires int or char");
        }
        out += pad_to(s, width, left ? '<' : '>', " ");
        break;
      }
      default: type_error(std::string("unsupported format character '") + conv + "'");
    }
    if (Budget* b = current_budget()) b->check_string(out.size());
  }
  if (!mapping && tuple_args && next < values.size()) type_error("not all arguments converted during string formatting");
  if (!mapping && !tuple_args && next == 0) type_error("not all arguments converted during string formatting");
  (void)used_mapping;
  return Value::string(std::move(out));
}

namespace {

// ---------------------------------------------------------------- str.format

std::string apply_format_spec(const Value& v, const std::string& spec) {
  // [[fill]align][sign][#][0][width][,][.precision][type]
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2) {
    size_t j = 0;
    uint32_t cp = utf8_next(spec, &j);
    (void)cp;
    if (j < spec.size() && is_align(spec[j])) {
      fill = spec.substr(0, j);
      align = spec[j];
      i = j + 1;
    }
  }
  if (!align && i < spec.size() && is_align(spec[i])) align = spec[i++];
  char sign = 0;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  bool alt = false;
  if (i < spec.size() && spec[i] == '#') alt = true, ++i;
  bool zero = false;
  if (i < spec.size() && spec[i] == '0') zero = true, ++i;
  int64_t width = -1;
  while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
    width = (width < 0 ? 0 : width) * 10 + (spec[i++] - '0');
    if (width > 1000000) fail(ErrorKind::kLimit, "format width too large");
  }
  char grouping = 0;
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_')) grouping = spec[i++];
  int prec = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    prec = 0;
    while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
      prec = prec * 10 + (spec[i++] - '0');
      if (prec > 100000) fail(ErrorKind::kLimit, "format precision too large");
    }
  }
  char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size()) type_error("Invalid format specifier");
  std::string body;
  const bool numeric = v.is_number();
  if (v.is_string() || (!numeric && (type == 0 || type == 's'))) {
    if (type && type != 's') type_error("Unknown format code '" + std::string(1, type) + "' for object of type 'str'");
    body = to_str(v);
    if (prec >= 0) {
      auto cps = utf8_decode(body);
      if (static_cast<size_t>(prec) < cps.size()) body = utf8_encode(cps, 0, static_cast<size_t>(prec));
    }
    return pad_to(body, width, align ? align : '<', fill);
  }
  if (!numeric) type_error("unsupported format string passed to " + type_name(v) + ".__format__");
  std::string flags;
  if (sign == '+') flags += "+";
  if (sign == ' ') flags += " ";
  if (alt) flags += "#";
  char conv = type;
  if (conv == 0) {
    if (v.is_float()) {
      if (prec < 0) {
        body = py_float_repr(v.as_double());
        if (sign == '+' && v.as_double() >= 0) body = "+" + body;
      } else {
        body = format_number_c(flags, -1, prec, 'g', v);
      }
    } else {
      body = format_number_c(flags, -1, -1, 'd', Value::integer(v.as_int()));
    }
  } else if (conv == 'd' || conv == 'x' || conv == 'X' || conv == 'o' || conv == 'b') {
    if (v.is_float()) type_error("Unknown format code '" + std::string(1, conv) + "' for object of type 'float'");
    if (conv == 'b') {
      uint64_t x = static_cast<uint64_t>(v.as_int() < 0 ? -v.as_int() : v.as_int());
      std::string bits;
      do {
        bits.insert(bits.begin(), static_cast<char>('0' + (x & 1)));
        x >>= 1;
      } while (x);
      body = (v.as_int() < 0 ? "-" : (sign == '+' ? "+" : "")) + std::string(alt ? "0b" : "") + bits;
    } else {
      body = format_number_c(flags, -1, -1, conv, Value::integer(v.as_int()));
    }
  } else if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'E' || conv == 'g' || conv == 'G' || conv == '%') {
    double x = v.as_double();
    if (conv == '%') x *= 100;
    body = format_number_c(flags, -1, prec < 0 ? 6 : prec, conv == '%' ? 'f' : conv, Value::number(x));
    if (conv == '%') body += "%";
  } else if (conv == 'n') {
    body = format_number_c(flags, -1, prec, v.is_float() ? 'g' : 'd', v);
  } else {
    type_error("Unknown format code '" + std::string(1, conv) + "'");
  }
  if (grouping) {
    // Group the integer digits in threes (after any sign, before any fraction or exponent).
    size_t start = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
    size_t end = start;
    while (end < body.size() && body[end] >= '0' && body[end] <= '9') ++end;
    std::string digits = body.substr(start, end - start), grouped;
    for (size_t k = 0; k < digits.size(); ++k) {
      if (k && (digits.size() - k) % 3 == 0) grouped.push_back(grouping);
      grouped.push_back(digits[k]);
    }
    body = body.substr(0, start) + grouped + body.substr(end);
  }
  if (zero && !align) {
    align = '=';
    fill = "0";
  }
  if (align == '=') {
    size_t sign_len = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
    std::string rest = body.substr(sign_len);
    return body.substr(0, sign_len) + pad_to(rest, width - static_cast<int64_t>(sign_len), '>', fill);
  }
  return pad_to(body, width, align ? align : '>', fill);
}

struct FormatState {
  int auto_idx = 0;
  bool manual = false, automatic = false;
};

std::string str_format_impl(Interp& in, const std::string& fmt, const Args& a, FormatState& st, int depth);

Value str_format(Interp& in, const std::string& fmt, const Args& a) {
  FormatState st;
  return Value::string(str_format_impl(in, fmt, a, st, 0));
}

std::string str_format_impl(Interp& in, const std::string& fmt, const Args& a, FormatState& st, int depth) {
  if (depth > 2) type_error("Max string recursion exceeded");
  int& auto_idx = st.auto_idx;
  bool& manual = st.manual;
  bool& automatic = st.automatic;
  std::string out;
  size_t i = 0;
  while (i < fmt.size()) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        i += 2;
        continue;
      }
      type_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      ++i;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      i += 2;
      continue;
    }
    // The field ends at the matching '}' (format specs may nest one level of fields).
    size_t close = i + 1;
    int level = 1;
    while (close < fmt.size()) {
      if (fmt[close] == '{') ++level;
      if (fmt[close] == '}' && --level == 0) break;
      ++close;
    }
    if (close >= fmt.size()) type_error("expected '}' before end of string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close + 1;
    std::string spec, conv;
    size_t colon = field.find(':');
    if (colon != std::string::npos) spec = field.substr(colon + 1), field = field.substr(0, colon);
    if (spec.find('{') != std::string::npos) spec = str_format_impl(in, spec, a, st, depth + 1);
    size_t bang = field.find('!');
    if (bang != std::string::npos) conv = field.substr(bang + 1), field = field.substr(0, bang);
    size_t name_end = field.find_first_of(".[");
    std::string head = field.substr(0, name_end);
    Value v;
    if (head.empty()) {
      if (manual) type_error("cannot switch from manual field specification to automatic field numbering");
      automatic = true;
      if (static_cast<size_t>(auto_idx) >= a.pos.size())
        type_error("Replacement index " + std::to_string(auto_idx) + " out of range for positional args tuple");
      v = a.pos[static_cast<size_t>(auto_idx++)];
    } else if (std::all_of(head.begin(), head.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      if (automatic) type_error("cannot switch from automatic field numbering to manual field specification");
      manual = true;
      size_t k = static_cast<size_t>(digits_to_int(head));
      if (k >= a.pos.size()) type_error("Replacement index " + head + " out of range for positional args tuple");
      v = a.pos[k];
    } else {
      bool found = false;
      for (const auto& [key, val] : a.kw)
        if (key == head) v = val, found = true;
      if (!found) type_error("KeyError: '" + head + "'");
    }
    size_t p = name_end;
    while (p != std::string::npos && p < field.size()) {
      if (field[p] == '.') {
        size_t q = field.find_first_of(".[", p + 1);
        v = in.getattr(v, field.substr(p + 1, q == std::string::npos ? std::string::npos : q - p - 1));
        p = q;
      } else {
        size_t q = field.find(']', p);
        if (q == std::string::npos) type_error("Missing ']' in format string");
        std::string key = field.substr(p + 1, q - p - 1);
        bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        v = in.getitem(v, digits ? Value::integer(digits_to_int(key)) : Value::string(key));
        p = q + 1;
      }
    }
    if (conv == "r" || conv == "a") {
      v = Value::string(repr(v));
    } else if (conv == "s") {
      v = Value::string(to_str(v));
    } else if (!conv.empty()) {
      type_error("Unknown conversion specifier " + conv);
    }
    out += apply_format_spec(v, spec);
    if (Budget* b = current_budget()) b->check_string(out.size());
  }
  return out;
}

// ---------------------------------------------------------------- helpers for filters

Value ignore_case(const Value& v) {
  if (v.is_string()) return Value::string(py_str_lower(v.str()));
  return v;
}

// jinja2.filters.make_attrgetter: "a.b.0" walks getitem per part (digits become ints).
std::vector<Value> attribute_parts(const Value& attr) {
  std::vector<Value> parts;
  if (attr.is_none() || attr.is_undefined()) return parts;
  if (!attr.is_string()) return {attr};
  const std::string& s = attr.str();
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    std::string part = s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    parts.push_back(digits ? Value::integer(digits_to_int(part)) : Value::string(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

Value get_attr_path(Interp& in, Value item, const std::vector<Value>& parts, const Value* dflt) {
  for (const Value& p : parts) {
    item = in.getitem(item, p);
    if (dflt && item.is_undefined()) item = *dflt;
  }
  return item;
}

std::vector<Value> sorted_values(Interp& in, const Items& items, bool reverse, bool case_sensitive,
                                 const Value* attribute) {
  // Keys: attribute may be "a,b" (several keys, compared as a list).
  std::vector<std::vector<Value>> attrs;
  if (attribute && attribute->is_string()) {
    const std::string& s = attribute->str();
    size_t start = 0;
    while (true) {
      size_t comma = s.find(',', start);
      attrs.push_back(attribute_parts(Value::string(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start))));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else if (attribute && !attribute->is_none()) {
    attrs.push_back({*attribute});
  }
  TempCharge pending(items.size() * (sizeof(Value) * 2 + sizeof(size_t)));
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t k = 0; k < items.size(); ++k) {
    Value key;
    if (attrs.empty()) {
      key = case_sensitive ? items[k] : ignore_case(items[k]);
    } else {
      std::vector<Value> ks;
      for (const auto& parts : attrs) {
        Value x = get_attr_path(in, items[k], parts, nullptr);
        ks.push_back(case_sensitive ? x : ignore_case(x));
      }
      key = Value::list(std::move(ks));
    }
    keyed.emplace_back(std::move(key), k);
  }
  tick(items.size() * 4 + 1);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (const auto& kv : keyed) out.push_back(items[kv.second]);
  return out;
}

Value select_or_reject(Interp& in, const Value& value, Args& a, bool select, bool lookup_attr) {
  if (!truthy(value)) return Value::iterator({}, "generator");
  std::vector<Value> parts;
  size_t off = 0;
  if (lookup_attr) {
    if (a.pos.empty()) type_error("Missing parameter for attribute name");
    parts = attribute_parts(a.pos[0]);
    off = 1;
  }
  std::string test;
  Args test_args;
  bool has_test = a.pos.size() > off;
  if (has_test) {
    if (!a.pos[off].is_string()) type_error("test name must be a string");
    test = a.pos[off].str();
    test_args.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(off + 1), a.pos.end());
    test_args.kw = a.kw;
  }
  std::vector<Value> out;
  for (const Value& item : iterate(value)) {
    tick();
    Value x = lookup_attr ? get_attr_path(in, item, parts, nullptr) : item;
    bool r;
    if (has_test) {
      Args copy = test_args;
      r = in.call_test(test, x, copy);
    } else {
      r = truthy(x);
    }
    if (r == select) out.push_back(item);
  }
  return Value::iterator(std::move(out), "generator");
}

Value min_max(Interp& in, const Value& value, Args& a, bool is_max) {
  Bound b(is_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  Items items = iterate(value);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const bool cs = truthy(b.get_or(0, Value::boolean(false)));
  std::vector<Value> parts;
  if (const Value* attr = b.get(1)) parts = attribute_parts(*attr);
  auto key = [&](const Value& x) {
    Value k = parts.empty() ? x : get_attr_path(in, x, parts, nullptr);
    return cs ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t k = 1; k < items.size(); ++k) {
    Value kk = key(items[k]);
    if (is_max ? less(best_key, kk) : less(kk, best_key)) best = k, best_key = kk;
  }
  return items[best];
}

double parse_py_float(const std::string& text, bool* ok) {
  std::string s = py_strip(text, nullptr, true, true);
  std::string clean;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '_') {
      if (k == 0 || k + 1 >= s.size() || !isdigit(static_cast<unsigned char>(s[k - 1])) ||
          !isdigit(static_cast<unsigned char>(s[k + 1]))) {
        *ok = false;
        return 0;
      }
      continue;
    }
    clean.push_back(s[k]);
  }
  std::string lower = py_str_lower(clean);
  std::string body = lower;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) body = body.substr(1);
  if (body == "inf" || body == "infinity" || body == "nan") {
    *ok = true;
    double v = body == "nan" ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    return lower[0] == '-' ? -v : v;
  }
  if (body.empty() || !(isdigit(static_cast<unsigned char>(body[0])) || body[0] == '.')) {
    *ok = false;
    return 0;
  }
  for (char c : body) {
    if (!(isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-')) {
      *ok = false;
      return 0;
    }
  }
  char* end = nullptr;
  double v = std::strtod(clean.c_str(), &end);
  *ok = end && *end == '\0' && !clean.empty();
  return v;
}

bool parse_py_int(const std::string& text, int64_t base, int64_t* out) {
  std::string s = py_strip(text, nullptr, true, true);
  if (s.empty()) return false;
  bool neg = false;
  size_t i = 0;
  if (s[0] == '+' || s[0] == '-') neg = s[0] == '-', i = 1;
  auto prefix = [&](char p) {
    return i + 1 < s.size() && s[i] == '0' && (s[i + 1] | 0x20) == p;
  };
  if (base == 0) {
    if (prefix('x')) {
      base = 16, i += 2;
    } else if (prefix('o')) {
      base = 8, i += 2;
    } else if (prefix('b')) {
      base = 2, i += 2;
    } else {
      base = 10;
    }
  } else if ((base == 16 && prefix('x')) || (base == 8 && prefix('o')) || (base == 2 && prefix('b'))) {
    i += 2;
  }
  if (base < 2 || base > 36) type_error("int() base must be >= 2 and <= 36, or 0");
  if (i >= s.size()) return false;
  uint64_t v = 0;
  bool prev_digit = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      if (!prev_digit || i + 1 >= s.size() || s[i + 1] == '_') return false;
      prev_digit = false;
      continue;
    }
    int d = isdigit(static_cast<unsigned char>(c)) ? c - '0'
            : isalpha(static_cast<unsigned char>(c)) ? (c | 0x20) - 'a' + 10 : 99;
    if (d >= base) return false;
    if (v > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - static_cast<uint64_t>(d)) / static_cast<uint64_t>(base))
      fail(ErrorKind::kLimit, "integer too large (duet integers are 64-bit)");
    v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    prev_digit = true;
  }
  *out = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return true;
}

Value py_round(double x, int64_t ndigits) {
  if (!std::isfinite(x)) return Value::number(x);
  if (ndigits >= 0) {
    if (ndigits > 300) return Value::number(x);
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(ndigits), x);
    return Value::number(std::strtod(buf, nullptr));
  }
  double p = std::pow(10.0, static_cast<double>(-ndigits));
  if (!std::isfinite(p)) return Value::number(0.0 * x);
  return Value::number(std::nearbyint(x / p) * p);
}

// ---------------------------------------------------------------- filters

using FilterFn = Value (*)(Interp&, const Value&, Args&);

Value f_abs(Interp&, const Value& v, Args& a) {
  no_args("abs", a);
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min()) fail(ErrorKind::kLimit, "integer overflow");
    return Value::integer(std::llabs(v.as_int()));
  }
  type_error("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_attr(Interp& in, const Value& v, Args& a) {
  Bound b("attr", a, {"name"});
  const Value* name = b.get(0);
  if (!name || !name->is_string()) type_error("attribute name must be a string");
  if (v.is_dict() && !Interp::has_method(v, name->str()))
    return Value::undefined("'dict object' has no attribute '" + name->str() + "'");
  return in.getattr(v, name->str());
}

Value f_capitalize(Interp&, const Value& v, Args& a) {
  no_args("capitalize", a);
  return str_value(py_str_capitalize(sstr(v)));
}

Value f_center(Interp&, const Value& v, Args& a) {
  Bound b("center", a, {"width"});
  std::string s = sstr(v);
  int64_t width = to_index(b.get_or(0, Value::integer(80)), "width");
  const int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return str_value(s);
  if (Budget* bud = current_budget()) bud->check_string(static_cast<size_t>(width));
  int64_t marg = width - len;
  int64_t left = marg / 2 + (marg & width & 1);
  return str_value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(marg - left), ' '));
}

Value f_length(Interp&, const Value& v, Args& a) {
  no_args("length", a);
  if (v.kind() == Kind::kLoop) return Value::integer(static_cast<int64_t>(v.as<LoopObj>().items().size()));
  return Value::integer(static_cast<int64_t>(py_len(v)));
}

Value f_default(Interp&, const Value& v, Args& a) {
  Bound b("default", a, {"default_value", "boolean"});
  Value dflt = b.get_or(0, Value::string(""));
  bool boolean = truthy(b.get_or(1, Value::boolean(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return dflt;
  return v;
}

Value f_dictsort(Interp&, const Value& v, Args& a) {
  Bound b("dictsort", a, {"case_sensitive", "by", "reverse"});
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_dict()) type_error("'" + type_name(v) + "' object has no attribute 'items'");
  bool cs = truthy(b.get_or(0, Value::boolean(false)));
  std::string by = sstr(b.get_or(1, Value::string("key")));
  bool rev = truthy(b.get_or(2, Value::boolean(false)));
  if (by != "key" && by != "value") type_error("You can only sort by either \"key\" or \"value\"");
  const auto& entries = v.dict().entries;
  TempCharge pending(entries.size() * (sizeof(Value) * 3 + sizeof(size_t)));
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t k = 0; k < entries.size(); ++k) {
    const Value& x = by == "key" ? entries[k].first : entries[k].second;
    keyed.emplace_back(cs ? x : ignore_case(x), k);
  }
  tick(entries.size() * 4 + 1);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return rev ? less(y.first, x.first) : less(x.first, y.first);
  });
  std::vector<Value> out;
  for (const auto& kv : keyed) out.push_back(Value::tuple({entries[kv.second].first, entries[kv.second].second}));
  return Value::list(std::move(out));
}

Value f_escape(Interp&, const Value& v, Args& a) {
  no_args("escape", a);
  if (v.is_markup()) return v;
  return Value::string(html_escape(sstr(v)), true);
}

Value f_forceescape(Interp&, const Value& v, Args& a) {
  no_args("forceescape", a);
  return Value::string(html_escape(sstr(v)), true);
}

Value f_first(Interp&, const Value& v, Args& a) {
  no_args("first", a);
  if (v.kind() == Kind::kIterator) {
    IterObj& it = v.iter();
    if (it.pos >= it.items.size()) return Value::undefined("No first item, sequence was empty.");
    return it.items[it.pos++];
  }
  if (v.is_list()) {
    const auto& items = v.list().items;
    return items.empty() ? Value::undefined("No first item, sequence was empty.") : items[0];
  }
  Items items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items[0];
}

Value f_last(Interp&, const Value& v, Args& a) {
  no_args("last", a);
  if (v.kind() == Kind::kIterator) type_error("'generator' object is not reversible");
  if (v.is_list()) {
    const auto& items = v.list().items;
    return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
  }
  Items items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_float(Interp&, const Value& v, Args& a) {
  Bound b("float", a, {"default"});
  Value dflt = b.get_or(0, Value::number(0.0));
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    bool ok = false;
    double d = parse_py_float(v.str(), &ok);
    return ok ? Value::number(d) : dflt;
  }
  return dflt;
}

Value f_int(Interp&, const Value& v, Args& a) {
  Bound b("int", a, {"default", "base"});
  Value dflt = b.get_or(0, Value::integer(0));
  int64_t base = to_index(b.get_or(1, Value::integer(10)), "base");
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    double d = v.as_double();
    if (!std::isfinite(d)) return dflt;
    if (std::fabs(d) >= 9.2e18) fail(ErrorKind::kLimit, "integer too large (duet integers are 64-bit)");
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    int64_t out;
    if (parse_py_int(v.str(), base, &out)) return Value::integer(out);
    bool ok = false;
    double d = parse_py_float(v.str(), &ok);
    if (ok && std::isfinite(d)) {
      if (std::fabs(d) >= 9.2e18) fail(ErrorKind::kLimit, "integer too large (duet integers are 64-bit)");
      return Value::integer(static_cast<int64_t>(d));
    }
    return dflt;
  }
  return dflt;
}

Value f_format(Interp&, const Value& v, Args& a) {
  if (!a.pos.empty() && !a.kw.empty()) type_error("can't handle positional and keyword arguments at the same time");
  if (!a.kw.empty()) {
    auto d = std::make_shared<DictObj>();
    for (auto& [k, x] : a.kw) d->set(Value::string(k), x);
    return py_format(sstr(v), Value::dict(std::move(d)));
  }
  return py_format(sstr(v), Value::tuple(a.pos));
}

Value f_indent(Interp&, const Value& v, Args& a) {
  Bound b("indent", a, {"width", "first", "blank"});
  if (v.is_undefined()) fail_undefined(v);
  Value w = b.get_or(0, Value::integer(4));
  std::string ind;
  if (w.is_string()) {
    ind = w.str();
  } else {
    int64_t n = to_index(w, "width");
    if (n > 0) {
      if (Budget* bud = current_budget()) bud->check_string(static_cast<size_t>(n));
      ind.assign(static_cast<size_t>(n), ' ');
    }
  }
  bool first = truthy(b.get_or(1, Value::boolean(false)));
  bool blank = truthy(b.get_or(2, Value::boolean(false)));
  std::string s = sstr(v) + "\n";
  std::vector<std::string> lines = splitlines(s, false);
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) rv += "\n" + ind;
      rv += lines[k];
      if (Budget* bud = current_budget()) bud->check_string(rv.size());
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) {
      rv += "\n";
      if (!lines[k].empty()) rv += ind;
      rv += lines[k];
      if (Budget* bud = current_budget()) bud->check_string(rv.size());
    }
  }
  if (first) rv = ind + rv;
  return Value::string(std::move(rv), v.is_markup());
}

Value f_join(Interp& in, const Value& v, Args& a) {
  Bound b("join", a, {"d", "attribute"});
  std::string d = sstr(b.get_or(0, Value::string("")));
  std::vector<Value> parts;
  if (const Value* attr = b.get(1); attr && !attr->is_none()) parts = attribute_parts(*attr);
  std::string out;
  bool first = true;
  for (const Value& x : iterate(v)) {
    if (!first) out += d;
    first = false;
    append_str(&out, parts.empty() ? x : get_attr_path(in, x, parts, nullptr));
    if (Budget* bud = current_budget()) bud->check_string(out.size());
    tick();
  }
  return Value::string(std::move(out));
}

Value f_list(Interp&, const Value& v, Args& a) {
  no_args("list", a);
  if (v.kind() == Kind::kLoop) return Value::list(v.as<LoopObj>().items());
  Items it = iterate(v);
  return Value::list(it.vec());
}

Value f_lower(Interp&, const Value& v, Args& a) {
  no_args("lower", a);
  return str_value(py_str_lower(sstr(v)));
}

Value f_upper(Interp&, const Value& v, Args& a) {
  no_args("upper", a);
  return str_value(py_str_upper(sstr(v)));
}

Value f_items(Interp&, const Value& v, Args& a) {
  no_args("items", a);
  if (v.is_undefined()) return Value::iterator({}, "generator");
  if (!v.is_dict()) type_error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict().entries) out.push_back(Value::tuple({k, x}));
  return Value::iterator(std::move(out), "generator");
}

Value f_map(Interp& in, const Value& v, Args& a) {
  if (!truthy(v)) return Value::iterator({}, "generator");
  std::vector<Value> out;
  if (a.pos.empty()) {
    Value attr, dflt;
    bool has_attr = false, has_default = false;
    for (auto& [k, x] : a.kw) {
      if (k == "attribute") {
        attr = x, has_attr = true;
      } else if (k == "default") {
        dflt = x, has_default = true;
      } else {
        type_error("Unexpected keyword argument '" + k + "'");
      }
    }
    if (!has_attr) type_error("map requires a filter argument");
    std::vector<Value> parts = attribute_parts(attr);
    const Value* d = has_default && !dflt.is_none() ? &dflt : nullptr;
    for (const Value& x : iterate(v)) {
      tick();
      out.push_back(get_attr_path(in, x, parts, d));
    }
  } else {
    if (!a.pos[0].is_string()) type_error("filter name must be a string");
    std::string name = a.pos[0].str();
    Args rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const Value& x : iterate(v)) {
      tick();
      Args copy = rest;
      out.push_back(in.call_filter(name, x, copy));
    }
  }
  return Value::iterator(std::move(out), "generator");
}

Value f_max(Interp& in, const Value& v, Args& a) { return min_max(in, v, a, true); }
Value f_min(Interp& in, const Value& v, Args& a) { return min_max(in, v, a, false); }

Value f_pprint(Interp&, const Value& v, Args& a) {
  no_args("pprint", a);
  return str_value(repr(v));
}

Value f_select(Interp& in, const Value& v, Args& a) { return select_or_reject(in, v, a, true, false); }
Value f_reject(Interp& in, const Value& v, Args& a) { return select_or_reject(in, v, a, false, false); }
Value f_selectattr(Interp& in, const Value& v, Args& a) { return select_or_reject(in, v, a, true, true); }
Value f_rejectattr(Interp& in, const Value& v, Args& a) { return select_or_reject(in, v, a, false, true); }

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, int64_t count) {
  std::string out;
  if (count < 0) count = std::numeric_limits<int64_t>::max();
  Budget* bud = current_budget();
  if (old.empty()) {
    size_t i = 0;
    int64_t done = 0;
    while (done < count) {
      out += rep;
      ++done;
      if (i >= s.size()) break;
      size_t j = i;
      utf8_next(s, &j);
      out.append(s, i, j - i);
      i = j;
      if (bud) bud->check_string(out.size());
    }
    if (i < s.size()) out.append(s, i, std::string::npos);
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += rep;
    pos = hit + old.size();
    ++done;
    if (bud) bud->check_string(out.size());
  }
  out.append(s, pos, std::string::npos);
  tick(out.size() / 1024 + 1);
  return out;
}

Value f_replace(Interp&, const Value& v, Args& a) {
  Bound b("replace", a, {"old", "new", "count"});
  if (!b.get(0) || !b.get(1)) type_error("replace() missing required arguments");
  Value cnt = b.get_or(2, Value::none());
  int64_t count = cnt.is_none() ? -1 : to_index(cnt, "count");
  return str_value(py_replace(sstr(v), sstr(*b.get(0)), sstr(*b.get(1)), count));
}

Value f_reverse(Interp&, const Value& v, Args& a) {
  no_args("reverse", a);
  if (v.is_string()) {
    auto cps = utf8_decode(v.str());
    std::reverse(cps.begin(), cps.end());
    return str_value(utf8_encode(cps, 0, cps.size()));
  }
  Items it = iterate(v);
  TempCharge pending(it.size() * sizeof(Value));
  std::vector<Value> items(it.vec().rbegin(), it.vec().rend());
  if (v.kind() == Kind::kIterator) return Value::list(std::move(items));
  return Value::iterator(std::move(items), v.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator");
}

Value f_round(Interp&, const Value& v, Args& a) {
  Bound b("round", a, {"precision", "method"});
  int64_t prec = to_index(b.get_or(0, Value::integer(0)), "precision");
  std::string method = sstr(b.get_or(1, Value::string("common")));
  if (method != "common" && method != "ceil" && method != "floor") type_error("method must be common, ceil or floor");
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) type_error("type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (!v.is_float()) {
      if (prec >= 0) return Value::integer(v.as_int());
      double p = std::pow(10.0, static_cast<double>(-prec));
      return Value::integer(static_cast<int64_t>(std::nearbyint(v.as_double() / p) * p));
    }
    return py_round(v.as_double(), prec);
  }
  double p = std::pow(10.0, static_cast<double>(prec));
  double x = v.as_double() * p;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

Value f_safe(Interp&, const Value& v, Args& a) {
  no_args("safe", a);
  return Value::string(sstr(v), true);
}

Value f_sort(Interp& in, const Value& v, Args& a) {
  Bound b("sort", a, {"reverse", "case_sensitive", "attribute"});
  bool rev = truthy(b.get_or(0, Value::boolean(false)));
  bool cs = truthy(b.get_or(1, Value::boolean(false)));
  return Value::list(sorted_values(in, iterate(v), rev, cs, b.get(2)));
}

Value f_string(Interp&, const Value& v, Args& a) {
  no_args("string", a);
  if (v.is_string()) return v;
  return str_value(to_str(v));
}

Value f_sum(Interp& in, const Value& v, Args& a) {
  Bound b("sum", a, {"attribute", "start"});
  std::vector<Value> parts;
  if (const Value* attr = b.get(0); attr && !attr->is_none()) parts = attribute_parts(*attr);
  Value acc = b.get_or(1, Value::integer(0));
  for (const Value& x : iterate(v)) {
    Value item = parts.empty() ? x : get_attr_path(in, x, parts, nullptr);
    if (acc.is_string() || item.is_string()) {
      if (acc.is_string()) type_error("sum() can't sum strings [use ''.join(seq) instead]");
    }
    acc = binary_op(BinOp::kAdd, acc, item);
  }
  return acc;
}

Value f_title(Interp&, const Value& v, Args& a) {
  no_args("title", a);
  // jinja2's do_title: split on runs of [-\s({\[<], upper-case the first char of each piece.
  std::string s = sstr(v);
  std::string out;
  size_t i = 0;
  bool in_word = false;
  while (i < s.size()) {
    size_t j = i;
    uint32_t cp = utf8_next(s, &j);
    bool sep = py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    if (sep) {
      utf8_append(&out, cp);
      in_word = false;
    } else {
      utf8_append(&out, in_word ? py_lower(cp) : py_upper(cp));
      in_word = true;
    }
    i = j;
  }
  return str_value(out);
}

Value f_tojson(Interp&, const Value& v, Args& a) {
  Bound b("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = truthy(b.get_or(0, Value::boolean(false)));
  Value ind = b.get_or(1, Value::none());
  if (!ind.is_none()) {
    o.has_indent = true;
    o.item_sep = ",";
    if (ind.is_string()) {
      o.indent = ind.str();
    } else {
      int64_t n = to_index(ind, "indent");
      if (n > 1024) fail(ErrorKind::kLimit, "tojson indent too large");
      if (n > 0) o.indent.assign(static_cast<size_t>(n), ' ');
    }
  }
  Value seps = b.get_or(2, Value::none());
  if (!seps.is_none()) {
    if (!seps.is_list() || seps.list().items.size() != 2 || !seps.list().items[0].is_string() ||
        !seps.list().items[1].is_string())
      type_error("separators must be a (item_separator, key_separator) pair of strings");
    o.item_sep = seps.list().items[0].str();
    o.key_sep = seps.list().items[1].str();
  }
  o.sort_keys = truthy(b.get_or(3, Value::boolean(false)));
  return str_value(to_json(v, o));
}

Value f_trim(Interp&, const Value& v, Args& a) {
  Bound b("trim", a, {"chars"});
  Value chars = b.get_or(0, Value::none());
  std::string s = sstr(v);
  tick(s.size() / 1024 + 1);
  if (chars.is_none()) return str_value(py_strip(s, nullptr, true, true));
  if (!chars.is_string()) type_error("strip arg must be None or str");
  return str_value(py_strip(s, &chars.str(), true, true));
}

Value f_truncate(Interp&, const Value& v, Args& a) {
  Bound b("truncate", a, {"length", "killwords", "end", "leeway"});
  std::string s = sstr(v);
  int64_t length = to_index(b.get_or(0, Value::integer(255)), "length");
  bool killwords = truthy(b.get_or(1, Value::boolean(false)));
  std::string end = sstr(b.get_or(2, Value::string("...")));
  Value lw = b.get_or(3, Value::none());
  int64_t leeway = lw.is_none() ? 5 : to_index(lw, "leeway");
  const int64_t end_len = static_cast<int64_t>(utf8_length(end));
  if (length < end_len) type_error("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) type_error("expected leeway >= 0");
  auto cps = utf8_decode(s);
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return str_value(s);
  std::string head = utf8_encode(cps, 0, static_cast<size_t>(length - end_len));
  if (killwords) return str_value(head + end);
  size_t sp = head.rfind(' ');
  if (sp != std::string::npos) head = head.substr(0, sp);
  return str_value(head + end);
}

Value f_unique(Interp& in, const Value& v, Args& a) {
  Bound b("unique", a, {"case_sensitive", "attribute"});
  bool cs = truthy(b.get_or(0, Value::boolean(false)));
  std::vector<Value> parts;
  if (const Value* attr = b.get(1); attr && !attr->is_none()) parts = attribute_parts(*attr);
  std::unordered_set<std::string> seen;
  std::vector<Value> out;
  for (const Value& x : iterate(v)) {
    tick();
    Value key = parts.empty() ? x : get_attr_path(in, x, parts, nullptr);
    if (!cs) key = ignore_case(key);
    if (seen.insert(hash_key(key)).second) out.push_back(x);
  }
  return Value::iterator(std::move(out), "generator");
}

Value f_batch(Interp&, const Value& v, Args& a) {
  Bound b("batch", a, {"linecount", "fill_with"});
  if (!b.get(0)) type_error("batch() missing required argument 'linecount'");
  int64_t n = to_index(*b.get(0), "linecount");
  if (n <= 0) type_error("batch linecount must be positive");
  const Value* fill = b.get(1);
  std::vector<Value> out, cur;
  for (const Value& x : iterate(v)) {
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::move(cur))), cur.clear();
    cur.push_back(x);
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::iterator(std::move(out), "generator");
}

Value f_wordcount(Interp&, const Value& v, Args& a) {
  no_args("wordcount", a);
  if (v.is_undefined()) fail_undefined(v);
  std::string s = sstr(v);
  int64_t n = 0;
  bool in_word = false;
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = utf8_next(s, &i);
    bool w = py_isalnum(cp) || cp == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> kFilters = {
      {"abs", f_abs},         {"attr", f_attr},         {"batch", f_batch},         {"capitalize", f_capitalize}, {"center", f_center},
      {"count", f_length},    {"d", f_default},         {"default", f_default},       {"dictsort", f_dictsort},
      {"e", f_escape},        {"escape", f_escape},     {"first", f_first},           {"float", f_float},
      {"forceescape", f_forceescape}, {"format", f_format}, {"indent", f_indent},    {"int", f_int},
      {"join", f_join},       {"last", f_last},         {"length", f_length},         {"list", f_list},
      {"lower", f_lower},     {"items", f_items},       {"map", f_map},               {"max", f_max},
      {"min", f_min},         {"pprint", f_pprint},     {"reject", f_reject},         {"rejectattr", f_rejectattr},
      {"replace", f_replace}, {"reverse", f_reverse},   {"round", f_round},           {"safe", f_safe},
      {"select", f_select},   {"selectattr", f_selectattr}, {"sort", f_sort},        {"string", f_string},
      {"sum", f_sum},         {"title", f_title},       {"tojson", f_tojson},         {"trim", f_trim},
      {"truncate", f_truncate}, {"unique", f_unique},   {"upper", f_upper},           {"wordcount", f_wordcount},
  };
  return kFilters;
}

bool is_unsupported_filter(const std::string& name) {
  static const char* const kNames[] = {"slice", "groupby", "striptags", "urlencode", "urlize", "wordwrap",
                                       "xmlattr", "filesizeformat", "random"};
  for (const char* n : kNames)
    if (name == n) return true;
  return false;
}

// ---------------------------------------------------------------- tests

bool t_sequence(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kString:
    case Kind::kDict: return true;
    case Kind::kList:
      return v.flavor() == ListFlavor::kList || v.flavor() == ListFlavor::kTuple || v.flavor() == ListFlavor::kRange;
    default: return false;
  }
}

bool t_iterable(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kString:
    case Kind::kList:
    case Kind::kDict:
    case Kind::kIterator:
    case Kind::kLoop: return true;
    default: return false;
  }
}

bool str_is_cased(const std::string& s, bool want_lower) {
  bool cased = false;
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = utf8_next(s, &i);
    if (want_lower ? py_iscased_upper(cp) : (py_iscased_lower(cp) && cp != 0xDF)) return false;
    if (py_iscased_upper(cp) || py_iscased_lower(cp)) cased = true;
  }
  return cased;
}

// ---------------------------------------------------------------- methods

const std::unordered_set<std::string>& str_methods() {
  static const std::unordered_set<std::string> k = {
      "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "upper",
      "lower", "title", "capitalize", "swapcase", "casefold", "replace", "find", "rfind", "index", "rindex",
      "count", "join", "format", "isdigit", "isnumeric", "isdecimal", "isalpha", "isalnum", "isspace",
      "isupper", "islower", "istitle", "center", "ljust", "rjust", "zfill", "partition", "rpartition",
      "removeprefix", "removesuffix", "format_map", "expandtabs", "isidentifier", "isprintable", "isascii"};
  return k;
}

std::vector<Value> py_split(const std::string& s, const Value* sep_v, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (!sep_v || sep_v->is_none()) {
    // Whitespace split: runs of whitespace, no empty strings.
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < s.size()) {
      size_t j = i;
      uint32_t cp = utf8_next(s, &j);
      if (py_isspace(cp)) {
        i = j;
        continue;
      }
      size_t start = i;
      while (i < s.size()) {
        size_t k = i;
        if (py_isspace(utf8_next(s, &k))) break;
        i = k;
      }
      words.emplace_back(start, i);
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      for (auto [a, b] : words) parts.push_back(s.substr(a, b - a));
    } else if (!from_right) {
      for (int64_t k = 0; k < maxsplit; ++k) parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
      if (!words.empty()) {
        parts.push_back(s.substr(words[static_cast<size_t>(maxsplit)].first));
      }
    } else {
      size_t keep = words.size() - static_cast<size_t>(maxsplit);
      if (keep > 0) parts.push_back(s.substr(0, words[keep - 1].second));
      for (size_t k = keep; k < words.size(); ++k) parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
    }
  } else {
    if (!sep_v->is_string()) type_error("must be str or None, not " + type_name(*sep_v));
    const std::string& sep = sep_v->str();
    if (sep.empty()) type_error("empty separator");
    std::vector<size_t> hits;
    size_t pos = 0;
    while (true) {
      size_t h = s.find(sep, pos);
      if (h == std::string::npos) break;
      hits.push_back(h);
      pos = h + sep.size();
    }
    if (maxsplit >= 0 && static_cast<size_t>(maxsplit) < hits.size()) {
      if (!from_right) {
        hits.resize(static_cast<size_t>(maxsplit));
      } else {
        // rsplit: the last maxsplit non-overlapping matches scanning from the right.
        std::vector<size_t> rh;
        size_t end = s.size();
        while (static_cast<int64_t>(rh.size()) < maxsplit) {
          if (end < sep.size()) break;
          size_t h = s.rfind(sep, end - sep.size());
          if (h == std::string::npos) break;
          rh.push_back(h);
          end = h;
        }
        std::reverse(rh.begin(), rh.end());
        hits = rh;
      }
    }
    size_t start = 0;
    for (size_t h : hits) {
      parts.push_back(s.substr(start, h - start));
      start = h + sep.size();
    }
    parts.push_back(s.substr(start));
  }
  tick(parts.size() / 16 + s.size() / 1024 + 1);
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

bool starts_or_ends(const std::string& s, const Value& affix, const Value* start, const Value* end, bool ends) {
  size_t b0, b1;
  cp_range(s, start, end, &b0, &b1);
  std::string_view body = std::string_view(s).substr(b0, b1 - b0);
  auto test = [&](const Value& x) {
    if (!x.is_string()) type_error(std::string(ends ? "endswith" : "startswith") + " first arg must be str or a tuple of str, not " + type_name(x));
    const std::string& a = x.str();
    if (a.size() > body.size()) return false;
    return ends ? body.substr(body.size() - a.size()) == a : body.substr(0, a.size()) == a;
  };
  if (affix.is_list() && affix.flavor() == ListFlavor::kTuple) {
    for (const Value& x : affix.list().items)
      if (test(x)) return true;
    return false;
  }
  return test(affix);
}

Value str_method(Interp& in, const Value& self, const std::string& name, Args& a) {
  const std::string& s = self.str();
  auto strip_arg = [&](const char* fn) -> std::optional<std::string> {
    Bound b(fn, a, {"chars"});
    Value c = b.get_or(0, Value::none());
    if (c.is_none()) return std::nullopt;
    if (!c.is_string()) type_error(std::string(fn) + " arg must be None or str");
    return c.str();
  };
  tick(s.size() / 1024 + 1);
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto chars = strip_arg(name.c_str());
    return str_value(py_strip(s, chars ? &*chars : nullptr, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    Bound b(name.c_str(), a, {"sep", "maxsplit"});
    int64_t maxsplit = to_index(b.get_or(1, Value::integer(-1)), "maxsplit");
    return Value::list(py_split(s, b.get(0), maxsplit, name == "rsplit"));
  }
  if (name == "splitlines") {
    Bound b("splitlines", a, {"keepends"});
    std::vector<Value> out;
    for (auto& l : splitlines(s, truthy(b.get_or(0, Value::boolean(false))))) out.push_back(Value::string(std::move(l)));
    return Value::list(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    if (a.pos.empty()) type_error(name + "() takes at least 1 argument (0 given)");
    if (!a.kw.empty()) type_error(name + "() takes no keyword arguments");
    return Value::boolean(starts_or_ends(s, a.pos[0], a.pos.size() > 1 ? &a.pos[1] : nullptr,
                                         a.pos.size() > 2 ? &a.pos[2] : nullptr, name == "endswith"));
  }
  if (name == "upper") return no_args("upper", a), str_value(py_str_upper(s));
  if (name == "lower" || name == "casefold") return no_args(name.c_str(), a), str_value(py_str_lower(s));
  if (name == "title") return no_args("title", a), str_value(py_str_title(s));
  if (name == "capitalize") return no_args("capitalize", a), str_value(py_str_capitalize(s));
  if (name == "swapcase") {
    no_args("swapcase", a);
    std::string out;
    size_t i = 0;
    while (i < s.size()) {
      uint32_t cp = utf8_next(s, &i);
      utf8_append(&out, py_iscased_upper(cp) ? py_lower(cp) : py_upper(cp));
    }
    return str_value(out);
  }
  if (name == "replace") {
    if (a.pos.size() < 2 || a.pos.size() > 3 || !a.kw.empty()) type_error("replace() takes 2 or 3 arguments");
    if (!a.pos[0].is_string() || !a.pos[1].is_string()) type_error("replace() arguments must be str");
    int64_t count = a.pos.size() == 3 ? to_index(a.pos[2], "count") : -1;
    return str_value(py_replace(s, a.pos[0].str(), a.pos[1].str(), count));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    if (a.pos.empty() || !a.pos[0].is_string()) type_error(name + "() argument must be str");
    size_t b0, b1;
    cp_range(s, a.pos.size() > 1 ? &a.pos[1] : nullptr, a.pos.size() > 2 ? &a.pos[2] : nullptr, &b0, &b1);
    std::string_view body = std::string_view(s).substr(b0, b1 - b0);
    const std::string& sub = a.pos[0].str();
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(body) + 1));
      int64_t n = 0;
      size_t p = 0;
      while ((p = body.find(sub, p)) != std::string_view::npos) ++n, p += sub.size();
      return Value::integer(n);
    }
    size_t hit = (name == "find" || name == "index") ? body.find(sub) : body.rfind(sub);
    if (hit == std::string_view::npos) {
      if (name == "index" || name == "rindex") type_error("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(cp_index_of_byte(s, b0 + hit)));
  }
  if (name == "join") {
    Bound b("join", a, {"iterable"});
    if (!b.get(0)) type_error("join() takes exactly one argument");
    std::string out;
    size_t k = 0;
    for (const Value& x : iterate(*b.get(0))) {
      if (!x.is_string())
        type_error("sequence item " + std::to_string(k) + ": expected str instance, " + type_name(x) + " found");
      if (k++) out += s;
      out += x.str();
      if (Budget* bud = current_budget()) bud->check_string(out.size());
    }
    return str_value(out);
  }
  if (name == "format") return str_format(in, s, a);
  if (name == "format_map") {
    Bound b("format_map", a, {"mapping"});
    Args kw;
    if (b.get(0) && b.get(0)->is_dict())
      for (const auto& [k, x] : b.get(0)->dict().entries) kw.kw.emplace_back(to_str(k), x);
    return str_format(in, s, kw);
  }
  auto all_cps = [&](auto pred) {
    if (s.empty()) return false;
    size_t i = 0;
    while (i < s.size())
      if (!pred(utf8_next(s, &i))) return false;
    return true;
  };
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return no_args(name.c_str(), a), Value::boolean(all_cps([](uint32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha")
    return no_args("isalpha", a), Value::boolean(all_cps([](uint32_t c) { return py_isalnum(c) && !(c >= '0' && c <= '9'); }));
  if (name == "isalnum") return no_args("isalnum", a), Value::boolean(all_cps(py_isalnum));
  if (name == "isspace") return no_args("isspace", a), Value::boolean(all_cps(py_isspace));
  if (name == "isascii") return no_args("isascii", a), Value::boolean(is_ascii(s));
  if (name == "isprintable") {
    no_args("isprintable", a);
    size_t i = 0;
    while (i < s.size())
      if (!py_isprintable(utf8_next(s, &i))) return Value::boolean(false);
    return Value::boolean(true);
  }
  if (name == "isidentifier") {
    no_args("isidentifier", a);
    bool ok = !s.empty() && !(s[0] >= '0' && s[0] <= '9');
    for (char c : s) ok = ok && (isalnum(static_cast<unsigned char>(c)) || c == '_' || static_cast<uint8_t>(c) >= 0x80);
    return Value::boolean(ok);
  }
  if (name == "isupper" || name == "islower") return no_args(name.c_str(), a), Value::boolean(str_is_cased(s, name == "islower"));
  if (name == "istitle") {
    no_args("istitle", a);
    bool cased = false, prev_cased = false;
    size_t i = 0;
    while (i < s.size()) {
      uint32_t cp = utf8_next(s, &i);
      if (py_iscased_upper(cp)) {
        if (prev_cased) return Value::boolean(false);
        prev_cased = cased = true;
      } else if (py_iscased_lower(cp)) {
        if (!prev_cased) return Value::boolean(false);
        prev_cased = cased = true;
      } else {
        prev_cased = false;
      }
    }
    return Value::boolean(cased);
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    Bound b(name.c_str(), a, {"width", "fillchar"});
    if (!b.get(0)) type_error(name + "() takes at least 1 argument");
    int64_t width = to_index(*b.get(0), "width");
    std::string fill = b.get(1) ? sstr(*b.get(1)) : " ";
    if (utf8_length(fill) != 1) type_error("The fill character must be exactly one character long");
    const int64_t len = static_cast<int64_t>(utf8_length(s));
    if (width <= len) return str_value(s);
    if (Budget* bud = current_budget()) bud->check_string(static_cast<size_t>(width) * fill.size());
    int64_t marg = width - len;
    int64_t left = name == "ljust" ? 0 : name == "rjust" ? marg : marg / 2 + (marg & width & 1);
    std::string out;
    for (int64_t k = 0; k < left; ++k) out += fill;
    out += s;
    for (int64_t k = 0; k < marg - left; ++k) out += fill;
    return str_value(out);
  }
  if (name == "zfill") {
    Bound b("zfill", a, {"width"});
    if (!b.get(0)) type_error("zfill() takes exactly one argument");
    int64_t width = to_index(*b.get(0), "width");
    const int64_t len = static_cast<int64_t>(utf8_length(s));
    if (width <= len) return str_value(s);
    if (Budget* bud = current_budget()) bud->check_string(static_cast<size_t>(width));
    size_t sign = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    return str_value(s.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') + s.substr(sign));
  }
  if (name == "partition" || name == "rpartition") {
    Bound b(name.c_str(), a, {"sep"});
    if (!b.get(0) || !b.get(0)->is_string()) type_error("must be str");
    const std::string& sep = b.get(0)->str();
    if (sep.empty()) type_error("empty separator");
    size_t h = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (h == std::string::npos) {
      if (name == "partition") return Value::tuple({self, str_value(""), str_value("")});
      return Value::tuple({str_value(""), str_value(""), self});
    }
    return Value::tuple({str_value(s.substr(0, h)), str_value(sep), str_value(s.substr(h + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Bound b(name.c_str(), a, {"affix"});
    if (!b.get(0) || !b.get(0)->is_string()) type_error("must be str");
    const std::string& x = b.get(0)->str();
    if (name == "removeprefix") return str_value(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
    if (s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0) return str_value(s.substr(0, s.size() - x.size()));
    return str_value(s);
  }
  if (name == "expandtabs") {
    Bound b("expandtabs", a, {"tabsize"});
    int64_t ts = to_index(b.get_or(0, Value::integer(8)), "tabsize");
    if (ts > 1024) fail(ErrorKind::kLimit, "tabsize too large");
    std::string out;
    int64_t col = 0;
    size_t i = 0;
    while (i < s.size()) {
      size_t st = i;
      uint32_t cp = utf8_next(s, &i);
      if (cp == '\t') {
        int64_t n = ts > 0 ? ts - col % ts : 0;
        out.append(static_cast<size_t>(n), ' ');
        col += n;
      } else {
        out.append(s, st, i - st);
        col = (cp == '\n' || cp == '\r') ? 0 : col + 1;
      }
      if (Budget* bud = current_budget()) bud->check_string(out.size());
    }
    return str_value(out);
  }
  type_error("'str' object has no attribute '" + name + "'");
}

Value dict_method(const Value& self, const std::string& name, Args& a) {
  const DictObj& d = self.dict();
  tick(d.size() / 16 + 1);
  if (name == "items" || name == "keys" || name == "values") {
    no_args(name.c_str(), a);
    std::vector<Value> out;
    out.reserve(d.size());
    for (const auto& [k, v] : d.entries)
      out.push_back(name == "items" ? Value::tuple({k, v}) : name == "keys" ? k : v);
    return Value::list(std::move(out), name == "items" ? ListFlavor::kDictItems
                                       : name == "keys" ? ListFlavor::kDictKeys : ListFlavor::kDictValues);
  }
  if (name == "get") {
    if (a.pos.empty() || a.pos.size() > 2 || !a.kw.empty()) type_error("get expected 1 or 2 arguments");
    hash_key(a.pos[0]);
    if (const Value* v = d.find(a.pos[0])) return *v;
    return a.pos.size() == 2 ? a.pos[1] : Value::none();
  }
  if (name == "copy") {
    no_args("copy", a);
    auto c = std::make_shared<DictObj>();
    for (const auto& [k, v] : d.entries) c->set(k, v);
    return Value::dict(std::move(c));
  }
  type_error("'dict' object has no attribute '" + name + "'");
}

Value list_method(const Value& self, const std::string& name, Args& a) {
  const auto& items = self.list().items;
  tick(items.size() / 16 + 1);
  if (name == "count") {
    if (a.pos.size() != 1) type_error("count() takes exactly one argument");
    int64_t n = 0;
    for (const Value& x : items) n += equals(x, a.pos[0]);
    return Value::integer(n);
  }
  if (name == "index") {
    if (a.pos.empty()) type_error("index expected at least 1 argument");
    for (size_t k = 0; k < items.size(); ++k)
      if (equals(items[k], a.pos[0])) return Value::integer(static_cast<int64_t>(k));
    type_error(repr(a.pos[0]) + " is not in list");
  }
  if (name == "copy") {
    no_args("copy", a);
    return Value::list(items);
  }
  type_error("'list' object has no attribute '" + name + "'");
}

}  // namespace

// ---------------------------------------------------------------- Interp entry points

Value Interp::call_filter(const std::string& name, const Value& v, Args& args) {
  budget_->tick(1 + (v.is_string() ? v.str().size() / 1024 : 0));
  const auto& table = filters();
  auto it = table.find(name);
  if (it != table.end()) return it->second(*this, v, args);
  if (is_unsupported_filter(name)) fail(ErrorKind::kUnsupported, "the '" + name + "' filter is not supported");
  fail(ErrorKind::kType, "No filter named '" + name + "'.");
}

bool Interp::call_test(const std::string& name, const Value& v, Args& a) {
  budget_->tick();
  auto one_arg = [&]() -> const Value& {
    if (a.pos.size() != 1 || !a.kw.empty()) type_error("test '" + name + "' takes exactly one argument");
    return a.pos[0];
  };
  auto none = [&]() {
    if (!a.pos.empty() || !a.kw.empty()) type_error("test '" + name + "' takes no arguments");
  };
  if (name == "defined") return none(), !v.is_undefined();
  if (name == "undefined") return none(), v.is_undefined();
  if (name == "none") return none(), v.is_none();
  if (name == "boolean") return none(), v.is_bool();
  if (name == "false") return none(), v.is_bool() && !v.as_bool();
  if (name == "true") return none(), v.is_bool() && v.as_bool();
  if (name == "integer") return none(), v.is_int();
  if (name == "float") return none(), v.is_float();
  if (name == "number") return none(), v.is_number();
  if (name == "string") return none(), v.is_string();
  if (name == "mapping") return none(), v.is_dict();
  if (name == "sequence") return none(), t_sequence(v);
  if (name == "iterable") return none(), t_iterable(v);
  if (name == "callable") return none(), v.kind() == Kind::kCallable || v.kind() == Kind::kLoop || v.is_undefined();
  if (name == "escaped") return none(), v.is_markup();
  if (name == "lower" || name == "upper") return none(), str_is_cased(to_str(v), name == "lower");
  if (name == "odd" || name == "even") {
    none();
    return equals(binary_op(BinOp::kMod, v, Value::integer(2)), Value::integer(name == "odd" ? 1 : 0));
  }
  if (name == "divisibleby") return equals(binary_op(BinOp::kMod, v, one_arg()), Value::integer(0));
  if (name == "sameas") {
    const Value& o = one_arg();
    if (v.kind() != o.kind()) return false;
    switch (v.kind()) {
      case Kind::kUndefined:
      case Kind::kNone: return true;
      case Kind::kBool:
      case Kind::kInt: return v.as_int() == o.as_int();
      case Kind::kFloat: return false;
      default: return v.obj() == o.obj();
    }
  }
  if (name == "in") return contains(one_arg(), v);
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, one_arg());
  if (name == "ne" || name == "!=") return !equals(v, one_arg());
  if (name == "lt" || name == "lessthan" || name == "<") return less(v, one_arg());
  if (name == "gt" || name == "greaterthan" || name == ">") return less(one_arg(), v);
  if (name == "le" || name == "<=") {
    const Value& o = one_arg();
    return less(v, o) || equals(v, o);
  }
  if (name == "ge" || name == ">=") {
    const Value& o = one_arg();
    return less(o, v) || equals(v, o);
  }
  if (name == "filter") {
    none();
    return v.is_string() && (filters().count(v.str()) || is_unsupported_filter(v.str()));
  }
  if (name == "test") {
    none();
    static const char* const kTests[] = {"odd", "even", "divisibleby", "defined", "undefined", "filter", "test",
                                         "none", "boolean", "false", "true", "integer", "float", "lower", "upper",
                                         "string", "mapping", "number", "sequence", "iterable", "callable",
                                         "sameas", "escaped", "in", "==", "eq", "equalto", "!=", "ne", ">", "gt",
                                         "greaterthan", "ge", ">=", "<", "lt", "lessthan", "<=", "le"};
    if (!v.is_string()) return false;
    for (const char* t : kTests)
      if (v.str() == t) return true;
    return false;
  }
  fail(ErrorKind::kType, "No test named '" + name + "'.");
}

bool Interp::has_method(const Value& self, const std::string& name) {
  switch (self.kind()) {
    case Kind::kString: return str_methods().count(name) != 0;
    case Kind::kDict: return name == "items" || name == "keys" || name == "values" || name == "get" || name == "copy";
    case Kind::kList:
      return (self.flavor() == ListFlavor::kList || self.flavor() == ListFlavor::kTuple) &&
             (name == "count" || name == "index" || (name == "copy" && self.flavor() == ListFlavor::kList));
    case Kind::kLoop: return name == "cycle" || name == "changed";
    default: return false;
  }
}

Value Interp::call_method(const Value& self, const std::string& name, Args& args) {
  budget_->tick(1 + (self.is_string() ? self.str().size() / 1024 : 0));
  switch (self.kind()) {
    case Kind::kString: return str_method(*this, self, name, args);
    case Kind::kDict: return dict_method(self, name, args);
    case Kind::kList: return list_method(self, name, args);
    case Kind::kLoop: {
      LoopObj& l = self.as<LoopObj>();
      if (name == "cycle") {
        if (args.pos.empty()) type_error("no items for cycling given");
        return args.pos[l.index0 % args.pos.size()];
      }
      Value cur = Value::tuple(args.pos);
      if (!l.has_last_changed || !equals(l.last_changed, cur)) {
        l.last_changed = cur;
        l.has_last_changed = true;
        return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    default: break;
  }
  type_error("'" + type_name(self) + "' object has no attribute '" + name + "'");
}

Value Interp::builtin_global(const std::string& name, Args& a) {
  if (name == "range") {
    if (!a.kw.empty()) type_error("range() takes no keyword arguments");
    if (a.pos.empty() || a.pos.size() > 3) type_error("range expected 1 to 3 arguments");
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
      stop = to_index(a.pos[0], "range");
    } else {
      start = to_index(a.pos[0], "range");
      stop = to_index(a.pos[1], "range");
      if (a.pos.size() == 3) step = to_index(a.pos[2], "range");
    }
    if (step == 0) type_error("range() arg 3 must not be zero");
    long double n = 0;
    if (step > 0 && stop > start) n = (static_cast<long double>(stop) - start + step - 1) / step;
    if (step < 0 && stop < start) n = (static_cast<long double>(start) - stop - step - 1) / -step;
    const uint32_t max = budget_->limits().max_range;
    if (n > max)
      fail(ErrorKind::kLimit, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(max) + ").");
    std::vector<Value> items;
    const int64_t count = static_cast<int64_t>(n);
    items.reserve(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k) items.push_back(Value::integer(start + k * step));
    tick(static_cast<uint64_t>(count) / 16 + 1);
    Value r = Value::list(std::move(items), ListFlavor::kRange);
    r.list().range_start = start, r.list().range_stop = stop, r.list().range_step = step;
    return r;
  }
  if (name == "dict" || name == "namespace") {
    auto d = std::make_shared<DictObj>();
    if (a.pos.size() > 1) type_error(name + " expected at most 1 argument");
    if (a.pos.size() == 1) {
      const Value& src = a.pos[0];
      if (src.is_dict()) {
        for (const auto& [k, v] : src.dict().entries) d->set(k, v);
      } else {
        for (const Value& pair : iterate(src)) {
          Items kv = iterate(pair);
          if (kv.size() != 2) type_error("dictionary update sequence element has wrong length");
          hash_key(kv[0]);
          d->set(kv[0], kv[1]);
        }
      }
    }
    for (auto& [k, v] : a.kw) d->set(Value::string(k), v);
    if (name == "dict") return Value::dict(std::move(d));
    auto ns = std::make_shared<NamespaceObj>();
    for (auto& [k, v] : d->entries) ns->attrs.set(k, v);
    Value nv = Value::object(Kind::kNamespace, std::move(ns));
    register_namespace(nv);
    return nv;
  }
  if (name == "raise_exception") {
    if (a.pos.size() != 1) type_error("raise_exception() takes exactly one argument");
    fail(ErrorKind::kRaised, to_str(a.pos[0]));
  }
  if (name == "strftime_now") {
    if (a.pos.size() != 1 || !a.pos[0].is_string()) type_error("strftime_now() takes one format string");
    std::time_t t = static_cast<std::time_t>(now_epoch_s());
    std::tm tm{};
    localtime_r(&t, &tm);
    const std::string& fmt = a.pos[0].str();
    if (fmt.size() > 1024) fail(ErrorKind::kLimit, "strftime format too long");
    std::string out(fmt.size() * 16 + 64, '\0');
    size_t n = fmt.empty() ? 0 : std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
    out.resize(n);
    return Value::string(std::move(out));
  }
  fail(ErrorKind::kUnsupported, "the global '" + name + "' is not supported");
}

}  // namespace duet::jinja
