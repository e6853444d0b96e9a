// tests/native/json_checker.h: a small strict JSON parser (RFC 8259 + valid UTF-8) for trace tests.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace json_checker {

/// A parsed JSON value. Numbers keep their source text so that tests can check formatting.
struct Value {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  std::string text;  // kString: decoded UTF-8; kNumber: the literal as written
  std::vector<Value> items;
  std::vector<std::pair<std::string, Value>> members;  // in order; duplicates are rejected

  bool is(Type t) const { return type == t; }
  const Value* find(std::string_view key) const {
    for (const auto& m : members) {
      if (m.first == key) return &m.second;
    }
    return nullptr;
  }
  const Value& at(std::string_view key) const {
    const Value* v = find(key);
    if (!v) throw std::runtime_error("missing key " + std::string(key));
    return *v;
  }
  double number() const { return std::stod(text); }
};

class Parser {
 public:
  explicit Parser(std::string_view in) : in_(in) {}

  Value parse_document() {
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != in_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON error at byte " + std::to_string(pos_) + ": " + what);
  }
  void skip_ws() {
    while (pos_ < in_.size() &&
           (in_[pos_] == ' ' || in_[pos_] == '\n' || in_[pos_] == '\r' || in_[pos_] == '\t')) {
      ++pos_;
    }
  }
  char peek() {
    if (pos_ >= in_.size()) fail("unexpected end");
    return in_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  void literal(std::string_view word) {
    if (in_.substr(pos_, word.size()) != word) fail("bad literal");
    pos_ += word.size();
  }

  Value parse_value(int depth) {
    if (depth > 512) fail("too deep");
    skip_ws();
    Value v;
    char c = peek();
    if (c == '{') {
      v.type = Value::Type::kObject;
      ++pos_;
      skip_ws();
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      for (;;) {
        skip_ws();
        std::string key = parse_string();
        if (v.find(key)) fail("duplicate key " + key);
        skip_ws();
        expect(':');
        Value member = parse_value(depth + 1);
        v.members.emplace_back(std::move(key), std::move(member));
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.type = Value::Type::kArray;
      ++pos_;
      skip_ws();
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      for (;;) {
        v.items.push_back(parse_value(depth + 1));
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.type = Value::Type::kString;
      v.text = parse_string();
      return v;
    }
    if (c == 't') {
      literal("true");
      v.type = Value::Type::kBool;
      v.boolean = true;
      return v;
    }
    if (c == 'f') {
      literal("false");
      v.type = Value::Type::kBool;
      return v;
    }
    if (c == 'n') {
      literal("null");
      return v;
    }
    v.type = Value::Type::kNumber;
    v.text = parse_number();
    return v;
  }

  std::string parse_number() {
    size_t start = pos_;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (peek() >= '1' && peek() <= '9') {
      while (pos_ < in_.size() && isdigit(in_[pos_])) ++pos_;
    } else {
      fail("bad number");
    }
    if (pos_ < in_.size() && in_[pos_] == '.') {
      ++pos_;
      if (!(pos_ < in_.size() && isdigit(in_[pos_]))) fail("bad fraction");
      while (pos_ < in_.size() && isdigit(in_[pos_])) ++pos_;
    }
    if (pos_ < in_.size() && (in_[pos_] == 'e' || in_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < in_.size() && (in_[pos_] == '+' || in_[pos_] == '-')) ++pos_;
      if (!(pos_ < in_.size() && isdigit(in_[pos_]))) fail("bad exponent");
      while (pos_ < in_.size() && isdigit(in_[pos_])) ++pos_;
    }
    return std::string(in_.substr(start, pos_ - start));
  }
  static bool isdigit(char c) { return c >= '0' && c <= '9'; }

  uint32_t hex4() {
    if (pos_ + 4 > in_.size()) fail("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = in_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= uint32_t(c - 'A' + 10);
      else
        fail("bad hex digit");
    }
    return v;
  }
  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out.push_back(char(cp));
    } else if (cp < 0x800) {
      out.push_back(char(0xC0 | (cp >> 6)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(char(0xE0 | (cp >> 12)));
      out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(char(0xF0 | (cp >> 18)));
      out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    }
  }
  // Length of a valid UTF-8 sequence at pos_, or 0.
  size_t utf8_length() const {
    auto b = [&](size_t k) { return static_cast<unsigned char>(in_[pos_ + k]); };
    unsigned char c = b(0);
    size_t n;
    uint32_t cp;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0)
      n = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0)
      n = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0)
      n = 4, cp = c & 0x07;
    else
      return 0;
    if (pos_ + n > in_.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
      if ((b(k) & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (b(k) & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0;
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
    return n;
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    for (;;) {
      char c = peek();
      unsigned char u = static_cast<unsigned char>(c);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (u < 0x20) fail("raw control character in string");
      if (c == '\\') {
        ++pos_;
        char e = peek();
        ++pos_;
        switch (e) {
          case '"':
            out.push_back('"');
            break;
          case '\\':
            out.push_back('\\');
            break;
          case '/':
            out.push_back('/');
            break;
          case 'b':
            out.push_back('\b');
            break;
          case 'f':
            out.push_back('\f');
            break;
          case 'n':
            out.push_back('\n');
            break;
          case 'r':
            out.push_back('\r');
            break;
          case 't':
            out.push_back('\t');
            break;
          case 'u': {
            uint32_t cp = hex4();
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (in_.substr(pos_, 2) != "\\u") fail("lone high surrogate");
              pos_ += 2;
              uint32_t lo = hex4();
              if (lo < 0xDC00 || lo > 0xDFFF) fail("bad low surrogate");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
              fail("lone low surrogate");
            }
            put_utf8(out, cp);
            break;
          }
          default:
            fail("bad escape");
        }
        continue;
      }
      size_t n = utf8_length();
      if (n == 0) fail("invalid UTF-8 in string");
      out.append(in_.substr(pos_, n));
      pos_ += n;
    }
  }

  std::string_view in_;
  size_t pos_ = 0;
};

/// Parses `text` strictly; throws std::runtime_error with the byte offset on any error.
inline Value parse(std::string_view text) { return Parser(text).parse_document(); }

}  // namespace json_checker
