"""safetensors files as dicts of numpy arrays (the format of PyTorch
state_dicts that libattn's CLI reads and writes). BF16 tensors load as their
raw bits (uint16 arrays): numpy has no bfloat16."""
import json
import struct

import numpy as np

_TO_NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32,
          "U8": np.uint8, "BOOL": np.bool_, "BF16": np.uint16}
_FROM_NP = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.float64): "F64",
            np.dtype(np.int64): "I64", np.dtype(np.int32): "I32", np.dtype(np.uint8): "U8",
            np.dtype(np.bool_): "BOOL"}


def load_safetensors(path):
    """{name: ndarray} of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("%s: not a safetensors file" % path)
    n = struct.unpack("<Q", blob[:8])[0]
    if n > len(blob) - 8:
        raise ValueError("%s: header runs past the end of the file" % path)
    header = json.loads(blob[8:8 + n])
    base, out = 8 + n, {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in _TO_NP:
            raise TypeError("%s: tensor %r has dtype %s" % (path, name, t["dtype"]))
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(blob[base + a:base + b], dtype=_TO_NP[t["dtype"]]).reshape(t["shape"]).copy()
    return out


def safetensors_bytes(tensors):
    """The safetensors serialization of {name: ndarray}."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        if a.dtype not in _FROM_NP:
            raise TypeError("tensor %r: dtype %s has no safetensors name here" % (name, a.dtype))
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _FROM_NP[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def save_safetensors(path, tensors):
    with open(path, "wb") as f:
        f.write(safetensors_bytes(tensors))
