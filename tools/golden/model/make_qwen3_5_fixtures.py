#!/usr/bin/env python3
"""Golden fixtures for the hybrid model (Qwen3.5-MoE, tiny config B of qwen-moe.md §8): a tiny
random checkpoint plus the HF transformers fp32 forward/backward on a batch of sequences of
different lengths, one of them longer than the 64-token DeltaNet chunk.

Needs PyPI torch, transformers (>= 5) and safetensors (never needed by CI; the fixtures are
committed):
    pip install torch transformers safetensors
    python3 tools/golden/model/make_qwen3_5_fixtures.py [--out tests/fixtures/model]

The fixture folder `qwen3_5_moe_b` holds
    config.json         as the released Qwen3.5 checkpoints write it: model_type qwen3_5_moe with
                        the text model's fields under text_config
    model.safetensors   weights in BF16 (HF ran on exactly these values upcast to fp32), stored
                        like the released checkpoints: text tower under `model.language_model.`,
                        experts fused per layer (mlp.experts.gate_up_proj [E, 2I, h],
                        mlp.experts.down_proj [E, h, I])
    qwen3_next_projections.safetensors
                        the same GDN input projections in Qwen3-Next's grouped layout
                        (in_proj_qkvz, in_proj_ba), checked here by running Qwen3NextForCausalLM
                        on the converted weights: its loss must equal Qwen3.5's
    batch.json          {"sequences": [[ids], ...]}
    expected.json       loss, per-sequence losses, logits rows, per-tensor gradient norms and
                        strided samples under the text model's per-expert names
                        (model.layers.{i}.mlp.experts.{e}.gate_proj.weight, ...), library versions

Loss convention as in make_qwen3_moe_fixtures.py: next-token labels inside each sequence, token
mean over the batch, no aux loss; HF runs each sequence alone (batch 1, no padding). Routing is
made unambiguous with the same router-margin rule.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The loss convention, HF run, gradient summary and margins are the Qwen3-MoE generator's.
from make_qwen3_moe_fixtures import (  # noqa: E402
    INIT_STD, hf_named_tensors, pick_model, run_hf, write_fixture)

TEXT_CONFIG_B = {
    "model_type": "qwen3_5_moe_text",
    "vocab_size": 512,
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 24,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                        "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 1]},
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 24,
    "linear_conv_kernel_dim": 4,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 24,
    "shared_expert_intermediate_size": 40,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "router_aux_loss_coef": 0.001,
    "max_position_embeddings": 256,
    "hidden_act": "silu",
    "attention_bias": False,
}

# 70 > 64: two DeltaNet chunks with a partial last one, in HF and in ours.
SEQUENCE_LENGTHS = [7, 19, 2, 70, 12]


def text_config_kwargs(fields):
    kwargs = dict(fields)
    kwargs.pop("model_type")
    return kwargs


def build_model(seed, fields=TEXT_CONFIG_B):
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    config = Qwen3_5MoeTextConfig(**text_config_kwargs(fields))
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Qwen3_5MoeForCausalLM(config).float()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):
                # The gated output norm is plain (identity 1).
                parameter.copy_(1.0 + 0.1 * torch.randn_like(parameter))
            elif name.endswith("norm.weight"):
                # Zero-centred (1 + w) norms: identity 0; non-trivial so a plain-vs-(1+w) mix-up shows.
                parameter.copy_(0.1 * torch.randn_like(parameter))
            elif name.endswith("linear_attn.A_log"):
                parameter.copy_(torch.log(torch.empty_like(parameter).uniform_(1.0, 16.0)))
            elif name.endswith("linear_attn.dt_bias"):
                parameter.copy_(torch.empty_like(parameter).uniform_(0.5, 1.5))
            elif name.endswith("linear_attn.conv1d.weight"):
                parameter.copy_(0.3 * torch.randn_like(parameter))
            elif name.endswith("mlp.gate.weight"):
                parameter.copy_(0.3 * torch.randn_like(parameter))
            else:
                parameter.copy_(INIT_STD * torch.randn_like(parameter))
            parameter.copy_(parameter.to(torch.bfloat16).to(torch.float32))
    model.train()
    return config, model


def released_layout(named):
    """In-memory names -> the released Qwen3.5 checkpoint names (text tower prefix)."""
    return {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v
            for k, v in named.items()}


def next_projections(named, fields):
    """Qwen3.5 split GDN projections -> Qwen3-Next's grouped in_proj_qkvz / in_proj_ba."""
    hk, hv = fields["linear_num_key_heads"], fields["linear_num_value_heads"]
    dk, dv = fields["linear_key_head_dim"], fields["linear_value_head_dim"]
    r, key_dim = hv // hk, hk * dk
    out = {}
    for name, value in named.items():
        if not name.endswith("linear_attn.in_proj_qkv.weight"):
            continue
        prefix = name[: -len("in_proj_qkv.weight")]
        qkv, z = value, named[prefix + "in_proj_z.weight"]
        b, a = named[prefix + "in_proj_b.weight"], named[prefix + "in_proj_a.weight"]
        q, k, v = qkv[:key_dim], qkv[key_dim:2 * key_dim], qkv[2 * key_dim:]
        groups = []
        for g in range(hk):
            groups += [q[g * dk:(g + 1) * dk], k[g * dk:(g + 1) * dk],
                       v[g * r * dv:(g + 1) * r * dv], z[g * r * dv:(g + 1) * r * dv]]
        out[prefix + "in_proj_qkvz.weight"] = torch.cat(groups)
        out[prefix + "in_proj_ba.weight"] = torch.cat(
            sum([[b[g * r:(g + 1) * r], a[g * r:(g + 1) * r]] for g in range(hk)], []))
    return out


def qwen3_next_loss(named, sequences):
    """Qwen3NextForCausalLM on the same weights (projections regrouped): its loss."""
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    kwargs = text_config_kwargs(TEXT_CONFIG_B)
    kwargs.update(decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
                  intermediate_size=96)
    config = Qwen3NextConfig(**kwargs)
    config._attn_implementation = "eager"
    model = Qwen3NextForCausalLM(config).float()
    state = {k: v for k, v in named.items()
             if not any(k.endswith(s) for s in ("in_proj_qkv.weight", "in_proj_z.weight",
                                                 "in_proj_b.weight", "in_proj_a.weight"))}
    state.update(next_projections(named, TEXT_CONFIG_B))
    model.load_state_dict(state, strict=True)
    return run_hf(model, sequences)["loss"]


def make_fixture(name, out_root, seed):
    import transformers

    rng = torch.Generator().manual_seed(4321)
    sequences = [torch.randint(0, TEXT_CONFIG_B["vocab_size"], (n,), generator=rng).tolist()
                 for n in SEQUENCE_LENGTHS]
    config, model, margin, used_seed = pick_model(name, build_model, sequences, seed)
    result = run_hf(model, sequences)
    in_memory = {n: p.detach() for n, p in model.named_parameters()}
    gradients = hf_named_tensors(model, config, lambda p: p.grad)  # per-expert names
    next_loss = qwen3_next_loss(in_memory, sequences)
    if abs(next_loss - result["loss"]) > 1e-6 * result["loss"]:
        sys.exit(f"{name}: Qwen3-Next layout gives loss {next_loss}, Qwen3.5 {result['loss']}")

    config_json = {"architectures": ["Qwen3_5MoeForConditionalGeneration"],
                   "model_type": "qwen3_5_moe", "tie_word_embeddings": False,
                   "text_config": TEXT_CONFIG_B}
    weight_files = {"model.safetensors": released_layout(in_memory),
                    "qwen3_next_projections.safetensors": next_projections(in_memory, TEXT_CONFIG_B)}
    grad_norm = write_fixture(
        os.path.join(out_root, name), config_json, weight_files, sequences, result, gradients,
        {"router_margin": margin, "qwen3_next_loss": next_loss, "seed": used_seed,
         "generator": {"script": "tools/golden/model/make_qwen3_5_fixtures.py",
                       "torch": torch.__version__, "transformers": transformers.__version__}})
    print(f"{name}: seed {used_seed}, router margin {margin:.2e}, loss {result['loss']:.6f}, "
          f"qwen3_next loss {next_loss:.6f}, grad_norm {grad_norm:.6f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                       "tests", "fixtures", "model"))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    make_fixture("qwen3_5_moe_b", args.out, args.seed)


if __name__ == "__main__":
    main()
