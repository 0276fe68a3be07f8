#!/usr/bin/env python3
"""Check an HF export of dyncp-train with Hugging Face transformers.

    python3 tools/check_hf_export.py runs/demo/hf --dyncp-check build/apps/dyncp-check/dyncp-check

Loads the exported folder with transformers' AutoModelForCausalLM (fp32), runs a seeded batch of
token-id sequences through it one sequence at a time, and compares the per-sequence mean
cross-entropy and the batch loss with `dyncp-check --json` on the same folder and batch (all
sequences packed in one bin there). Exits 0 when they agree within --tolerance (relative), 1
when they do not, 2 on bad usage. Needs PyPI torch and transformers; CI does not run it.
"""
import argparse
import json
import random
import subprocess
import sys
import tempfile


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("export_dir")
    parser.add_argument("--dyncp-check", required=True, help="path of the dyncp-check binary")
    parser.add_argument("--sequences", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    try:
        import torch
        import transformers
    except ImportError as error:
        print(f"check_hf_export: needs torch and transformers ({error}); pip install them", file=sys.stderr)
        return 2

    model = transformers.AutoModelForCausalLM.from_pretrained(args.export_dir, dtype=torch.float32)
    model.eval()
    vocab = model.config.vocab_size
    rng = random.Random(args.seed)
    sequences = [[rng.randrange(vocab) for _ in range(rng.randrange(8, 96))] for _ in range(args.sequences)]

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as batch:
        json.dump({"sequences": sequences}, batch)
    ours = json.loads(subprocess.run([args.dyncp_check, "--hf", args.export_dir, "--batch", batch.name, "--json"],
                                     check=True, capture_output=True, text=True).stdout)

    losses, loss_sum, tokens = [], 0.0, 0
    with torch.no_grad():
        for ids in sequences:
            logits = model(torch.tensor([ids])).logits[0, :-1]
            per_token = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="sum")
            losses.append(per_token.item() / (len(ids) - 1))
            loss_sum += per_token.item()
            tokens += len(ids) - 1
    theirs = loss_sum / tokens

    worst = max(abs(a - b) / abs(b) for a, b in zip(ours["per_sequence_loss"], losses))
    batch_error = abs(ours["loss"] - theirs) / abs(theirs)
    print(f"transformers {transformers.__version__}: batch loss {theirs:.7f}, dyncp-check {ours['loss']:.7f} "
          f"(relative {batch_error:.2e}); worst per-sequence relative difference {worst:.2e}")
    return 0 if max(worst, batch_error) <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
