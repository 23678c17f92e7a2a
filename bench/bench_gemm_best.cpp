// bench/bench_gemm_best.cpp — each GEMM pass of the bf16 training steps beside oneDNN's
// best configuration for its shape, on this machine, in the same minutes.
//
// The passes are the products gemm_bf16 (core/native/gemm_bf16.h) runs in a BERT-base
// step (batch 8 x 128 tokens: the linear layers' forward, input-gradient and
// weight-gradient products, the MLM decoder, attention) and in a ResNet50 step (batch 8:
// the 1x1 convolutions as channels-last GEMMs), each with the operand layouts, output
// dtype and bias the step uses. For each pass three timings (four for a batch),
// median of --reps after two warm-ups:
//   lockstep   gemm_bf16 with the step's arguments, its own primitive cache, and a weight
//              operand named as one (packed once: Note [bf16 weights packed once per
//              step] in core/native/gemm_bf16.cpp), as the step runs with
//              LOCKSTEP_BF16_PACK_WEIGHTS=1 (by default the step passes B plain);
//              a batch (attention): native::matmul on (B, H, rows, cols) tensors laid
//              out as the step hands them over — q and the probabilities dense, k and
//              v the heads of the (B, T, 3 E) q/k/v projection, the context's gradient
//              those of a (B, T, E) one, transposed views where the step transposes —
//              so the copies matmul makes first (Note [bf16 batched matmul as one
//              call] in core/native/gemm_bf16.h) are inside the clock;
//   plain      oneDNN's matmul primitive on the same strided buffers, built once
//              outside the clock (no per-call work on our side at all);
//   packed     the same with the weight operand in `format_tag::any` (oneDNN's own
//              blocked layout), reordered once outside the clock;
//   batched    (a batch only) one oneDNN call over all products, on dense
//              (batch, rows, cols) operands, transposed ones read in place.
// plain and packed run a batch as one call per product. best = the fastest of them; ratio = best ms / lockstep ms, lockstep's rate
// over the best rate (1 = as fast as oneDNN's best; the target is >= 0.8 for
// every pass).
// On a CPU where oneDNN has no bf16 matmul (no AVX-512: Note [bf16 without oneDNN
// kernels] in core/native/gemm_bf16_via_float32.cpp) oneDNN's best for the shape is
// its float32 matmul: plain, packed and batched then run on float32 copies of the
// operands (output float32), and lockstep's bf16 GEMM, which widens its operands
// itself, is timed against that ("onednn_dtype":"f32" in every line).
//
//   build/bin/bench_gemm_best [--threads T] [--reps N] [--model bert|resnet50|all]
//   bench/gemm_vs_best.sh                      # the same, with the CPU named first
//
// Read before: core/native/gemm_bf16.h. Read next: docs/results/bf16.md.
#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdio>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "bench/bench_stats.h"
#include "core/factory.h"
#include "core/half.h"
#include "core/native/fast/onednn_engine.h"
#include "core/native/gemm_bf16.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "tools/cli.h"

namespace {

using lockstep::BFloat16;
namespace native = lockstep::native;

// One product of a step: C (m, n) = op(A) op(B) [+ bias]; `weight_b`: B is a weight
// (forward: W (n, k) read transposed; input gradient: W (k, n) as stored). A batch
// is attention's (8 sequences x 12 heads); a_rows, b_rows: 0 for an operand stored
// as dense (rows, cols) matrices, else the width in units of E = 768 of the (B, T, .)
// tensor whose heads it is (3: the q/k/v projection, 1: the context's gradient).
struct Pass {
  const char* name;
  int64_t m, n, k;
  bool trans_a, trans_b;
  bool out_bf16;
  bool bias;
  bool weight_b;
  int64_t batch = 1;
  int a_rows = 0, b_rows = 0;
};

// BERT-base, 1024 tokens: hidden 768, FFN 3072, vocabulary 30522.
const std::vector<Pass> kBert = {
    {"bert_proj_fwd", 1024, 768, 768, false, true, true, true, true},
    {"bert_proj_dgrad", 1024, 768, 768, false, false, false, false, true},
    {"bert_proj_wgrad", 768, 768, 1024, true, false, false, false, false},
    {"bert_ffn_up_fwd", 1024, 3072, 768, false, true, true, true, true},
    {"bert_ffn_up_dgrad", 1024, 768, 3072, false, false, false, false, true},
    {"bert_ffn_up_wgrad", 3072, 768, 1024, true, false, false, false, false},
    {"bert_ffn_down_fwd", 1024, 768, 3072, false, true, true, true, true},
    {"bert_ffn_down_dgrad", 1024, 3072, 768, false, false, true, false, true},
    {"bert_ffn_down_wgrad", 768, 3072, 1024, true, false, false, false, false},
    {"bert_decoder_fwd", 1024, 30522, 768, false, true, true, true, true},
    {"bert_decoder_dgrad", 1024, 768, 30522, false, false, false, false, true},
    {"bert_decoder_wgrad", 30522, 768, 1024, true, false, false, false, false},
    // scores = q k^T, dq = dS k, dk^T = q^T dS; context = P v, dP = dC v^T, dv = P^T dC
    {"bert_attn_scores", 128, 128, 64, false, true, true, false, false, 96, 0, 3},
    {"bert_attn_scores_dq", 128, 64, 128, false, false, true, false, false, 96, 0, 3},
    {"bert_attn_scores_dk", 64, 128, 128, true, false, true, false, false, 96, 0, 0},
    {"bert_attn_context", 128, 64, 128, false, false, true, false, false, 96, 0, 3},
    {"bert_attn_context_dp", 128, 128, 64, false, true, true, false, false, 96, 1, 3},
    {"bert_attn_context_dv", 128, 64, 128, true, false, true, false, false, 96, 0, 1},
};

// ResNet50, batch 8, channels-last 1x1 convolutions: M = 8 H W pixels, K = C_in, N = C_out.
const std::vector<Pass> kResnet = {
    {"resnet_1x1_56_expand_fwd", 8 * 56 * 56, 256, 64, false, true, true, false, true},
    {"resnet_1x1_56_expand_dgrad", 8 * 56 * 56, 64, 256, false, false, true, false, true},
    {"resnet_1x1_56_expand_wgrad", 256, 64, 8 * 56 * 56, true, false, false, false, false},
    {"resnet_1x1_56_reduce_fwd", 8 * 56 * 56, 64, 256, false, true, true, false, true},
    {"resnet_1x1_28_expand_fwd", 8 * 28 * 28, 512, 128, false, true, true, false, true},
    {"resnet_1x1_14_expand_fwd", 8 * 14 * 14, 1024, 256, false, true, true, false, true},
    {"resnet_1x1_14_reduce_fwd", 8 * 14 * 14, 256, 1024, false, true, true, false, true},
    {"resnet_1x1_14_reduce_dgrad", 8 * 14 * 14, 1024, 256, false, false, true, false, true},
    {"resnet_1x1_7_expand_fwd", 8 * 7 * 7, 2048, 512, false, true, true, false, true},
    {"resnet_1x1_7_reduce_fwd", 8 * 7 * 7, 512, 2048, false, true, true, false, true},
    {"resnet_1x1_7_reduce_wgrad", 512, 2048, 8 * 7 * 7, true, false, false, false, false},
};

struct Options {
  int threads = 1;
  int reps = 10;
  std::string model = "all";
};

Options parse(int argc, char** argv) {
  Options o;
  lockstep::cli::Program p("bench_gemm_best",
                           "each bf16 GEMM pass of the BERT-base and ResNet50 steps beside "
                           "oneDNN's best configuration for its shape; JSON lines");
  p.threads(o.threads);
  p.integer("--reps", o.reps, "timed repetitions per pass and configuration", 1, 100000);
  p.choice("--model", o.model, "which step's passes", {"bert", "resnet50", "all"});
  p.parse(argc, argv);
  return o;
}

template <class F>
double median_ms(int reps, F&& run) {
  run();
  run();
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return lockstep::bench::median(ms);
}

struct Buffers {
  std::vector<BFloat16> a, b, bias;
  std::vector<float> c32;
  std::vector<BFloat16> c16;
  std::vector<float> a32, b32, bias32;  // float32 copies, for oneDNN without bf16 kernels
};

// The dtype oneDNN's configurations compute in: bf16 where it has the kernels, else
// float32 (see the header).
dnnl::memory::data_type onednn_dtype() {
  return native::onednn_detail::has_bf16() ? dnnl::memory::data_type::bf16
                                           : dnnl::memory::data_type::f32;
}
// The operand pointers oneDNN's configurations read, in onednn_dtype().
struct OnednnOperands {
  void *a, *b, *bias, *c;
  size_t a_bytes, b_bytes, c_bytes;  // bytes per element
};
OnednnOperands onednn_operands(const Pass& s, Buffers& buf) {
  if (onednn_dtype() == dnnl::memory::data_type::bf16) {
    return {buf.a.data(), buf.b.data(), buf.bias.data(),
            s.out_bf16 ? static_cast<void*>(buf.c16.data()) : static_cast<void*>(buf.c32.data()),
            sizeof(BFloat16), sizeof(BFloat16), s.out_bf16 ? sizeof(BFloat16) : sizeof(float)};
  }
  return {buf.a32.data(), buf.b32.data(), buf.bias32.data(), buf.c32.data(),
          sizeof(float), sizeof(float), sizeof(float)};
}
char* at(void* base, int64_t element, size_t bytes) {
  return static_cast<char*>(base) + element * static_cast<int64_t>(bytes);
}

// oneDNN's matmul on the pass's buffers, B plain (as stored) or packed (format any).
double time_onednn(const Pass& s, Buffers& buf, bool pack_b, int reps) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  dnnl::engine& engine = native::onednn_detail::cpu_engine();
  dnnl::stream& stream = native::onednn_detail::thread_stream();
  const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  const dt op = onednn_dtype();
  const OnednnOperands ptr = onednn_operands(s, buf);
  const dnnl::memory::desc a_md({s.m, s.k}, op, s.trans_a ? dims{1, lda} : dims{lda, 1});
  const dnnl::memory::desc b_plain({s.k, s.n}, op, s.trans_b ? dims{1, ldb} : dims{ldb, 1});
  const dnnl::memory::desc b_md =
      pack_b ? dnnl::memory::desc({s.k, s.n}, op, dnnl::memory::format_tag::any) : b_plain;
  const dt out = op == dt::bf16 && s.out_bf16 ? dt::bf16 : dt::f32;
  const dnnl::memory::desc c_md({s.m, s.n}, out, dims{s.n, 1});
  const dnnl::memory::desc bias_md =
      s.bias ? dnnl::memory::desc({1, s.n}, op, dims{s.n, 1}) : dnnl::memory::desc();
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, bias_md, c_md), engine);
  const dnnl::matmul primitive(pd);
  std::vector<dnnl::memory> a_mem, b_mem, c_mem;
  const int64_t a_size = s.m * s.k, b_size = s.k * s.n, c_size = s.m * s.n;
  for (int64_t i = 0; i < s.batch; ++i) {
    a_mem.emplace_back(a_md, engine, at(ptr.a, i * a_size, ptr.a_bytes));
    dnnl::memory b_user(b_plain, engine, at(ptr.b, i * b_size, ptr.b_bytes));
    if (pack_b) {  // the one reorder, outside the clock
      dnnl::memory packed(pd.weights_desc(), engine);
      dnnl::reorder(b_user, packed).execute(stream, b_user, packed);
      stream.wait();
      b_mem.push_back(packed);
    } else {
      b_mem.push_back(b_user);
    }
    c_mem.emplace_back(c_md, engine, at(ptr.c, i * c_size, ptr.c_bytes));
  }
  dnnl::memory bias_mem;
  if (s.bias) bias_mem = dnnl::memory(bias_md, engine, ptr.bias);
  return median_ms(reps, [&] {
    for (int64_t i = 0; i < s.batch; ++i) {
      std::unordered_map<int, dnnl::memory> args{
          {DNNL_ARG_SRC, a_mem[i]}, {DNNL_ARG_WEIGHTS, b_mem[i]}, {DNNL_ARG_DST, c_mem[i]}};
      if (s.bias) args.insert({DNNL_ARG_BIAS, bias_mem});
      primitive.execute(stream, args);
    }
    stream.wait();
  });
}

// oneDNN's matmul as ONE call over the batch, operands dense (batch, rows, cols).
double time_onednn_batched(const Pass& s, Buffers& buf, int reps) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  dnnl::engine& engine = native::onednn_detail::cpu_engine();
  dnnl::stream& stream = native::onednn_detail::thread_stream();
  const int64_t m = s.m, n = s.n, k = s.k;
  const dt op = onednn_dtype();
  const OnednnOperands ptr = onednn_operands(s, buf);
  const dnnl::memory::desc a_md({s.batch, m, k}, op,
                                s.trans_a ? dims{m * k, 1, m} : dims{m * k, k, 1});
  const dnnl::memory::desc b_md({s.batch, k, n}, op,
                                s.trans_b ? dims{k * n, 1, k} : dims{k * n, n, 1});
  const dnnl::memory::desc c_md({s.batch, m, n}, op, dims{m * n, n, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
  const dnnl::matmul primitive(pd);
  const std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(a_md, engine, ptr.a)},
      {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, engine, ptr.b)},
      {DNNL_ARG_DST, dnnl::memory(c_md, engine, ptr.c)}};
  return median_ms(reps, [&] {
    primitive.execute(stream, args);
    stream.wait();
  });
}

// One operand of an attention pass as the step hands it to matmul: `stored` (rows,
// cols) per head, dense or the heads of a (B, T, width E) tensor, viewed transposed
// when `trans` (see Pass).
lockstep::Tensor step_operand(int64_t rows, int64_t cols, bool trans, int width) {
  const int64_t B = 8, H = 12, T = 128, D = 64, E = H * D;
  const int64_t stored_rows = trans ? cols : rows, stored_cols = trans ? rows : cols;
  lockstep::Tensor t;
  if (width == 0) {
    t = lockstep::randn({B, H, stored_rows, stored_cols}).to(lockstep::kBFloat16);
  } else {
    LS_CHECK(stored_rows == T && stored_cols == D, "bench_gemm_best: a head operand is (T, D)");
    t = lockstep::randn({B, T, width * E}).to(lockstep::kBFloat16);
    t = t.narrow(2, (width - 1) * E, E).reshape({B, T, H, D}).transpose(1, 2);  // (B, H, T, D)
  }
  return trans ? t.transpose(2, 3) : t;
}

double time_lockstep(const Pass& s, Buffers& buf, int reps) {
  if (s.batch > 1) {  // attention: native::matmul on the step's layouts (copies included)
    const lockstep::Tensor a = step_operand(s.m, s.k, s.trans_a, s.a_rows);
    const lockstep::Tensor b = step_operand(s.k, s.n, s.trans_b, s.b_rows);
    return median_ms(reps, [&] { (void)native::matmul(a, b); });
  }
  const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  // A weight operand is described as one to gemm_bf16, which may pack it once
  // (the owner stands for the parameter whose bf16 copy B is).
  const native::Bf16Weight weight{std::make_shared<int>(0), /*version=*/1};
  return median_ms(reps, [&] {
    const BFloat16* bias = s.bias ? buf.bias.data() : nullptr;
    auto run = [&]<class Out>(Out* c) {
      native::gemm_bf16(s.trans_a, s.trans_b, s.m, s.n, s.k, buf.a.data(), lda, buf.b.data(), ldb,
                        0.0f, c, s.n, bias, s.weight_b ? &weight : nullptr);
    };
    if (s.out_bf16) {
      run(buf.c16.data());
    } else {
      run(buf.c32.data());
    }
  });
}

}  // namespace

int run_main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  lockstep::set_num_threads(o.threads);  // lockstep's and oneDNN's (both OpenMP)
  std::vector<Pass> passes;
  if (o.model != "resnet50") passes.insert(passes.end(), kBert.begin(), kBert.end());
  if (o.model != "bert") passes.insert(passes.end(), kResnet.begin(), kResnet.end());
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  double worst = 1e9;
  for (const Pass& s : passes) {
    Buffers buf;
    buf.a.resize(s.m * s.k * s.batch);
    buf.b.resize(s.k * s.n * s.batch);
    buf.bias.resize(s.n);
    for (BFloat16& x : buf.a) x = BFloat16(uniform(rng));
    for (BFloat16& x : buf.b) x = BFloat16(uniform(rng));
    for (BFloat16& x : buf.bias) x = BFloat16(uniform(rng));
    (s.out_bf16 ? buf.c16.resize(s.m * s.n * s.batch) : buf.c32.resize(s.m * s.n * s.batch));
    if (onednn_dtype() == dnnl::memory::data_type::f32) {  // float32 copies (see the header)
      buf.a32.assign(buf.a.begin(), buf.a.end());
      buf.b32.assign(buf.b.begin(), buf.b.end());
      buf.bias32.assign(buf.bias.begin(), buf.bias.end());
      buf.c32.resize(s.m * s.n * s.batch);
    }
    const double ours = time_lockstep(s, buf, o.reps);
    const double plain = time_onednn(s, buf, false, o.reps);
    const double packed = time_onednn(s, buf, true, o.reps);
    const double batched = s.batch > 1 ? time_onednn_batched(s, buf, o.reps) : 0.0;
    const double best = std::min(std::min(plain, packed), s.batch > 1 ? batched : plain);
    const double gflop = 2.0 * s.m * s.n * s.k * s.batch * 1e-9;
    worst = std::min(worst, best / ours);
    std::printf(
        "{\"bench\":\"gemm_best\",\"pass\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"batch\":%lld,"
        "\"trans_a\":%s,\"trans_b\":%s,\"out\":\"%s\",\"bias\":%s,\"lockstep_gflops\":%.0f,"
        "\"plain_gflops\":%.0f,\"packed_gflops\":%.0f,\"batched_gflops\":%.0f,"
        "\"lockstep_over_best\":%.3f,\"onednn_dtype\":\"%s\"}\n",
        s.name, static_cast<long long>(s.m), static_cast<long long>(s.n),
        static_cast<long long>(s.k), static_cast<long long>(s.batch), s.trans_a ? "true" : "false",
        s.trans_b ? "true" : "false", s.out_bf16 ? "bf16" : "f32", s.bias ? "true" : "false",
        gflop / (ours * 1e-3), gflop / (plain * 1e-3), gflop / (packed * 1e-3),
        s.batch > 1 ? gflop / (batched * 1e-3) : 0.0, best / ours,
        onednn_dtype() == dnnl::memory::data_type::bf16 ? "bf16" : "f32");
    std::fflush(stdout);
  }
  std::printf("{\"bench\":\"gemm_best\",\"summary\":true,\"threads\":%d,\"worst_ratio\":%.3f}\n",
              o.threads, worst);
  return 0;
}

int main(int argc, char** argv) {
  return lockstep::cli::run("bench_gemm_best", [&] { return run_main(argc, argv); });
}
