// nn/safetensors_json.h — the small, strict JSON reader and writer helpers
// behind nn/serialize.cpp.
//
// A safetensors header is one JSON object whose values are objects of strings,
// arrays of non-negative integers and, under "__metadata__", strings. This
// parser accepts exactly that subset of JSON — objects, arrays, strings (all
// escapes, \uXXXX with surrogate pairs) and non-negative integers that fit in
// 64 bits — and rejects everything else (floats, negatives, true/false/null,
// duplicate keys, trailing commas, nesting deeper than kMaxJsonDepth, trailing
// garbage other than whitespace) with an ls::Error that gives the byte offset.
// It never reads outside the given text, so a corrupt file cannot crash it.
// Read before: nn/serialize.h. Read next: nn/serialize.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lockstep::nn::detail {

inline constexpr int kMaxJsonDepth = 16;

struct JsonValue {
  enum class Kind { Object, Array, String, Integer };
  Kind kind = Kind::Object;
  std::string string;                                      // Kind::String
  uint64_t integer = 0;                                    // Kind::Integer
  std::vector<JsonValue> array;                            // Kind::Array
  std::vector<std::pair<std::string, JsonValue>> object;  // Kind::Object, file order, unique keys

  const char* kind_name() const;  // "object", "array", "string", "integer"
};

// Parses `text` as one JSON value (surrounding whitespace allowed). Errors are
// thrown as ls::Error prefixed with `context` (e.g. "ls::nn::load_tensors('m.safetensors')").
JsonValue parse_json(std::string_view text, const std::string& context);

// `s` as a JSON string literal, quotes included ("a\"b" for a"b).
std::string json_quote(const std::string& s);

}  // namespace lockstep::nn::detail
