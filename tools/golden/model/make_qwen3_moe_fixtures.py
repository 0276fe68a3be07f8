#!/usr/bin/env python3
"""Golden fixtures for the Qwen3-MoE model: tiny random HF checkpoints plus the HF transformers
fp32 forward/backward on a batch of sequences of different lengths.

Needs PyPI torch, transformers and safetensors (never needed by CI; the fixtures are committed):
    pip install torch transformers safetensors
    python3 tools/golden/model/make_qwen3_moe_fixtures.py [--out tests/fixtures/model]

Each fixture folder holds
    config.json         HF config (rope_theta top level, per-expert tensor names on disk)
    model.safetensors   weights in BF16, so the file is small; HF runs on exactly these values
                        upcast to fp32
    batch.json          {"sequences": [[ids], ...]}
    expected.json       loss conventions below, logits samples, per-tensor gradient norms and
                        strided gradient samples, router margin, library versions

Loss convention (the one dyncp-check and the trainer use): labels are the next token inside each
sequence, the last token of a sequence has no loss; loss = sum of per-token cross-entropy over all
sequences / number of loss tokens (token mean over the batch, not a mean of sequence means);
the MoE aux loss is excluded. HF runs every sequence separately (batch size 1, no padding), so a
packed implementation that matches also proves its packing.

Routing is made unambiguous: for every token of every MoE layer the gap between the k-th and
(k+1)-th router probability must be at least ROUTER_MARGIN, else the seed is advanced and the
checkpoint rebuilt. Otherwise two correct implementations could pick different experts.
"""
import argparse
import json
import os
import sys

import torch

ROUTER_MARGIN = 2e-4
# Larger than the usual 0.02 so the tiny model is far from linear and every term matters.
INIT_STD = 0.05
GRADIENT_SAMPLES = 32

CONFIG_A = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "vocab_size": 512,
    "hidden_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 24,
    "intermediate_size": 96,
    "moe_intermediate_size": 48,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [0],
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
    "router_aux_loss_coef": 0.001,
    "attention_bias": False,
    "use_sliding_window": False,
    "hidden_act": "silu",
}

# Variant: unnormalised top-k weights, tied embeddings, and the dense layer chosen by
# decoder_sparse_step instead of mlp_only_layers (layer 0 dense, layer 1 MoE). Two layers, a
# smaller vocabulary and narrower experts keep all committed fixtures under 1 MB.
CONFIG_B = dict(CONFIG_A, norm_topk_prob=False, tie_word_embeddings=True, num_hidden_layers=2,
                decoder_sparse_step=2, mlp_only_layers=[], vocab_size=256,
                moe_intermediate_size=32)

SEQUENCE_LENGTHS = [7, 19, 2, 31, 12]


def compact(values):
    """fp32 carries 9 significant digits; writing more only grows the files."""
    return [float(f"{v:.9g}") for v in values]


def build_model(config_fields, seed):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    fields = dict(config_fields)
    rope_parameters = dict(fields.pop("rope_parameters", {"rope_type": "default"}))
    rope_parameters.setdefault("rope_theta", fields.pop("rope_theta", 10000.0))
    fields.pop("architectures")
    fields.pop("model_type")
    config = Qwen3MoeConfig(**fields, rope_parameters=rope_parameters)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(config).float()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                # Non-trivial norm weights, so plain-vs-(1+w) RMSNorm mix-ups show.
                parameter.copy_(1.0 + 0.1 * torch.randn_like(parameter))
            elif name.endswith("mlp.gate.weight"):
                # A wider router so top-k choices are decisive.
                parameter.copy_(0.3 * torch.randn_like(parameter))
            else:
                parameter.copy_(INIT_STD * torch.randn_like(parameter))
            # Round to bf16 so the committed BF16 file holds exactly the weights HF ran with.
            parameter.copy_(parameter.to(torch.bfloat16).to(torch.float32))
    if config.tie_word_embeddings:
        model.tie_weights()
    model.train()
    return config, model


def hf_named_tensors(model, config, values_of):
    """HF on-disk names -> tensors, splitting transformers 5.x fused experts per expert."""
    out = {}
    for name, parameter in model.named_parameters():
        value = values_of(parameter)
        if value is None:
            continue
        if name.endswith("mlp.experts.gate_up_proj"):
            prefix = name[: -len("gate_up_proj")]
            inter = config.moe_intermediate_size
            for e in range(config.num_experts):
                out[f"{prefix}{e}.gate_proj.weight"] = value[e, :inter]
                out[f"{prefix}{e}.up_proj.weight"] = value[e, inter:]
        elif name.endswith("mlp.experts.down_proj"):
            prefix = name[: -len("down_proj")]
            for e in range(config.num_experts):
                out[f"{prefix}{e}.down_proj.weight"] = value[e]
        else:
            out[name] = value
    if config.tie_word_embeddings:
        out.pop("lm_head.weight", None)
    return out


def router_margin(model, config, sequences):
    """Smallest gap between the k-th and (k+1)-th router probability over all tokens/layers."""
    margins = []

    def hook(module, inputs, output):
        hidden = inputs[0].reshape(-1, module.weight.shape[1])
        probs = torch.softmax(torch.nn.functional.linear(hidden, module.weight), dim=-1, dtype=torch.float)
        top = torch.topk(probs, config.num_experts_per_tok + 1, dim=-1).values
        margins.append((top[:, -2] - top[:, -1]).min().item())

    # Qwen3MoeTopKRouter, Qwen3_5MoeTopKRouter, ...
    handles = [m.register_forward_hook(hook) for m in model.modules()
               if type(m).__name__.endswith("TopKRouter")]
    assert handles, "no router modules found"
    with torch.no_grad():
        for ids in sequences:
            model(input_ids=torch.tensor([ids]))
    for handle in handles:
        handle.remove()
    return min(margins)


def run_hf(model, sequences):
    model.zero_grad(set_to_none=True)
    loss_sum = torch.zeros((), dtype=torch.float64)
    per_sequence_sum = []
    loss_tokens = sum(len(ids) - 1 for ids in sequences)
    logits_rows = []
    total = 0.0
    for index, ids in enumerate(sequences):
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
        targets = torch.tensor(ids[1:])
        token_losses = torch.nn.functional.cross_entropy(logits[:-1], targets, reduction="none")
        sequence_sum = token_losses.sum()
        per_sequence_sum.append(sequence_sum.item())
        total = total + sequence_sum
        position = len(ids) - 1  # the last row has seen the whole sequence
        logits_rows.append({"sequence": index, "position": position,
                            "values": compact(logits[position].detach().tolist())})
    loss = total / loss_tokens
    loss.backward()
    loss_sum = sum(per_sequence_sum)
    return {
        "loss": loss.item(),
        "loss_sum": loss_sum,
        "loss_tokens": loss_tokens,
        "per_sequence_loss": [s / (len(ids) - 1) for s, ids in zip(per_sequence_sum, sequences)],
        "logits": logits_rows,
    }


def gradient_summary(gradients):
    norms, samples = {}, {}
    total = 0.0
    for name, grad in sorted(gradients.items()):
        flat = grad.detach().double().reshape(-1)
        norms[name] = flat.norm().item()
        total += norms[name] ** 2
        count = min(GRADIENT_SAMPLES, flat.numel())
        indices = [(j * flat.numel()) // count for j in range(count)]
        samples[name] = {"indices": indices, "values": compact([flat[i].item() for i in indices])}
    return total ** 0.5, norms, samples


def pick_model(name, build, sequences, seed):
    """build(seed) -> (config, model), advancing the seed until routing is unambiguous."""
    for attempt in range(200):
        config, model = build(seed + attempt)
        margin = router_margin(model, config, sequences)
        if margin >= ROUTER_MARGIN:
            return config, model, margin, seed + attempt
    sys.exit(f"{name}: no seed gave a router margin >= {ROUTER_MARGIN}")


def write_fixture(folder, config_json, weight_files, sequences, result, gradients, extra):
    """config.json, BF16 weight files {file: {name: tensor}}, batch.json and expected.json
    (result, gradient summary, then `extra`). Returns the total gradient norm."""
    from safetensors.torch import save_file

    grad_norm, grad_norms, grad_samples = gradient_summary(gradients)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config_json, f, indent=2)
        f.write("\n")
    for file_name, tensors in weight_files.items():
        path = os.path.join(folder, file_name)
        save_file({k: v.contiguous().to(torch.bfloat16) for k, v in tensors.items()}, path,
                  metadata={"format": "pt"})
        os.chmod(path, 0o644)
    with open(os.path.join(folder, "batch.json"), "w") as f:
        json.dump({"sequences": sequences}, f)
        f.write("\n")
    expected = dict(result)
    expected.update({"grad_norm": grad_norm, "grad_norms": grad_norms,
                     "grad_samples": grad_samples})
    expected.update(extra)
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump(expected, f)
        f.write("\n")
    return grad_norm


def make_fixture(name, config_fields, out_root, seed):
    import transformers

    rng = torch.Generator().manual_seed(1234)
    sequences = [torch.randint(0, config_fields["vocab_size"], (n,), generator=rng).tolist()
                 for n in SEQUENCE_LENGTHS]
    config, model, margin, used_seed = pick_model(
        name, lambda s: build_model(config_fields, s), sequences, seed)
    result = run_hf(model, sequences)
    grad_norm = write_fixture(
        os.path.join(out_root, name), config_fields,
        {"model.safetensors": hf_named_tensors(model, config, lambda p: p.detach())}, sequences,
        result, hf_named_tensors(model, config, lambda p: p.grad),
        {"router_margin": margin, "seed": used_seed,
         "generator": {"script": "tools/golden/model/make_qwen3_moe_fixtures.py",
                       "torch": torch.__version__, "transformers": transformers.__version__}})
    print(f"{name}: seed {used_seed}, router margin {margin:.2e}, loss {result['loss']:.6f}, "
          f"grad_norm {grad_norm:.6f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                       "tests", "fixtures", "model"))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    make_fixture("qwen3_moe_a", CONFIG_A, args.out, args.seed)
    make_fixture("qwen3_moe_b_tied_unnormalized", CONFIG_B, args.out, args.seed + 1000)


if __name__ == "__main__":
    main()
