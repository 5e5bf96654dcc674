"""`ringside bench layer --peer pytorch`: ringside's reference layer in PyTorch eager.

The layer of src/layer/reference.h, written as a PyTorch user would (an nn.Module of nn.Linear,
nn.LayerNorm or nn.RMSNorm, nn.Dropout and scaled_dot_product_attention), fp32, one thread, no
torch.compile. Pre-norm:

  h1  = Norm1(x);  q, k, v = split(h1 W_qkv + b_qkv);  q, k = RoPE(q, k)   (rotate-half)
  x2  = x + Dropout1(SDPA(q, k, v, causal, GQA) W_o + b_o)
  out = x2 + Dropout2(act(Norm2(x2) W_1 + b_1) W_2 + b_2)   (act: exact GeLU, or SwiGLU)

Protocol: ringside embeds this file at build time and starts `PYTHON -c <this text> --config JSON`
(JSON: LayerConfig::to_json), with stdin and stdout pipes to it and stderr its own. One line each:
  child   `skip <why>` then exits 0, when torch cannot be imported (or is older than 2.5);
          otherwise, after building the layer and one warm-up forward and backward,
          `ready <parameter count> <torch version> <cpu capability> <threads>`
  parent  `round`: the child runs one forward and one backward(dout), each timed with
          time.perf_counter, and answers `<forward seconds> <backward seconds>`
  parent  `quit`, or end of file: the child exits.

`python3 peer_pytorch.py --check DUMP_DIR` runs the same module on the weights, x, dout and dropout
masks a `ringside reference --dump DUMP_DIR` wrote and compares out, dx and every weight's gradient
with ringside's: exit 1 when one differs by more than 1e-5 of its largest element (needs numpy).
"""
import json
import sys
import time

TOLERANCE = 1e-5  # --check: fp32 rounding of two summation orders, relative to the tensor's largest element


def torch_or_reason():
    """(torch, None), or (None, why this Python cannot run the peer)."""
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install raising something else
        return None, f"{sys.executable} cannot import torch: {e}"
    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 5):
        return None, f"torch {torch.__version__} is older than 2.5 (nn.RMSNorm, SDPA's enable_gqa)"
    return torch, None


def build_layer(torch, c):
    """The layer of config c (LayerConfig::to_json's keys) as an nn.Module."""
    nn, F = torch.nn, torch.nn.functional
    if len(c.get("docs", [])) > 1 or c.get("window"):
        raise SystemExit("peer_pytorch: packed documents and sliding windows are not built here")

    def rope_tables(s, d, theta):
        """cos and sin [s, d] of angle pos theta^(-2i/d), each half's angles twice (rotate-half);
        the angles in float64, as ringside computes them."""
        inv_freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        angle = torch.arange(s, dtype=torch.float64)[:, None] * inv_freq
        angle = torch.cat([angle, angle], dim=-1)
        return angle.cos().float(), angle.sin().float()

    def rotate(x, cos, sin):
        """RoPE, rotate-half (GPT-NeoX, Llama): (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)."""
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            h, self.H, self.Hkv, f = c["h"], c["H"], c["Hkv"], c["f"]
            self.d = h // self.H
            self.causal, self.swiglu = c["causal"], c["mlp"] == "swiglu"
            Norm = nn.LayerNorm if c["norm"] == "layernorm" else nn.RMSNorm
            self.ln1, self.ln2 = Norm(h, eps=c["eps"]), Norm(h, eps=c["eps"])
            self.qkv = nn.Linear(h, (self.H + 2 * self.Hkv) * self.d, bias=c["bias"])
            self.o = nn.Linear(self.H * self.d, h, bias=c["bias"])
            self.fc1 = nn.Linear(h, 2 * f if self.swiglu else f, bias=c["bias"])  # SwiGLU: [gate | up]
            self.fc2 = nn.Linear(f, h, bias=c["bias"])
            self.drop1, self.drop2 = nn.Dropout(c["dropout"]), nn.Dropout(c["dropout"])
            self.rope = c["rope"]
            if self.rope:
                cos, sin = rope_tables(c["s"], self.d, c["rope_theta"])
                self.register_buffer("cos", cos, persistent=False)
                self.register_buffer("sin", sin, persistent=False)

        def forward(self, x):
            b, s, _ = x.shape
            H, Hkv, d = self.H, self.Hkv, self.d
            q, k, v = self.qkv(self.ln1(x)).split([H * d, Hkv * d, Hkv * d], dim=-1)
            q, k, v = (t.view(b, s, -1, d).transpose(1, 2) for t in (q, k, v))  # [b, heads, s, d]
            if self.rope:
                q, k = rotate(q, self.cos, self.sin), rotate(k, self.cos, self.sin)
            # Query head i reads kv head i // (H / Hkv), as ringside's; enable_gqa shares the kv
            # heads without copying them (as fast as repeat_interleave forward, faster backward).
            a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, enable_gqa=Hkv != H)
            x2 = x + self.drop1(self.o(a.transpose(1, 2).reshape(b, s, H * d)))
            u = self.fc1(self.ln2(x2))
            if self.swiglu:
                gate, up = u.chunk(2, dim=-1)
                g = F.silu(gate) * up
            else:
                g = F.gelu(u)  # exact (erf), as ringside's
            return x2 + self.drop2(self.fc2(g))

    return Layer()


def serve(torch, c):
    """The protocol above, on stdin and stdout."""
    torch.set_num_threads(1)
    torch.manual_seed(c["seed"])
    layer = build_layer(torch, c)
    x = torch.randn(c["b"], c["s"], c["h"], requires_grad=True)  # the backward computes dx, as ringside's
    dout = torch.randn(c["b"], c["s"], c["h"])

    def one_round():
        t0 = time.perf_counter()
        out = layer(x)
        t1 = time.perf_counter()
        out.backward(dout)
        t2 = time.perf_counter()
        layer.zero_grad(set_to_none=True)
        x.grad = None
        return t1 - t0, t2 - t1

    one_round()  # warm: pages, the allocator, kernel choices
    count = sum(p.numel() for p in layer.parameters())
    capability = torch.backends.cpu.get_cpu_capability()
    print(f"ready {count} {torch.__version__} {capability} {torch.get_num_threads()}", flush=True)
    for line in iter(sys.stdin.readline, ""):
        if line.strip() == "quit":
            break
        if line.strip() != "round":
            raise SystemExit(f"peer_pytorch: unknown request {line.strip()!r}")
        print("%.9f %.9f" % one_round(), flush=True)


def ringside_name(name):
    """A parameter's name in ringside (layer/weights.h): "ln1.weight" -> "ln1.gamma", "ln1.bias"
    -> "ln1.beta"; the linear layers' names are the same."""
    block, kind = name.split(".")
    if block.startswith("ln"):
        kind = {"weight": "gamma", "bias": "beta"}[kind]
    return f"{block}.{kind}"


def check(torch, folder):
    """--check: this module against a ringside dump; 0 when every tensor agrees, 1 otherwise."""
    import numpy as np

    manifest = json.load(open(f"{folder}/manifest.json"))
    c = manifest["config"]
    tensor = lambda name: torch.from_numpy(np.load(f"{folder}/{manifest['tensors'][name]['file']}"))
    layer = build_layer(torch, c)
    not_weights = ("x", "dout", "out", "dropout1.mask", "dropout2.mask")
    dumped = {n for n in manifest["tensors"] if n not in not_weights and not n.startswith("grad.")}
    names = {n: ringside_name(n) for n, _ in layer.named_parameters()}
    if set(names.values()) != dumped:
        print(f"peer_pytorch: the module's parameters {sorted(names.values())} are not the dump's {sorted(dumped)}")
        return 1
    # nn.Linear holds W as [out, in]; ringside as [in, out].
    with torch.no_grad():
        for n, p in layer.named_parameters():
            w = tensor(names[n])
            p.copy_(w.t() if p.dim() == 2 else w)

    class FixedDropout(torch.nn.Module):
        """Dropout by ringside's mask (Philox), so that the outputs can agree."""

        def __init__(self, mask):
            super().__init__()
            self.mask, self.scale = mask, 1.0 / (1.0 - c["dropout"])

        def forward(self, y):
            return y * self.mask * self.scale

    layer.drop1, layer.drop2 = FixedDropout(tensor("dropout1.mask")), FixedDropout(tensor("dropout2.mask"))
    torch.set_num_threads(1)
    x = tensor("x").requires_grad_()
    out = layer(x)
    out.backward(tensor("dout"))
    pairs = [("out", out, tensor("out")), ("grad.x", x.grad, tensor("grad.x"))]
    for n, p in layer.named_parameters():
        pairs.append((f"grad.{names[n]}", p.grad.t() if p.dim() == 2 else p.grad, tensor(f"grad.{names[n]}")))
    worst = 0.0
    for name, ours, theirs in pairs:
        err = ((ours - theirs).abs().max() / theirs.abs().max()).item()
        worst = max(worst, err)
        print(f"  {name:16} {list(theirs.shape)!s:16} max |torch - ringside| / max |ringside| = {err:.2e}")
    verdict = "agree with ringside's within" if worst <= TOLERANCE else "DIFFER from ringside's: above"
    print(f"peer_pytorch: {len(pairs)} tensors {verdict} {TOLERANCE:g} (worst {worst:.2e}); {layer_summary(c)}")
    return 0 if worst <= TOLERANCE else 1


def layer_summary(c):
    return " ".join(f"{k}={c[k]}" for k in ("b", "s", "h", "H", "Hkv", "f", "norm", "mlp", "bias", "causal", "rope", "dropout"))


def main(argv):
    torch, why = torch_or_reason()
    if argv[:1] == ["--config"] and len(argv) == 2:
        if torch is None:
            print(f"skip {why}", flush=True)
            return 0
        serve(torch, json.loads(argv[1]))
        return 0
    if argv[:1] == ["--check"] and len(argv) == 2:
        if torch is None:
            print(f"peer_pytorch: {why}", file=sys.stderr)
            return 1
        return check(torch, argv[1])
    print("usage: peer_pytorch.py --config JSON | --check DUMP_DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
