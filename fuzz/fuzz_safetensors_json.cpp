// fuzz/fuzz_safetensors_json.cpp — libFuzzer target for the JSON subset parser
// of safetensors headers (nn/safetensors_json.h). Each input is parsed as a
// header: malformed text must throw ls::Error (never crash, recurse without
// bound, or blow up memory, see Note [JSON value limit]). The same bytes are
// also quoted with json_quote and parsed back, which must give them unchanged.
// Seeds: fuzz/make_seeds.cpp. Read before: nn/safetensors_json.h.
// Read next: fuzz/fuzz_safetensors.cpp.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"
#include "nn/safetensors_json.h"

namespace ls = lockstep;
using ls::nn::detail::JsonValue;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string context = "fuzz";
  try {
    const JsonValue v = ls::nn::detail::parse_json(text, context);
    (void)v.kind_name();
  } catch (const ls::Error&) {
  }
  // Any byte string survives quoting and parsing (the quoted form is valid JSON).
  const std::string original(text);
  try {
    const JsonValue q = ls::nn::detail::parse_json(ls::nn::detail::json_quote(original), context);
    if (q.kind != JsonValue::Kind::String || q.string != original) {
      std::fprintf(stderr, "fuzz_safetensors_json: json_quote round trip changed the string\n");
      std::abort();
    }
  } catch (const ls::Error& e) {
    std::fprintf(stderr, "fuzz_safetensors_json: json_quote produced text the parser refuses: %s\n",
                 e.what());
    std::abort();
  }
  return 0;
}
