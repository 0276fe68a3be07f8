#!/usr/bin/env python3
"""Extract the fields of Megatron-Bridge's ConfigContainer sections from the published wheels.

Reads the dataclass definitions with `ast` (nothing is imported, so torch is not needed) and
writes lib/config/bridge_fields.inc: one line per field with the section, the class, the field
name, its type annotation and its default, normalised to the spelling a Bridge YAML dump uses
(None -> null, True -> true, torch.bfloat16 stays, an enum member becomes its name).

    pip download --no-deps --python-version 3.12 --only-binary=:all: \
        megatron-bridge==0.6.2 megatron-core==0.19.2 -d /tmp/bridge-wheels
    python3 tools/bridge/extract_bridge_fields.py /tmp/bridge-wheels/*.whl \
        > lib/config/bridge_fields.inc

The classification of every field (lib/config/bridge_classification.cpp) is checked against
this list by tests/config/bridge_table_test.cpp, so a new Bridge field fails the test until it
is classified.
"""

import ast
import sys
import zipfile

# ConfigContainer section -> the classes a dump may name for it (each class lists all its
# fields; a path's first line is the one lookups without a class find).
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


# Dynamic-CP fields of Megatron-Bridge PR #6127 (not in a release yet): the keys a user adds to
# a released recipe to turn dynamic CP on. (section, class, field, type, default)
DYNAMIC_CP_FIELDS = [
    ("model", "GPTModelProvider", "dynamic_context_parallel", "bool", "false"),
    ("model", "GPTModelProvider", "min_dynamic_context_parallel_size", "int", "1"),
    ("model", "GPTModelProvider", "sequence_packing_scheduler",
     "Optional[Literal['dp_balanced', 'default_dynamic_cp']]", "null"),
    ("dataset", "GPTDatasetConfig", "enable_global_batch_packing", "bool", "false"),
    ("dataset", "GPTDatasetConfig", "dynamic_context_parallel", "bool", "false"),
]


class Sources:
    """Every module of the wheels, parsed on demand."""

    def __init__(self, wheels):
        self.files = {}
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                for name in archive.namelist():
                    if name.endswith(".py"):
                        module = name[:-3].replace("/", ".")
                        if module.endswith(".__init__"):
                            module = module[: -len(".__init__")]
                        self.files[module] = archive.read(name).decode("utf-8")
        self.trees = {}

    def tree(self, module):
        if module not in self.trees:
            if module not in self.files:
                raise KeyError(f"module {module} is not in the wheels")
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
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        base = node.module
                        if node.level:
                            parts = module.split(".")
                            is_package = module in self.files and self._is_package(module)
                            parent = parts if is_package else parts[:-1]
                            parent = parent[: len(parent) - (node.level - 1)]
                            base = ".".join(parent + ([node.module] if node.module else []))
                        return self.find_class(base, alias.name, depth + 1)
        raise KeyError(f"class {name} not found from {module}")

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
            continue  # a non-dataclass base outside the wheels (typing, torch)
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
        if is_init_false(statement.value) and name.startswith("_"):
            continue
        ordered.pop(name, None)
        ordered[name] = (annotation, normalise(statement.value))
    return ordered


def c_string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def field_line(*items):
    return "DYNCP_BRIDGE_FIELD(" + ", ".join(c_string(item) for item in items) + ")"


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    sources = Sources(argv[1:])
    print("// Generated by tools/bridge/extract_bridge_fields.py from megatron-bridge and")
    print("// megatron-core wheels; do not edit. One line per field of each ConfigContainer")
    print("// section: DYNCP_BRIDGE_FIELD(section, class, field, type, default).")
    for section, classes in SECTIONS:
        for qualified in classes:
            module, name = qualified.rsplit(".", 1)
            class_module, node = sources.find_class(module, name)
            emitted = set()
            for field_name, (annotation, default) in class_fields(sources, class_module,
                                                                  node).items():
                emitted.add(field_name)
                print(field_line(section, name, field_name, annotation, default))
            for extra in DYNAMIC_CP_FIELDS:
                if extra[0] == section and extra[2] not in emitted:
                    print(field_line(section, name, *extra[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
