// nn/safetensors_json.h — the small, strict JSON reader and writer helpers
// behind nn/serialize.cpp.
//
// A safetensors header is one JSON object whose values are objects of strings,
// arrays of non-negative integers and, under "__metadata__", strings. This
// parser accepts exactly that subset of JSON — objects, arrays, strings (all
// escapes, \uXXXX with surrogate pairs) and non-negative integers that fit in
// 64 bits — and rejects everything else (floats, negatives, true/false/null,
// duplicate keys, trailing commas, nesting deeper than kMaxJsonDepth, trailing
// garbage other than whitespace, more than kMaxJsonValues values) with an
// ls::Error that gives the byte offset. It never reads outside the given text,
// so a corrupt file cannot crash it, and its memory stays within a small
// multiple of the text's size (see Note [JSON value limit]).
//
// § Note [JSON value limit]
// A parsed value costs ~100 bytes but can take 2 bytes of text ("0,"), so a
// 100 MB header of "[0,0,0,..." would expand to ~5 GB of JsonValues. The parser
// counts values and stops at kMaxJsonValues (about 100k tensors' worth; a
// ResNet-152 checkpoint uses ~10k), which bounds a hostile header to ~100 MB.
// Read before: nn/serialize.h. Read next: nn/serialize.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::nn::detail {

inline constexpr int kMaxJsonDepth = 16;
inline constexpr size_t kMaxJsonValues = size_t{1} << 20;

struct JsonMember;

struct JsonValue {
  enum class Kind { Object, Array, String, Integer };
  Kind kind = Kind::Object;
  std::string string;               // Kind::String
  uint64_t integer = 0;             // Kind::Integer
  std::vector<JsonValue> array;     // Kind::Array
  std::vector<JsonMember> object;   // Kind::Object, file order, unique keys

  const char* kind_name() const;  // "object", "array", "string", "integer"
};

// One key of an object. A struct rather than std::pair<std::string, JsonValue>:
// a pair of a still-incomplete JsonValue inside JsonValue does not compile with
// clang and libstdc++ (found building fuzz/ with clang).
struct JsonMember {
  std::string key;
  JsonValue value;
};

// Parses `text` as one JSON value (surrounding whitespace allowed). Errors are
// thrown as ls::Error prefixed with `context` (e.g. "ls::nn::load_tensors('m.safetensors')").
JsonValue parse_json(std::string_view text, const std::string& context);

// `s` as a JSON string literal, quotes included ("a\"b" for a"b).
std::string json_quote(const std::string& s);

}  // namespace lockstep::nn::detail
