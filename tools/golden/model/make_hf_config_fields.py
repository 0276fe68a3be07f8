#!/usr/bin/env python3
"""Writes tests/fixtures/model/hf_config_fields.json: every config.json field transformers' own
config classes define for the supported model types (instantiated with their defaults and
serialised the way save_pretrained writes them), and the rope_parameters keys transformers
validates. The C++ test `hf_config_fields` fails on any field here that
lib/config/hf_config_fields.cpp does not classify, so a field a later transformers adds shows up.

    pip install transformers
    python3 tools/golden/model/make_hf_config_fields.py
"""
import json
import os

import transformers
from transformers import Qwen3MoeConfig, Qwen3NextConfig
from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeConfig, Qwen3_5MoeTextConfig

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def main():
    scopes = {}
    for model_type, config_class in [("qwen3_moe", Qwen3MoeConfig), ("qwen3_next", Qwen3NextConfig),
                                      ("qwen3_5_moe_text", Qwen3_5MoeTextConfig), ("qwen3_5_moe", Qwen3_5MoeConfig)]:
        fields = config_class().to_dict()
        scopes[model_type] = sorted(fields)
        for nested in ("text_config", "vision_config"):
            if isinstance(fields.get(nested), dict):
                scopes[model_type + "." + nested] = sorted(fields[nested])
    import transformers.modeling_rope_utils as rope_utils
    rope_keys = set(rope_utils.RopeParameters.__annotations__)  # a TypedDict of every rope type's keys
    out = {"source": "transformers " + transformers.__version__, "scopes": scopes,
           "rope_parameters": sorted(rope_keys)}
    path = os.path.join(ROOT, "tests", "fixtures", "model", "hf_config_fields.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", path, {k: len(v) for k, v in scopes.items()}, len(rope_keys), "rope keys")


if __name__ == "__main__":
    main()
