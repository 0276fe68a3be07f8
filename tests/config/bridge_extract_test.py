#!/usr/bin/env python3
"""Checks tools/bridge/extract_bridge_fields.py, run by ctest:  bridge_extract_test.py TOOL

Two made-up releases (0.9.0 as a wheel, 0.10.0 and main as source trees) whose dataclasses add,
rename and re-default fields must give one line per field and spelling, with the releases that
declare it, versions in numeric order and main last; a folder that is not a release set exits 2."""

import ast
import os
import subprocess
import sys
import tempfile
import zipfile

TOOL = sys.argv[1]

CORE = '''
from dataclasses import dataclass

@dataclass
class OptimizerConfig:
    lr: float = 0.001
    muon_{nesterov}: bool = False
    adam_eps: float = {eps}
'''

BRIDGE = '''
from dataclasses import dataclass, field
from megatron.core.optimizer.optimizer_config import OptimizerConfig as MCoreOptimizerConfig

@dataclass
class OptimizerConfig(MCoreOptimizerConfig):
    {extra}
    _private: int = field(default=0, init=False)
'''


def write_tree(root, nesterov, eps, extra):
    files = {
        "megatron/core/optimizer/optimizer_config.py": CORE.format(nesterov=nesterov, eps=eps),
        "megatron/bridge/training/config.py": BRIDGE.format(extra=extra),
    }
    for name, text in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as out:
            out.write(text)
    return files


def fields(text):
    out = []
    for line in text.splitlines():
        if line.startswith("DYNCP_BRIDGE_FIELD"):
            out.append(ast.literal_eval(line[len("DYNCP_BRIDGE_FIELD"):]))
    return out


with tempfile.TemporaryDirectory() as work:
    releases = os.path.join(work, "releases")
    # 0.9.0: a wheel; muon_use_nesterov, adam_eps 1e-08.
    tree = os.path.join(work, "tree-0.9.0")
    files = write_tree(tree, "use_nesterov", "1e-08", "check: bool = True")
    os.makedirs(os.path.join(releases, "0.9.0"))
    with zipfile.ZipFile(os.path.join(releases, "0.9.0", "fake-0.9.0-py3-none-any.whl"), "w") as whl:
        for name in files:
            whl.write(os.path.join(tree, name), name)
    # 0.10.0 and main: source trees; muon_nesterov, and main changes adam_eps's default.
    write_tree(os.path.join(releases, "0.10.0", "src"), "nesterov", "1e-08", "check: bool = True")
    write_tree(os.path.join(releases, "main", "src"), "nesterov", "1e-05", "fresh: int = 3")
    for label, line in (("0.9.0", "fake 0.9.0 (wheel)"), ("0.10.0", "fake 0.10.0 (tree)"),
                        ("main", "fake main at deadbeef")):
        with open(os.path.join(releases, label, "SOURCE"), "w") as out:
            out.write(line + "\n")

    result = subprocess.run([sys.executable, TOOL, releases], capture_output=True, text=True)
    print(result.stderr)
    assert result.returncode == 0, result.returncode
    text = result.stdout
    assert 'DYNCP_BRIDGE_RELEASE("0.9.0", "fake 0.9.0 (wheel)")' in text, text
    order = [text.index(f'DYNCP_BRIDGE_RELEASE("{label}"') for label in ("0.9.0", "0.10.0", "main")]
    assert order == sorted(order), "releases out of version order"
    assert "fake-0.9.0-py3-none-any.whl" in text and "0.10.0: src/ (a source tree" in text

    optimizer = [f for f in fields(text) if f[0] == "optimizer"]
    by_name = {}
    for section, cls, name, _type, default, labels in optimizer:
        assert cls == "OptimizerConfig"
        by_name.setdefault(name, []).append((default, labels))
    assert by_name["lr"] == [("0.001", "0.9.0 0.10.0 main")], by_name["lr"]
    assert by_name["muon_use_nesterov"] == [("false", "0.9.0")]
    assert by_name["muon_nesterov"] == [("false", "0.10.0 main")]
    # A changed default: one line per spelling, the newest release's first.
    assert by_name["adam_eps"] == [("1e-05", "main"), ("1e-08", "0.9.0 0.10.0")], by_name["adam_eps"]
    assert by_name["check"] == [("true", "0.9.0 0.10.0")]
    assert by_name["fresh"] == [("3", "main")]
    assert "_private" not in by_name
    # The release's declaration order, with a dropped field where it stood.
    names = [name for name in dict.fromkeys(f[2] for f in optimizer)]
    assert names.index("muon_use_nesterov") < names.index("adam_eps"), names

    bad = subprocess.run([sys.executable, TOOL, os.path.join(work, "absent")],
                         capture_output=True, text=True)
    assert bad.returncode == 2, bad.returncode
print("bridge_extract_test: ok")
