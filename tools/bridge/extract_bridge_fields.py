#!/usr/bin/env python3
"""Extract the fields of Megatron-Bridge's ConfigContainer sections from several Bridge releases.

Reads the dataclass definitions with `ast` (nothing is imported, so torch is not needed) and
writes lib/config/bridge_fields.inc: the releases it read, then one line per field with the
section, the class, the field name, its type annotation, its default (normalised to the spelling
a Bridge YAML dump uses: None -> null, True -> true, torch.bfloat16 stays, an enum member
becomes its name) and the releases that declare it so. A field whose type or default changed
between releases has one line per spelling.

The sources are not part of this repository. SOURCES is a folder with one subfolder per release,
named by its label (a version number, or `main`); each holds the megatron-bridge and
megatron-core wheels of that release, or unpacked source trees (folders with a `megatron/`
package inside), and a one-line file SOURCE that says what they are (versions, commits). Labels
sort as versions, `main` last.

    for pair in 0.4.0:0.17.0 0.4.1:0.17.0 0.4.2:0.17.1 0.5.0:0.18.0 0.5.1:0.18.2 \
                0.6.0:0.19.0 0.6.2:0.19.2; do
      bridge=${pair%:*} core=${pair#*:}
      pip download --no-deps --python-version 3.12 --platform manylinux_2_28_x86_64 \
          --only-binary=:all: megatron-bridge==$bridge megatron-core==$core -d /tmp/bridge/$bridge
      echo "megatron-bridge $bridge, megatron-core $core (PyPI wheels)" > /tmp/bridge/$bridge/SOURCE
    done
    # A branch (main): checkouts of Megatron-Bridge's src/ and Megatron-LM's root, one commit
    # each, as /tmp/bridge/main/bridge/megatron/... and /tmp/bridge/main/core/megatron/...,
    # with a SOURCE line naming both commits.
    python3 tools/bridge/extract_bridge_fields.py /tmp/bridge > lib/config/bridge_fields.inc

Each Bridge release is paired with the megatron-core release published with it (the Bridge
wheels do not pin one: the one published the same day, or the last one before). The
classification of every field (lib/config/bridge_rules.cpp) is checked against this list by tests/config/bridge_dump_test.cpp and bridge_release_test.cpp, so a
new Bridge field fails the tests until it is classified.
"""

import ast
import hashlib
import os
import re
import sys
import zipfile

# ConfigContainer section -> the classes a dump may name for it (each class lists all its
# fields; a path's first line is the one lookups without a class find). A class is found at the
# module named, else as seen from megatron.bridge.training.config (where ConfigContainer is).
SECTIONS = [
    ("rng", ["megatron.training.config.common_config.RNGConfig"]),
    ("rerun_state_machine", ["megatron.bridge.training.config.RerunStateMachineConfig"]),
    ("train", ["megatron.bridge.training.config.TrainingConfig"]),
    ("model", ["megatron.bridge.models.gpt_provider.GPTModelProvider"]),
    ("optimizer", ["megatron.bridge.training.config.OptimizerConfig"]),
    ("ddp", ["megatron.bridge.training.config.DistributedDataParallelConfig"]),
    ("validation", ["megatron.training.config.training_config.ValidationConfig"]),
    ("scheduler", ["megatron.bridge.training.config.SchedulerConfig"]),
    ("dataset", ["megatron.bridge.training.config.GPTDatasetConfig",
                 "megatron.bridge.data.builders.gpt_sft.GPTSFTDatasetConfig",
                 "megatron.bridge.data.builders.gpt_sft.FinetuningDatasetConfig"]),
    ("dataset.preprocessing", ["megatron.bridge.data.sft_processing.ChatSFTPreprocessingConfig"]),
    ("dataset.offline_packing_specs", ["megatron.bridge.data.packing.config.PackedSequenceSpecs"]),
    ("logger", ["megatron.bridge.training.config.LoggerConfig"]),
    ("tokenizer", ["megatron.bridge.training.tokenizers.config.TokenizerConfig"]),
    ("checkpoint", ["megatron.bridge.training.config.CheckpointConfig"]),
    ("dist", ["megatron.bridge.training.config.DistributedInitConfig"]),
    ("ft", ["megatron.bridge.training.config.FaultToleranceConfig"]),
    ("straggler", ["megatron.bridge.training.config.StragglerDetectionConfig"]),
    ("nvrx_straggler", ["megatron.bridge.training.config.NVRxStragglerDetectionConfig"]),
    ("profiling", ["megatron.bridge.training.config.ProfilingConfig"]),
    ("peft", ["megatron.bridge.peft.lora.LoRA"]),
    ("comm_overlap", ["megatron.bridge.training.comm_overlap.CommOverlapConfig"]),
    ("mixed_precision", ["megatron.bridge.training.mixed_precision.MixedPrecisionConfig"]),
    ("tensor_inspect", ["megatron.bridge.training.config.TensorInspectConfig"]),
    ("inprocess_restart", ["megatron.bridge.training.config.InProcessRestartConfig"]),
]

CONFIG_MODULE = "megatron.bridge.training.config"

# Dynamic-CP fields of Megatron-Bridge PR #6127 (in no release read here): the keys a user adds
# to a released recipe to turn dynamic CP on. (section, class, field, type, default); each is
# added to every class of its section that does not declare it, under the label "pr6127".
DYNAMIC_CP_LABEL = "pr6127"
DYNAMIC_CP_FIELDS = [
    ("model", "GPTModelProvider", "dynamic_context_parallel", "bool", "false"),
    ("model", "GPTModelProvider", "min_dynamic_context_parallel_size", "int", "1"),
    ("model", "GPTModelProvider", "sequence_packing_scheduler",
     "Optional[Literal['dp_balanced', 'default_dynamic_cp']]", "null"),
    ("dataset", "GPTDatasetConfig", "enable_global_batch_packing", "bool", "false"),
    ("dataset", "GPTDatasetConfig", "dynamic_context_parallel", "bool", "false"),
]


class Sources:
    """Every module of one release's wheels or source trees, parsed on demand."""

    def __init__(self, folder):
        self.files = {}
        for entry in sorted(os.listdir(folder)):
            path = os.path.join(folder, entry)
            if entry.endswith(".whl"):
                with zipfile.ZipFile(path) as archive:
                    for name in archive.namelist():
                        if name.endswith(".py"):
                            self._add(name, archive.read(name).decode("utf-8"))
            elif os.path.isdir(path):
                for root, _dirs, names in os.walk(path):
                    for name in names:
                        if name.endswith(".py"):
                            full = os.path.join(root, name)
                            relative = os.path.relpath(full, path)
                            with open(full, encoding="utf-8") as source:
                                self._add(relative, source.read())
        self.trees = {}

    def _add(self, name, text):
        module = name[:-3].replace("/", ".").replace(os.sep, ".")
        if module.endswith(".__init__"):
            module = module[: -len(".__init__")]
        self.files[module] = text

    def tree(self, module):
        if module not in self.trees:
            if module not in self.files:
                raise KeyError(f"module {module} is not in the sources")
            self.trees[module] = ast.parse(self.files[module])
        return self.trees[module]

    def find_class(self, module, name, depth=0):
        """(module, ClassDef) for `name` as seen from `module`, following imports."""
        if depth > 8:
            raise KeyError(f"{module}.{name}: import chain too long")
        tree = self.tree(module)
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return module, node
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or node.level):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        base = node.module or ""
                        if node.level:
                            parts = module.split(".")
                            parent = parts if self._is_package(module) else parts[:-1]
                            parent = parent[: len(parent) - (node.level - 1)]
                            base = ".".join(parent + ([node.module] if node.module else []))
                        return self.find_class(base, alias.name, depth + 1)
        raise KeyError(f"class {name} not found from {module}")

    def locate(self, qualified):
        """The class a section names: at its module, else as ConfigContainer's module sees it."""
        module, name = qualified.rsplit(".", 1)
        try:
            return self.find_class(module, name)
        except KeyError:
            return self.find_class(CONFIG_MODULE, name)

    def _is_package(self, module):
        return any(other.startswith(module + ".") for other in self.files)


def base_name(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return base_name(node.value)
    return None


def normalise(node):
    """A default expression as a Bridge YAML dump would spell its value."""
    if node is None:
        return "<required>"
    if isinstance(node, ast.Constant):
        value = node.value
        if value is None:
            return "null"
        if value is True:
            return "true"
        if value is False:
            return "false"
        if isinstance(value, float):
            return repr(value)
        return str(value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = normalise(node.operand)
        return "-" + inner
    if isinstance(node, ast.BinOp):
        try:
            value = eval(compile(ast.Expression(node), "<default>", "eval"), {}, {})
            return repr(value) if isinstance(value, float) else str(value)
        except Exception:
            return "<computed>"
    if isinstance(node, (ast.List, ast.Tuple)) and not node.elts:
        return "[]"
    if isinstance(node, (ast.List, ast.Tuple)):
        return "[" + ", ".join(normalise(item) for item in node.elts) + "]"
    if isinstance(node, ast.Dict) and not node.keys:
        return "{}"
    if isinstance(node, ast.Attribute):
        text = ast.unparse(node)
        if text.startswith("torch."):
            return text  # a dtype
        return node.attr  # an enum member: dumps carry its name
    if isinstance(node, ast.Call):
        callee = ast.unparse(node.func)
        if callee in ("field", "dataclasses.field"):
            for keyword in node.keywords:
                if keyword.arg == "default":
                    return normalise(keyword.value)
                if keyword.arg == "default_factory":
                    factory = ast.unparse(keyword.value)
                    if factory in ("list", "tuple"):
                        return "[]"
                    if factory == "dict":
                        return "{}"
                    return "<computed>"
            return "<required>"
        return "<computed>"
    return "<computed>"


def is_init_false(node):
    if isinstance(node, ast.Call) and ast.unparse(node.func) in ("field", "dataclasses.field"):
        for keyword in node.keywords:
            if keyword.arg == "init" and isinstance(keyword.value, ast.Constant):
                return keyword.value.value is False
    return False


def class_fields(sources, module, node, seen=None):
    """Dataclass fields in definition order, bases first (the dataclass MRO rule)."""
    seen = set() if seen is None else seen
    ordered = {}
    for base in reversed(node.bases):
        name = base_name(base)
        if name in (None, "ABC", "Generic", "object", "nn.Module"):
            continue
        try:
            base_module, base_node = sources.find_class(module, name)
        except KeyError:
            continue  # a non-dataclass base outside the sources (typing, torch)
        key = (base_module, base_node.name)
        if key in seen:
            continue
        seen.add(key)
        for field_name, info in class_fields(sources, base_module, base_node, seen).items():
            ordered.pop(field_name, None)
            ordered[field_name] = info
    for statement in node.body:
        if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
            continue
        name = statement.target.id
        annotation = ast.unparse(statement.annotation)
        if name.startswith("_") or annotation.startswith(("ClassVar", "typing.ClassVar")):
            continue
        if annotation.startswith("InitVar"):
            continue
        ordered.pop(name, None)
        ordered[name] = (annotation, normalise(statement.value))
    return ordered


def release_key(label):
    """Version order; `main` (or any non-numeric label) after every release."""
    numbers = re.findall(r"\d+", label)
    if label == "main" or not numbers:
        return (1, [], label)
    return (0, [int(number) for number in numbers], label)


def read_release(folder):
    """(section, class) -> ordered {field: (type, default)} for one release."""
    sources = Sources(folder)
    out = {}
    for section, classes in SECTIONS:
        for qualified in classes:
            name = qualified.rsplit(".", 1)[1]
            try:
                class_module, node = sources.locate(qualified)
            except KeyError as missing:
                print(f"{folder}: {name} absent ({missing})", file=sys.stderr)
                continue
            out[(section, name)] = class_fields(sources, class_module, node)
    return out


def merge_order(orders):
    """One order for the union of several orders (newest first): each name after the name that
    precedes it where it first appears."""
    merged = list(orders[0])
    for order in orders[1:]:
        previous = None
        for name in order:
            if name not in merged:
                at = merged.index(previous) + 1 if previous is not None else 0
                merged.insert(at, name)
            previous = name
    return merged


def c_string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def macro(name, *items):
    return name + "(" + ", ".join(c_string(item) for item in items) + ")"


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[1]
    labels = sorted((entry for entry in os.listdir(root)
                     if os.path.isdir(os.path.join(root, entry))), key=release_key)
    releases = {}
    descriptions = {}
    for label in labels:
        releases[label] = read_release(os.path.join(root, label))
        with open(os.path.join(root, label, "SOURCE"), encoding="utf-8") as source:
            descriptions[label] = source.read().strip()
    newest_first = list(reversed(labels))
    print("// Generated by tools/bridge/extract_bridge_fields.py from the megatron-bridge and")
    print("// megatron-core sources of the releases below; do not edit.")
    print("// DYNCP_BRIDGE_RELEASE(label, sources), oldest first.")
    print("// DYNCP_BRIDGE_FIELD(section, class, field, type, default, releases): one line per")
    print("// field of each ConfigContainer section and spelling of its type and default, with the")
    print("// labels of the releases that declare it so (space-separated).")
    print("// The files read (sha256):")
    for label in labels:
        for entry in sorted(os.listdir(os.path.join(root, label))):
            if entry.endswith(".whl"):
                with open(os.path.join(root, label, entry), "rb") as wheel:
                    digest = hashlib.sha256(wheel.read()).hexdigest()
                print(f"//   {label}: {entry} {digest}")
            elif os.path.isdir(os.path.join(root, label, entry)):
                print(f"//   {label}: {entry}/ (a source tree; see its SOURCE line)")
    for label in labels:
        print(macro("DYNCP_BRIDGE_RELEASE", label, descriptions[label]))
    print(macro("DYNCP_BRIDGE_RELEASE", DYNAMIC_CP_LABEL,
                "Megatron-Bridge PR #6127 (dynamic context parallelism), not in a release"))
    for section, classes in SECTIONS:
        for qualified in classes:
            name = qualified.rsplit(".", 1)[1]
            present = [label for label in newest_first if (section, name) in releases[label]]
            if not present:
                continue
            order = merge_order([list(releases[label][(section, name)]) for label in present])
            for field_name in order:
                spellings = {}  # (type, default) -> labels, in release order
                for label in labels:
                    fields = releases[label].get((section, name), {})
                    if field_name in fields:
                        spellings.setdefault(fields[field_name], []).append(label)
                # The newest release's spelling first: lookups without a release find it.
                for (annotation, default), found in sorted(
                        spellings.items(), key=lambda item: -max(map(labels.index, item[1]))):
                    print(macro("DYNCP_BRIDGE_FIELD", section, name, field_name, annotation,
                                default, " ".join(found)))
            for extra in DYNAMIC_CP_FIELDS:
                if extra[0] == section and extra[2] not in order:
                    print(macro("DYNCP_BRIDGE_FIELD", section, name, *extra[2:], DYNAMIC_CP_LABEL))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
