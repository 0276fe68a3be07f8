#!/usr/bin/env python3
"""Tokens/s of HF transformers Qwen3MoeForCausalLM forward + backward, on the bin written by
bench_model --write-batch / --write-config, for comparison in the same run. CPU fp32 by default;
`--device cuda --dtype bf16` is the anchor of tools/bench/gpu_step.sh.

Every sequence runs as its own batch of one (eager attention cannot pack), which is the same
work as one packed bin; the loss is the token-mean over the bin, as in dyncp-check.
Needs PyPI torch + transformers (not a CI dependency).
"""
import argparse
import json
import statistics
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--batch", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--size", default="?")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    fields = json.load(open(args.config))
    fields.pop("architectures", None)
    fields.pop("model_type", None)
    theta = fields.pop("rope_theta", 10000.0)
    fields.pop("rope_parameters", None)
    config = Qwen3MoeConfig(**fields, rope_parameters={"rope_type": "default", "rope_theta": theta})
    config._attn_implementation = "sdpa"
    torch.manual_seed(1)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    # Built on the device in its dtype: a 4-layer model of real widths has 2.7e9 parameters,
    # whose initialisation on the host would take longer than the benchmark itself.
    torch.set_default_dtype(dtype)
    with torch.device(args.device):
        model = Qwen3MoeForCausalLM(config).train()
    torch.set_default_dtype(torch.float32)
    sequences = [torch.tensor([ids], device=args.device)
                 for ids in json.load(open(args.batch))["sequences"]]
    tokens = sum(s.shape[1] for s in sequences)
    loss_tokens = tokens - len(sequences)

    def step():
        model.zero_grad(set_to_none=False)
        total = 0.0
        for ids in sequences:
            logits = model(input_ids=ids).logits[0]
            total = total + torch.nn.functional.cross_entropy(logits[:-1].float(), ids[0, 1:],
                                                              reduction="sum")
        (total / loss_tokens).backward()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    step()  # warm-up
    seconds = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    print(json.dumps({"impl": "hf-transformers", "size": args.size, "bin_tokens": tokens,
                      "sequences": len(sequences), "threads": args.threads, "steps": args.steps,
                      "device": args.device, "dtype": args.dtype, "layers": config.num_hidden_layers,
                      "median_s": round(median, 4), "min_s": round(min(seconds), 4),
                      "tokens_per_s": round(tokens / median, 1),
                      "torch": torch.__version__,
                      "transformers": __import__("transformers").__version__}))


if __name__ == "__main__":
    main()
