#!/usr/bin/env python3
"""An independent forward pass in NumPy (float64) over the tensors `ringside reference --dump`
(or `run --dump`) wrote: the design's layer written again from its formulas, in another
language, its norm (LayerNorm or RMSNorm), MLP (GeLU or SwiGLU) and biases as the manifest's
config records them, with the attention mask rebuilt from the manifest alone (documents as cu_seqlens, the
window, RoPE positions per document or global) and the manifest's padding checked to hold every
real token once. Exits non-zero when the dumped `out` differs from it by more than fp32
rounding (relative error 1e-5), or when the padding record is inconsistent.

usage: numpy_forward.py DUMP_DIR [S]   (S: the padded length the manifest must record)
"""
import json
import math
import sys

import numpy as np


def main(d, want_slots=None):
    m = json.load(open(f"{d}/manifest.json"))
    c = m["config"]
    t = {name: np.load(f"{d}/{e['file']}").astype(np.float64) for name, e in m["tensors"].items()}
    b, s, h, H, Hkv, p = c["b"], c["s"], c["h"], c["H"], c["Hkv"], c["dropout"]
    hd = h // H

    norm_kind, mlp, bias = c["norm"], c["mlp"], c["bias"]  # a manifest without them is an error
    assert norm_kind in ("layernorm", "rmsnorm") and mlp in ("gelu", "swiglu"), f"unknown layer {norm_kind} {mlp}"

    def norm(x, which):  # LayerNorm, or RMSNorm (x / rms(x) gamma: no mean, no beta)
        g = t[f"{which}.gamma"]
        if norm_kind == "rmsnorm":
            assert f"{which}.beta" not in t, f"RMSNorm has no {which}.beta"
            return x / np.sqrt((x**2).mean(-1, keepdims=True) + c["eps"]) * g
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + c["eps"]) * g + t[f"{which}.beta"]

    def linear(x, name):  # x W (+ b when the layer has biases; their absence checked)
        if not bias:
            assert f"{name}.bias" not in t, f"--no-bias, yet {name}.bias was dumped"
        return x @ t[f"{name}.weight"] + (t[f"{name}.bias"] if bias else 0)

    mask = m.get("mask", {"cu_seqlens": [0, s], "causal": c["causal"], "window": 0, "rope_positions": "global"})
    cu = np.array(mask["cu_seqlens"])
    assert cu[0] == 0 and cu[-1] == s and np.all(np.diff(cu) >= 1), f"bad cu_seqlens {cu}"
    doc = np.searchsorted(cu, np.arange(s), side="right") - 1  # each token's document
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    visible = doc[:, None] == doc[None, :]
    if mask["causal"]:
        visible &= j <= i
    if mask["window"] > 0:
        visible &= (i - j < mask["window"]) if mask["causal"] else (abs(i - j) < mask["window"])
    pos = np.arange(s) - (cu[doc] if mask["rope_positions"] == "document" else 0)
    pad = mask.get("padding")
    if pad:  # the run's slots: every real token exactly once, in order, documents whole
        real = [g["real"] + k for g in pad["segments"] for k in range(g["len"])]
        slots = sum(g["padded"] for g in pad["segments"])
        assert real == list(range(s)) and slots == pad["S"] >= s, f"padding holds tokens {real[:8]}... in {slots} slots"
        print(f"padding: s = {s} real tokens in S = {pad['S']} slots, {len(pad['segments'])} segments")
    if want_slots is not None and (pad or {}).get("S") != want_slots:
        print(f"the manifest records S = {(pad or {}).get('S')} slots, expected {want_slots}")
        return 1

    def rope(x):  # x [b, s, heads, d], rotate-half, theta^(-2i/d), at each token's position
        half = hd // 2
        ang = pos[:, None] * c["rope_theta"] ** (-2.0 * np.arange(half) / hd)
        cos, sin = np.cos(ang)[None, :, None, :], np.sin(ang)[None, :, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    x = t["x"]
    qkv = linear(norm(x, "ln1"), "qkv")
    q = qkv[..., : H * hd].reshape(b, s, H, hd)
    k = qkv[..., H * hd : (H + Hkv) * hd].reshape(b, s, Hkv, hd)
    v = qkv[..., (H + Hkv) * hd :].reshape(b, s, Hkv, hd)
    if c["rope"]:
        q, k = rope(q), rope(k)
    k = np.repeat(k, H // Hkv, axis=2)  # query head i reads kv head i // (H / Hkv)
    v = np.repeat(v, H // Hkv, axis=2)
    scores = np.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(hd)
    scores = np.where(visible, scores, -np.inf)  # every token sees itself, so no row is empty
    prob = np.exp(scores - scores.max(-1, keepdims=True))
    prob /= prob.sum(-1, keepdims=True)
    a = np.einsum("bhij,bjhd->bihd", prob, v).reshape(b, s, H * hd)
    x2 = x + linear(a, "o") * t["dropout1.mask"] / (1 - p)
    u = linear(norm(x2, "ln2"), "fc1")
    if mlp == "gelu":
        g = 0.5 * u * (1 + np.vectorize(math.erf)(u / math.sqrt(2)))
    else:  # SwiGLU (Shazeer 2020): fc1's columns are [gate | up]; SiLU(gate) * up
        f = c["f"]
        assert u.shape[-1] == 2 * f, f"SwiGLU's fc1 has {u.shape[-1]} columns, not 2 f = {2 * f}"
        gate, up = u[..., :f], u[..., f:]
        g = gate / (1 + np.exp(-gate)) * up
    out = x2 + linear(g, "fc2") * t["dropout2.mask"] / (1 - p)

    err = np.linalg.norm(out - t["out"]) / np.linalg.norm(out)
    print(f"numpy forward ({norm_kind}, {mlp}, {'bias' if bias else 'no bias'}) vs dumped out: relative error {err:.3e} (bound 1e-5)")
    return 0 if err < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None))
