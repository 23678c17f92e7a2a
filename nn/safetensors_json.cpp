// nn/safetensors_json.cpp — a recursive-descent parser for the JSON subset of
// safetensors headers (see nn/safetensors_json.h), and string quoting.
// Read before: nn/safetensors_json.h.
#include "nn/safetensors_json.h"

#include <cstdio>
#include <unordered_set>
#include <utility>

#include "core/error.h"

namespace lockstep::nn::detail {

const char* JsonValue::kind_name() const {
  switch (kind) {
    case Kind::Object: return "object";
    case Kind::Array: return "array";
    case Kind::String: return "string";
    case Kind::Integer: return "integer";
  }
  return "value";
}

namespace {

class Parser {
 public:
  Parser(std::string_view text, const std::string& context) : text_(text), context_(context) {}

  JsonValue parse_document() {
    skip_whitespace();
    JsonValue value = parse_value(0);
    skip_whitespace();
    if (pos_ != text_.size()) fail("unexpected characters after the JSON value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(context_ + ": bad JSON header at byte " + std::to_string(pos_) + ": " + what);
  }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  void expect(char c) {
    if (at_end() || text_[pos_] != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  void skip_whitespace() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++pos_;
  }

  JsonValue parse_value(int depth) {
    if (depth > kMaxJsonDepth) fail("nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    if (at_end()) fail("unexpected end of the header");
    if (++values_ > kMaxJsonValues)  // see Note [JSON value limit]
      fail("more than " + std::to_string(kMaxJsonValues) + " values; the header is corrupt");
    const char c = peek();
    JsonValue v;
    if (c == '{') {
      v.kind = JsonValue::Kind::Object;
      parse_object(v, depth);
    } else if (c == '[') {
      v.kind = JsonValue::Kind::Array;
      parse_array(v, depth);
    } else if (c == '"') {
      v.kind = JsonValue::Kind::String;
      v.string = parse_string();
    } else if (c >= '0' && c <= '9') {
      v.kind = JsonValue::Kind::Integer;
      v.integer = parse_integer();
    } else {
      fail(std::string("unexpected character '") + c +
           "' (a safetensors header holds only objects, arrays, strings and non-negative integers)");
    }
    return v;
  }

  void parse_object(JsonValue& v, int depth) {
    expect('{');
    skip_whitespace();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    // A set, not a scan of the keys so far: a header with n tensors must not
    // cost n^2 comparisons (100k tensors took minutes that way).
    std::unordered_set<std::string> seen;
    while (true) {
      skip_whitespace();
      if (peek() != '"') fail("expected a string key");
      std::string key = parse_string();
      if (!seen.insert(key).second) fail("duplicate key \"" + key + "\"");
      skip_whitespace();
      expect(':');
      skip_whitespace();
      v.object.push_back(JsonMember{std::move(key), parse_value(depth + 1)});
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return;
    }
  }

  void parse_array(JsonValue& v, int depth) {
    expect('[');
    skip_whitespace();
    if (peek() == ']') {
      ++pos_;
      return;
    }
    while (true) {
      skip_whitespace();
      v.array.push_back(parse_value(depth + 1));
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return;
    }
  }

  uint64_t parse_integer() {
    const size_t start = pos_;
    uint64_t value = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      const uint64_t digit = static_cast<uint64_t>(peek() - '0');
      if (value > (UINT64_MAX - digit) / 10) fail("integer does not fit in 64 bits");
      value = value * 10 + digit;
      ++pos_;
    }
    if (pos_ - start > 1 && text_[start] == '0') fail("integer with a leading zero");
    if (peek() == '.' || peek() == 'e' || peek() == 'E')
      fail("only integers are expected in a safetensors header");
    return value;
  }

  unsigned parse_hex4() {
    if (text_.size() - pos_ < 4) fail("truncated \\u escape");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      code <<= 4;
      if (h >= '0' && h <= '9') code |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') code |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') code |= static_cast<unsigned>(h - 'A' + 10);
      else fail("bad hex digit in \\u escape");
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("raw control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_end()) fail("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = parse_hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate must be followed by a low one
            if (text_.size() - pos_ < 2 || text_[pos_] != '\\' || text_[pos_ + 1] != 'u')
              fail("unpaired surrogate in \\u escape");
            pos_ += 2;
            const unsigned low = parse_hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired surrogate in \\u escape");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  std::string_view text_;
  const std::string& context_;
  size_t pos_ = 0;
  size_t values_ = 0;
};

}  // namespace

JsonValue parse_json(std::string_view text, const std::string& context) {
  return Parser(text, context).parse_document();
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace lockstep::nn::detail
