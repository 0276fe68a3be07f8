#!/usr/bin/env python3
"""Same-run GEMM anchor for tools/bench/gpu_step.sh: bf16 GEMM rates (fp32 accumulation) at the
shapes a Qwen3-30B-A3B layer runs on a packed bin, through PyTorch's CUDA matmul (cuBLASLt for
bf16 on Hopper). One JSON line per shape: {"impl": "gemm-anchor", "name", "m", "n", "k",
"count", "tflops"}; "count" GEMMs of that shape run back to back (the experts' groups).

Shapes for a bin of T tokens, hidden h, q = Hq*d, kv = Hkv*d, E experts top-k, expert FFN I
(forward GEMMs; backward runs the same m*n*k twice more with transposed operands, timed too):
  qkv projection   [T, h] x [h, q + 2kv]
  output proj      [T, q] x [q, h]
  expert gate_up   E x [T*k/E, h] x [h, 2I]      (uniform routing)
  expert down      E x [T*k/E, I] x [I, h]
Needs torch; `--device cpu` runs the same code on the CPU (fp32) to check the script itself.
"""
import argparse
import json
import statistics
import time

import torch


def rate(device, dtype, m, n, k, count, repeats):
    a = [torch.randn(m, k, device=device, dtype=dtype) for _ in range(count)]
    b = [torch.randn(k, n, device=device, dtype=dtype) for _ in range(count)]

    def run():
        for x, y in zip(a, b):
            torch.matmul(x, y)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    run()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return 2.0 * m * n * k * count / statistics.median(seconds) / 1e12


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--q-heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--expert-ffn", type=int, default=768)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    t, h = args.tokens, args.hidden
    q, kv = args.q_heads * args.head_dim, args.kv_heads * args.head_dim
    rows = max(1, t * args.top_k // args.experts)
    shapes = [("qkv_proj", t, q + 2 * kv, h, 1), ("o_proj", t, h, q, 1),
              ("expert_gate_up", rows, 2 * args.expert_ffn, h, args.experts),
              ("expert_down", rows, h, args.expert_ffn, args.experts)]
    for name, m, n, k, count in shapes:
        print(json.dumps({"impl": "gemm-anchor", "device": args.device, "name": name, "m": m,
                          "n": n, "k": k, "count": count,
                          "tflops": round(rate(args.device, dtype, m, n, k, count,
                                               args.repeats), 3)}))


if __name__ == "__main__":
    main()
