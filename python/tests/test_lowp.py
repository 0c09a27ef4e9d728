"""bf16 and f16 models through ``torch.compile(backend="fxhlo")`` run in the fast kernels (no
step on the reference interpreter; docs/runtime.md, "bf16 and f16"), and are at least as
accurate as eager against a float64 run."""

import pytest
import torch
import torch.nn.functional as F

from fxhlo.runner import STATS

pytestmark = pytest.mark.usefixtures("fresh_backend")


class Block(torch.nn.Module):
    """A pre-norm transformer block: layer norm, attention (SDPA, causal), an MLP with GELU,
    Llama's RMS norm in f32, residuals."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.ln = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)
        self.norm_w = torch.nn.Parameter(torch.rand(d) + 0.5)

    def rms(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.norm_w * xf.to(x.dtype)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        x = x + self.down(F.gelu(self.up(self.rms(x))))
        return torch.softmax(x, dim=-1)


class ConvNet(torch.nn.Module):
    """conv + batch norm + ReLU, max pooling, a residual conv, global average pooling, linear."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = F.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
        y = torch.relu(y + self.c2(y))
        return self.fc(y.mean((2, 3)))


def _steps():
    """(steps, steps on the interpreter, their reasons, eager parts) of every graph compiled."""
    gs = list(STATS.graphs.values())
    reasons = {r: n for g in gs for r, n in g.fallback_reasons.items()}
    return (sum(g.steps for g in gs), sum(g.fallback_steps for g in gs), reasons,
            sum(g.eager_partitions for g in gs))


def _max_err(a, b):
    return (a.double() - b.double()).abs().max().item()


def _run(model, x, dtype):
    torch.manual_seed(0)
    m = model().eval()
    with torch.no_grad():
        ref = m.double()(x.double())
        m = m.to(dtype)
        want = m(x.to(dtype))
        got = torch.compile(m, backend="fxhlo")(x.to(dtype))
    return got, want, ref


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("model,shape", [(Block, (2, 16, 64)), (ConvNet, (2, 3, 16, 16))])
def test_low_precision_models_run_in_the_fast_kernels(model, shape, dtype):
    torch.manual_seed(1)
    x = torch.randn(shape)
    got, want, ref = _run(model, x, dtype)
    assert got.dtype == dtype and got.shape == want.shape
    steps, interpreted, reasons, eager = _steps()
    assert steps > 0 and eager == 0
    assert interpreted == 0, reasons
    # Computed in f32 and rounded once per stored value: within twice eager's own error
    # against float64 (eager rounds after every op).
    e_fx, e_eager = _max_err(got, ref), _max_err(want, ref)
    assert e_fx <= 2 * e_eager + 1e-3, (e_fx, e_eager)


def test_bf16_results_are_bf16_values_rounded_once():
    """A chain of bf16 ops is computed in f32 and rounded once: ``exp(x) * 3 + 1`` in bf16
    equals the float64 result rounded to bf16 (eager rounds after each op and can differ)."""
    x = torch.linspace(-4, 4, 1001).to(torch.bfloat16)

    def f(x):
        return torch.exp(x) * 3 + 1

    got = torch.compile(f, backend="fxhlo")(x)
    want = (torch.exp(x.double()) * 3 + 1).to(torch.bfloat16)
    steps, interpreted, reasons, _ = _steps()
    assert steps > 0 and interpreted == 0, reasons
    diff = (got.view(torch.int16).int() - want.view(torch.int16).int()).abs()
    # f32's exp is within an ulp of f32, so a result can cross a bf16 rounding boundary only
    # where the exact value lies next to one: at most one bf16 ulp, rarely.
    assert diff.max().item() <= 1
    assert (diff == 0).float().mean().item() >= 0.99
