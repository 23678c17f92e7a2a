// distributed/ddp/nonfinite_check.cpp — the scans and the policy of Note [Non-finite gradients],
// and the copy of a gradient into its bucket that counts in the same pass.
// Read before: distributed/ddp/nonfinite_check.h.
#include "distributed/ddp/nonfinite_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "core/native/fast/streaming_store.h"
#include "core/native/native.h"

namespace lockstep::distributed::detail {

namespace {

// Exponent bits all ones: NaN or +-Inf. Integer compares, so the loop vectorises.
// Bits is the float's same-sized unsigned integer, `exponent` its exponent mask.
template <typename Float, typename Bits, Bits exponent>
int64_t count_non_finite_bits(const Float* p, int64_t n) {
  static_assert(sizeof(Float) == sizeof(Bits));
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    Bits bits;
    std::memcpy(&bits, p + i, sizeof(Bits));
    count += (bits & exponent) == exponent;
  }
  return count;
}

const char* policy_name(NonFinitePolicy p) {
  switch (p) {
    case NonFinitePolicy::OFF: return "off";
    case NonFinitePolicy::WARN: return "warn";
    case NonFinitePolicy::SKIP_STEP: return "skip";
    case NonFinitePolicy::STOP: return "stop";
  }
  return "?";
}

}  // namespace

int64_t count_non_finite(const Tensor& original) {
  if (!original.defined() || !is_floating_point(original.dtype())) return 0;
  Tensor t = original.device().is_cpu() ? original.contiguous() : original.to(Device::cpu()).contiguous();
  if (t.dtype() == kFloat64) {
    return count_non_finite_bits<double, uint64_t, 0x7ff0000000000000ull>(static_cast<const double*>(t.raw_data()),
                                                                         t.numel());
  }
  if (t.dtype() != kFloat32) t = t.to(kFloat32);  // half, bfloat16: Inf and NaN survive the cast
  return count_non_finite_bits<float, uint32_t, 0x7f800000u>(static_cast<const float*>(t.raw_data()),
                                                             t.numel());
}

namespace {

// The fused loop of copy_scaled_counting_non_finite: out = in * s, counting the
// elements of `in` whose exponent bits are all ones. Bits is In's same-sized
// unsigned integer; `widen` turns those bits into the float32 value (bfloat16:
// the upper half of a float32, so the conversion is exact).
template <typename Bits, Bits exponent, typename Widen>
int64_t scaled_copy_loop(float* out, const void* in_bytes, int64_t n, float s, bool count, Widen widen) {
  const auto* in = static_cast<const Bits*>(in_bytes);
  int64_t bad = 0;
  if (count) {
    for (int64_t i = 0; i < n; ++i) {
      bad += (in[i] & exponent) == exponent;
      out[i] = widen(in[i]) * s;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = widen(in[i]) * s;
  }
  return bad;
}

float float_of_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// § Note [Large bucket copies stream past the cache]
// A float32 gradient of native::detail::kStreamingBytes (12 MiB) and more —
// mlp-reversed's 2048 x 2048 weights (16.8 MB), BERT's word embedding (94 MB) —
// is copied into its bucket slot with non-temporal stores. The slot's next
// reader is the bucket's reduction, which runs only once the rest of the
// bucket (up to bucket_cap_mb) has been written, so a slot that size is out of
// the caches by then whatever the store; a normal store would first read each
// of its lines from memory (read for ownership), a third tensor's worth of
// traffic in a pass that DDP adds to every iteration. Measured on an AMD Zen 2
// (docs/results/evaluation.md, 2026-12-07 evening): mlp-reversed, 2 ranks on
// one host, DDP's backward 4-5 ms shorter (ddp over local 1.38 -> 1.31); ResNet50,
// whose largest gradient is 9.4 MB, keeps the plain loop (streaming its 4-9 MB
// gradients measured no gain). The values and the count are the plain loop's
// bit for bit (the same single-precision multiply; tests/distributed/
// test_ddp_nonfinite.cpp); after the stores the copying thread fences, before
// the bucket can be handed to the thread that reduces it. Without AVX2, the
// plain loop.
#if defined(__AVX2__)
bool streams_bucket_copy(int64_t numel) {
  return numel * static_cast<int64_t>(sizeof(float)) >= native::detail::kStreamingBytes;
}

// out = in * s, counting the non-finite elements of `in`: scaled_copy_loop's
// float32 case with 8-lane non-temporal stores into `out` (Note [Large bucket
// copies stream past the cache]). The lanes before out's first 32-byte boundary
// and after its last one run the plain loop.
int64_t streamed_scaled_copy(float* out, const float* in, int64_t n, float s, bool count) {
  constexpr uint32_t kExponent = 0x7f800000u;
  auto plain = [&](int64_t lo, int64_t hi) {
    return scaled_copy_loop<uint32_t, kExponent>(out + lo, in + lo, hi - lo, s, count, float_of_bits);
  };
  const int64_t head = std::min<int64_t>(n, ((32 - reinterpret_cast<uintptr_t>(out) % 32) % 32) / 4);
  int64_t bad = plain(0, head), i = head;
  const __m256 scale = _mm256_set1_ps(s);
  const __m256i exponent = _mm256_set1_epi32(static_cast<int>(kExponent));
  __m256i non_finite = _mm256_setzero_si256();  // per lane: minus the number seen
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(in + i);
    const __m256i e = _mm256_and_si256(_mm256_castps_si256(v), exponent);
    non_finite = _mm256_add_epi32(non_finite, _mm256_cmpeq_epi32(e, exponent));  // -1 where all ones
    _mm256_stream_ps(out + i, _mm256_mul_ps(v, scale));
  }
  _mm_sfence();
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), non_finite);
  for (int32_t lane : lanes) bad -= lane;  // (a lane counts at most n / 8 < 2^31 for n < 2^34)
  bad += plain(i, n);
  return count ? bad : 0;
}
#endif

}  // namespace

int64_t copy_scaled_counting_non_finite(const Tensor& dst, const Tensor& src, double scale, bool count) {
  const bool fused = dst.device().is_cpu() && src.device().is_cpu() && dst.dtype() == kFloat32 &&
                     (src.dtype() == kFloat32 || src.dtype() == kBFloat16) && dst.is_contiguous() &&
                     src.is_contiguous() && dst.numel() == src.numel();
  if (!fused) {
    if (dst.raw_data() != src.raw_data()) native::copy_(dst, src);  // in place: scale only
    if (scale != 1.0) native::binary_scalar_(native::BinaryOp::Mul, dst, scale);
    return count ? count_non_finite(src) : 0;
  }
  float* out = static_cast<float*>(dst.raw_data());
  const float s = static_cast<float>(scale);  // as binary_scalar_ does: the scalar in the tensor's type
  if (src.dtype() == kBFloat16) {
    return scaled_copy_loop<uint16_t, 0x7f80u>(out, src.raw_data(), src.numel(), s, count, [](uint16_t b) {
      return float_of_bits(static_cast<uint32_t>(b) << 16);
    });
  }
#if defined(__AVX2__)
  if (streams_bucket_copy(src.numel())) {
    return streamed_scaled_copy(out, static_cast<const float*>(src.raw_data()), src.numel(), s, count);
  }
#endif
  return scaled_copy_loop<uint32_t, 0x7f800000u>(out, src.raw_data(), src.numel(), s, count, float_of_bits);
}

NonFinitePolicy non_finite_policy(NonFinitePolicy option) {
  const char* env = std::getenv("LOCKSTEP_NONFINITE");
  if (env == nullptr || *env == '\0') return option;
  for (NonFinitePolicy p : {NonFinitePolicy::OFF, NonFinitePolicy::WARN, NonFinitePolicy::SKIP_STEP, NonFinitePolicy::STOP}) {
    if (std::strcmp(env, policy_name(p)) == 0) return p;
  }
  throw Error(lockstep::detail::str("DistributedDataParallel: LOCKSTEP_NONFINITE='", env,
                                    "' is not one of off, warn, skip, stop; unset it for the default (warn)"));
}

NonFiniteCheck::NonFiniteCheck(NonFinitePolicy policy, std::vector<Tensor> params, std::vector<std::string> names,
                               int rank)
    : policy_(policy),
      params_(std::move(params)),
      names_(std::move(names)),
      rank_(rank),
      recorded_(params_.size(), -1) {}

void NonFiniteCheck::record(size_t index, int64_t non_finite) {
  if (index < recorded_.size()) recorded_[index] = non_finite;
}

void NonFiniteCheck::before_copy_back(bool local_values) {
  local_.clear();
  local_known_ = local_values && policy_ != NonFinitePolicy::OFF;
  std::vector<int64_t> recorded(params_.size(), -1);
  recorded.swap(recorded_);  // this backward's counts; the next backward starts with none
  if (!local_known_) return;
  for (size_t i = 0; i < params_.size() && local_.empty(); ++i) {
    const Tensor g = params_[i].grad();
    if (const int64_t bad = recorded[i] >= 0 ? recorded[i] : count_non_finite(g); bad > 0) {
      local_ = lockstep::detail::str("this rank's own gradient of '", names_[i], "' has ", bad, " of ", g.numel(),
                                     " elements NaN or Inf (a non-finite loss or activation here)");
    }
  }
}

void NonFiniteCheck::after_copy_back(int64_t iteration) {
  if (policy_ == NonFinitePolicy::OFF) return;
  if (policy_ == NonFinitePolicy::WARN && local_known_) {
    // Warning only: the rank that produced them says so; no second pass.
    if (!local_.empty()) {
      report(lockstep::detail::str("DDP (rank ", rank_, "): non-finite gradients in synced backward #", iteration,
                                   ": ", local_, "; DDP averages them into every rank's gradients."));
    }
    return;
  }
  size_t first = params_.size();
  int64_t bad = 0;
  for (size_t i = 0; i < params_.size() && first == params_.size(); ++i) {
    bad = count_non_finite(params_[i].grad());
    if (bad > 0) first = i;
  }
  if (first == params_.size()) return;
  const std::string origin =
      !local_.empty() ? local_
      : local_known_ ? std::string("this rank's own gradients were finite: another rank produced them")
                     : std::string("which rank produced them is not known with gradient_as_bucket_view");
  std::string message = lockstep::detail::str(
      "DDP (rank ", rank_, "): non-finite gradients after averaging in synced backward #", iteration,
      ": the first is '", names_[first], "' (", bad, " of ", params_[first].grad().numel(), " elements NaN or Inf); ",
      origin, ".");
  if (policy_ == NonFinitePolicy::STOP) {
    throw Error(message + " Stopping (DDPOptions().non_finite_gradients(NonFinitePolicy::STOP) or "
                          "LOCKSTEP_NONFINITE=stop); check the inputs, the loss and the learning rate of that rank.");
  }
  if (policy_ == NonFinitePolicy::SKIP_STEP) {
    for (Tensor& p : params_) p.mutable_grad() = Tensor();
    message += " Gradients cleared on every rank: the next optimizer step leaves the parameters unchanged "
               "(LOCKSTEP_NONFINITE=skip).";
  }
  report(message);
}

void NonFiniteCheck::report(const std::string& message) {
  if (reports_ >= 20) return;
  std::fprintf(stderr, "lockstep: warning: %s%s\n", message.c_str(),
               ++reports_ == 20 ? " (no more of these warnings in this run)" : "");
  std::fflush(stderr);
}

}  // namespace lockstep::distributed::detail
