// bench/bench_lstm_onednn.cpp — does oneDNN's LSTM primitive pay against lockstep's fused
// LSTM layer (Note [Fused LSTM layer])? One layer, one direction, float32, forward and
// backward at the word language model's shape (35 steps, batch 20, 200 -> 200), both on
// the same inputs and weights:
//   fused   nn::LSTM's layer: out = forward(x); backward of out.sum() (x, W and b need grad).
//   onednn  lstm_forward (training, weights in the layout the primitive picks, reordered from
//           PyTorch's layout every call, as a layer whose weights the optimizer changes
//           must) and lstm_backward (its own weight layouts; gradients zeroed, then
//           reordered back), with its workspace; PyTorch's CPU LSTM (mkldnn_rnn_layer)
//           is this primitive.
// Prints one JSON line per path (median ms of forward and forward + backward over --reps,
// after 3 warm-ups) and a summary with onednn / fused, and the largest difference of the
// two outputs (they compute the same function: a check that the comparison is fair).
//
//   build/bin/bench_lstm_onednn [--threads T] [--reps N] [--seq T] [--batch B] [--hidden H]
//
// Read before: nn/lstm_layer.h. Read next: docs/results/examples.md.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "bench/bench_stats.h"
#include "core/factory.h"
#include "core/from_blob.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "nn/rnn.h"
#include "tools/cli.h"

namespace {

namespace ls = lockstep;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct Options {
  int threads = 1, reps = 20;
  int64_t seq = 35, batch = 20, hidden = 200;
};

Options parse(int argc, char** argv) {
  Options o;
  ls::cli::Program p("bench_lstm_onednn", "lockstep's fused LSTM layer beside oneDNN's LSTM primitive, "
                                          "forward and backward, float32; JSON lines, the last a summary.");
  p.threads(o.threads);
  p.integer("--reps", o.reps, "timed repetitions per path", 1, 100000);
  p.integer("--seq", o.seq, "time steps", 1, 100000);
  p.integer("--batch", o.batch, "batch rows", 1, 100000);
  p.integer("--hidden", o.hidden, "input and hidden size", 1, 100000);
  p.parse(argc, argv);
  return o;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Median ms of `fn` over reps calls after 3 warm-ups.
template <class F>
double median_ms(int reps, F&& fn) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(ms_since(t0));
  }
  return ls::bench::median(t);
}

// oneDNN's LSTM over x (T, B, H) with lockstep's layer weights: PyTorch's layout,
// W_ih (4H, I) and W_hh (4H, H) row-major, gates i, f, g, o, which oneDNN reads as ldgoi.
struct OnednnLstm {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::lstm_forward::primitive_desc fwd_pd;
  dnnl::lstm_backward::primitive_desc bwd_pd;
  dnnl::memory x, h0, c0, w_ih, w_hh, bias, y, hy, cy, dy, dx, dh0, dc0, dw_ih, dw_hh, db;
  dnnl::memory w_ih_f, w_hh_f, w_ih_b, w_hh_b, dw_ih_p, dw_hh_p, workspace;

  OnednnLstm(int64_t T, int64_t B, int64_t H, const float* x_data, const float* wih, const float* whh,
             const float* b_sum) {
    const dnnl::memory::dims tnc{T, B, H}, ldnc{1, 1, B, H}, ldigo{1, 1, H, 4, H}, ldgo{1, 1, 4, H};
    auto md = [](const dnnl::memory::dims& d, tag t) { return dnnl::memory::desc(d, dt::f32, t); };
    const auto any_w = md(ldigo, tag::any);
    dnnl::lstm_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::rnn_direction::unidirectional_left2right,
                                md(tnc, tag::tnc), md(ldnc, tag::ldnc), md(ldnc, tag::ldnc), any_w, any_w,
                                md(ldgo, tag::ldgo), md(tnc, tag::tnc), md(ldnc, tag::ldnc), md(ldnc, tag::ldnc));
    fwd_pd = dnnl::lstm_forward::primitive_desc(fd, eng);
    dnnl::lstm_backward::desc bd(dnnl::prop_kind::backward, dnnl::rnn_direction::unidirectional_left2right,
                                 md(tnc, tag::tnc), md(ldnc, tag::ldnc), md(ldnc, tag::ldnc), any_w, any_w,
                                 md(ldgo, tag::ldgo), md(tnc, tag::tnc), md(ldnc, tag::ldnc), md(ldnc, tag::ldnc),
                                 md(tnc, tag::tnc), md(ldnc, tag::ldnc), md(ldnc, tag::ldnc), any_w, any_w,
                                 md(ldgo, tag::ldgo), md(tnc, tag::tnc), md(ldnc, tag::ldnc), md(ldnc, tag::ldnc));
    bwd_pd = dnnl::lstm_backward::primitive_desc(bd, eng, fwd_pd);
    auto mem = [&](const dnnl::memory::desc& d) { return dnnl::memory(d, eng); };
    x = mem(md(tnc, tag::tnc)), y = mem(md(tnc, tag::tnc)), dy = mem(md(tnc, tag::tnc)), dx = mem(md(tnc, tag::tnc));
    h0 = mem(md(ldnc, tag::ldnc)), c0 = mem(md(ldnc, tag::ldnc)), hy = mem(md(ldnc, tag::ldnc));
    cy = mem(md(ldnc, tag::ldnc)), dh0 = mem(md(ldnc, tag::ldnc)), dc0 = mem(md(ldnc, tag::ldnc));
    w_ih = mem(md(ldigo, tag::ldgoi)), w_hh = mem(md(ldigo, tag::ldgoi)), bias = mem(md(ldgo, tag::ldgo));
    dw_ih = mem(md(ldigo, tag::ldgoi)), dw_hh = mem(md(ldigo, tag::ldgoi)), db = mem(md(ldgo, tag::ldgo));
    w_ih_f = mem(fwd_pd.weights_layer_desc()), w_hh_f = mem(fwd_pd.weights_iter_desc());
    w_ih_b = mem(bwd_pd.weights_layer_desc()), w_hh_b = mem(bwd_pd.weights_iter_desc());
    dw_ih_p = mem(bwd_pd.diff_weights_layer_desc()), dw_hh_p = mem(bwd_pd.diff_weights_iter_desc());
    workspace = mem(fwd_pd.workspace_desc());
    const size_t th = static_cast<size_t>(T * B * H) * 4, w = static_cast<size_t>(4 * H * H) * 4;
    std::memcpy(x.get_data_handle(), x_data, th);
    std::memcpy(w_ih.get_data_handle(), wih, w);
    std::memcpy(w_hh.get_data_handle(), whh, w);
    std::memcpy(bias.get_data_handle(), b_sum, static_cast<size_t>(4 * H) * 4);
    for (const dnnl::memory* m : {&h0, &c0, &dh0, &dc0}) std::memset(m->get_data_handle(), 0, m->get_desc().get_size());
    for (float* p = static_cast<float*>(dy.get_data_handle()), *e = p + T * B * H; p < e; ++p) *p = 1.0f;
  }

  void forward() {
    dnnl::reorder(w_ih, w_ih_f).execute(strm, w_ih, w_ih_f);  // the weights changed since last step
    dnnl::reorder(w_hh, w_hh_f).execute(strm, w_hh, w_hh_f);
    dnnl::lstm_forward(fwd_pd).execute(strm, {{DNNL_ARG_SRC_LAYER, x}, {DNNL_ARG_SRC_ITER, h0},
        {DNNL_ARG_SRC_ITER_C, c0}, {DNNL_ARG_WEIGHTS_LAYER, w_ih_f}, {DNNL_ARG_WEIGHTS_ITER, w_hh_f},
        {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST_LAYER, y}, {DNNL_ARG_DST_ITER, hy}, {DNNL_ARG_DST_ITER_C, cy},
        {DNNL_ARG_WORKSPACE, workspace}});
    strm.wait();
  }

  void forward_backward() {
    forward();
    dnnl::reorder(w_ih, w_ih_b).execute(strm, w_ih, w_ih_b);
    dnnl::reorder(w_hh, w_hh_b).execute(strm, w_hh, w_hh_b);
    for (const dnnl::memory* m : {&dw_ih_p, &dw_hh_p, &db}) std::memset(m->get_data_handle(), 0, m->get_desc().get_size());
    dnnl::lstm_backward(bwd_pd).execute(strm, {{DNNL_ARG_SRC_LAYER, x}, {DNNL_ARG_SRC_ITER, h0},
        {DNNL_ARG_SRC_ITER_C, c0}, {DNNL_ARG_WEIGHTS_LAYER, w_ih_b}, {DNNL_ARG_WEIGHTS_ITER, w_hh_b},
        {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST_LAYER, y}, {DNNL_ARG_DST_ITER, hy}, {DNNL_ARG_DST_ITER_C, cy},
        {DNNL_ARG_DIFF_DST_LAYER, dy}, {DNNL_ARG_DIFF_DST_ITER, dh0}, {DNNL_ARG_DIFF_DST_ITER_C, dc0},
        {DNNL_ARG_WORKSPACE, workspace}, {DNNL_ARG_DIFF_SRC_LAYER, dx}, {DNNL_ARG_DIFF_SRC_ITER, dh0},
        {DNNL_ARG_DIFF_SRC_ITER_C, dc0}, {DNNL_ARG_DIFF_WEIGHTS_LAYER, dw_ih_p},
        {DNNL_ARG_DIFF_WEIGHTS_ITER, dw_hh_p}, {DNNL_ARG_DIFF_BIAS, db}});
    dnnl::reorder(dw_ih_p, dw_ih).execute(strm, dw_ih_p, dw_ih);  // back to the parameters' layout
    dnnl::reorder(dw_hh_p, dw_hh).execute(strm, dw_hh_p, dw_hh);
    strm.wait();
  }
};

}  // namespace

int run_main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  ls::set_num_threads(o.threads);
  ls::manual_seed(0);
  const int64_t T = o.seq, B = o.batch, H = o.hidden;
  ls::nn::LSTM lstm(ls::nn::LSTMOptions(H, H));
  const ls::nn::RNNWeights& w = lstm.layer(0);
  const ls::Tensor x = ls::randn({T, B, H});  // (T, B, H)
  const ls::Tensor b_sum = (w.b_ih + w.b_hh).detach().contiguous();  // (4H) oneDNN's one bias
  OnednnLstm dnn(T, B, H, x.data_ptr<float>(), w.w_ih.data_ptr<float>(), w.w_hh.data_ptr<float>(),
                 b_sum.data_ptr<float>());
  const ls::Tensor xg = x.detach().requires_grad_();
  ls::Tensor out;
  const double fused_fwd = median_ms(o.reps, [&] { out = std::get<0>(lstm.forward(xg)); });
  const double fused_all = median_ms(o.reps, [&] {
    lstm.zero_grad();
    std::get<0>(lstm.forward(xg)).sum().backward();
  });
  const double dnn_fwd = median_ms(o.reps, [&] { dnn.forward(); });
  const double dnn_all = median_ms(o.reps, [&] { dnn.forward_backward(); });
  const ls::Tensor y = ls::from_blob(dnn.y.get_data_handle(), {T, B, H});  // (T, B, H)
  const double diff = (out.detach() - y).abs().max().item<double>();
  std::printf("{\"bench\":\"lstm_onednn\",\"path\":\"fused\",\"fwd_ms\":%.3f,\"fwd_bwd_ms\":%.3f}\n", fused_fwd, fused_all);
  std::printf("{\"bench\":\"lstm_onednn\",\"path\":\"onednn\",\"fwd_ms\":%.3f,\"fwd_bwd_ms\":%.3f}\n", dnn_fwd, dnn_all);
  std::printf("{\"bench\":\"lstm_onednn\",\"summary\":true,\"seq\":%lld,\"batch\":%lld,\"hidden\":%lld,\"threads\":%d,"
              "\"fwd_onednn_over_fused\":%.3f,\"fwd_bwd_onednn_over_fused\":%.3f,\"max_abs_diff_out\":%.3g}\n",
              static_cast<long long>(T), static_cast<long long>(B), static_cast<long long>(H), o.threads,
              dnn_fwd / fused_fwd, dnn_all / fused_all, diff);
  return 0;
}

int main(int argc, char** argv) {
  return lockstep::cli::run("bench_lstm_onednn", [&] { return run_main(argc, argv); });
}
