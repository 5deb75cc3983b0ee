#!/usr/bin/env python3
"""Generate the golden files the C tests compare against (needs python3-torch).

    python3 tests/golden/gen_golden.py [OUTDIR]      (default: tests/golden)

Writes, for every case, CASE.weights.safetensors (the module's exact
state_dict, buffers included) and CASE.io.safetensors (x, [y], [mask], out),
plus rng.safetensors (torch.rand, uniform_, nn.Linear init, dropout masks) and
manifest.txt (one case per line). The committed files are what `make test`
uses; `make test` never needs torch.

The seed classes are copied from the notebooks with their evident bugs fixed
the way libattn implements their intent (docs/LAYERS.md):
  - Warner SingleHeadAttention: `_init_` -> `__init__`, `UNBIND` -> `unbind`;
  - nanoGPT Head: `self.dropout = nn.Dropout(dropout)` was never defined;
  - Warner CausalAttention / CausalCrossAttention: `combined_mask +=` mutated
    the causal buffer in place; we use `causal | padding`;
  - CausalCrossAttention reshaped y with x's length; k/v use y's own length
    and the causal mask is sliced [:Sq, :Sk];
  - SelfAttention_v1/v2 use `keys.T`, which only means a transpose for 2-D
    input; 3-D input is treated as a batch (`keys.transpose(-2, -1)`);
  - a query row that sees no key gives zeros (PyTorch would give NaN).
"""
import json
import math
import os
import random
import struct
import sys

import torch
import torch.nn as nn

torch.set_num_threads(1)
FLAVOR = "mkl" if torch.backends.mkl.is_available() else "nomkl"


# --------------------------------------------------------------------------
# safetensors writer (no dependency on the safetensors package)

def save_st(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        if t.dtype == torch.bool:
            dt, raw = "BOOL", bytes(t.to(torch.uint8).flatten().tolist())
        elif t.dtype == torch.uint8:
            dt, raw = "U8", bytes(t.flatten().tolist())
        elif t.dtype in (torch.float16, torch.bfloat16):
            dt = "F16" if t.dtype == torch.float16 else "BF16"
            raw = struct.pack("<%dh" % t.numel(), *t.flatten().view(torch.int16).tolist())
        elif t.dtype in (torch.int64, torch.int32):
            n = 8 if t.dtype == torch.int64 else 4
            dt = "I64" if n == 8 else "I32"
            raw = struct.pack("<%d%s" % (t.numel(), "q" if n == 8 else "i"), *t.flatten().tolist())
        else:
            t = t.to(torch.float32)
            dt = "F32"
            raw = struct.pack("<%df" % t.numel(), *t.flatten().tolist())
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def softmax_rows(attn):
    """softmax over the last dim; rows with every key masked give zeros (and
    zero gradients, with no NaN anywhere in backward)."""
    dead = torch.isneginf(attn).all(dim=-1, keepdim=True)
    return torch.softmax(attn.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)


CAPTURE = None  # a list while fwd_bwd records the attention weights (eval cases)


def seen(w):
    """The seed classes pass their softmax output through here (before any
    dropout) so that eval cases can store the attention weights."""
    if CAPTURE is not None:
        CAPTURE.append(w.detach().clone())
    return w


def stacked_weights(ws):
    """Captured weights as (B, heads, S, Sk), heads in module order."""
    out = []
    for w in ws:
        if w.dim() == 2:
            w = w[None, None]
        elif w.dim() == 3:
            w = w[:, None]
        out.append(w)
    return torch.cat(out, dim=1)


# --------------------------------------------------------------------------
# The seed classes (intent-fixed, see module docstring)

class SelfAttention_v1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        keys = x @ self.W_key
        queries = x @ self.W_query
        values = x @ self.W_value
        attn_scores = queries @ keys.transpose(-2, -1)
        attn_weights = seen(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))
        return attn_weights @ values


class SelfAttention_v2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.transpose(-2, -1)
        attn_weights = seen(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))
        return attn_weights @ values


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.d_out = d_out
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x)
        queries = self.W_query(x)
        values = self.W_value(x)
        attn_scores = queries @ keys.transpose(1, 2)
        attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
        attn_weights = seen(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))
        attn_weights = self.dropout(attn_weights)
        return attn_weights @ values


class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)])

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], dim=-1)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        attn_scores.masked_fill_(mask_bool, -torch.inf)
        attn_weights = seen(torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1))
        attn_weights = self.dropout(attn_weights)
        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)


class Head(nn.Module):
    def __init__(self, n_embd, head_size, block_size, dropout):
        super().__init__()
        self.key = nn.Linear(n_embd, head_size, bias=False)
        self.query = nn.Linear(n_embd, head_size, bias=False)
        self.value = nn.Linear(n_embd, head_size, bias=False)
        self.register_buffer('tril', torch.tril(torch.ones(block_size, block_size)))
        self.dropout = nn.Dropout(dropout)  # missing in the seed

    def forward(self, x):
        B, T, C = x.shape
        k = self.key(x)
        q = self.query(x)
        wei = q @ k.transpose(-2, -1) * C ** -0.5
        wei = wei.masked_fill(self.tril[:T, :T] == 0, float('-inf'))
        wei = seen(torch.softmax(wei, dim=-1))
        wei = self.dropout(wei)
        v = self.value(x)
        return wei @ v


class GptMultiHeadAttention(nn.Module):
    def __init__(self, n_embd, num_heads, head_size, block_size, dropout):
        super().__init__()
        self.heads = nn.ModuleList([Head(n_embd, head_size, block_size, dropout) for _ in range(num_heads)])
        self.proj = nn.Linear(n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        out = torch.cat([h(x) for h in self.heads], dim=-1)
        return self.dropout(self.proj(out))


class SingleHeadAttention(nn.Module):
    def __init__(self, hidden_size, bias=True):  # seed: `_init_`
        super().__init__()
        self.Wqkv = nn.Linear(hidden_size, (hidden_size // 4) * 3, bias=bias)
        self.Wo = nn.Linear(hidden_size // 4, hidden_size, bias=bias)

    def forward(self, x):
        B, S, C = x.shape
        q, k, v = self.Wqkv(x).reshape(B, S, 3, C // 4).unbind(dim=2)  # seed: `UNBIND`
        attn = q @ k.transpose(-2, -1)
        attn = attn / math.sqrt(k.size(-1))
        attn = seen(attn.softmax(dim=-1))
        x = attn @ v
        return self.Wo(x)


class MultiHeadAttetion(nn.Module):
    def __init__(self, hidden_size, num_heads, attn_drop=0.1, out_drop=0.1, bias=True):
        super().__init__()
        assert hidden_size % num_heads == 0
        self.nh = num_heads
        self.Wqkv = nn.Linear(hidden_size, hidden_size * 3, bias=bias)
        self.Wo = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.out_drop = nn.Dropout(out_drop)

    def forward(self, x):
        B, S, C = x.shape
        x = self.Wqkv(x).reshape(B, S, 3, self.nh, C // self.nh)
        q, k, v = x.transpose(3, 1).unbind(dim=2)
        attn = q @ k.transpose(-2, -1)
        attn = attn / math.sqrt(k.size(-1))
        attn = seen(attn.softmax(dim=-1))
        attn = self.attn_drop(attn)
        x = attn @ v
        return self.out_drop(self.Wo(x.transpose(1, 2).reshape(B, S, C)))


class BidirectionalAttention(nn.Module):
    def __init__(self, hidden_size, num_heads, attn_drop=0.1, out_drop=0.1, bias=True):
        super().__init__()
        assert hidden_size % num_heads == 0
        self.nh = num_heads
        self.Wqkv = nn.Linear(hidden_size, hidden_size * 3, bias=bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.Wo = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.out_drop = nn.Dropout(out_drop)

    def forward(self, x, mask=None):
        B, S, C = x.shape
        x = self.Wqkv(x).reshape(B, S, 3, self.nh, C // self.nh)
        q, k, v = x.transpose(3, 1).unbind(dim=2)
        attn = q @ k.transpose(-2, -1)
        attn = attn / math.sqrt(k.size(-1))
        if mask is not None:
            attn = attn.masked_fill(mask.view(B, 1, 1, S), float('-inf'))
        attn = seen(softmax_rows(attn))
        attn = self.attn_drop(attn)
        x = attn @ v
        x = x.transpose(1, 2).reshape(B, S, C)
        return self.out_drop(self.Wo(x))


class WarnerCausalAttention(nn.Module):
    def __init__(self, hidden_size, num_heads, context_size, attn_drop=0.1, out_drop=0.1, bias=True):
        super().__init__()
        assert hidden_size % num_heads == 0
        self.nh = num_heads
        self.Wqkv = nn.Linear(hidden_size, hidden_size * 3, bias=bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.Wo = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.out_drop = nn.Dropout(out_drop)
        self.register_buffer('causal_mask',
                             torch.triu(torch.ones([context_size, context_size], dtype=torch.bool), diagonal=1)
                             .view(1, 1, context_size, context_size), persistent=False)

    def forward(self, x, mask=None):
        B, S, C = x.shape
        x = self.Wqkv(x).reshape(B, S, 3, self.nh, C // self.nh)
        q, k, v = x.transpose(3, 1).unbind(dim=2)
        attn = q @ k.transpose(-2, -1)
        attn = attn / math.sqrt(k.size(-1))
        combined_mask = self.causal_mask[:, :, :S, :S]
        if mask is not None:
            combined_mask = combined_mask | mask.view(B, 1, 1, S)  # seed: in-place +=
        attn = attn.masked_fill(combined_mask, float('-inf'))
        attn = seen(softmax_rows(attn))
        attn = self.attn_drop(attn)
        x = attn @ v
        x = x.transpose(1, 2).reshape(B, S, C)
        return self.out_drop(self.Wo(x))


class CausalCrossAttention(nn.Module):
    def __init__(self, hidden_size, num_heads, context_size, attn_drop=0.1, out_drop=0.1, bias=True):
        super().__init__()
        assert hidden_size % num_heads == 0
        self.nh = num_heads
        self.Wq = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.Wkv = nn.Linear(hidden_size, hidden_size * 2, bias=bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.Wo = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.out_drop = nn.Dropout(out_drop)
        self.register_buffer('causal_mask',
                             torch.triu(torch.ones([context_size, context_size], dtype=torch.bool), diagonal=1)
                             .view(1, 1, context_size, context_size), persistent=False)

    def forward(self, x, y, mask=None):
        B, S, C = x.shape
        Sk = y.shape[1]
        q = self.Wq(x).reshape(B, S, self.nh, C // self.nh).transpose(1, 2)
        y = self.Wkv(y).reshape(B, Sk, 2, self.nh, C // self.nh)  # seed: reshape(B, S, ...)
        k, v = y.transpose(3, 1).unbind(dim=2)
        attn = q @ k.transpose(-2, -1)
        attn = attn / math.sqrt(k.size(-1))
        combined_mask = self.causal_mask[:, :, :S, :Sk]
        if mask is not None:
            combined_mask = combined_mask | mask.view(B, 1, 1, Sk)
        attn = attn.masked_fill(combined_mask, float('-inf'))
        attn = seen(softmax_rows(attn))
        attn = self.attn_drop(attn)
        x = attn @ v
        x = x.transpose(1, 2).reshape(B, S, C)
        return self.out_drop(self.Wo(x))


def simple_attention(x):
    return seen(torch.softmax(x @ x.transpose(-2, -1), dim=-1)) @ x


# --------------------------------------------------------------------------

CTX_BIG = 160  # context length of generated buffers (>= every S below)


def make_module(kind, C, heads, bias, p, pout, ctx):
    if kind == "sa_v1":
        return SelfAttention_v1(C, heads)  # heads slot carries d_out here
    if kind == "sa_v2":
        return SelfAttention_v2(C, heads, qkv_bias=bias)
    raise ValueError(kind)


def padding_mask(B, S, rng, style):
    """(B, S) bool, True = padding. style: none/right/left/mixed."""
    m = torch.zeros(B, S, dtype=torch.bool)
    for b in range(B):
        n_pad = rng.randint(0, S - 1) if S > 1 else 0
        left = style == "left" or (style == "mixed" and b % 2 == 1)
        if n_pad:
            if left:
                m[b, :n_pad] = True
            else:
                m[b, S - n_pad:] = True
    return m


def fwd_bwd(m, args, seed):
    """torch.manual_seed(seed); out = m(*args); out.backward(grad_out).
    Returns out and the gradients under the names `attn run --grad` writes."""
    args = [a.detach().clone().requires_grad_(True) if a.is_floating_point() else a for a in args]
    global CAPTURE
    m.zero_grad()
    torch.manual_seed(seed)
    CAPTURE = []
    out = m(*args)
    ws, CAPTURE = CAPTURE, None
    g = torch.randn(out.shape)
    out.backward(g)
    grads = {"grad_out": g, "grad_x": args[0].grad.detach().clone()}
    if len(args) > 1 and args[1].is_floating_point():
        grads["grad_y"] = args[1].grad.detach().clone()
    for name, prm in m.named_parameters():
        grads["grad." + name] = prm.grad.detach().clone() if prm.grad is not None else torch.zeros_like(prm)
    drops = m.training and any(isinstance(d, nn.Dropout) and d.p > 0 for d in m.modules())
    if ws and not drops:  # no dropout: the attention weights every head computed
        grads["attn_weights"] = stacked_weights(ws)
    return out.detach(), grads


class Gen:
    def __init__(self, outdir):
        self.outdir = outdir
        self.manifest = []

    def case(self, name, kind, module, inputs, out, heads=1, train=0, seed=0, p=0.0, pout=0.0, ctx=0, grads=None):
        save_st(os.path.join(self.outdir, name + ".weights.safetensors"), module.state_dict())
        io = {k: v.detach() for k, v in inputs.items()}
        io["out"] = out.detach()
        if grads:
            io.update(grads)
        save_st(os.path.join(self.outdir, name + ".io.safetensors"), io)
        self.manifest.append(
            "case=%s kind=%s heads=%d train=%d seed=%d flavor=%s dropout=%r out_dropout=%r ctx=%d"
            % (name, kind, heads, train, seed, FLAVOR, p, pout, ctx))

    def write_manifest(self):
        with open(os.path.join(self.outdir, "manifest.txt"), "w") as f:
            f.write("# generated by gen_golden.py with torch %s (%s dropout stream)\n" % (torch.__version__, FLAVOR))
            f.write("\n".join(self.manifest) + "\n")


def gen_rng(outdir):
    t = {}
    torch.manual_seed(123)
    t["rand_seed123"] = torch.rand(1000)
    torch.manual_seed(0)
    t["uniform_seed0_m2.5_0.75"] = torch.empty(700).uniform_(-2.5, 0.75)
    torch.manual_seed(2**32 + 5)  # manual_seed keeps the low 32 bits for MT19937
    t["rand_seed2p32p5"] = torch.rand(50)
    for (fin, fout, seed) in ((3, 2, 789), (17, 5, 1), (64, 48, 42), (1, 1, 7)):
        torch.manual_seed(seed)
        lin = nn.Linear(fin, fout)
        t["linear_%d_%d_seed%d.weight" % (fin, fout, seed)] = lin.weight.detach().clone()
        t["linear_%d_%d_seed%d.bias" % (fin, fout, seed)] = lin.bias.detach().clone()
    torch.manual_seed(7)
    x = torch.ones(37, 29)
    t["dropout_p0.3_seed7_call1"] = torch.nn.functional.dropout(x, 0.3, True)
    t["dropout_p0.3_seed7_call2"] = torch.nn.functional.dropout(x, 0.3, True)
    torch.manual_seed(11)
    t["dropout_p0.9_seed11"] = torch.nn.functional.dropout(torch.arange(1, 301, dtype=torch.float32), 0.9, True)
    save_st(os.path.join(outdir, "rng.safetensors"), t)
    with open(os.path.join(outdir, "rng_flavor.txt"), "w") as f:
        f.write(FLAVOR + "\n")


def gen_layers(g, rng):
    # simple: softmax(x x^T) x, 2-D and 3-D, S = 1 included
    for i, (B, S, C, three_d) in enumerate([(1, 6, 3, False), (1, 1, 5, False), (3, 7, 4, True), (2, 1, 8, True),
                                            (2, 33, 16, True)]):
        x = torch.rand(B, S, C) * 2 - 1
        if not three_d:
            x = x[0]

        class Simple(nn.Module):
            def forward(self, x):
                return simple_attention(x)
        out, grads = fwd_bwd(Simple(), (x,), 0)
        g.case("simple_%d" % i, "simple", nn.Module(), {"x": x}, out, grads=grads)
    # sa_v1 / sa_v2
    for kind in ("sa_v1", "sa_v2"):
        shapes = [(1, 6, 3, 2, False, False), (1, 1, 4, 3, False, True), (2, 9, 5, 7, True, True),
                  (3, 17, 8, 8, True, False), (1, 64, 12, 5, False, True)]
        for i, (B, S, C, O, three_d, bias) in enumerate(shapes):
            if kind == "sa_v1" and bias:
                continue
            torch.manual_seed(1000 + i)
            m = SelfAttention_v1(C, O) if kind == "sa_v1" else SelfAttention_v2(C, O, qkv_bias=bias)
            x = torch.randn(B, S, C)
            xin = x if three_d else x[0]
            out, grads = fwd_bwd(m, (xin,), 0)
            g.case("%s_%d" % (kind, i), kind, m, {"x": xin}, out, grads=grads)


def gen_layers_all(g, rng):
    """Every other seed layer, eval and train, with random shapes."""
    cid = [0]

    def run(kind, m, inputs, heads=1, train=0, p=0.0, pout=0.0, ctx=0, args=()):
        seed = rng.randint(0, 10000) if train else 0
        m.train(bool(train))
        out, grads = fwd_bwd(m, args, seed)
        name = "%s_%s%d" % (kind, "train_" if train else "", cid[0])
        cid[0] += 1
        g.case(name, kind, m, inputs, out, heads=heads, train=train, seed=seed, p=p, pout=pout, ctx=ctx, grads=grads)

    Ss = [1, 2, 7, 16, 33, 63, 65, 129]
    for train in (0, 1):
        p = 0.25 if train else 0.0
        for i in range(6):
            S = Ss[(i * 3 + train) % len(Ss)]
            B = rng.randint(1, 3)
            H = rng.randint(1, 4)
            hd = rng.choice([1, 2, 3, 4, 8])
            C = H * hd * rng.choice([1, 2]) if i % 2 else rng.randint(2, 12)
            C = max(C, H)
            C -= C % H
            bias = bool(i % 2)
            ctx = S + rng.randint(0, 5)
            x = torch.randn(B, S, C)
            torch.manual_seed(100 + i)
            O = rng.randint(1, 9)
            run("causal", CausalAttention(C, O, ctx, p, qkv_bias=bias), {"x": x}, train=train, p=p, args=(x,))
            torch.manual_seed(200 + i)
            run("mha_wrapper", MultiHeadAttentionWrapper(C, O, ctx, p, H, qkv_bias=bias), {"x": x}, heads=H,
                train=train, p=p, args=(x,))
            torch.manual_seed(300 + i)
            Om = H * rng.randint(1, 4)
            run("mha", MultiHeadAttention(C, Om, ctx, p, H, qkv_bias=bias), {"x": x}, heads=H, train=train, p=p,
                args=(x,))
            torch.manual_seed(400 + i)
            run("gpt_mha", GptMultiHeadAttention(C, H, C // H, ctx, p), {"x": x}, heads=H, train=train, p=p, pout=p,
                args=(x,))
            C4 = 4 * rng.randint(1, 6)
            x4 = torch.randn(B, S, C4)
            torch.manual_seed(500 + i)
            run("single_head", SingleHeadAttention(C4, bias=bias), {"x": x4}, args=(x4,)) if not train else None
            pa, po = (0.25, 0.125) if train else (0.0, 0.0)
            torch.manual_seed(600 + i)
            run("fused_mha", MultiHeadAttetion(C, H, pa, po, bias=bias), {"x": x}, heads=H, train=train, p=pa,
                pout=po, args=(x,))
            style = ["right", "left", "mixed"][i % 3]
            mask = padding_mask(B, S, rng, style)
            torch.manual_seed(700 + i)
            run("bidirectional", BidirectionalAttention(C, H, pa, po, bias=bias), {"x": x, "mask": mask}, heads=H,
                train=train, p=pa, pout=po, args=(x, mask))
            torch.manual_seed(800 + i)
            m = WarnerCausalAttention(C, H, ctx, pa, po, bias=bias)
            if i % 2:
                run("causal_mha", m, {"x": x, "mask": mask}, heads=H, train=train, p=pa, pout=po, ctx=ctx,
                    args=(x, mask))
            else:
                run("causal_mha", m, {"x": x}, heads=H, train=train, p=pa, pout=po, ctx=0, args=(x,))
            Sk = Ss[(i * 5 + 3 + train) % len(Ss)]
            y = torch.randn(B, Sk, C)
            ctxc = max(S, Sk) + rng.randint(0, 3)
            torch.manual_seed(900 + i)
            m = CausalCrossAttention(C, H, ctxc, pa, po, bias=bias)
            if i % 3 == 2:
                kmask = padding_mask(B, Sk, rng, style)
                run("cross", m, {"x": x, "y": y, "mask": kmask}, heads=H, train=train, p=pa, pout=po, ctx=ctxc,
                    args=(x, y, kmask))
            else:
                run("cross", m, {"x": x, "y": y}, heads=H, train=train, p=pa, pout=po, ctx=ctxc, args=(x, y))


def gen_optim(outdir):
    """Three steps of each optimizer configuration on a fixed parameter set."""
    t = {}
    lines = []
    configs = [
        ("sgd_plain", "sgd", dict(lr=0.1)),
        ("sgd_momentum", "sgd", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
        ("sgd_nesterov", "sgd", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.001)),
        ("sgd_maximize", "sgd", dict(lr=0.02, momentum=0.5, maximize=True)),
        ("adamw_default", "adamw", dict()),
        ("adamw_custom", "adamw", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
        ("adamw_maximize", "adamw", dict(lr=0.003, maximize=True, weight_decay=0.0)),
    ]
    torch.manual_seed(4242)
    p0 = [torch.randn(7, 5), torch.randn(13)]
    grads = [[torch.randn_like(p) for p in p0] for _ in range(3)]
    for i, p in enumerate(p0):
        t["p%d.init" % i] = p
        for s_ in range(3):
            t["p%d.grad%d" % (i, s_)] = grads[s_][i]
    for name, kind, kw in configs:
        params = [nn.Parameter(p.clone()) for p in p0]
        opt = (torch.optim.SGD if kind == "sgd" else torch.optim.AdamW)(params, **kw)
        for s_ in range(3):
            for p, g in zip(params, grads[s_]):
                p.grad = g.clone()
            opt.step()
        for i, p in enumerate(params):
            t["%s.p%d" % (name, i)] = p.detach()
        opts = dict(kw)
        if "betas" in opts:
            opts["beta1"], opts["beta2"] = opts.pop("betas")
        lines.append("name=%s kind=%s %s" % (name, kind, " ".join("%s=%r" % (k, float(v)) for k, v in opts.items())))
    save_st(os.path.join(outdir, "optim.safetensors"), t)
    with open(os.path.join(outdir, "optim_manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(0)
    rng = random.Random(0)
    gen_rng(outdir)
    gen_optim(outdir)
    g = Gen(outdir)
    gen_layers(g, rng)
    gen_layers_all(g, rng)
    g.write_manifest()
    print("wrote %d cases to %s (dropout stream: %s)" % (len(g.manifest), outdir, FLAVOR))


if __name__ == "__main__":
    main()
