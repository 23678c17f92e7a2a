"""bench/torch/models.py — the PyTorch twins of lockstep's benchmark models, and the workloads.

Each network is built so that its module names, parameter shapes and initialisation match the
lockstep model it is compared with:
  resnet18 / resnet50   torchvision's ResNet (models/resnet.h follows torchvision's layout,
                        including ResNet v1.5's stride on the 3x3 convolution).
  Bert                  models/bert.{h,cpp}: token + position + type embeddings, LayerNorm,
                        dropout, a post-norm GELU encoder, MLM head Linear-GELU-LayerNorm, decoder.
  SmallCNN              models/small_cnn.cpp: the Fashion-MNIST network.
workload() builds a model, its fixed input and its loss the way bench/bench_models.h does
(seed 0, the same input every step), so step times compare number for number.

Read before: models/resnet.h, models/bert.h, models/small_cnn.h, bench/bench_models.h.
Read next: bench/torch/step.py, bench/torch/ddp.py.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BERT_BASE_VOCAB = 30522


class Bert(nn.Module):
    """BertConfig's fields as keyword arguments; the defaults are BertConfig::base().

    The submodules are created in the order lockstep registers them (tok, pos, typ, ln, drop,
    enc, head, dec), so a fixed seed draws the same initial values in the same order."""

    def __init__(self, vocab=BERT_BASE_VOCAB, hidden=768, layers=12, heads=12, ffn=3072,
                 max_len=512, type_vocab=2, dropout=0.1, eps=1e-12):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(max_len, hidden)
        self.typ = nn.Embedding(type_vocab, hidden)
        self.ln = nn.LayerNorm(hidden, eps=eps)
        self.drop = nn.Dropout(dropout)
        block = nn.TransformerEncoderLayer(hidden, heads, ffn, dropout=dropout, activation="gelu",
                                           batch_first=True, layer_norm_eps=eps, norm_first=False)
        self.enc = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.LayerNorm(hidden, eps=eps))
        self.dec = nn.Linear(hidden, vocab)

    @staticmethod
    def tiny(**overrides):
        """BertConfig::tiny(): vocab 512, hidden 32, 2 layers, 2 heads, FFN 64, 64 positions."""
        sizes = dict(vocab=512, hidden=32, layers=2, heads=2, ffn=64, max_len=64)
        sizes.update(overrides)
        return Bert(**sizes)

    def forward(self, ids, key_padding_mask=None):  # ids (B, T) int64 -> logits (B, T, vocab)
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)  # (1, T)
        types = torch.zeros_like(ids)                                          # one segment
        h = self.tok(ids) + self.pos(positions) + self.typ(types)              # (B, T, H)
        h = self.drop(self.ln(h))
        h = self.enc(h, src_key_padding_mask=key_padding_mask)
        return self.dec(self.head(h))


class SmallCNN(nn.Module):
    """conv(1->32, 3x3, pad 1)-ReLU-maxpool2 - conv(32->64, 3x3, pad 1)-ReLU-maxpool2 -
    fc(64*7*7 -> 128)-ReLU - fc(128 -> 10); (N, 1, 28, 28) -> (N, 10)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)  # (N, 32, 14, 14)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)  # (N, 64, 7, 7)
        return self.fc2(F.relu(self.fc1(h.flatten(1))))


def resnet(name, num_classes=1000):
    import torchvision  # only the ResNets need it
    return getattr(torchvision.models, name)(weights=None, num_classes=num_classes)


MODELS = ("resnet50", "resnet18", "bert", "bert-tiny")


def workload(name, batch, image=224, seq=None, layers=None):
    """(model, input, loss(output) -> scalar), seeded like bench/bench_models.h.

    ResNet: x randn (B, 3, S, S), labels randint [0, 1000). BERT: ids and labels randint
    [0, vocab) (B, T), cross-entropy over every position. layers/seq default to 12/128
    (bert) and 2/64 (bert-tiny)."""
    torch.manual_seed(0)
    if name in ("resnet50", "resnet18"):
        model = resnet(name)
        x = torch.randn(batch, 3, image, image)
        y = torch.randint(0, 1000, (batch,))
        return model, x, lambda out: F.cross_entropy(out, y)
    if name == "bert":
        model = Bert(layers=layers or 12)
        seq = seq or 128
    elif name == "bert-tiny":
        model = Bert.tiny(layers=layers or 2)
        seq = seq or 64
    else:
        raise SystemExit(f"models.py: unknown model '{name}' (one of {', '.join(MODELS)})")
    vocab = model.dec.out_features
    ids = torch.randint(0, vocab, (batch, seq))
    labels = torch.randint(0, vocab, (batch, seq))
    return model, ids, lambda out: F.cross_entropy(out.reshape(-1, vocab), labels.reshape(-1))
