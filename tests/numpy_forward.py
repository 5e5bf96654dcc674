#!/usr/bin/env python3
"""An independent forward pass in NumPy (float64) over the tensors `ringside reference --dump`
wrote: the design's layer written again from its formulas, in another language. Exits non-zero
when the dumped `out` differs from it by more than fp32 rounding (relative error 1e-5).

usage: numpy_forward.py DUMP_DIR
"""
import json
import math
import sys

import numpy as np


def main(d):
    m = json.load(open(f"{d}/manifest.json"))
    c = m["config"]
    t = {name: np.load(f"{d}/{e['file']}").astype(np.float64) for name, e in m["tensors"].items()}
    b, s, h, H, Hkv, p = c["b"], c["s"], c["h"], c["H"], c["Hkv"], c["dropout"]
    hd = h // H

    def layernorm(x, g, beta):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + c["eps"]) * g + beta

    def rope(x):  # x [b, s, heads, d], rotate-half, theta^(-2i/d)
        half = hd // 2
        ang = np.arange(s)[:, None] * c["rope_theta"] ** (-2.0 * np.arange(half) / hd)
        cos, sin = np.cos(ang)[None, :, None, :], np.sin(ang)[None, :, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    x = t["x"]
    qkv = layernorm(x, t["ln1.gamma"], t["ln1.beta"]) @ t["qkv.weight"] + t["qkv.bias"]
    q = qkv[..., : H * hd].reshape(b, s, H, hd)
    k = qkv[..., H * hd : (H + Hkv) * hd].reshape(b, s, Hkv, hd)
    v = qkv[..., (H + Hkv) * hd :].reshape(b, s, Hkv, hd)
    if c["rope"]:
        q, k = rope(q), rope(k)
    k = np.repeat(k, H // Hkv, axis=2)  # query head i reads kv head i // (H / Hkv)
    v = np.repeat(v, H // Hkv, axis=2)
    scores = np.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(hd)
    if c["causal"]:
        scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
    prob = np.exp(scores - scores.max(-1, keepdims=True))
    prob /= prob.sum(-1, keepdims=True)
    a = np.einsum("bhij,bjhd->bihd", prob, v).reshape(b, s, H * hd)
    x2 = x + (a @ t["o.weight"] + t["o.bias"]) * t["dropout1.mask"] / (1 - p)
    u = layernorm(x2, t["ln2.gamma"], t["ln2.beta"]) @ t["fc1.weight"] + t["fc1.bias"]
    gelu = 0.5 * u * (1 + np.vectorize(math.erf)(u / math.sqrt(2)))
    out = x2 + (gelu @ t["fc2.weight"] + t["fc2.bias"]) * t["dropout2.mask"] / (1 - p)

    err = np.linalg.norm(out - t["out"]) / np.linalg.norm(out)
    print(f"numpy forward vs dumped out: relative error {err:.3e} (bound 1e-5)")
    return 0 if err < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
