#!/usr/bin/env python3
"""tools/make_golden.py — writes the PyTorch parity golden files in tests/golden/.

Runs against the PyTorch of the benchmarks' reference venv (bench/torch/venv.sh creates it on
first use), with the reference models of bench/torch/models.py; nothing outside the repository:
    "$(bench/torch/venv.sh | head -n1)" tools/make_golden.py     # rewrites tests/golden/
The tests (tests/nn/test_parity.cpp, tests/models/test_parity.cpp,
tests/models/test_models.cpp) read these files; they never need Python.

Each case is one safetensors file (written here by hand, no `safetensors` package:
8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}},
then the raw little-endian data). Keys inside a file:
    input.<name>           the forward's inputs, float32 (or int64 / bool)
    state.<name>           the module's state_dict before forward (parameters and buffers), float32
    grad_output            fixed random weights w: the backward starts from loss = (output * w).sum()
    output                 the forward's output                         \
    grad.input.<name>      d loss / d input, for every floating input    } float64, see below
    grad.param.<name>      d loss / d parameter, PyTorch's names        /
    state_after.<name>     buffers after the forward (BatchNorm's running statistics)
and __metadata__ with "module" (the PyTorch call), "param_order" / "buffer_order"
(named_parameters / named_buffers order, space-separated) and "torch_f32_error" (how far
PyTorch's own float32 run lands from the float64 reference, for each tensor).

§ Note [Golden references are float64]
Inputs and weights are float32 values. The references are computed by PyTorch in float64
from exactly those values, so they are the exact answer up to ~1e-15. The tests run
lockstep twice: in float32 (which must land within float32 rounding of the reference, like
PyTorch's own float32 run does: see "torch_f32_error") and in float64 (which must agree to
~1e-10, tight enough to catch formula slips such as eps placement or a biased/unbiased
variance that hide below float32 noise).

§ Note [Synthetic weights]
The two tiny CNN models (ResNet with BasicBlock [1, 1, 1, 1], 4.9M parameters; the
Fashion-MNIST CNN, 0.4M) are too big to store. Their weights are instead a pure function
of (parameter name, element index), computed identically here and in the C++ test:
    seed = fnv1a32(name); h = fmix32(uint32(j) ^ seed)       (murmur3's finaliser)
    u = h / 2^32 in [0, 1); value = float32(center + scale * (2u - 1)), in float64 arithmetic
with (center, scale) = (0, 1/sqrt(fan_in)) for >= 2-d weights, (1, 0.1) for 1-d "weight"
(BatchNorm's gamma) and (0, 0.1) for biases; buffers keep PyTorch's initial values. Their
parameter gradients are stored as samples: every stride-th element of the flattened
gradient, stride = ceil(numel / 1024) (grad_sample.param.<name>), plus the full gradient's
L2 norm (grad_norm.param.<name>); state_sample.<name> holds the first 16 weights so the test
can first check that its generator reproduces this one bit for bit.

model_bert_tiny_masked.safetensors holds only input.ids, input.key_padding_mask and the
float64 output of model_bert_tiny's model run with that mask (forward only).
Also written: resnet50_params.txt and bert_base_params.txt, one line per tensor,
"param|buffer <name> <dims...>", ending with "total_parameters <count>".
"""
import copy
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "tests", "golden")
sys.path.insert(0, os.path.join(HERE, "..", "bench", "torch"))
import models  # noqa: E402  (bench/torch/models.py: the reference BERT and SmallCNN)

# ---------------------------------------------------------------- safetensors writer

_DTYPES = {torch.float32: ("F32", "<f4"), torch.float64: ("F64", "<f8"),
           torch.int64: ("I64", "<i8"), torch.bool: ("BOOL", "|b1")}


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        code, np_dtype = _DTYPES[t.dtype]
        data = t.numpy().astype(np_dtype).tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    return os.path.getsize(path)


# ---------------------------------------------------------------- helpers

def max_error(a, ref):
    """max |a - ref| / max(max|ref|, tiny): the scale-relative error the tests use."""
    a, ref = a.detach().double(), ref.detach().double()
    scale = max(ref.abs().max().item(), 1e-30) if ref.numel() else 1.0
    return (a - ref).abs().max().item() / scale if ref.numel() else 0.0


def run(module, inputs, forward, dtype, gout):
    """Forward + backward of (out * gout).sum() in `dtype`; returns out, input grads, param grads."""
    m = copy.deepcopy(module).to(dtype)
    xs = {}
    for k, v in inputs.items():
        xs[k] = v.to(dtype).requires_grad_(True) if v.is_floating_point() else v.clone()
    out = forward(m, xs)
    if gout is not None:
        (out * gout.to(dtype)).sum().backward()
    gin = {k: v.grad for k, v in xs.items() if v.is_floating_point()}
    gpar = {k: p.grad for k, p in m.named_parameters()}
    return m, out, gin, gpar


def record(name, module, inputs, forward, description, gout_seed=1234):
    """Runs one case in float64 (the reference) and float32 (to measure PyTorch's own
    float32 error) and writes tests/golden/<name>.safetensors."""
    tensors = {f"input.{k}": v for k, v in inputs.items()}
    for k, v in module.state_dict().items():
        tensors[f"state.{k}"] = v
    with torch.no_grad():
        shape = forward(copy.deepcopy(module).double(),
                        {k: (v.double() if v.is_floating_point() else v) for k, v in inputs.items()}).shape
    gout = torch.randn(shape, generator=torch.Generator().manual_seed(gout_seed))
    tensors["grad_output"] = gout
    m64, out64, gin64, gpar64 = run(module, inputs, forward, torch.float64, gout)
    m32, out32, gin32, gpar32 = run(module, inputs, forward, torch.float32, gout)
    tensors["output"] = out64
    errors = {"output": max_error(out32, out64)}
    for k, g in gin64.items():
        tensors[f"grad.input.{k}"] = g
        errors[f"grad.input.{k}"] = max_error(gin32[k], g)
    for k, g in gpar64.items():
        tensors[f"grad.param.{k}"] = g
        errors[f"grad.param.{k}"] = max_error(gpar32[k], g)
    buffers32 = dict(m32.named_buffers())
    for k, b in m64.named_buffers():
        tensors[f"state_after.{k}"] = b
        if b.is_floating_point():
            errors[f"state_after.{k}"] = max_error(buffers32[k], b)
    meta = {
        "module": description,
        "param_order": " ".join(k for k, _ in module.named_parameters()),
        "buffer_order": " ".join(k for k, _ in module.named_buffers()),
        "torch_f32_error": json.dumps({k: float(f"{v:.3g}") for k, v in errors.items()}),
        "torch_version": torch.__version__,
    }
    size = write_safetensors(os.path.join(GOLDEN, name + ".safetensors"), tensors, meta)
    print(f"{name:34s} {size / 1024:7.1f} KiB  torch f32 vs f64: {max(errors.values()):.2e}")
    return size


# ---------------------------------------------------------------- layers

def layer_cases():
    total = 0
    x_only = lambda m, xs: m(xs["x"])  # noqa: E731

    def case(name, make, inputs, description, forward=x_only, train=True, seed=0):
        torch.manual_seed(seed)
        module = make()
        module.train(train)
        return record(name, module, inputs(), forward, description)

    r = lambda *s: torch.randn(*s)  # noqa: E731
    total += case("nn_linear_2d", lambda: nn.Linear(7, 4), lambda: {"x": r(5, 7)}, "nn.Linear(7, 4), x (5, 7)")
    total += case("nn_linear_3d", lambda: nn.Linear(7, 4), lambda: {"x": r(2, 3, 7)}, "nn.Linear(7, 4), x (2, 3, 7)")
    total += case("nn_linear_nobias", lambda: nn.Linear(7, 4, bias=False), lambda: {"x": r(2, 3, 7)},
                  "nn.Linear(7, 4, bias=False), x (2, 3, 7)")
    total += case("nn_conv2d", lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2),
                  lambda: {"x": r(2, 4, 9, 9)},
                  "nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2), x (2, 4, 9, 9)")
    total += case("nn_conv2d_nobias",
                  lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2, bias=False),
                  lambda: {"x": r(2, 4, 9, 9)},
                  "nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2, bias=False), x (2, 4, 9, 9)")
    total += case("nn_conv2d_rect", lambda: nn.Conv2d(3, 5, (3, 2), stride=(1, 2), padding=(1, 0)),
                  lambda: {"x": r(2, 3, 6, 7)},
                  "nn.Conv2d(3, 5, (3, 2), stride=(1, 2), padding=(1, 0)), x (2, 3, 6, 7)")

    def batch_norm():
        bn = nn.BatchNorm2d(3)
        with torch.no_grad():  # non-trivial affine parameters and running statistics
            bn.weight.copy_(1 + 0.3 * torch.randn(3))
            bn.bias.copy_(0.3 * torch.randn(3))
            bn.running_mean.copy_(0.5 * torch.randn(3))
            bn.running_var.copy_(0.5 + torch.rand(3))
            bn.num_batches_tracked.fill_(5)
        return bn
    bn_x = lambda: {"x": 2 * r(4, 3, 5, 5) + 0.5}  # noqa: E731
    total += case("nn_batch_norm2d_train", batch_norm, bn_x,
                  "nn.BatchNorm2d(3) in train mode (momentum 0.1), x (4, 3, 5, 5)", train=True)
    total += case("nn_batch_norm2d_eval", batch_norm, bn_x, "nn.BatchNorm2d(3) in eval mode, x (4, 3, 5, 5)",
                  train=False)

    def layer_norm(shape):
        def make():
            ln = nn.LayerNorm(shape)
            with torch.no_grad():
                ln.weight.copy_(1 + 0.3 * torch.randn(shape))
                ln.bias.copy_(0.3 * torch.randn(shape))
            return ln
        return make
    total += case("nn_layer_norm", layer_norm(8), lambda: {"x": 3 * r(2, 5, 8) + 1}, "nn.LayerNorm(8), x (2, 5, 8)")
    total += case("nn_layer_norm_2d", layer_norm([4, 8]), lambda: {"x": r(3, 4, 8)},
                  "nn.LayerNorm([4, 8]), x (3, 4, 8)")

    def embedding():
        e = nn.Embedding(10, 6, padding_idx=2)
        with torch.no_grad():
            e.weight[2].copy_(torch.randn(6))  # a non-zero padding row: forward still returns it
        return e
    total += case("nn_embedding", embedding,
                  lambda: {"ids": torch.tensor([[2, 0, 5, 2], [9, 5, 5, 1], [2, 3, 7, 0]])},
                  "nn.Embedding(10, 6, padding_idx=2) with a non-zero padding row, ids (3, 4) int64",
                  forward=lambda m, xs: m(xs["ids"]))
    total += case("nn_gelu", nn.GELU, lambda: {"x": 2 * r(3, 7)}, "nn.GELU() (erf form), x (3, 7)")
    total += case("nn_relu", nn.ReLU, lambda: {"x": r(3, 7)}, "nn.ReLU(), x (3, 7)")
    total += case("nn_max_pool2d", lambda: nn.MaxPool2d(3, stride=2, padding=1), lambda: {"x": r(2, 3, 9, 8)},
                  "nn.MaxPool2d(3, stride=2, padding=1), x (2, 3, 9, 8)")
    total += case("nn_adaptive_avg_pool2d", lambda: nn.AdaptiveAvgPool2d((3, 2)), lambda: {"x": r(2, 3, 7, 5)},
                  "nn.AdaptiveAvgPool2d((3, 2)), x (2, 3, 7, 5): uneven, overlapping windows")
    total += case("nn_adaptive_avg_pool2d_1", lambda: nn.AdaptiveAvgPool2d(1), lambda: {"x": r(2, 3, 5, 4)},
                  "nn.AdaptiveAvgPool2d(1), x (2, 3, 5, 4)")
    total += case("nn_flatten", nn.Flatten, lambda: {"x": r(2, 3, 2, 2)}, "nn.Flatten(), x (2, 3, 2, 2)")

    def padding_mask():  # (B, T) = (2, 5), true = ignore that key; no row fully masked
        return torch.tensor([[False, False, False, True, True], [False, True, False, False, False]])

    def mha():
        m = nn.MultiheadAttention(8, 2, dropout=0.0, batch_first=True)
        with torch.no_grad():  # PyTorch zeroes these biases at init; make them count
            m.in_proj_bias.copy_(0.1 * torch.randn(24))
            m.out_proj.bias.copy_(0.1 * torch.randn(8))
        return m
    total += case("nn_multihead_attention", mha, lambda: {"x": r(2, 5, 8), "key_padding_mask": padding_mask()},
                  "nn.MultiheadAttention(8, 2, batch_first=True), self-attention x (2, 5, 8) with a bool "
                  "key_padding_mask (2, 5), true = ignore",
                  forward=lambda m, xs: m(xs["x"], xs["x"], xs["x"], key_padding_mask=xs["key_padding_mask"],
                                          need_weights=False)[0])
    total += case("nn_multihead_attention_nomask", mha, lambda: {"x": r(2, 5, 8)},
                  "nn.MultiheadAttention(8, 2, batch_first=True), self-attention x (2, 5, 8), no mask",
                  forward=lambda m, xs: m(xs["x"], xs["x"], xs["x"], need_weights=False)[0])

    def encoder_layer():
        m = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation="gelu", batch_first=True,
                                       norm_first=False)
        with torch.no_grad():
            m.self_attn.in_proj_bias.copy_(0.1 * torch.randn(24))
            m.self_attn.out_proj.bias.copy_(0.1 * torch.randn(8))
            for norm in (m.norm1, m.norm2):
                norm.weight.copy_(1 + 0.3 * torch.randn(8))
                norm.bias.copy_(0.3 * torch.randn(8))
        return m
    total += case("nn_transformer_encoder_layer", encoder_layer,
                  lambda: {"x": r(2, 5, 8), "key_padding_mask": padding_mask()},
                  "nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation='gelu', batch_first=True, "
                  "norm_first=False), x (2, 5, 8), src_key_padding_mask (2, 5)",
                  forward=lambda m, xs: m(xs["x"], src_key_padding_mask=xs["key_padding_mask"]))

    # Losses: no module; the backward starts from loss * grad_output (a scalar).
    total += case("loss_cross_entropy", nn.Module,
                  lambda: {"logits": 2 * r(6, 5), "target": torch.tensor([1, -100, 4, 0, -100, 4])},
                  "F.cross_entropy(logits (6, 5), target (6,), ignore_index=-100 default), 2 targets ignored",
                  forward=lambda m, xs: F.cross_entropy(xs["logits"], xs["target"]))
    total += case("loss_cross_entropy_ignore_index", nn.Module,
                  lambda: {"logits": 2 * r(6, 5), "target": torch.tensor([1, 3, 4, 0, 3, 2])},
                  "F.cross_entropy(logits (6, 5), target (6,), ignore_index=3), 2 targets ignored",
                  forward=lambda m, xs: F.cross_entropy(xs["logits"], xs["target"], ignore_index=3))
    total += case("loss_mse", nn.Module, lambda: {"input": r(3, 4), "target": r(3, 4)},
                  "F.mse_loss(input (3, 4), target (3, 4)), mean reduction; both require grad",
                  forward=lambda m, xs: F.mse_loss(xs["input"], xs["target"]))

    # The layers and losses a libtorch user's programs need.
    def group_norm():
        gn = nn.GroupNorm(2, 4)
        with torch.no_grad():  # non-trivial affine parameters
            gn.weight.copy_(1 + 0.3 * torch.randn(4))
            gn.bias.copy_(0.3 * torch.randn(4))
        return gn
    total += case("nn_group_norm", group_norm, lambda: {"x": 2 * r(2, 4, 3, 3) + 0.5},
                  "nn.GroupNorm(2, 4) with random affine parameters, x (2, 4, 3, 3)")
    total += case("nn_conv_transpose2d",
                  lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
                  lambda: {"x": r(2, 4, 4, 5)},
                  "nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2), x (2, 4, 4, 5)")
    total += case("nn_leaky_relu", lambda: nn.LeakyReLU(0.1), lambda: {"x": r(3, 7)}, "nn.LeakyReLU(0.1), x (3, 7)")
    total += case("loss_nll", nn.Module,
                  lambda: {"log_probs": F.log_softmax(2 * r(6, 5), 1), "target": torch.tensor([1, -100, 4, 0, 2, 4])},
                  "F.nll_loss(log_probs (6, 5), target (6,)), mean over the 5 targets not ignored",
                  forward=lambda m, xs: F.nll_loss(xs["log_probs"], xs["target"]))
    total += case("loss_binary_cross_entropy", nn.Module,
                  lambda: {"input": torch.sigmoid(2 * r(3, 4)), "target": torch.rand(3, 4)},
                  "F.binary_cross_entropy(input (3, 4) in (0, 1), target (3, 4), reduction='sum')",
                  forward=lambda m, xs: F.binary_cross_entropy(xs["input"], xs["target"], reduction="sum"))
    total += case("loss_binary_cross_entropy_with_logits", nn.Module,
                  lambda: {"input": 3 * r(3, 4), "target": torch.rand(3, 4)},
                  "F.binary_cross_entropy_with_logits(input (3, 4), target (3, 4)), mean; both require grad",
                  forward=lambda m, xs: F.binary_cross_entropy_with_logits(xs["input"], xs["target"]))
    total += case("loss_smooth_l1", nn.Module, lambda: {"input": 2 * r(3, 4), "target": r(3, 4)},
                  "F.smooth_l1_loss(input (3, 4), target (3, 4), reduction='none', beta=0.5)",
                  forward=lambda m, xs: F.smooth_l1_loss(xs["input"], xs["target"], reduction="none", beta=0.5))

    # Recurrent layers: the output and the final states joined into one tensor
    # (output.flatten(), h_n.flatten()[, c_n.flatten()]), so one backward checks all three.
    flat = lambda *ts: torch.cat([t.flatten() for t in ts])  # noqa: E731

    def lstm_forward(m, xs):
        out, (h, c) = m(xs["x"], (xs["h0"], xs["c0"])) if "h0" in xs else m(xs["x"])
        return flat(out, h, c)
    total += case("nn_lstm", lambda: nn.LSTM(5, 6, num_layers=2, batch_first=True),
                  lambda: {"x": r(3, 4, 5), "h0": r(2, 3, 6), "c0": r(2, 3, 6)},
                  "nn.LSTM(5, 6, num_layers=2, batch_first=True), x (3, 4, 5), h0 and c0 (2, 3, 6); "
                  "output cat(out, h_n, c_n) flattened", forward=lstm_forward)
    total += case("nn_lstm_nobias_nohx", lambda: nn.LSTM(5, 6, bias=False), lambda: {"x": r(4, 3, 5)},
                  "nn.LSTM(5, 6, bias=False), x (4, 3, 5) time-major, no (h0, c0); output cat(out, h_n, c_n) "
                  "flattened", forward=lstm_forward)
    total += case("nn_gru", lambda: nn.GRU(5, 6, num_layers=2, batch_first=True),
                  lambda: {"x": r(3, 4, 5), "h0": r(2, 3, 6)},
                  "nn.GRU(5, 6, num_layers=2, batch_first=True), x (3, 4, 5), h0 (2, 3, 6); output "
                  "cat(out, h_n) flattened", forward=lambda m, xs: flat(*m(xs["x"], xs["h0"])))
    total += case("nn_lstm_bidirectional", lambda: nn.LSTM(5, 6, num_layers=2, bidirectional=True),
                  lambda: {"x": r(4, 3, 5), "h0": r(4, 3, 6), "c0": r(4, 3, 6)},
                  "nn.LSTM(5, 6, num_layers=2, bidirectional=True), x (4, 3, 5), h0 and c0 (4, 3, 6); "
                  "output cat(out, h_n, c_n) flattened", forward=lstm_forward)
    total += case("nn_gru_bidirectional", lambda: nn.GRU(5, 6, batch_first=True, bidirectional=True),
                  lambda: {"x": r(3, 4, 5)},
                  "nn.GRU(5, 6, batch_first=True, bidirectional=True), x (3, 4, 5), no h0; output "
                  "cat(out, h_n) flattened", forward=lambda m, xs: flat(*m(xs["x"])))
    total += case("nn_lstm_cell", lambda: nn.LSTMCell(5, 6), lambda: {"x": r(3, 5), "h": r(3, 6), "c": r(3, 6)},
                  "nn.LSTMCell(5, 6), x (3, 5), (h, c) (3, 6); output cat(h', c') flattened",
                  forward=lambda m, xs: flat(*m(xs["x"], (xs["h"], xs["c"]))))
    total += case("nn_gru_cell", lambda: nn.GRUCell(5, 6), lambda: {"x": r(3, 5), "h": r(3, 6)},
                  "nn.GRUCell(5, 6), x (3, 5), h (3, 6)", forward=lambda m, xs: m(xs["x"], xs["h"]))

    def encoder():
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation="relu", norm_first=True)
        m = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8), enable_nested_tensor=False)
        with torch.no_grad():  # the copies start equal and PyTorch zeroes the attention biases: vary them
            for p in m.parameters():
                p.add_(0.1 * torch.randn(p.shape))
        return m
    total += case("nn_transformer_encoder", encoder,
                  lambda: {"x": r(5, 2, 8), "mask": torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)},
                  "nn.TransformerEncoder(TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation='relu', "
                  "norm_first=True), 2, norm=LayerNorm(8)), every parameter + 0.1 N(0, 1), x (5, 2, 8) "
                  "time-major, mask (5, 5) bool causal (true = hidden)",
                  forward=lambda m, xs: m(xs["x"], mask=xs["mask"]))
    return total


# ---------------------------------------------------------------- models

def fnv1a32(s):
    h = 0x811C9DC5
    for b in s.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def fmix32(h):  # murmur3's finaliser on a uint32 array (multiplication wraps mod 2^32)
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def synthetic(name, shape):
    """See Note [Synthetic weights]."""
    n = int(np.prod(shape)) if len(shape) else 1
    with np.errstate(over="ignore"):
        h = fmix32(np.arange(n, dtype=np.uint32) ^ np.uint32(fnv1a32(name)))
    u = h.astype(np.float64) / 4294967296.0
    if len(shape) >= 2:
        center, scale = 0.0, 1.0 / math.sqrt(n // shape[0])
    elif name.endswith("weight"):
        center, scale = 1.0, 0.1
    else:
        center, scale = 0.0, 0.1
    return torch.from_numpy((center + scale * (2.0 * u - 1.0)).astype(np.float32)).reshape(shape)


def record_synthetic(name, module, x, description):
    """A model with synthetic weights; gradients stored as samples (Note [Synthetic weights])."""
    with torch.no_grad():
        for k, p in module.named_parameters():
            p.copy_(synthetic(k, tuple(p.shape)))
    module.train()
    tensors = {"input.x": x}
    for k, p in module.named_parameters():
        tensors[f"state_sample.{k}"] = p.detach().flatten()[:16].clone()
    forward = lambda m, xs: m(xs["x"])  # noqa: E731
    with torch.no_grad():
        shape = copy.deepcopy(module)(x).shape
    gout = torch.randn(shape, generator=torch.Generator().manual_seed(1234))
    tensors["grad_output"] = gout
    m64, out64, gin64, gpar64 = run(module, {"x": x}, forward, torch.float64, gout)
    m32, out32, gin32, gpar32 = run(module, {"x": x}, forward, torch.float32, gout)
    tensors["output"] = out64
    tensors["grad.input.x"] = gin64["x"]
    errors = {"output": max_error(out32, out64), "grad.input.x": max_error(gin32["x"], gin64["x"])}
    for k, g in gpar64.items():
        stride = -(-g.numel() // 1024)
        tensors[f"grad_sample.param.{k}"] = g.flatten()[::stride]
        tensors[f"grad_norm.param.{k}"] = g.norm()
        errors[f"grad.param.{k}"] = max_error(gpar32[k], g)
    buffers32 = dict(m32.named_buffers())
    for k, b in m64.named_buffers():
        tensors[f"state_after.{k}"] = b
        if b.is_floating_point():
            errors[f"state_after.{k}"] = max_error(buffers32[k], b)
    meta = {
        "module": description,
        "param_order": " ".join(k for k, _ in module.named_parameters()),
        "buffer_order": " ".join(k for k, _ in module.named_buffers()),
        "torch_f32_error": json.dumps({k: float(f"{v:.3g}") for k, v in errors.items()}),
        "torch_version": torch.__version__,
    }
    size = write_safetensors(os.path.join(GOLDEN, name + ".safetensors"), tensors, meta)
    print(f"{name:34s} {size / 1024:7.1f} KiB  torch f32 vs f64: {max(errors.values()):.2e}")
    return size


def tiny_bert():
    """models.Bert with BertConfig::tiny()'s sizes and every dropout off."""
    torch.manual_seed(0)
    m = models.Bert.tiny()
    for sub in m.modules():
        if isinstance(sub, nn.Dropout):
            sub.p = 0.0
        if isinstance(sub, nn.MultiheadAttention):
            sub.dropout = 0.0
    with torch.no_grad():  # PyTorch zeroes these at init; make them count
        for sub in m.modules():
            if isinstance(sub, nn.MultiheadAttention):
                sub.in_proj_bias.copy_(0.1 * torch.randn(sub.in_proj_bias.shape))
                sub.out_proj.bias.copy_(0.1 * torch.randn(sub.out_proj.bias.shape))
    return m.train()


def model_cases():
    total = 0
    # 64x64, not 32x32: at 32x32 layer4's BatchNorms see 2 values per channel, whose
    # normalised output barely depends on the input, so the backward is mostly cancellation
    # (PyTorch's own float32 gradients then differ from float64 by up to 16%).
    torch.manual_seed(0)
    resnet = torchvision.models.resnet.ResNet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1], num_classes=10)
    total += record_synthetic("model_resnet_tiny", resnet, torch.randn(2, 3, 64, 64),
                              "torchvision ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10), train mode, "
                              "x (2, 3, 64, 64), synthetic weights")
    torch.manual_seed(0)
    total += record_synthetic("model_small_cnn", models.SmallCNN(), torch.rand(3, 1, 28, 28),
                              "bench/torch/models.py SmallCNN, x (3, 1, 28, 28) in [0, 1), synthetic weights")

    bert = tiny_bert()
    torch.manual_seed(1)
    ids = torch.randint(0, 512, (2, 12))
    mask = torch.zeros(2, 12, dtype=torch.bool)
    mask[0, 9:] = True
    mask[1, 5:] = True
    size = record("model_bert_tiny", bert, {"ids": ids}, lambda m, xs: m(xs["ids"]),
                  "bench/torch/models.py Bert.tiny() (vocab=512, hidden=32, layers=2, heads=2, ffn=64, max_len=64), "
                  "every dropout p = 0, train mode, ids (2, 12)")
    total += size
    # The same model and ids with a key padding mask: forward only (logits at every position).
    with torch.no_grad():
        out = copy.deepcopy(bert).double()(ids, key_padding_mask=mask)
    tensors = {"input.ids": ids, "input.key_padding_mask": mask, "output": out}
    total += write_safetensors(os.path.join(GOLDEN, "model_bert_tiny_masked.safetensors"), tensors,
                               {"module": "model_bert_tiny's model and ids, enc(x, src_key_padding_mask=mask), "
                                          "mask (2, 12) true at [0, 9:] and [1, 5:]; forward only, float64"})
    return total


def parameter_listing(path, title, module):
    lines = [f"# {title}: named_parameters() then named_buffers(), '<kind> <name> <dims...>'"]
    for k, p in module.named_parameters():
        lines.append(" ".join(["param", k] + [str(d) for d in p.shape]))
    for k, b in module.named_buffers():
        lines.append(" ".join(["buffer", k] + [str(d) for d in b.shape]))
    count = sum(p.numel() for p in module.parameters())
    lines.append(f"total_parameters {count}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{os.path.basename(path):34s} {os.path.getsize(path) / 1024:7.1f} KiB  {count} parameters")
    return os.path.getsize(path)


def main():
    os.makedirs(GOLDEN, exist_ok=True)
    torch.set_num_threads(1)
    total = layer_cases() + model_cases()
    total += parameter_listing(os.path.join(GOLDEN, "resnet50_params.txt"), "torchvision.models.resnet50()",
                               torchvision.models.resnet50(weights=None))
    total += parameter_listing(os.path.join(GOLDEN, "bert_base_params.txt"), "bench/torch/models.py Bert()",
                               models.Bert())
    print(f"total {total / 1024:.1f} KiB in {os.path.normpath(GOLDEN)}")


if __name__ == "__main__":
    main()
