"""Registry of the small models that make up ``testdata/``.

Every model is built from ``torch.manual_seed(seed)`` random initialisation; nothing is
downloaded.  ``build(name, seed)`` returns ``(model, example_inputs)``; ``REGISTRY[name]`` holds
the per-model settings (whether a ``model.pt2`` is written, notes for ``meta.json``, tolerance).

Run ``python -m fxhlo.models`` to list the registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import nn

DEFAULT_SEED = 0


@dataclass
class ModelSpec:
    name: str
    builder: Callable[[], Tuple[nn.Module, tuple]]
    save_pt2: bool = False
    notes: Optional[str] = None
    tolerance: Optional[Dict[str, float]] = None
    extra_meta: Dict[str, object] = field(default_factory=dict)


REGISTRY: Dict[str, ModelSpec] = {}


def register(name: str, *, save_pt2: bool = False, notes: Optional[str] = None,
             tolerance: Optional[Dict[str, float]] = None, **extra_meta):
    def deco(fn):
        REGISTRY[name] = ModelSpec(name, fn, save_pt2=save_pt2, notes=notes,
                                   tolerance=tolerance, extra_meta=extra_meta)
        return fn
    return deco


def build(name: str, seed: int = DEFAULT_SEED) -> Tuple[nn.Module, tuple]:
    """Build registered model ``name`` with seed ``seed``: returns (model in eval mode, inputs)."""
    if name not in REGISTRY:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(REGISTRY))}")
    torch.manual_seed(seed)
    model, inputs = REGISTRY[name].builder()
    return model.eval(), tuple(inputs)


def _randomize_bn(module: nn.Module) -> None:
    """Give every BatchNorm non-trivial affine params and running statistics (eval-mode BN)."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))
                m.bias.copy_(0.1 * torch.randn_like(m.bias))
                m.running_mean.copy_(0.1 * torch.randn_like(m.running_mean))
                m.running_var.copy_(0.5 + torch.rand_like(m.running_var))


# --------------------------------------------------------------------------------------- mlp

class MLP(nn.Module):
    def __init__(self, sizes=(32, 64, 64, 10)):
        super().__init__()
        self.fc1 = nn.Linear(sizes[0], sizes[1])
        self.fc2 = nn.Linear(sizes[1], sizes[2])
        self.fc3 = nn.Linear(sizes[2], sizes[3])
        self.act = nn.GELU()

    def forward(self, x):
        x = self.act(self.fc1(x))
        x = self.act(self.fc2(x))
        return self.fc3(x)


@register("mlp", save_pt2=True, notes="3-layer MLP 32->64->64->10 with GELU (erf)")
def _mlp():
    return MLP(), (torch.randn(4, 32),)


# --------------------------------------------------------------------------------------- cnn

class SmallCNN(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(16 * 4 * 4, num_classes)

    def forward(self, x):
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        x = self.pool(self.relu(self.bn2(self.conv2(x))))
        x = torch.flatten(x, 1)
        return self.fc(x)


@register("cnn", save_pt2=True,
          notes="conv-bn-relu-maxpool x2 + flatten + linear; BN in eval mode with random running stats")
def _cnn():
    m = SmallCNN()
    _randomize_bn(m)
    return m, (torch.randn(2, 3, 16, 16),)


# ---------------------------------------------------------------------------------- resnet18

RESNET_WIDTHS = (16, 32, 64, 128)


def _make_resnet18(widths=RESNET_WIDTHS, num_classes=10):
    from torchvision.models.resnet import BasicBlock, ResNet

    class NarrowResNet(ResNet):
        """torchvision ResNet-18 topology (BasicBlock, [2, 2, 2, 2]) with reduced channel widths.

        Same structure as ``torchvision.models.resnet18``: 7x7/2 stem conv + BN + ReLU, 3x3/2
        maxpool, four stages of two BasicBlocks (1x1 conv + BN downsample where the shape
        changes), adaptive avgpool, fc.  Only the stage widths differ (default 16/32/64/128
        instead of 64/128/256/512) to keep the weights small.
        """

        def __init__(self):
            nn.Module.__init__(self)
            norm_layer = nn.BatchNorm2d
            self._norm_layer = norm_layer
            self.inplanes = widths[0]
            self.dilation = 1
            self.groups = 1
            self.base_width = 64
            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = norm_layer(self.inplanes)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(BasicBlock, widths[0], 2)
            self.layer2 = self._make_layer(BasicBlock, widths[1], 2, stride=2)
            self.layer3 = self._make_layer(BasicBlock, widths[2], 2, stride=2)
            self.layer4 = self._make_layer(BasicBlock, widths[3], 2, stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(widths[3] * BasicBlock.expansion, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)

    return NarrowResNet()


@register("resnet18", save_pt2=False,
          notes="torchvision ResNet-18 topology (BasicBlock [2,2,2,2], 7x7/2 stem, maxpool, "
                "downsample, adaptive avgpool, fc) with REDUCED stage widths 16/32/64/128 "
                "(torchvision uses 64/128/256/512) to keep testdata small; random BN stats",
          tolerance={"rtol": 1e-4, "atol": 1e-4},
          widths=list(RESNET_WIDTHS))
def _resnet18():
    m = _make_resnet18()
    _randomize_bn(m)
    return m, (torch.randn(1, 3, 64, 64),)


# ------------------------------------------------------------------------ transformer_encoder

@register("transformer_encoder", save_pt2=False,
          notes="nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, "
                "batch_first=True, dropout=0.0)")
def _transformer_encoder():
    m = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True,
                                   dropout=0.0)
    return m, (torch.randn(2, 8, 32),)


# -------------------------------------------------------------------------------------- gpt2

class GPT2Logits(nn.Module):
    """Wraps a GPT2LMHeadModel so forward(input_ids) returns the logits tensor only."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids):
        out = self.lm(input_ids=input_ids, use_cache=False, return_dict=True)
        return out.logits


@register("gpt2", save_pt2=True,
          notes="transformers GPT2LMHeadModel, n_layer=2 n_head=2 n_embd=32 vocab=128 "
                "n_positions=32, eager attention, no dropout; returns logits only; "
                "lm_head tied to wte")
def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=128, n_positions=32,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                     bos_token_id=0, eos_token_id=0)
    cfg._attn_implementation = "eager"
    lm = GPT2LMHeadModel(cfg)
    lm.eval()
    ids = torch.randint(0, cfg.vocab_size, (1, 8), dtype=torch.int64)
    return GPT2Logits(lm), (ids,)


# -------------------------------------------------------------------------------- reductions

class Reductions(nn.Module):
    """Exercises indexing / reduction / selection ops rather than layers."""

    def forward(self, x, idx, gidx):
        ls = torch.log_softmax(x, dim=-1)                  # [4,16]
        am = torch.argmax(x, dim=1)                        # [4] i64
        g = torch.gather(ls, 1, gidx)                      # [4,5]
        rows = x[idx]                                      # [3,16]  aten.index.Tensor
        st = x[:, 1::3]                                    # [4,5]   slice with step
        c = torch.cat([g, st], dim=0)                      # [8,5]
        s = c.sum(dim=0)                                   # [5]
        mx = torch.amax(x, dim=1, keepdim=True)            # [4,1]
        cs = torch.cumsum(x, dim=1)                        # [4,16]
        w = torch.where(x > 0.5 * mx, cs, -x)              # [4,16]
        m = rows.mean(dim=(0, 1))                          # []
        big = (am >= 8).to(torch.int64) + am               # [4] i64, comparison + cast
        return ls, am, g, w.mean(dim=-1) + m, s, big


@register("reductions", save_pt2=True,
          notes="log_softmax, argmax, gather, advanced indexing, cat, strided slice, "
                "sum/mean/amax over dims, cumsum, where, comparisons; 6 outputs")
def _reductions():
    x = torch.randn(4, 16)
    idx = torch.tensor([2, 0, 3], dtype=torch.int64)
    gidx = torch.randint(0, 16, (4, 5), dtype=torch.int64)
    return Reductions(), (x, idx, gidx)


def main():
    for name, spec in REGISTRY.items():
        print(f"{name:22s} pt2={spec.save_pt2!s:5s} {spec.notes or ''}")


if __name__ == "__main__":
    main()
