#!/usr/bin/env python3
"""Golden fixture for the Gated DeltaNet ops: HF transformers' own functions (Qwen3-Next
modeling: causal_conv1d_fn torch fallback, torch_chunk_gated_delta_rule with its in-kernel L2
norm, torch_recurrent_gated_delta_rule as a cross-check, Qwen3NextRMSNormGated) run in fp32 on a
small packed bin, forward and autograd backward.

Needs PyPI torch and transformers (never needed by CI; the fixture is committed):
    pip install torch transformers
    python3 tools/golden/ops/make_gated_delta_fixture.py [--out tests/fixtures/ops/gated_delta.json]

The chain per sequence (HF's fallback ignores cu_seqlens, so every sequence runs alone, batch 1,
and the results are concatenated, as reference qwen-moe.md §3.7 prescribes):
    c' = silu(causal depthwise conv(mixed, conv_weight))   -> q | k | v
    beta = sigmoid(b),  g = -exp(A_log) * softplus(a + dt_bias)
    core, final = chunk_gated_delta_rule(q, k, v, g, beta, initial_state, l2norm(q, k) inside,
                                         scale 1/sqrt(dk))
    y = RMSNormGated(core; norm_weight, z)          (plain weight times silu(z))
    loss = sum(y * dy) + sum(final * d_final)
Every input is float32; the C++ side reads the same values (printed with 9 significant digits,
which round-trip exactly) and runs in f64, so the comparison measures HF's fp32 round-off.
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F
import transformers
from transformers.models.qwen3_next import modeling_qwen3_next as hf

LENGTHS = [13, 6]  # a partial last chunk for chunk size 4 in both, one shorter than two chunks
KEY_HEADS, VALUE_HEADS, KEY_DIM, VALUE_DIM, KERNEL = 2, 4, 8, 6, 4
CHUNK_SIZE = 4
SEED = 20261129


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="tests/fixtures/ops/gated_delta.json")
    args = parser.parse_args()
    torch.manual_seed(SEED)
    tokens = sum(LENGTHS)
    key_size, value_size = KEY_HEADS * KEY_DIM, VALUE_HEADS * VALUE_DIM
    conv_dim = 2 * key_size + value_size
    f32 = torch.float32
    inputs = {
        "mixed": torch.randn(tokens, conv_dim, dtype=f32),
        "conv_weight": 0.5 * torch.randn(conv_dim, KERNEL, dtype=f32),
        "z": torch.randn(tokens, VALUE_HEADS, VALUE_DIM, dtype=f32),
        "a": torch.randn(tokens, VALUE_HEADS, dtype=f32),
        "b": torch.randn(tokens, VALUE_HEADS, dtype=f32),
        "A_log": 0.5 * torch.randn(VALUE_HEADS, dtype=f32),
        "dt_bias": torch.randn(VALUE_HEADS, dtype=f32),
        "norm_weight": 1.0 + 0.3 * torch.randn(VALUE_DIM, dtype=f32),
        "initial_state": 0.5 * torch.randn(len(LENGTHS), VALUE_HEADS, KEY_DIM, VALUE_DIM, dtype=f32),
    }
    cotangents = {
        "dy": torch.randn(tokens, VALUE_HEADS, VALUE_DIM, dtype=f32),
        "d_final": torch.randn(len(LENGTHS), VALUE_HEADS, KEY_DIM, VALUE_DIM, dtype=f32),
    }
    leaves = {name: t.clone().requires_grad_(True) for name, t in inputs.items()}
    norm = hf.Qwen3NextRMSNormGated(VALUE_DIM, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(leaves["norm_weight"])
    norm.weight = torch.nn.Parameter(norm.weight)  # its own leaf; gradient read below

    outputs = {"conv": [], "core": [], "y": [], "final_state": []}
    loss = 0
    max_recurrent_gap = 0.0
    begin = 0
    for s, length in enumerate(LENGTHS):
        end = begin + length
        mixed = leaves["mixed"][begin:end].t().unsqueeze(0)  # [1, C, L]
        conv = hf.causal_conv1d_fn(mixed, leaves["conv_weight"], None, activation="silu")
        conv = conv.squeeze(0).t()  # [L, C]
        q, k, v = torch.split(conv, [key_size, key_size, value_size], dim=-1)
        q = q.reshape(1, length, KEY_HEADS, KEY_DIM)
        k = k.reshape(1, length, KEY_HEADS, KEY_DIM)
        v = v.reshape(1, length, VALUE_HEADS, VALUE_DIM)
        beta = leaves["b"][begin:end].sigmoid().unsqueeze(0)
        g = (-leaves["A_log"].float().exp() *
             F.softplus(leaves["a"][begin:end].float() + leaves["dt_bias"])).unsqueeze(0)
        init = leaves["initial_state"][s:s + 1]
        core, final = hf.torch_chunk_gated_delta_rule(
            q, k, v, g=g, beta=beta, chunk_size=CHUNK_SIZE, initial_state=init,
            output_final_state=True, use_qk_l2norm_in_kernel=True)
        with torch.no_grad():
            core_r, final_r = hf.torch_recurrent_gated_delta_rule(
                q, k, v, g=g, beta=beta, initial_state=init, output_final_state=True,
                use_qk_l2norm_in_kernel=True)
            max_recurrent_gap = max(max_recurrent_gap, (core - core_r).abs().max().item(),
                                    (final - final_r).abs().max().item())
        core = core.squeeze(0)  # [L, Hv, dv]
        y = norm(core.reshape(-1, VALUE_DIM), leaves["z"][begin:end].reshape(-1, VALUE_DIM))
        y = y.reshape(length, VALUE_HEADS, VALUE_DIM)
        loss = loss + (y * cotangents["dy"][begin:end]).sum() + \
            (final * cotangents["d_final"][s:s + 1]).sum()
        outputs["conv"].append(conv)
        outputs["core"].append(core)
        outputs["y"].append(y)
        outputs["final_state"].append(final.squeeze(0))
        begin = end
    assert max_recurrent_gap < 1e-4, f"HF chunked vs recurrent differ by {max_recurrent_gap}"
    loss.backward()

    def pack(t):
        t = t.detach().to(f32).contiguous()
        return {"shape": list(t.shape), "data": [float(f"{x:.9g}") for x in t.flatten().tolist()]}

    expected = {
        "conv": pack(torch.cat(outputs["conv"])),
        "core": pack(torch.cat(outputs["core"])),
        "y": pack(torch.cat(outputs["y"])),
        "final_state": pack(torch.stack(outputs["final_state"])),
    }
    for name, leaf in leaves.items():
        if name == "norm_weight":
            expected["d_norm_weight"] = pack(norm.weight.grad)
        else:
            expected["d_" + name] = pack(leaf.grad)
    fixture = {
        "description": "HF Qwen3-Next Gated DeltaNet ops in fp32 (tools/golden/ops/"
                       "make_gated_delta_fixture.py)",
        "config": {"key_heads": KEY_HEADS, "value_heads": VALUE_HEADS, "key_dim": KEY_DIM,
                   "value_dim": VALUE_DIM, "conv_kernel": KERNEL, "chunk_size": CHUNK_SIZE,
                   "l2norm_eps": 1e-6, "rms_norm_eps": 1e-6},
        "cu_seqlens": [0] + [sum(LENGTHS[:i + 1]) for i in range(len(LENGTHS))],
        "inputs": {name: pack(t) for name, t in {**inputs, **cotangents}.items()},
        "expected": expected,
        "hf_chunked_vs_recurrent_max_abs": max_recurrent_gap,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes), "
          f"HF chunked vs recurrent max |diff| {max_recurrent_gap:.2e}")


if __name__ == "__main__":
    main()
