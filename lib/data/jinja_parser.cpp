// Lexer and parser of the Jinja subset chat templates use, following Jinja 2/3's grammar and
// precedence (jinja2/parser.py): condexpr < or < and < not < compare (== != < > <= >= in, not in)
// < + - < ~ < * / // % < ** < unary - + < primary with postfix (.attr [sub] (call)) and filters
// / tests. Whitespace as transformers compiles templates: trim_blocks and lstrip_blocks on,
// `-` and `+` tag modifiers, \r\n and \r read as \n, one trailing newline of the source dropped.

#include <cctype>
#include <cstdlib>
#include <string_view>

#include "data/jinja_syntax.hpp"
#include "data/utf8.hpp"

namespace dyncp::data::jinja {

namespace {

struct Token {
  enum class Type { name, string, integer, floating, op, end };
  Type type = Type::end;
  std::string text;
  Value value;
  int line = 0;
};

// One piece of the template: literal text, an output tag or a statement tag's tokens.
struct Piece {
  enum class Kind { text, output, statement };
  Kind kind = Kind::text;
  std::string text;
  std::vector<Token> tokens;
  int line = 0;
};

std::string normalize_newlines(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's unicode-escape decoding of a string literal's body.
std::string unescape_literal(const std::string& body, int line) {
  std::string out;
  for (std::size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out.push_back(body[i]);
      continue;
    }
    const char c = body[++i];
    const auto hex = [&](std::size_t digits) {
      if (i + digits >= body.size())
        throw TemplateError(line, "truncated \\x / \\u escape in a string literal");
      const std::string code = body.substr(i + 1, digits);
      for (const char d : code) {
        if (!std::isxdigit(static_cast<unsigned char>(d)))
          throw TemplateError(line, "bad \\x / \\u escape in a string literal");
      }
      i += digits;
      append_utf8(out, static_cast<char32_t>(std::stoul(code, nullptr, 16)));
    };
    switch (c) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case '\n':
        break;  // line continuation
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      default:
        if (c >= '0' && c <= '7') {
          unsigned code = 0;
          std::size_t digits = 0;
          --i;
          while (digits < 3 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7') {
            code = code * 8 + static_cast<unsigned>(body[++i] - '0');
            ++digits;
          }
          append_utf8(out, static_cast<char32_t>(code));
        } else {
          out.push_back('\\');  // unknown escapes stay as written
          out.push_back(c);
        }
    }
  }
  return out;
}

class TagLexer {
 public:
  TagLexer(const std::string& source, std::size_t& pos, int& line)
      : source_(source), pos_(pos), line_(line) {}

  // Lexes tokens up to the closing `}}` (output) or `%}` (statement). Returns whether the
  // closing marker carried `-` (strip following whitespace) and `+` (keep the newline).
  std::vector<Token> lex(bool output, bool& strip_after, bool& keep_newline) {
    std::vector<Token> tokens;
    int depth = 0;
    const int start_line = line_;
    while (true) {
      while (pos_ < source_.size() && is_space(source_[pos_])) {
        if (source_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= source_.size())
        throw TemplateError(start_line, output ? "unclosed {{ tag" : "unclosed {% tag");
      const std::string_view rest(source_.data() + pos_, source_.size() - pos_);
      const std::string_view close = output ? "}}" : "%}";
      for (const char modifier : {'-', '+'}) {
        if (rest.size() >= 3 && rest[0] == modifier && rest.substr(1, 2) == close &&
            (depth == 0 || !output)) {
          strip_after = modifier == '-';
          keep_newline = modifier == '+';
          pos_ += 3;
          return tokens;
        }
      }
      if (rest.substr(0, 2) == close && (depth == 0 || !output)) {
        pos_ += 2;
        return tokens;
      }
      tokens.push_back(next_token(depth));
    }
  }

 private:
  Token next_token(int& depth) {
    Token token;
    token.line = line_;
    const char c = source_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const std::size_t start = pos_;
      while (pos_ < source_.size() &&
             (std::isalnum(static_cast<unsigned char>(source_[pos_])) || source_[pos_] == '_'))
        ++pos_;
      token.type = Token::Type::name;
      token.text = source_.substr(start, pos_ - start);
      return token;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return number();
    if (c == '\'' || c == '"') return string_literal(c);
    static const char* const two_char_ops[] = {"**", "//", "==", "!=", "<=", ">="};
    for (const char* op : two_char_ops) {
      if (source_.compare(pos_, 2, op) == 0) {
        pos_ += 2;
        token.type = Token::Type::op;
        token.text = op;
        return token;
      }
    }
    if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos) {
      std::size_t end = pos_;
      next_code_point(source_, end);  // the whole character, not one byte of it
      throw TemplateError(
          line_, "unexpected character '" + source_.substr(pos_, end - pos_) + "' in a tag");
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    ++pos_;
    token.type = Token::Type::op;
    token.text = std::string(1, c);
    return token;
  }

  Token number() {
    Token token;
    token.line = line_;
    const std::size_t start = pos_;
    const auto digits = [&] {
      while (pos_ < source_.size() &&
             (std::isdigit(static_cast<unsigned char>(source_[pos_])) || source_[pos_] == '_'))
        ++pos_;
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < source_.size() && source_[pos_] == '.' &&
        std::isdigit(static_cast<unsigned char>(source_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < source_.size() && (source_[pos_] == 'e' || source_[pos_] == 'E')) {
      std::size_t probe = pos_ + 1;
      if (probe < source_.size() && (source_[probe] == '+' || source_[probe] == '-')) ++probe;
      if (probe < source_.size() && std::isdigit(static_cast<unsigned char>(source_[probe]))) {
        is_float = true;
        pos_ = probe;
        digits();
      }
    }
    std::string text = source_.substr(start, pos_ - start);
    std::erase(text, '_');
    token.text = text;
    if (is_float) {
      token.type = Token::Type::floating;
      // Python reads 1e999 as inf and 1e-999 as 0.0; strtod does too (std::stod throws).
      token.value = Value::floating(std::strtod(text.c_str(), nullptr));
    } else {
      token.type = Token::Type::integer;
      try {
        token.value = Value::integer(std::stoll(text));
      } catch (const std::out_of_range&) {
        token.value = Value::big_integer(text);
      }
    }
    return token;
  }

  Token string_literal(char quote) {
    Token token;
    token.line = line_;
    token.type = Token::Type::string;
    std::size_t i = pos_ + 1;
    std::string body;
    while (true) {
      if (i >= source_.size()) throw TemplateError(token.line, "unterminated string literal");
      const char c = source_[i];
      if (c == '\\' && i + 1 < source_.size()) {
        body.push_back(c);
        body.push_back(source_[i + 1]);
        if (source_[i + 1] == '\n') ++line_;
        i += 2;
        continue;
      }
      if (c == quote) break;
      if (c == '\n') ++line_;
      body.push_back(c);
      ++i;
    }
    pos_ = i + 1;
    token.value = Value::string(unescape_literal(normalize_newlines(body), token.line));
    return token;
  }

  const std::string& source_;
  std::size_t& pos_;
  int& line_;
};

// The text of {% raw %} ... {% endraw %} after the opening tag, as jinja2's lexer reads it:
// no trim_blocks newline after the opening tag (only its `-`), lstrip_blocks and `{%-` before
// the closing one; the closing tag's own `-` / `+` and trim_blocks are returned in the flags.
void read_raw(const std::string& source, std::size_t& pos, int& line, bool& strip_after,
              bool& keep_newline, std::vector<Piece>& pieces) {
  const int start_line = line;
  if (strip_after) {
    while (pos < source.size() && is_space(source[pos])) {
      if (source[pos] == '\n') ++line;
      ++pos;
    }
  }
  for (std::size_t tag = source.find("{%", pos); tag != std::string::npos;
       tag = source.find("{%", tag + 2)) {
    std::size_t at = tag + 2;
    const char open_modifier = at < source.size() ? source[at] : '\0';
    if (open_modifier == '-' || open_modifier == '+') ++at;
    while (at < source.size() && is_space(source[at])) ++at;
    if (source.compare(at, 6, "endraw") != 0) continue;
    at += 6;
    while (at < source.size() && is_space(source[at])) ++at;
    const char close_modifier = at < source.size() ? source[at] : '\0';
    if (close_modifier == '-' || close_modifier == '+') ++at;
    if (source.compare(at, 2, "%}") != 0) continue;
    std::string text = source.substr(pos, tag - pos);
    if (open_modifier == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (open_modifier != '+') {
      const std::size_t line_start =
          text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if (line_start > 0 && text.find_first_not_of(" \t\f\v", line_start) == std::string::npos)
        text.resize(line_start);
    }
    for (std::size_t i = pos; i < at; ++i) line += source[i] == '\n' ? 1 : 0;
    if (!text.empty())
      pieces.push_back({Piece::Kind::text, normalize_newlines(text), {}, start_line});
    pos = at + 2;
    strip_after = close_modifier == '-';
    keep_newline = close_modifier == '+';
    return;
  }
  throw TemplateError(start_line, "missing {% endraw %} for this {% raw %}");
}

std::vector<Piece> split_template(std::string source) {
  // keep_trailing_newline=False: Jinja drops one newline at the end of the source.
  if (source.ends_with("\r\n")) {
    source.resize(source.size() - 2);
  } else if (source.ends_with('\n') || source.ends_with('\r')) {
    source.pop_back();
  }
  std::vector<Piece> pieces;
  std::size_t pos = 0;
  int line = 1;
  while (pos < source.size()) {
    std::size_t tag = pos;
    while (true) {
      tag = source.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= source.size()) {
        tag = std::string::npos;
        break;
      }
      const char next = source[tag + 1];
      if (next == '{' || next == '%' || next == '#') break;
      ++tag;
    }
    std::string text = source.substr(pos, tag == std::string::npos ? std::string::npos : tag - pos);
    const int text_line = line;
    for (const char c : text) line += c == '\n' ? 1 : 0;
    if (tag == std::string::npos) {
      if (!text.empty())
        pieces.push_back({Piece::Kind::text, normalize_newlines(text), {}, text_line});
      break;
    }
    const char kind = source[tag + 1];
    const char modifier = tag + 2 < source.size() ? source[tag + 2] : '\0';
    const bool block_like = kind == '%' || kind == '#';
    if (modifier == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (block_like && modifier != '+') {
      // lstrip_blocks: spaces and tabs between a line start and a block or comment tag go.
      const std::size_t line_start =
          text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      const bool at_line_start = line_start > 0 || pos == 0 || (pos > 0 && source[pos - 1] == '\n');
      if (at_line_start && text.find_first_not_of(" \t\f\v", line_start) == std::string::npos) {
        text.resize(line_start);
      }
    }
    if (!text.empty())
      pieces.push_back({Piece::Kind::text, normalize_newlines(text), {}, text_line});
    pos = tag + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
    bool strip_after = false;
    bool keep_newline = false;
    if (kind == '#') {
      const std::size_t end = source.find("#}", pos);
      if (end == std::string::npos) throw TemplateError(line, "unclosed comment");
      for (std::size_t i = pos; i < end; ++i) line += source[i] == '\n' ? 1 : 0;
      strip_after = end > pos && source[end - 1] == '-';
      keep_newline = end > pos && source[end - 1] == '+';
      pos = end + 2;
    } else {
      Piece piece;
      piece.kind = kind == '{' ? Piece::Kind::output : Piece::Kind::statement;
      piece.line = line;
      TagLexer lexer(source, pos, line);
      piece.tokens = lexer.lex(kind == '{', strip_after, keep_newline);
      const bool raw = piece.kind == Piece::Kind::statement && piece.tokens.size() == 1 &&
                       piece.tokens[0].type == Token::Type::name && piece.tokens[0].text == "raw";
      if (raw) {
        read_raw(source, pos, line, strip_after, keep_newline, pieces);
      } else {
        pieces.push_back(std::move(piece));
      }
    }
    if (strip_after) {
      while (pos < source.size() && is_space(source[pos])) {
        if (source[pos] == '\n') ++line;
        ++pos;
      }
    } else if (block_like && !keep_newline && pos < source.size() && source[pos] == '\n') {
      ++pos;  // trim_blocks: the first newline after a block or comment tag goes
      ++line;
    }
  }
  return pieces;
}

ExprPtr make_expr(Expr::Kind kind, int line) {
  auto expr = std::make_unique<Expr>();
  expr->kind = kind;
  expr->line = line;
  return expr;
}

class ExpressionParser {
 public:
  ExpressionParser(const std::vector<Token>& tokens, std::size_t start, int line)
      : tokens_(tokens), index_(start), line_(line) {}

  const Token& current() const {
    static const Token end_token;
    return index_ < tokens_.size() ? tokens_[index_] : end_token;
  }
  bool at_end() const { return index_ >= tokens_.size(); }
  int line() const { return at_end() ? line_ : current().line; }
  bool is_op(std::string_view op) const {
    return current().type == Token::Type::op && current().text == op;
  }
  bool is_name(std::string_view name) const {
    return current().type == Token::Type::name && current().text == name;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    ++index_;
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    ++index_;
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail("expected '" + std::string(op) + "'");
  }
  std::string expect_name() {
    if (current().type != Token::Type::name) fail("expected a name");
    return tokens_[index_++].text;
  }
  [[noreturn]] void fail(const std::string& message) const {
    const std::string found = at_end() ? "end of tag" : "'" + current().text + "'";
    throw TemplateError(line(), message + ", found " + found);
  }
  void expect_end() {
    if (!at_end()) fail("unexpected tokens at the end of the tag");
  }

  ExprPtr expression(bool with_condexpr = true) {
    return with_condexpr ? conditional() : logical_or();
  }

  // a, b, c (a tuple) or a single expression.
  ExprPtr tuple(bool with_condexpr = true) {
    const int start_line = line();
    std::vector<ExprPtr> items;
    bool saw_comma = false;
    while (true) {
      if (!items.empty() && !skip_op(",")) break;
      if (!items.empty()) saw_comma = true;
      if (at_end() || is_op(")") || is_op("]") || is_op("}") || is_op("=") || is_name("if") ||
          is_name("recursive")) {
        if (items.empty()) fail("expected an expression");
        break;
      }
      items.push_back(expression(with_condexpr));
    }
    if (!saw_comma && items.size() == 1) return std::move(items.front());
    auto node = make_expr(Expr::Kind::tuple, start_line);
    node->children = std::move(items);
    return node;
  }

  // Assignment targets: a name, `a, b`, or `ns.attribute` when allowed.
  std::vector<std::string> assign_targets(std::string* attribute) {
    std::vector<std::string> names;
    const bool parenthesized = skip_op("(");
    names.push_back(expect_name());
    if (attribute != nullptr && skip_op(".")) {
      *attribute = expect_name();
      return names;
    }
    while (skip_op(",")) {
      if (at_end() || is_name("in") || is_op("=") || is_op(")")) break;
      names.push_back(expect_name());
    }
    if (parenthesized) expect_op(")");
    return names;
  }

  // ( args ) after the opening parenthesis was consumed.
  void call_arguments(Expr& node) {
    while (!skip_op(")")) {
      if (current().type == Token::Type::name && index_ + 1 < tokens_.size() &&
          tokens_[index_ + 1].type == Token::Type::op && tokens_[index_ + 1].text == "=") {
        std::string key = tokens_[index_].text;
        index_ += 2;
        node.keywords.emplace_back(std::move(key), expression());
      } else {
        if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
        if (!node.keywords.empty()) fail("positional argument after a keyword argument");
        node.children.push_back(expression());
      }
      if (!skip_op(",")) {
        expect_op(")");
        break;
      }
    }
  }

 private:
  ExprPtr conditional() {
    ExprPtr expr = logical_or();
    while (skip_name("if")) {
      auto node = make_expr(Expr::Kind::conditional, expr->line);
      ExprPtr condition = logical_or();
      ExprPtr otherwise = skip_name("else") ? conditional() : nullptr;
      node->children.push_back(std::move(condition));
      node->children.push_back(std::move(expr));
      node->children.push_back(std::move(otherwise));
      expr = std::move(node);
    }
    return expr;
  }
  ExprPtr logical_or() {
    ExprPtr left = logical_and();
    while (skip_name("or")) {
      auto node = make_expr(Expr::Kind::logical_or, left->line);
      node->children.push_back(std::move(left));
      node->children.push_back(logical_and());
      left = std::move(node);
    }
    return left;
  }
  ExprPtr logical_and() {
    ExprPtr left = logical_not();
    while (skip_name("and")) {
      auto node = make_expr(Expr::Kind::logical_and, left->line);
      node->children.push_back(std::move(left));
      node->children.push_back(logical_not());
      left = std::move(node);
    }
    return left;
  }
  ExprPtr logical_not() {
    if (is_name("not")) {
      auto node = make_expr(Expr::Kind::logical_not, line());
      ++index_;
      node->children.push_back(logical_not());
      return node;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr first = math1();
    auto node = make_expr(Expr::Kind::compare, first->line);
    node->children.push_back(std::move(first));
    while (true) {
      std::string op;
      if (current().type == Token::Type::op &&
          (current().text == "==" || current().text == "!=" || current().text == "<" ||
           current().text == ">" || current().text == "<=" || current().text == ">=")) {
        op = current().text;
        ++index_;
      } else if (is_name("in")) {
        op = "in";
        ++index_;
      } else if (is_name("not") && index_ + 1 < tokens_.size() &&
                 tokens_[index_ + 1].type == Token::Type::name &&
                 tokens_[index_ + 1].text == "in") {
        op = "not in";
        index_ += 2;
      } else {
        break;
      }
      node->ops.push_back(op);
      node->children.push_back(math1());
    }
    if (node->ops.empty()) return std::move(node->children.front());
    return node;
  }
  ExprPtr binary_chain(ExprPtr (ExpressionParser::*operand)(),
                       std::initializer_list<std::string_view> ops) {
    ExprPtr left = (this->*operand)();
    while (current().type == Token::Type::op) {
      bool matched = false;
      for (const std::string_view op : ops) matched |= current().text == op;
      if (!matched) break;
      auto node = make_expr(Expr::Kind::binary, left->line);
      node->name = current().text;
      ++index_;
      node->children.push_back(std::move(left));
      node->children.push_back((this->*operand)());
      left = std::move(node);
    }
    return left;
  }
  ExprPtr math1() { return binary_chain(&ExpressionParser::concat, {"+", "-"}); }
  ExprPtr concat() { return binary_chain(&ExpressionParser::math2, {"~"}); }
  ExprPtr math2() { return binary_chain(&ExpressionParser::power, {"*", "/", "//", "%"}); }
  ExprPtr power() { return binary_chain(&ExpressionParser::unary_with_filters, {"**"}); }
  ExprPtr unary_with_filters() { return unary(true); }

  ExprPtr unary(bool with_filter) {
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make_expr(is_op("-") ? Expr::Kind::negate : Expr::Kind::unary_plus, line());
      ++index_;
      node->children.push_back(unary(false));
    } else {
      node = primary();
    }
    node = postfix(std::move(node));
    if (with_filter) node = filters_and_tests(std::move(node));
    return node;
  }

  ExprPtr primary() {
    const Token& token = current();
    const int token_line = line();
    if (at_end()) fail("expected an expression");
    if (token.type == Token::Type::name) {
      ++index_;
      auto node = make_expr(Expr::Kind::literal, token_line);
      if (token.text == "true" || token.text == "True") {
        node->value = Value::boolean(true);
      } else if (token.text == "false" || token.text == "False") {
        node->value = Value::boolean(false);
      } else if (token.text == "none" || token.text == "None") {
        node->value = Value::none();
      } else {
        node->kind = Expr::Kind::name;
        node->name = token.text;
      }
      return node;
    }
    if (token.type == Token::Type::string) {
      std::string text;
      while (current().type == Token::Type::string) text += tokens_[index_++].value.text();
      auto node = make_expr(Expr::Kind::literal, token_line);
      node->value = Value::string(std::move(text));
      return node;
    }
    if (token.type == Token::Type::integer || token.type == Token::Type::floating) {
      ++index_;
      auto node = make_expr(Expr::Kind::literal, token_line);
      node->value = token.value;
      return node;
    }
    if (skip_op("(")) {
      if (skip_op(")")) return make_expr(Expr::Kind::tuple, token_line);
      ExprPtr inner = tuple();
      if (!skip_op(")")) {
        // A parenthesized tuple keeps its commas inside tuple(); anything else is an error.
        fail("expected ')'");
      }
      return inner;
    }
    if (skip_op("[")) {
      auto node = make_expr(Expr::Kind::list, token_line);
      while (!skip_op("]")) {
        node->children.push_back(expression());
        if (!skip_op(",")) {
          expect_op("]");
          break;
        }
      }
      return node;
    }
    if (skip_op("{")) {
      auto node = make_expr(Expr::Kind::dict, token_line);
      while (!skip_op("}")) {
        node->children.push_back(expression());
        expect_op(":");
        node->children.push_back(expression());
        if (!skip_op(",")) {
          expect_op("}");
          break;
        }
      }
      return node;
    }
    fail("expected an expression");
  }

  ExprPtr postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        ++index_;
        auto attribute = make_expr(Expr::Kind::attribute, line());
        if (current().type == Token::Type::integer) {
          attribute->kind = Expr::Kind::item;
          auto index = make_expr(Expr::Kind::literal, line());
          index->value = tokens_[index_++].value;
          attribute->children.push_back(std::move(node));
          attribute->children.push_back(std::move(index));
        } else {
          attribute->name = expect_name();
          attribute->children.push_back(std::move(node));
        }
        node = std::move(attribute);
      } else if (is_op("[")) {
        ++index_;
        node = subscript(std::move(node));
      } else if (is_op("(")) {
        ++index_;
        auto call = make_expr(Expr::Kind::call, node->line);
        call->children.push_back(std::move(node));
        call_arguments(*call);
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

  ExprPtr subscript(ExprPtr object) {
    const int start_line = line();
    ExprPtr start;
    if (!is_op(":")) {
      start = expression();
      if (!is_op(":")) {
        expect_op("]");
        auto item = make_expr(Expr::Kind::item, start_line);
        item->children.push_back(std::move(object));
        item->children.push_back(std::move(start));
        return item;
      }
    }
    auto slice = make_expr(Expr::Kind::slice, start_line);
    slice->children.push_back(std::move(object));
    slice->children.push_back(std::move(start));
    expect_op(":");
    slice->children.push_back(is_op(":") || is_op("]") ? nullptr : expression());
    if (skip_op(":")) {
      slice->children.push_back(is_op("]") ? nullptr : expression());
    } else {
      slice->children.push_back(nullptr);
    }
    expect_op("]");
    return slice;
  }

 public:
  // Filters (| name(args)) and tests (is [not] name arg) after a primary.
  ExprPtr filters_and_tests(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        ++index_;
        auto filter = make_expr(Expr::Kind::filter, line());
        filter->name = expect_name();
        while (is_op(".")) {  // dotted filter names
          ++index_;
          filter->name += "." + expect_name();
        }
        filter->children.push_back(std::move(node));
        if (skip_op("(")) call_arguments(*filter);
        node = std::move(filter);
      } else if (is_name("is")) {
        ++index_;
        auto test = make_expr(Expr::Kind::test, line());
        test->negated = skip_name("not");
        test->name = expect_name();
        test->children.push_back(std::move(node));
        if (skip_op("(")) {
          call_arguments(*test);
        } else if (!at_end() &&
                   (current().type == Token::Type::name || current().type == Token::Type::string ||
                    current().type == Token::Type::integer ||
                    current().type == Token::Type::floating || is_op("(") || is_op("[") ||
                    is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail("tests cannot be chained with 'is'");
          test->children.push_back(postfix(primary()));
        }
        node = std::move(test);
      } else if (is_op("(")) {
        ++index_;
        auto call = make_expr(Expr::Kind::call, node->line);
        call->children.push_back(std::move(node));
        call_arguments(*call);
        node = std::move(call);
      } else {
        return node;
      }
    }
  }

 private:
  const std::vector<Token>& tokens_;
  std::size_t index_;
  int line_;
};

NodePtr make_node(Node::Kind kind, int line) {
  auto node = std::make_unique<Node>();
  node->kind = kind;
  node->line = line;
  return node;
}

class BodyParser {
 public:
  explicit BodyParser(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

  std::unique_ptr<Program> program() {
    auto result = std::make_unique<Program>();
    std::string end_tag;
    result->body = body({}, end_tag);
    if (index_ < pieces_.size()) {
      throw TemplateError(pieces_[index_].line, "unexpected '" + end_tag + "'");
    }
    result->has_generation_blocks = has_generation_;
    result->blocks = blocks_;
    return result;
  }

 private:
  static std::string keyword(const Piece& piece) {
    return !piece.tokens.empty() && piece.tokens[0].type == Token::Type::name ? piece.tokens[0].text
                                                                              : std::string();
  }

  // Parses nodes until a statement whose keyword is one of `ends` (left unconsumed; its keyword
  // in `found`). At the top level `ends` is empty and the whole template is read.
  Body body(std::initializer_list<std::string_view> ends, std::string& found) {
    Body nodes;
    while (index_ < pieces_.size()) {
      const Piece& piece = pieces_[index_];
      if (piece.kind == Piece::Kind::text) {
        auto node = make_node(Node::Kind::text, piece.line);
        node->text = piece.text;
        nodes.push_back(std::move(node));
        ++index_;
        continue;
      }
      if (piece.kind == Piece::Kind::output) {
        ExpressionParser parser(piece.tokens, 0, piece.line);
        auto node = make_node(Node::Kind::output, piece.line);
        node->expr = parser.tuple();
        parser.expect_end();
        nodes.push_back(std::move(node));
        ++index_;
        continue;
      }
      const std::string name = keyword(piece);
      for (const std::string_view end : ends) {
        if (name == end) {
          found = name;
          return nodes;
        }
      }
      nodes.push_back(statement(piece, name));
    }
    if (ends.size() != 0) {
      std::string expected;
      for (const std::string_view end : ends)
        expected += (expected.empty() ? "" : " or ") + std::string(end);
      throw TemplateError(pieces_.empty() ? 1 : pieces_.back().line,
                          "missing {% " + expected + " %} before the end of the template");
    }
    return nodes;
  }

  void expect_end_tag(const char* name) {
    ExpressionParser parser(pieces_[index_].tokens, 1, pieces_[index_].line);
    parser.expect_end();
    (void)name;
    ++index_;
  }

  NodePtr statement(const Piece& piece, const std::string& name) {
    using Handler = NodePtr (BodyParser::*)(ExpressionParser&, const Piece&);
    static const std::pair<const char*, Handler> handlers[] = {
        {"if", &BodyParser::parse_if},
        {"for", &BodyParser::parse_for},
        {"set", &BodyParser::parse_set},
        {"macro", &BodyParser::parse_macro},
        {"call", &BodyParser::parse_call},
        {"filter", &BodyParser::parse_filter},
        {"with", &BodyParser::parse_with},
        {"generation", &BodyParser::parse_generation},
        {"block", &BodyParser::parse_block},
        {"autoescape", &BodyParser::parse_autoescape},
        {"break", &BodyParser::parse_loop_control},
        {"continue", &BodyParser::parse_loop_control},
    };
    ExpressionParser parser(piece.tokens, 1, piece.line);
    ++index_;
    for (const auto& [keyword_name, handler] : handlers) {
      if (name == keyword_name) return (this->*handler)(parser, piece);
    }
    if (name.empty()) throw TemplateError(piece.line, "a statement tag needs a keyword");
    if (name == "include" || name == "import" || name == "from" || name == "extends") {
      // jinja2 fails on these with "no loader for this environment specified".
      throw TemplateError(piece.line, "{% " + name +
                                          " %} needs a template loader, and transformers' "
                                          "chat-template environment has none: a chat template "
                                          "cannot include, import or extend another");
    }
    throw TemplateError(piece.line, "unsupported statement {% " + name +
                                        " %} (jinja2 in transformers' environment has: if, for, "
                                        "set, macro, call, filter, with, block, autoescape, raw, "
                                        "generation, break, continue)");
  }

  NodePtr parse_if(ExpressionParser& parser, const Piece& piece) {
    std::string found;
    auto node = make_node(Node::Kind::if_block, piece.line);
    ExprPtr condition = parser.tuple();
    parser.expect_end();
    while (true) {
      Body branch = body({"elif", "else", "endif"}, found);
      node->branches.emplace_back(std::move(condition), std::move(branch));
      const Piece& end = pieces_[index_];
      ExpressionParser end_parser(end.tokens, 1, end.line);
      ++index_;
      if (found == "elif") {
        condition = end_parser.tuple();
        end_parser.expect_end();
        continue;
      }
      end_parser.expect_end();
      if (found == "else") {
        node->else_body = body({"endif"}, found);
        expect_end_tag("endif");
      }
      break;
    }
    return node;
  }

  NodePtr parse_for(ExpressionParser& parser, const Piece& piece) {
    std::string found;
    auto node = make_node(Node::Kind::for_loop, piece.line);
    node->targets = parser.assign_targets(nullptr);
    if (!parser.skip_name("in")) parser.fail("expected 'in' in a for loop");
    node->expr = parser.tuple(false);
    if (parser.skip_name("if")) node->condition = parser.expression();
    node->recursive = parser.skip_name("recursive");
    parser.expect_end();
    node->body = body({"else", "endfor"}, found);
    if (found == "else") {
      expect_end_tag("else");
      node->else_body = body({"endfor"}, found);
    }
    expect_end_tag("endfor");
    return node;
  }

  NodePtr parse_set(ExpressionParser& parser, const Piece& piece) {
    std::string found;
    auto node = make_node(Node::Kind::set, piece.line);
    node->targets = parser.assign_targets(&node->text);
    if (parser.skip_op("=")) {
      node->expr = parser.tuple();
      parser.expect_end();
      return node;
    }
    if (!node->text.empty() || node->targets.size() != 1)
      parser.fail("a {% set %} block assigns one plain name");
    node->kind = Node::Kind::set_block;
    if (parser.is_op("|")) node->filter = parser.filters_and_tests(nullptr);
    parser.expect_end();
    node->body = body({"endset"}, found);
    expect_end_tag("endset");
    return node;
  }

  // (name [= default], ...) of a macro or a call block.
  void parameters(ExpressionParser& parser, Node& node) {
    while (!parser.skip_op(")")) {
      node.targets.push_back(parser.expect_name());
      node.defaults.push_back(parser.skip_op("=") ? parser.expression() : nullptr);
      if (!parser.skip_op(",")) {
        parser.expect_op(")");
        break;
      }
    }
  }

  NodePtr parse_macro(ExpressionParser& parser, const Piece& piece) {
    std::string found;
    auto node = make_node(Node::Kind::macro, piece.line);
    node->text = parser.expect_name();
    parser.expect_op("(");
    parameters(parser, *node);
    parser.expect_end();
    node->body = body({"endmacro"}, found);
    expect_end_tag("endmacro");
    // jinja2 gives a macro varargs / kwargs when its body reads those names.
    node->catch_varargs = reads_name(node->body, "varargs");
    node->catch_kwargs = reads_name(node->body, "kwargs");
    return node;
  }

  NodePtr parse_call(ExpressionParser& parser, const Piece& piece) {
    std::string found;
    auto node = make_node(Node::Kind::call_block, piece.line);
    if (parser.skip_op("(")) parameters(parser, *node);
    node->expr = parser.expression();
    if (node->expr->kind != Expr::Kind::call) parser.fail("{% call %} needs a macro call");
    parser.expect_end();
    node->body = body({"endcall"}, found);
    expect_end_tag("endcall");
    node->catch_varargs = reads_name(node->body, "varargs");
    node->catch_kwargs = reads_name(node->body, "kwargs");
    return node;
  }

  NodePtr parse_filter(ExpressionParser& parser, const Piece& piece) {
    std::string found;
    auto node = make_node(Node::Kind::filter_block, piece.line);
    // The filter chain applies to the block's text: parse "x | f | g" with a null x.
    auto first = make_expr(Expr::Kind::filter, piece.line);
    first->name = parser.expect_name();
    first->children.push_back(nullptr);
    if (parser.skip_op("(")) parser.call_arguments(*first);
    node->filter = parser.filters_and_tests(std::move(first));
    parser.expect_end();
    node->body = body({"endfilter"}, found);
    expect_end_tag("endfilter");
    return node;
  }

  NodePtr parse_with(ExpressionParser& parser, const Piece& piece) {
    std::string found;
    auto node = make_node(Node::Kind::with_block, piece.line);
    while (!parser.at_end()) {
      node->targets.push_back(parser.expect_name());
      parser.expect_op("=");
      node->defaults.push_back(parser.expression());
      if (!parser.skip_op(",")) break;
    }
    parser.expect_end();
    node->body = body({"endwith"}, found);
    expect_end_tag("endwith");
    return node;
  }

  NodePtr parse_generation(ExpressionParser& parser, const Piece& piece) {
    std::string found;
    has_generation_ = true;
    auto node = make_node(Node::Kind::generation, piece.line);
    parser.expect_end();
    node->body = body({"endgeneration"}, found);
    expect_end_tag("endgeneration");
    return node;
  }

  NodePtr parse_block(ExpressionParser& parser, const Piece& piece) {
    std::string found;
    auto node = make_node(Node::Kind::block, piece.line);
    node->text = parser.expect_name();
    node->scoped = parser.skip_name("scoped");
    // A required block must be overridden by a child template, which needs a loader.
    if (parser.skip_name("required"))
      parser.fail(
          "a required block needs a child template to fill it, and chat templates have none");
    parser.expect_end();
    for (const Node* other : blocks_) {
      if (other->text == node->text)
        throw TemplateError(piece.line, "block '" + node->text + "' defined twice");
    }
    node->body = body({"endblock"}, found);
    ExpressionParser end_parser(pieces_[index_].tokens, 1, pieces_[index_].line);
    if (!end_parser.at_end() && end_parser.expect_name() != node->text)
      end_parser.fail("{% endblock %} names another block than '" + node->text + "'");
    end_parser.expect_end();
    ++index_;
    blocks_.push_back(node.get());
    return node;
  }

  NodePtr parse_autoescape(ExpressionParser& parser, const Piece& piece) {
    std::string found;
    auto node = make_node(Node::Kind::autoescape, piece.line);
    node->expr = parser.expression();
    parser.expect_end();
    node->body = body({"endautoescape"}, found);
    expect_end_tag("endautoescape");
    return node;
  }

  NodePtr parse_loop_control(ExpressionParser& parser, const Piece& piece) {
    parser.expect_end();
    const bool is_break = keyword(piece) == "break";
    return make_node(is_break ? Node::Kind::loop_break : Node::Kind::loop_continue, piece.line);
  }

  static bool reads_name(const Expr* expr, std::string_view name) {
    if (expr == nullptr) return false;
    if (expr->kind == Expr::Kind::name && expr->name == name) return true;
    for (const ExprPtr& child : expr->children) {
      if (reads_name(child.get(), name)) return true;
    }
    for (const auto& keyword_argument : expr->keywords) {
      if (reads_name(keyword_argument.second.get(), name)) return true;
    }
    return false;
  }

  static bool reads_name(const Body& nodes, std::string_view name) {
    for (const NodePtr& node : nodes) {
      if (node->kind == Node::Kind::macro) continue;  // a nested macro has its own
      if (reads_name(node->expr.get(), name) || reads_name(node->condition.get(), name) ||
          reads_name(node->filter.get(), name) || reads_name(node->body, name) ||
          reads_name(node->else_body, name))
        return true;
      for (const ExprPtr& value : node->defaults) {
        if (reads_name(value.get(), name)) return true;
      }
      for (const auto& [condition, branch] : node->branches) {
        if (reads_name(condition.get(), name) || reads_name(branch, name)) return true;
      }
    }
    return false;
  }

  std::vector<Piece> pieces_;
  std::size_t index_ = 0;
  bool has_generation_ = false;
  std::vector<const Node*> blocks_;
};

}  // namespace

std::unique_ptr<Program> parse_program(const std::string& source) {
  return BodyParser(split_template(source)).program();
}

}  // namespace dyncp::data::jinja
