#!/usr/bin/env python3
"""Golden fixtures for the config.json fields that change the math beyond the base configs:
RoPE scaling types (linear, yarn, llama3, dynamic), sliding-window attention, pad_token_id
(no gradient into the padding row from the lookup), an odd rotary dimension and dynamic RoPE
with a partial rotary factor. Each is a tiny
random checkpoint plus the HF transformers forward/backward in fp32 (as the other model
fixtures) and the loss again in fp64 (the model cast to double), on sequences long enough that
each feature changes the result.

Needs PyPI torch, transformers (>= 5) and safetensors (never needed by CI; the fixtures are
committed):
    pip install torch transformers safetensors
    python3 tools/golden/model/make_hf_feature_fixtures.py [--out tests/fixtures/model]
        [--only NAME ...]

Folder layout, loss convention and routing margin as in make_qwen3_moe_fixtures.py; expected.json
adds `loss_fp64` and `feature_effect`: how far the fp64 loss moves when the feature is switched
off (default RoPE, no window), so a test that passes cannot be passing on a feature that does
nothing here; for pad_token_id (gradient only) it is how far the padding row's gradient moves,
and `pad_row_grad` holds that row; for dynamic RoPE `feature_gradient_effect` is how far all
gradients move (relative), the loss of a model this small hardly moving.

Dynamic RoPE: transformers recomputes the inverse frequencies from the longest position of a
forward call and keeps them until a call shorter than max_position_embeddings, so its result
depends on the calls before. The reference here is each sequence as transformers runs it
alone (a fresh rotary state before every call), with sequences past max_position_embeddings
of two different lengths, so each gets its own frequencies.
"""
import argparse
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_qwen3_5_fixtures as hybrid  # noqa: E402
import make_qwen3_moe_fixtures as moe  # noqa: E402

# Small so that all fixtures together stay a few hundred KB; max_position_embeddings 64 with
# sequences up to 70 tokens, so scaled RoPE runs past the original context.
BASE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "vocab_size": 128,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 48,
    "moe_intermediate_size": 16,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [0],
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 64,
    "tie_word_embeddings": False,
    "router_aux_loss_coef": 0.001,
    "attention_bias": False,
    "use_sliding_window": False,
    "hidden_act": "silu",
}
LENGTHS = [5, 23, 70, 41]
# Sequences past max_position_embeddings of different lengths, and short ones between.
LENGTHS_PAST_CONTEXT = [5, 23, 96, 41, 128]
PAD_TOKEN = 3


def rope(rope_type, **fields):
    return dict({"rope_type": rope_type, "rope_theta": 10000.0}, **fields)


MOE_FIXTURES = {
    "qwen3_moe_rope_linear": (dict(BASE, rope_parameters=rope("linear", factor=2.0)), LENGTHS),
    "qwen3_moe_rope_yarn": (dict(BASE, rope_parameters=rope(
        "yarn", factor=4.0, original_max_position_embeddings=16, beta_fast=32.0, beta_slow=1.0)),
        LENGTHS),
    # original context 32: wavelengths below 8 stay, above 32 are divided by 8, between blend.
    "qwen3_moe_rope_llama3": (dict(BASE, rope_parameters=rope(
        "llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=32)), LENGTHS),
    # max_position_embeddings 32: three sequences past it, two within.
    "qwen3_moe_rope_dynamic": (dict(BASE, max_position_embeddings=32,
                                    rope_parameters=rope("dynamic", factor=4.0)),
                               LENGTHS_PAST_CONTEXT),
    "qwen3_moe_sliding_window": (dict(BASE, use_sliding_window=True, sliding_window=8), LENGTHS),
    "qwen3_moe_pad_token_tied": (dict(BASE, pad_token_id=PAD_TOKEN, tie_word_embeddings=True),
                                 LENGTHS),
}

# Qwen3.5 text model with head_dim 12 and partial_rotary_factor 0.25: HF's rotary dim 3 is odd,
# so it rotates 4 dims with frequencies theta^(-2i/3); linear scaling on top. Gated attention
# in both layers (a model this small gives its DeltaNet gates gradients too tiny to compare in
# fp32; qwen3_5_moe_b covers DeltaNet).
HYBRID_ODD_ROTARY = {
    "model_type": "qwen3_5_moe_text",
    "vocab_size": 128,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "layer_types": ["full_attention", "full_attention"],
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 12,
    "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0,
                        "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0]},
    "linear_num_key_heads": 1,
    "linear_num_value_heads": 2,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 8,
    "linear_conv_kernel_dim": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 16,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "router_aux_loss_coef": 0.001,
    "max_position_embeddings": 64,
    "hidden_act": "silu",
    "attention_bias": False,
}


# The same hybrid with dynamic RoPE on half of head_dim 12 (transformers' dim 6: the NTK
# exponent 6/4), max_position_embeddings 32.
HYBRID_DYNAMIC_PARTIAL = dict(
    HYBRID_ODD_ROTARY, max_position_embeddings=32,
    rope_parameters={"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0,
                     "partial_rotary_factor": 0.5, "mrope_section": [1, 1, 1]})


def run_each_alone(model):
    """Before every forward call, put each dynamic rotary embedding back to its initial state,
    so that every sequence is run as transformers runs it alone."""
    def reset(_module, _args, _kwargs=None):
        for module in model.modules():
            if hasattr(module, "original_inv_freq") and hasattr(module, "max_seq_len_cached"):
                module.register_buffer("inv_freq", module.original_inv_freq.clone(),
                                       persistent=False)
                module.max_seq_len_cached = module.original_max_seq_len
    model.register_forward_pre_hook(reset)
    return model


def without_feature(fields):
    """The same config with the feature off: the loss must move."""
    plain = copy.deepcopy(fields)
    rope_parameters = plain.get("rope_parameters")
    if rope_parameters is not None:
        plain["rope_parameters"] = {k: v for k, v in rope_parameters.items()
                                    if k in ("rope_theta", "partial_rotary_factor", "mrope_section")}
        plain["rope_parameters"]["rope_type"] = "default"
    plain["use_sliding_window"] = False
    plain.pop("pad_token_id", None)
    if plain["model_type"] != "qwen3_moe":
        plain.pop("use_sliding_window")
    return plain


def sequences_for(name, lengths, vocab):
    rng = torch.Generator().manual_seed(sum(map(ord, name)))
    sequences = [torch.randint(0, vocab, (n,), generator=rng).tolist() for n in lengths]
    if "pad_token" in name:
        for ids in sequences:
            for position in range(1, len(ids), 4):
                ids[position] = PAD_TOKEN
    return sequences


def fp64_loss(model, sequences):
    twin = run_each_alone(copy.deepcopy(model).double())
    twin.set_experts_implementation("eager")  # the grouped-mm path takes no fp64
    with torch.no_grad():
        total, tokens = 0.0, 0
        for ids in sequences:
            logits = twin(input_ids=torch.tensor([ids])).logits[0]
            targets = torch.tensor(ids[1:])
            total += torch.nn.functional.cross_entropy(logits[:-1], targets, reduction="sum").item()
            tokens += len(ids) - 1
    return total / tokens


def gradient_effect(model, plain):
    """How far the feature moves the gradients: |g - g_plain| / |g_plain| over all parameters
    (plain: the same weights with the feature off, after run_hf). A random model this small
    barely moves its loss with RoPE, but its gradients move by percents."""
    diff = total = 0.0
    for (_, p), (_, q) in zip(model.named_parameters(), plain.named_parameters()):
        diff += (p.grad.double() - q.grad.double()).pow(2).sum().item()
        total += q.grad.double().pow(2).sum().item()
    return (diff / total) ** 0.5


def plain_loss(build, fields, seed, sequences):
    _, model = build(without_feature(fields), seed)
    return fp64_loss(model, sequences)


def make_moe(name, fields, lengths, out_root, seed):
    import transformers

    sequences = sequences_for(name, lengths, fields["vocab_size"])
    config, model, margin, used_seed = moe.pick_model(
        name, lambda s: moe.build_model(fields, s), sequences, seed)
    result = moe.run_hf(run_each_alone(model), sequences)
    reference64 = fp64_loss(model, sequences)
    effect = abs(plain_loss(moe.build_model, fields, used_seed, sequences) - reference64)
    extra = {}
    if "pad_token_id" in fields:
        # A gradient-only feature: the padding row's gradient, and how far the lookup's share
        # (which padding_idx drops) would move it.
        row = model.model.embed_tokens.weight.grad[PAD_TOKEN].detach().clone()
        _, plain = moe.build_model(without_feature(fields), used_seed)
        moe.run_hf(plain, sequences)
        effect = (plain.model.embed_tokens.weight.grad[PAD_TOKEN] - row).norm().item()
        extra = {"pad_row": PAD_TOKEN, "pad_row_grad": moe.compact(row.tolist())}
    if fields.get("rope_parameters", {}).get("rope_type") == "dynamic":
        _, plain = moe.build_model(without_feature(fields), used_seed)
        moe.run_hf(plain, sequences)
        extra = {"feature_gradient_effect": gradient_effect(model, plain)}
    moe.write_fixture(
        os.path.join(out_root, name), fields,
        {"model.safetensors": moe.hf_named_tensors(model, config, lambda p: p.detach())},
        sequences, result, moe.hf_named_tensors(model, config, lambda p: p.grad),
        dict({"loss_fp64": reference64, "feature_effect": effect, "router_margin": margin,
              "seed": used_seed,
              "generator": {"script": "tools/golden/model/make_hf_feature_fixtures.py",
                            "torch": torch.__version__,
                            "transformers": transformers.__version__}}, **extra))
    print(f"{name}: seed {used_seed}, loss {result['loss']:.6f} (fp64 {reference64:.6f}), "
          f"feature effect {effect:.2e}")


def make_hybrid(name, fields, lengths, out_root, seed):
    import transformers

    sequences = sequences_for(name, lengths, fields["vocab_size"])
    build = lambda s: hybrid.build_model(s, fields)  # noqa: E731
    config, model, margin, used_seed = moe.pick_model(name, build, sequences, seed)
    result = moe.run_hf(run_each_alone(model), sequences)
    reference64 = fp64_loss(model, sequences)
    effect = abs(fp64_loss(hybrid.build_model(used_seed, without_feature(fields))[1], sequences)
                 - reference64)
    extra = {}
    if fields["rope_parameters"].get("rope_type") == "dynamic":
        plain = hybrid.build_model(used_seed, without_feature(fields))[1]
        moe.run_hf(plain, sequences)
        extra = {"feature_gradient_effect": gradient_effect(model, plain)}
    in_memory = {n: p.detach() for n, p in model.named_parameters()}
    config_json = {"architectures": ["Qwen3_5MoeForConditionalGeneration"],
                   "model_type": "qwen3_5_moe", "tie_word_embeddings": False,
                   "text_config": fields}
    moe.write_fixture(
        os.path.join(out_root, name), config_json,
        {"model.safetensors": hybrid.released_layout(in_memory)}, sequences, result,
        moe.hf_named_tensors(model, config, lambda p: p.grad),
        dict({"loss_fp64": reference64, "feature_effect": effect, "router_margin": margin,
              "seed": used_seed,
              "generator": {"script": "tools/golden/model/make_hf_feature_fixtures.py",
                            "torch": torch.__version__,
                            "transformers": transformers.__version__}}, **extra))
    print(f"{name}: seed {used_seed}, loss {result['loss']:.6f} (fp64 {reference64:.6f}), "
          f"feature moves the loss by {effect:.2e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                       "tests", "fixtures", "model"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", action="append", default=[],
                        help="write only this fixture (repeatable); default: all")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    wanted = lambda name: not args.only or name in args.only  # noqa: E731
    for offset, (name, (fields, lengths)) in enumerate(MOE_FIXTURES.items()):
        if wanted(name):
            make_moe(name, fields, lengths, args.out, args.seed + 100 * offset)
    if wanted("qwen3_5_moe_odd_rotary"):
        make_hybrid("qwen3_5_moe_odd_rotary", HYBRID_ODD_ROTARY, LENGTHS, args.out,
                    args.seed + 1000)
    if wanted("qwen3_5_moe_rope_dynamic_partial"):
        make_hybrid("qwen3_5_moe_rope_dynamic_partial", HYBRID_DYNAMIC_PARTIAL,
                    LENGTHS_PAST_CONTEXT, args.out, args.seed + 1100)


if __name__ == "__main__":
    main()
