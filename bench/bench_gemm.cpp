// bench/bench_gemm.cpp — GFLOP/s of each GEMM backend on square and model-shaped products.
//
// Shapes: square sizes, the BERT-base linear layers (batch 8, sequence 128, so
// M = 1024 rows) forward and backward, BERT attention as a batch of 96 small
// products (8 sequences x 12 heads), and ResNet50 convolutions as im2col GEMMs
// (batch 8: M = 8 * H * W output pixels, K = C_in * kh * kw, N = C_out).
// Each (shape, backend) prints one JSON line; the last line is a summary.
// float32, alpha = 1, beta = 0; median over --reps timed runs after 2 warm-ups.
// --dtype bf16 times the bfloat16 GEMM instead (core/native/gemm_bf16.h: bf16
// operands, float32 accumulation and output, as a weight gradient is written; on
// AMX hardware oneDNN runs it on the tile units); its backends are onednn and
// reference (Eigen has no bf16 path here).
//
//   build/bin/bench_gemm [--threads T] [--backend eigen|onednn|reference|all] [--reps N]
//                        [--dtype f32|bf16] [--shape NAME] [--list-shapes]
// --backend also takes a comma-separated list (onednn,eigen); --shape runs one shape.
// --list-shapes prints the shapes as JSON (bench/compare_gemm.sh times them with
// OpenBLAS and PyTorch). "all" skips the reference loops on products larger than
// 512^3 multiply-adds (they would take minutes); ask for --backend reference to force them.
//
// Read before: core/native/gemm.h. Read next: bench/compare_gemm.sh, docs/results/gemm.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "tools/cli.h"
#include "core/half.h"
#include "core/native/gemm.h"
#include "core/native/gemm_bf16.h"
#include "core/parallel.h"
#include "bench/bench_stats.h"

namespace {

using lockstep::native::GemmBackend;

struct Shape {
  const char* name;
  int64_t m, n, k;
  bool trans_a = false, trans_b = false;
  int64_t batch = 1;
};

const std::vector<Shape> kShapes = {
    {"square_128", 128, 128, 128},
    {"square_256", 256, 256, 256},
    {"square_512", 512, 512, 512},
    {"square_1024", 1024, 1024, 1024},
    {"square_2048", 2048, 2048, 2048},
    // BERT-base, 1024 tokens: QKV/output projection, FFN up and down (forward),
    // then the backward products of the projection (grad input: B^T; grad weight: A^T).
    {"bert_proj", 1024, 768, 768},
    {"bert_ffn_up", 1024, 3072, 768},
    {"bert_ffn_down", 1024, 768, 3072},
    {"bert_proj_grad_input", 1024, 768, 768, false, true},
    {"bert_ffn_grad_weight", 768, 3072, 1024, true, false},
    // Attention per (sequence, head): scores Q K^T (128x64 . 64x128), context P V.
    {"bert_attn_scores", 128, 128, 64, false, true, 96},
    {"bert_attn_context", 128, 64, 128, false, false, 96},
    // ResNet50, batch 8, as im2col GEMMs (M = 8*H*W, K = Cin*kh*kw, N = Cout).
    {"resnet_conv1x1_56_expand", 8 * 56 * 56, 256, 64},
    {"resnet_conv1x1_56_reduce", 8 * 56 * 56, 64, 256},
    {"resnet_conv3x3_56", 8 * 56 * 56, 64, 576},
    {"resnet_conv3x3_14", 8 * 14 * 14, 256, 2304},
    {"resnet_conv3x3_7", 8 * 7 * 7, 512, 4608},
    {"resnet_fc", 8, 1000, 2048},
    // The word language model's LSTM step (batch 20, 200 units): h W_hh^T with W_hh (800, 200)
    // read transposed, and the same product on a transposed copy (Note [The recurrent weight
    // transposed once] in nn/rnn_layer_common.h).
    {"lstm_step_trans_b", 20, 800, 200, false, true},
    {"lstm_step_plain_b", 20, 800, 200},
};

struct Options {
  int threads = 1;
  std::string backend = "all";
  int reps = 10;
  std::string shape;  // empty: every shape
  bool list_shapes = false;
  std::string dtype = "f32";
};

Options parse(int argc, char** argv) {
  Options o;
  lockstep::cli::Program p("bench_gemm", "GEMM GFLOP/s for square and ResNet/BERT-shaped matrices; JSON lines, the "
                                         "last a summary.");
  p.threads(o.threads);
  p.text("--backend", o.backend, "onednn, eigen, reference, a comma-separated list of them, or all");
  p.integer("--reps", o.reps, "timed repetitions per shape", 1, 100000);
  p.text("--shape", o.shape, "time this shape only (see --list-shapes; default: all)")->default_str("");
  p.flag("--list-shapes", o.list_shapes, "print the shapes and exit");
  p.choice("--dtype", o.dtype, "operand type: f32, or bf16 (float32 accumulation and output)", {"f32", "bf16"});
  p.parse(argc, argv);
  return o;
}

const char* json_bool(bool b) { return b ? "true" : "false"; }

// Median milliseconds of `reps` runs of one (batched) product after two warm-ups;
// T is the operand type (float, or BFloat16 with a float32 result).
template <class T>
double time_shape(const Shape& s, GemmBackend backend, int reps) {
  const int64_t a_size = s.m * s.k, b_size = s.k * s.n, c_size = s.m * s.n;
  std::vector<T> a(a_size * s.batch), b(b_size * s.batch);
  std::vector<float> c(c_size * s.batch);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  for (T& x : a) x = T(uniform(rng));
  for (T& x : b) x = T(uniform(rng));
  std::vector<int64_t> a_off(s.batch), b_off(s.batch), c_off(s.batch);
  for (int64_t i = 0; i < s.batch; ++i) {
    a_off[i] = i * a_size;
    b_off[i] = i * b_size;
    c_off[i] = i * c_size;
  }
  // Contiguous operands: the leading dimension is the stored width.
  const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  lockstep::native::set_gemm_backend(backend);
  auto run = [&] {
    if constexpr (std::is_same_v<T, lockstep::BFloat16>) {
      if (s.batch == 1) {
        lockstep::native::gemm_bf16(s.trans_a, s.trans_b, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, 0.f,
                                    c.data(), s.n);
      } else {
        lockstep::native::gemm_bf16_batched(s.batch, s.trans_a, s.trans_b, s.m, s.n, s.k, a.data(), a_off.data(),
                                            lda, b.data(), b_off.data(), ldb, 0.f, c.data(), c_off.data(), s.n);
      }
    } else if (s.batch == 1) {
      lockstep::native::gemm_with(backend, s.trans_a, s.trans_b, s.m, s.n, s.k, 1.f, a.data(),
                                  lda, b.data(), ldb, 0.f, c.data(), s.n);
    } else {
      lockstep::native::gemm_batched(s.batch, s.trans_a, s.trans_b, s.m, s.n, s.k, 1.f,
                                     a.data(), a_off.data(), lda, b.data(), b_off.data(), ldb,
                                     0.f, c.data(), c_off.data(), s.n);
    }
  };
  run();
  run();
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return lockstep::bench::median(ms);
}

using lockstep::bench::median;  // bench/bench_stats.h

}  // namespace

int run_main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  if (opt.list_shapes) {
    for (const Shape& s : kShapes) {
      std::printf("{\"shape\":\"%s\",\"m\":%ld,\"n\":%ld,\"k\":%ld,\"trans_a\":%s,"
                  "\"trans_b\":%s,\"batch\":%ld}\n",
                  s.name, long(s.m), long(s.n), long(s.k), json_bool(s.trans_a),
                  json_bool(s.trans_b), long(s.batch));
    }
    return 0;
  }
  std::vector<GemmBackend> backends;
  const bool bf16 = opt.dtype == "bf16";
  const std::string names = opt.backend != "all" ? opt.backend : bf16 ? "onednn,reference" : "onednn,eigen,reference";
  std::istringstream name_list(names);
  for (std::string name; std::getline(name_list, name, ',');) {
    if (name == "onednn") {
      backends.push_back(GemmBackend::OneDNN);
    } else if (name == "eigen") {
      if (bf16) {
        std::fprintf(stderr, "bench_gemm: --backend eigen has no bf16 GEMM; with --dtype bf16 use onednn or "
                             "reference\n");
        return 2;
      }
      backends.push_back(GemmBackend::Eigen);
    } else if (name == "reference") {
      backends.push_back(GemmBackend::Reference);
    } else {
      std::fprintf(stderr, "bench_gemm: unknown backend '%s'\n", name.c_str());
      return 2;
    }
  }
  if (!opt.shape.empty() && std::none_of(kShapes.begin(), kShapes.end(), [&](const Shape& s) {
        return opt.shape == s.name;
      })) {
    std::fprintf(stderr, "bench_gemm: unknown shape '%s' (see --list-shapes)\n", opt.shape.c_str());
    return 2;
  }
  const GemmBackend default_backend = lockstep::native::gemm_backend();
  lockstep::set_num_threads(opt.threads);

  std::vector<std::vector<double>> gflops_by_backend(backends.size());
  for (const Shape& s : kShapes) {
    if (!opt.shape.empty() && opt.shape != s.name) continue;
    for (size_t bi = 0; bi < backends.size(); ++bi) {
      const GemmBackend backend = backends[bi];
      const double macs = double(s.m) * double(s.n) * double(s.k) * double(s.batch);
      if (backend == GemmBackend::Reference && opt.backend == "all" && macs > 512.0 * 512 * 512) {
        continue;
      }
      const double ms = bf16 ? time_shape<lockstep::BFloat16>(s, backend, opt.reps)
                             : time_shape<float>(s, backend, opt.reps);
      const double gflops = 2 * macs / (ms * 1e6);
      gflops_by_backend[bi].push_back(gflops);
      std::printf("{\"bench\":\"gemm\",\"shape\":\"%s\",\"m\":%ld,\"n\":%ld,\"k\":%ld,"
                  "\"batch\":%ld,\"trans_a\":%s,\"trans_b\":%s,\"dtype\":\"%s\",\"backend\":\"%s\","
                  "\"threads\":%d,\"reps\":%d,\"median_ms\":%.4f,\"gflops\":%.2f}\n",
                  s.name, long(s.m), long(s.n), long(s.k), long(s.batch), json_bool(s.trans_a),
                  json_bool(s.trans_b), opt.dtype.c_str(), lockstep::native::gemm_backend_name(backend),
                  opt.threads, opt.reps, ms, gflops);
      std::fflush(stdout);
    }
  }
  lockstep::native::set_gemm_backend(default_backend);

  std::printf("{\"bench\":\"gemm\",\"summary\":true,\"dtype\":\"%s\",\"threads\":%d,\"reps\":%d,"
              "\"default_backend\":\"%s\",\"median_gflops\":{",
              opt.dtype.c_str(), opt.threads, opt.reps, lockstep::native::gemm_backend_name(default_backend));
  for (size_t bi = 0; bi < backends.size(); ++bi) {
    std::printf("%s\"%s\":%.2f", bi ? "," : "", lockstep::native::gemm_backend_name(backends[bi]),
                median(gflops_by_backend[bi]));
  }
  std::printf("}}\n");
  return 0;
}

int main(int argc, char** argv) {
  return lockstep::cli::run("bench_gemm", [&] { return run_main(argc, argv); });
}
