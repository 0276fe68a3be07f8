#!/usr/bin/env python3
"""The commands the README and the docs show must work as written. Run by ctest:

    doc_commands_test.py SOURCE_ROOT BUILD_DIR

From README.md, docs/**/*.md and tools/slurm/* (code blocks and inline code):
- every `configs/...yaml` path must exist;
- every dyncp-* command line (after launcher prefixes such as `mpirun -np 4` or `VAR=1`) must
  use only options its binary's --help lists (per subcommand for dyncp-data);
- commands without placeholders (RECIPE, DIR, [..], ...) run from the source root: the cheap ones
  (--dry-run, --help, --print-config, --version) as written, and dyncp-train training commands as
  a --dry-run (with --world-size from the launcher's -np / -n), and must exit 0.
"""

import glob
import os
import re
import shlex
import subprocess
import sys

ROOT, BUILD = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
BINARIES = ("dyncp-train", "dyncp-plan", "dyncp-data", "dyncp-check", "dyncp-export")
CHEAP = {"--dry-run", "--help", "--print-config", "--print-config-reference", "--version"}
failures = []


def fail(message):
    failures.append(message)
    print(f"FAIL: {message}")


def documents():
    paths = [os.path.join(ROOT, "README.md")]
    paths += sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
    paths += sorted(glob.glob(os.path.join(ROOT, "tools", "slurm", "*")))
    return [p for p in paths if os.path.isfile(p)]


def code_snippets(path):
    """(line number, text) of every fenced block line (continuations joined) and inline span."""
    lines = open(path, encoding="utf-8").read().split("\n")
    snippets, fenced, pending, pending_line = [], False, "", 0
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or path.endswith(".sbatch"):
            text = line.strip()
            if path.endswith(".sbatch"):
                text = text.lstrip("#").strip()
            if not pending:
                pending_line = number
            if text.endswith("\\"):
                pending += text[:-1] + " "
                continue
            snippets.append((pending_line, pending + text))
            pending = ""
        else:
            snippets += [(number, span) for span in re.findall(r"`([^`]+)`", line)]
    return snippets


def is_placeholder(token):
    return (re.search(r"[\[\](){}|<>]", token) is not None or "..." in token
            or re.fullmatch(r"[A-Z][A-Z_.]*", token.split("=")[-1]) is not None
            or token in ("r.yaml", "recipe.yaml", "RECIPE"))


LAUNCHER_WORDS = {"mpirun", "srun", "/usr/bin/time", "-v", "-np", "-n", "--mpi=pmix", "$",
                  "--overcommit", "-O", "env", "exec"}


def command_in(text):
    """(binary, args, ranks, env) when the snippet runs a dyncp-* binary, else None."""
    text = re.split(r"\s#\s", text)[0]
    try:
        tokens = shlex.split(text)
    except ValueError:
        return None
    ranks = None
    for index, token in enumerate(tokens):
        name = os.path.basename(token)
        if name in BINARIES:
            prefix = tokens[:index]
            if not all(t in LAUNCHER_WORDS or re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", t)
                       or t.isdigit() for t in prefix):
                return None
            for flag in ("-np", "-n"):
                if flag in prefix and prefix.index(flag) + 1 < len(prefix):
                    ranks = prefix[prefix.index(flag) + 1]
            args = []
            for arg in tokens[index + 1:]:
                if arg in ("|", ">", ">>", "&&", ";", "2>&1"):
                    break
                args.append(arg)
            env = tuple(tuple(t.split("=", 1)) for t in prefix if re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", t))
            return name, args, ranks, env
        if not (token in LAUNCHER_WORDS or re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", token)
                or token.isdigit()):
            return None
    return None


help_cache = {}


def help_text(binary, subcommand):
    key = (binary, subcommand)
    if key not in help_cache:
        argv = [os.path.join(BUILD, "apps", binary, binary)] + ([subcommand] if subcommand else [])
        result = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=60)
        help_cache[key] = result.stdout + result.stderr
    return help_cache[key]


def check_command(where, binary, args, ranks, env):
    executable = os.path.join(BUILD, "apps", binary, binary)
    if not os.access(executable, os.X_OK):
        fail(f"{where}: {binary} is not built at {executable}")
        return
    subcommand = args[0] if binary == "dyncp-data" and args and not args[0].startswith("-") else None
    usage = help_text(binary, subcommand)
    for arg in args:
        if arg.startswith("--"):
            option = arg.split("=")[0]
            if option not in usage:
                fail(f"{where}: {binary}{' ' + subcommand if subcommand else ''} has no option {option}")
    if any(is_placeholder(arg) for arg in args):
        return
    # `dyncp-train --dry-run` in a sentence names a flag, not a command to run.
    if binary == "dyncp-train" and "--config" not in args and not CHEAP - {"--dry-run", "--print-config"} & set(args):
        return
    argv = [executable] + args
    if not CHEAP & set(args):
        if binary != "dyncp-train":
            return
        argv += ["--dry-run"] + (["--world-size", ranks] if ranks else [])
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "OPENBLAS_NUM_THREADS": "1", **dict(env)})
    if result.returncode != 0:
        fail(f"{where}: `{' '.join(argv)}` exited {result.returncode}:\n"
             f"{(result.stdout + result.stderr)[-1500:]}")
    else:
        print(f"ok: {where}: {binary} {' '.join(args)}")


checked_paths = checked_commands = 0
for document in documents():
    relative = os.path.relpath(document, ROOT)
    seen = set()
    for number, snippet in code_snippets(document):
        where = f"{relative}:{number}"
        for path in re.findall(r"configs/[A-Za-z0-9_./-]+\.ya?ml", snippet):
            checked_paths += 1
            if not os.path.isfile(os.path.join(ROOT, path)):
                fail(f"{where}: {path} does not exist")
        command = command_in(snippet)
        if command and (command[0], tuple(command[1]), command[2], command[3]) not in seen:
            seen.add((command[0], tuple(command[1]), command[2], command[3]))
            checked_commands += 1
            check_command(where, *command)

print(f"{checked_paths} recipe paths and {checked_commands} commands checked")
if checked_paths == 0 or checked_commands == 0:
    fail("found no recipe paths or commands: the extraction is broken")
if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
