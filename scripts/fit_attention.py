#!/usr/bin/env python3
"""Fits the attention curves of the H100 profile (src/model/hardware/h100-nvlink.json) and of the
Blackwell GPU parts (src/model/hardware/gpus/*.json) to their published points, and prints each
curve's residuals on the points it used and on points it did not.

The model (src/model/efficiency.h):
    rate = R e / (e + k_half) x occupancy
    occupancy = min(1, fill(x) / fill(x_chart)),  fill(x) = x / (x + a)
    x = CTAs per SM x balance: CTAs = b H ceil(rows / 128) (rows: queries forward, keys backward),
        balance = the mean tile's work over the largest's (1 unmasked, 1/2 for a causal square)
    x_chart: FlashAttention's benchmark setup, b x s = 16K tokens of 16 heads: 2048 CTAs
e is the keys a query sees (L unmasked, (L + 1) / 2 causal). R and k_half are minimax fits (the
smallest worst relative error) at the chart's own occupancy, where the occupancy term is 1, so the
occupancy parameter a (fitted to ring-flash-attention's 5-head single-GPU column by `ringside
validate`'s fit, src/model/validation/parameters.json) does not change them. Points of other
occupancies (tritonbench's batch 4 x 48 heads, cuDNN's 64 heads) are corrected by it.

Usage: scripts/fit_attention.py   (prints; the profile holds the numbers it prints)
Sources: docs/calibration.md C and F (FA2 and FA3 README charts, FA3 paper Fig. 5 and 6, tritonbench
PRs #1254, #1256, #1267, cuDNN frontend benchmark CSVs, TransformerEngine's attention notebook).
"""
import math

SMS = 132
LENGTHS = [512, 1024, 2048, 4096, 8192, 16384]
OCCUPANCY = {"forward": 1.0, "backward": 0.45}  # a, as fitted (parameters.json); the prior is 1


def fill(x, a):
    return x / (x + a)


def occupancy(b, H, rows, causal, direction, sms=SMS):
    a = OCCUPANCY[direction]
    balance = 0.5 if causal else 1.0
    x = b * H * math.ceil(rows / 128) / sms * balance
    chart = 2048 / sms * balance
    return min(1.0, fill(x, a) / fill(chart, a))


def chart_points(values):
    """FlashAttention's charts: b x s = 16K, 16 heads of d 128."""
    return [(16384 // L, L, 16, v) for L, v in zip(LENGTHS, values) if v is not None]


# (b, L, H, TFLOP/s), d 128, bf16/fp16, H100 SXM5.
CURVES = {
    "fa2.backward": {
        "causal": False, "direction": "backward",
        "fit": chart_points([214, 260, 291, 310, 318, 322]),  # FA3 paper Fig. 6, FA2 rows
        "held_out": [(1, 32768, 8, 337)],  # flash-attention #1051: (1, 32K, 8, 128) FA2 backward
    },
    "fa3.backward": {
        "causal": False, "direction": "backward",
        "fit": chart_points([316, 424, 501, 542, 559, 561]),  # FA3 paper Fig. 6
        "held_out": [(4, 1024, 48, 313.3), (4, 2048, 48, 434.8), (4, 4096, 48, 519.8), (4, 8192, 48, 561.4)],  # tritonbench #1256
    },
    "fa3.backward_causal": {
        "causal": True, "direction": "backward",
        "fit": [(4, 1024, 48, 182), (4, 2048, 48, 316), (4, 4096, 48, 444), (4, 8192, 48, 539)],  # tritonbench #1267
        "held_out": [],
    },
    "cudnn.backward": {
        "causal": False, "direction": "backward",
        "fit": chart_points([305, 408, 465, 499, 518, 516]),  # FA3 paper Fig. 6, cuDNN rows
        "held_out": [(1, 8192, 64, 594), (1, 16384, 64, 612)],  # cuDNN 9.19 on H200, 64 heads (the same SMs)
    },
    "cudnn.backward_causal": {
        "causal": True, "direction": "backward",
        # Fig. 6's non-causal cuDNN backward x the causal / non-causal ratio of cuDNN frontend's 2024
        # benchmark CSV (16 heads: 438.45 / 535.06 at 4K, 461.89 / 536.95 at 8K, 488.56 / 546.53 at
        # 16K) [derived]
        "fit": [(4, 4096, 16, 499 * 438.45 / 535.06), (2, 8192, 16, 518 * 461.89 / 536.95), (1, 16384, 16, 516 * 488.56 / 546.53)],
        "held_out": [(1, 2048, 64, 370), (1, 4096, 64, 474), (1, 8192, 64, 541), (1, 16384, 64, 579)],  # cuDNN 9.19, H200
    },
}


# Blackwell, bf16, d 128 (docs/calibration.md G); every point's call fills the GPU at least as the
# charts' 2048 tiles do, so its occupancy term is 1. A curve with "k_half" set has too few points
# (or points that cannot fix it) for a half-point: its k_half is the stated rule's, R the minimax.
BLACKWELL = {
    "b200 fa4.forward": {  # flash-attention PR #2605, FA4 table: 32K tokens of 16 heads
        "causal": False, "direction": "forward", "sms": 148,
        "fit": [(32 * 1024 // L, L, 16, v) for L, v in zip([1024, 2048, 4096, 8192, 16384], [1145, 1382, 1559, 1646, 1745])],
        "held_out": [(4, 8192, 16, 1534.8)],  # PR #2280, an earlier build
    },
    "b200 fa4.forward_causal": {
        "causal": True, "direction": "forward", "sms": 148,
        "fit": [(32, 1024, 16, 785), (16, 2048, 16, 1132), (8, 4096, 16, 1381)],
        "held_out": [(4, 8192, 16, 1418.1)],  # PR #2280, an earlier build
    },
    "b200 fa4.backward": {  # PR #2280, 2-CTA, one point: k_half B200 cuDNN's [assumed]
        "causal": False, "direction": "backward", "sms": 148, "k_half": 662,
        "fit": [(4, 8192, 16, 1359.8)], "held_out": [],
    },
    "b200 fa4.backward_causal": {
        "causal": True, "direction": "backward", "sms": 148, "k_half": 662,
        "fit": [(4, 8192, 16, 1208.6)], "held_out": [],
    },
    "b200 cudnn.backward_causal": {  # cudnn-frontend be6c079, cuDNN 9.13.1, 128 query heads
        "causal": True, "direction": "backward", "sms": 148,
        "fit": [(1, 8192, 128, 942.5), (1, 16384, 128, 1074.8), (1, 32768, 128, 1108.7), (1, 65536, 128, 1073.1)],
        "held_out": [],
    },
    "b200 cudnn.forward (d 64)": {  # PR #2605's cuDNN column at d 64 (32 heads); x 1428 / 980 for d 128
        "causal": False, "direction": "forward", "sms": 148,
        "fit": [(32 * 1024 // L, L, 32, v) for L, v in zip([1024, 2048, 4096, 8192, 16384], [980, 1072, 1118, 1147, 1157])],
        "held_out": [],
    },
    "b200 cudnn.forward_causal (d 64)": {
        "causal": True, "direction": "forward", "sms": 148,
        "fit": [(32 * 1024 // L, L, 32, v) for L, v in zip([1024, 2048, 4096, 8192, 16384], [627, 826, 977, 1071, 1115])],
        "held_out": [],
    },
    "gb200 cudnn.backward_causal": {  # cuDNN 9.22, batch 2, 64 query heads; a free fit's k_half is 0
        "causal": True, "direction": "backward", "sms": 148, "k_half": 662,
        "fit": [(2, 8192, 64, 1332), (2, 16384, 64, 1328), (2, 32768, 64, 1226)],
        "held_out": [],
    },
}


def modeled(R, k, b, L, H, causal, direction, sms=SMS):
    e = (L + 1) / 2 if causal else L
    return R * e / (e + k) * occupancy(b, H, L, causal, direction, sms)


def fit(curve):
    best = None
    sms = curve.get("sms", SMS)
    for k10 in ([round(curve["k_half"] * 10)] if "k_half" in curve else range(0, 20001)):
        k = k10 / 10
        ratios = [v / modeled(1.0, k, b, L, H, curve["causal"], curve["direction"], sms) for b, L, H, v in curve["fit"]]
        R = 2 * min(ratios) * max(ratios) / (min(ratios) + max(ratios))
        worst = max(abs(R / r - 1) for r in ratios)
        if best is None or worst < best[0] - 1e-12:
            best = (worst, R, k)
    return best


def main():
    for name, curve in {**CURVES, **BLACKWELL}.items():
        worst, R, k = fit(curve)
        print(f"{name}: tflops {R:.0f}, k_half {k:.0f} (worst error on its {len(curve['fit'])} points {100 * worst:.1f}%)")
        for tag in ("fit", "held_out"):
            for b, L, H, v in curve[tag]:
                m = modeled(round(R), round(k), b, L, H, curve["causal"], curve["direction"], curve.get("sms", SMS))
                print(f"  {tag:8s} b {b:2d} L {L:6d} H {H:2d}: published {v:6.1f}, modeled {m:6.1f} ({100 * (m / v - 1):+5.1f}%)")


if __name__ == "__main__":
    main()
