// core/dtype.cpp — sizes, names and promotion of ScalarType.
// Read before: core/dtype.h.
#include "core/dtype.h"

namespace lockstep {

size_t element_size(ScalarType t) {
  return dispatch_all(t, []<class T>() { return sizeof(T); });
}

const char* dtype_name(ScalarType t) {
  switch (t) {
    case kFloat32: return "float32";
    case kFloat64: return "float64";
    case kInt64: return "int64";
    case kInt32: return "int32";
    case kUInt8: return "uint8";
    case kBool: return "bool";
    case kFloat16: return "float16";
    case kBFloat16: return "bfloat16";
  }
  return "unknown";
}

namespace {
// Rank in the promotion lattice: a higher rank wins.
int promotion_rank(ScalarType t) {
  switch (t) {
    case kBool: return 0;
    case kUInt8: return 1;
    case kInt32: return 2;
    case kInt64: return 3;
    case kFloat16: return 4;
    case kBFloat16: return 4;
    case kFloat32: return 5;
    case kFloat64: return 6;
  }
  return 0;
}
}  // namespace

ScalarType promote_types(ScalarType a, ScalarType b) {
  if (a == b) return a;
  if ((a == kFloat16 && b == kBFloat16) || (a == kBFloat16 && b == kFloat16)) return kFloat32;
  return promotion_rank(a) >= promotion_rank(b) ? a : b;
}

}  // namespace lockstep
