"""Shared by the HF export tests: train the demo recipe briefly on one rank and export it."""

import os
import subprocess
import sys

ONE_RANK = ["model.context_parallel_size=1", "model.dynamic_context_parallel=false",
            "model.max_seqlen_per_dp_cp_rank=2048", "model.expert_model_parallel_size=1"]


def run(argv):
    """Runs a command, exits the test with its output when it fails; returns stdout + stderr."""
    result = subprocess.run(argv, capture_output=True, text=True,
                            env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if result.returncode != 0:
        print(result.stdout + result.stderr)
        sys.exit(f"{argv[0]} exited {result.returncode}")
    return result.stdout + result.stderr


def train_demo(train, root, work, tokenizer, *overrides, launcher=()):
    """2 steps of configs/demo/tiny_moe.yaml on one rank on the demo chat data (`launcher`, e.g.
    mpirun -np 2, and the overrides may change the layout)."""
    demo = os.path.join(root, "tests", "fixtures", "data", "demo")
    return run([*launcher, train, "--config", os.path.join(root, "configs", "demo", "tiny_moe.yaml"), *ONE_RANK,
                f"dataset.data_path={os.path.join(demo, 'train.jsonl')}",
                "~dataset.validation_data_path", "~validation.eval_interval",
                "~scheduler.lr_warmup_iters", f"dataset.cache_dir={work}/cache",
                f"tokenizer.tokenizer_model={tokenizer}", "train.train_iters=2",
                "train.global_batch_size=4", "logger.metrics_path=", *overrides])
