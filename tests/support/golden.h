// tests/support/golden.h — reading the PyTorch parity golden files and comparing
// lockstep's tensors with them.
//
// tools/make_golden.py (run with Debian's /usr/bin/python3 and python3-torch 1.13)
// writes tests/golden/<case>.safetensors; its docstring lists the keys (input.*,
// state.*, grad_output, output, grad.input.*, grad.param.*, state_after.*) and the
// notes [Golden references are float64] and [Synthetic weights]. The tests find the
// folder from this file's own path, so they need neither Python nor a CMake define.
//
// § Note [Parity tolerance]
// An element passes when |actual - expected| <= rtol * |expected| + atol * scale,
// scale = max |expected| over the tensor (1 if it is all zeros). The atol term is
// relative to the tensor's scale because float32 rounding in a sum grows with the
// size of the summands, not of the result: a gradient entry that cancels to ~0 still
// carries the rounding error of the large terms it summed. The references are exact
// (float64, see the generator), so the budget only has to cover lockstep's own
// rounding: PyTorch's float32 run lands within 5e-7 · scale of them on every layer
// (the generator records it as "torch_f32_error"), so float32 gets rtol 1e-4,
// atol 1e-5 — 20x PyTorch's own error, yet small enough to catch any formula slip
// that shows in float32. float64 gets rtol 1e-9, atol 1e-11: summation order alone
// moves results by ~1e-15, and a slip like eps outside the square root or a biased
// variance moves them by > 1e-7. With LS_GOLDEN_VERBOSE=1 in the environment every
// comparison prints its worst error / allowed ratio to stderr (lockstep's layers stay
// below 0.02 in both dtypes, the models below 0.05).
//
// Read before: nn/serialize.h, tools/make_golden.py.
// Used by: tests/nn/test_parity.cpp, tests/models/test_parity.cpp, tests/models/test_models.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/serialize.h"

namespace lockstep::testing {

inline std::filesystem::path golden_dir() {
  return std::filesystem::path(LOCKSTEP_SOURCE_DIR) / "tests" / "golden";  // tests/CMakeLists.txt
}

struct Golden {
  std::string name;
  std::map<std::string, Tensor> tensors;
  nn::Metadata metadata;

  bool has(const std::string& key) const { return tensors.count(key) != 0; }
  const Tensor& at(const std::string& key) const {
    auto it = tensors.find(key);
    LS_CHECK(it != tensors.end(), "golden file ", name, ".safetensors has no tensor '", key,
             "' (regenerate with /usr/bin/python3 tools/make_golden.py?)");
    return it->second;
  }
  // Entries whose key starts with `prefix`, with the prefix removed.
  std::map<std::string, Tensor> with_prefix(const std::string& prefix) const {
    std::map<std::string, Tensor> out;
    for (const auto& [key, t] : tensors) {
      if (key.rfind(prefix, 0) == 0) out[key.substr(prefix.size())] = t;
    }
    return out;
  }
  std::string meta(const std::string& key) const {
    auto it = metadata.find(key);
    return it == metadata.end() ? std::string() : it->second;
  }
  // A space-separated metadata list ("param_order", "buffer_order") as a vector.
  std::vector<std::string> meta_list(const std::string& key) const {
    std::vector<std::string> out;
    std::istringstream is(meta(key));
    for (std::string word; is >> word;) out.push_back(word);
    return out;
  }
};

// Loads tests/golden/<name>.safetensors.
inline Golden load_golden(const std::string& name) {
  Golden g;
  g.name = name;
  g.tensors = nn::load_tensors((golden_dir() / (name + ".safetensors")).string(), &g.metadata);
  return g;
}

// One line of a parameter listing (tests/golden/*_params.txt).
struct ListedTensor {
  std::string kind;  // "param" or "buffer"
  std::string name;
  IntList shape;
  bool operator==(const ListedTensor&) const = default;
};

struct Listing {
  std::vector<ListedTensor> tensors;
  int64_t total_parameters = -1;
};

inline Listing load_listing(const std::string& file) {
  const auto path = golden_dir() / file;
  std::ifstream in(path);
  LS_CHECK(in.good(), "cannot open ", path.string());
  Listing out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    std::string kind;
    is >> kind;
    if (kind == "total_parameters") {
      is >> out.total_parameters;
      continue;
    }
    ListedTensor t;
    t.kind = kind;
    is >> t.name;
    for (int64_t d; is >> d;) t.shape.push_back(d);
    out.tensors.push_back(t);
  }
  return out;
}

struct Tolerance {
  double rtol, atol;
};
inline constexpr Tolerance kFloat32Tolerance{1e-4, 1e-5};  // see Note [Parity tolerance]
inline constexpr Tolerance kFloat64Tolerance{1e-9, 1e-11};

inline Tolerance tolerance_for(ScalarType dtype) {
  return dtype == kFloat64 ? kFloat64Tolerance : kFloat32Tolerance;
}

// "" when `actual` matches `expected` within `tol` (Note [Parity tolerance]);
// otherwise a message naming `what`, the worst element and both values.
inline std::string compare_to_golden(const Tensor& actual, const Tensor& expected, Tolerance tol,
                                     const std::string& what) {
  std::ostringstream os;
  if (!actual.defined()) {
    os << what << ": lockstep's tensor is undefined (did the backward reach it?)";
    return os.str();
  }
  if (actual.sizes() != expected.sizes()) {
    os << what << ": shape " << actual.shape_str() << " but PyTorch's is " << expected.shape_str();
    return os.str();
  }
  const std::vector<double> a = actual.detach().to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> e = expected.to(kFloat64).contiguous().to_vector<double>();
  double scale = 0.0;
  for (double v : e) scale = std::max(scale, std::abs(v));
  if (scale == 0.0) scale = 1.0;
  size_t worst = 0;
  double worst_ratio = 0.0;  // error / allowed error; > 1 fails
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(a[i] - e[i]);
    const double allowed = tol.rtol * std::abs(e[i]) + tol.atol * scale;
    double ratio = err / allowed;  // NaN if either is NaN: fails below
    if (std::isnan(a[i]) && std::isnan(e[i])) ratio = 0.0;  // e.g. a fully masked attention row
    else if (allowed == 0.0) ratio = err == 0.0 ? 0.0 : INFINITY;
    if (ratio > worst_ratio || std::isnan(ratio)) {
      worst_ratio = std::isnan(ratio) ? INFINITY : ratio;
      worst = i;
    }
  }
  if (std::getenv("LS_GOLDEN_VERBOSE") != nullptr) {  // to see the margins: see Note [Parity tolerance]
    std::fprintf(stderr, "%-72s error / allowed = %.3g\n", what.c_str(), worst_ratio);
  }
  if (worst_ratio <= 1.0) return "";
  os.precision(10);
  os << what << ": element " << worst << " (flat) is " << a[worst] << " but PyTorch's is "
     << e[worst] << " (|diff| " << std::abs(a[worst] - e[worst]) << "; allowed: rtol "
     << tol.rtol << " * |expected| + atol " << tol.atol << " * " << scale
     << ", the tensor's max |expected|)";
  return os.str();
}

}  // namespace lockstep::testing

// In doctest files: fails the check with compare_to_golden's message.
#define CHECK_GOLDEN(actual, expected, tol, what)                                           \
  do {                                                                                      \
    const std::string golden_message_ =                                                     \
        ::lockstep::testing::compare_to_golden((actual), (expected), (tol), (what));        \
    CHECK_MESSAGE(golden_message_.empty(), golden_message_);                                \
  } while (0)
