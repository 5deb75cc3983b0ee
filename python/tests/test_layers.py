"""libattn.Layer on every layer golden of tests/golden (PyTorch's seed
classes: outputs, attention weights, dropout in train mode), and the KV
cache's incremental forward against the full one."""
import os

import numpy as np
import pytest

import libattn
from conftest import GOLDEN

RTOL, ATOL = 2e-4, 2e-5


def manifest():
    out = []
    for line in open(os.path.join(GOLDEN, "manifest.txt")):
        if line.startswith("#") or not line.strip():
            continue
        out.append(dict(kv.split("=", 1) for kv in line.split()))
    return out


CASES = manifest()


def build(c):
    kind = c["kind"]
    weights = {} if kind == "simple" else libattn.load_safetensors(
        os.path.join(GOLDEN, c["case"] + ".weights.safetensors"))
    kw = dict(heads=int(c["heads"]), dropout=float(c["dropout"]), out_dropout=float(c["out_dropout"]),
              torch_flavor=c["flavor"])
    if kind in ("causal_mha", "cross") and int(c["ctx"]):
        kw["context_length"] = int(c["ctx"])
    return libattn.Layer(kind, weights, **kw)


@pytest.mark.parametrize("c", CASES, ids=[c["case"] for c in CASES])
def test_layer_golden(c):
    io = libattn.load_safetensors(os.path.join(GOLDEN, c["case"] + ".io.safetensors"))
    layer = build(c)
    train = int(c["train"])
    args = dict(y=io.get("y"), mask=io.get("mask"), train=bool(train), seed=int(c["seed"]) if train else None)
    out = layer(io["x"], **args)
    assert out.shape == io["out"].shape
    np.testing.assert_allclose(out, io["out"], rtol=RTOL, atol=ATOL)
    if "attn_weights" in io:
        w = layer.attention_weights(io["x"], **args)
        np.testing.assert_allclose(w, io["attn_weights"], rtol=RTOL, atol=ATOL)


def test_state_dict_round_trip():
    c = next(c for c in CASES if c["kind"] == "mha" and c["train"] == "0")
    weights = libattn.load_safetensors(os.path.join(GOLDEN, c["case"] + ".weights.safetensors"))
    sd = build(c).state_dict()
    assert list(sd) == list(weights)
    for name in sd:
        np.testing.assert_array_equal(sd[name], weights[name].astype(np.float32))


INCREMENTAL = [c for c in CASES if c["kind"] in ("causal", "mha_wrapper", "mha", "gpt_mha", "causal_mha")
               and c["train"] == "0"]


@pytest.mark.parametrize("c", INCREMENTAL, ids=[c["case"] for c in INCREMENTAL])
def test_incremental_matches_full(c):
    io = libattn.load_safetensors(os.path.join(GOLDEN, c["case"] + ".io.safetensors"))
    x = io["x"] if io["x"].ndim == 3 else io["x"][None]
    mask = None
    if "mask" in io:  # the padding of the whole input covers the cache after every chunk
        mask = io["mask"] if io["mask"].ndim == 2 else io["mask"][None]
    layer = build(c)
    cache = layer.kv_cache(x.shape[0], x.shape[1], page_size=16)
    outs = [layer.forward_incremental(cache, x[:, t:t + 3], mask) for t in range(0, x.shape[1], 3)]
    want = io["out"] if io["out"].ndim == 3 else io["out"][None]
    np.testing.assert_allclose(np.concatenate(outs, axis=1), want, rtol=RTOL, atol=ATOL)
