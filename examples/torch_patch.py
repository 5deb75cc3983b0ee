"""An unmodified PyTorch model on libattn: libattn.torch.patch().

The model below is written the way current PyTorch code is written, with
torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x). On torch
1.13, which has no such function, this file defines it first from PyTorch's
documented math. The model runs twice on the same input: unpatched (that
math) and patched (libattn's fused forward and backward): the outputs and
every parameter's gradient must agree.

Run: make examples (or, from the repository after make:
PYTHONPATH=python python3 examples/torch_patch.py). Needs torch."""
import math
import sys

try:
    import torch
except ImportError:
    print("skipped: torch is not installed (Debian: apt-get install python3-torch)")
    sys.exit(77)
import torch.nn.functional as F  # noqa: E402

import libattn.torch as lat  # noqa: E402

if not hasattr(F, "scaled_dot_product_attention"):  # torch < 2.0: PyTorch 2.x's documented reference

    def _sdpa_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
        L, S = query.size(-2), key.size(-2)
        bias = torch.zeros(L, S, dtype=query.dtype)
        if is_causal:
            bias.masked_fill_(torch.ones(L, S, dtype=torch.bool).tril().logical_not(), float("-inf"))
        if attn_mask is not None:
            bias = bias.masked_fill(attn_mask.logical_not(), float("-inf")) if attn_mask.dtype == torch.bool \
                else bias + attn_mask
        w = query @ key.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(query.size(-1)))
        w = torch.softmax(w + bias, dim=-1)
        return torch.dropout(w, dropout_p, train=True) @ value

    F.scaled_dot_product_attention = _sdpa_math


class Block(torch.nn.Module):
    """A pre-norm transformer block: causal self-attention and an MLP."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        B, S, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, S, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # the call libattn replaces
        x = x + self.proj(a.transpose(1, 2).reshape(B, S, d))
        return x + self.mlp(self.ln2(x))


def run(model, x):
    model.zero_grad()
    y = model(x)
    y.square().mean().backward()
    return y.detach().clone(), [p.grad.clone() for p in model.parameters()]


torch.manual_seed(0)
S = 32 if "--quick" in sys.argv else 256
model = torch.nn.Sequential(Block(128, 4), Block(128, 4))
x = torch.randn(2, S, 128)
y_ref, g_ref = run(model, x)  # torch's own attention
lat.patch()
try:
    y_lat, g_lat = run(model, x)  # the same model, attention by libattn
finally:
    lat.unpatch()
dy = (y_lat - y_ref).abs().max().item()
dg = max(((a - b).abs().max() / (b.abs().max() + 1e-12)).item() for a, b in zip(g_lat, g_ref))
print("2 transformer blocks, S = %d: output max |diff| %.2e, gradients max relative diff %.2e" % (S, dy, dg))
ok = dy < 1e-4 and dg < 1e-3
print("check: outputs and gradients agree (tolerances 1e-04, 1e-03): %s" % ("ok" if ok else "FAILED"))
sys.exit(0 if ok else 1)
