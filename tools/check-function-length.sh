#!/usr/bin/env bash
# No function in lib/ or apps/ longer than the limit (docs/architecture.md §7): universal-ctags'
# line/end fields give each function's first and last line. Prints every function over the
# limit, longest first; exits 1 if there is any.
#   tools/check-function-length.sh [ROOT] [LIMIT]     (LIMIT defaults to 150 lines)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
limit=${2:-150}
ctags_program=$(command -v ctags-universal || command -v ctags || true)
if [[ -z $ctags_program ]] || ! "$ctags_program" --version 2>/dev/null | grep -q "Universal Ctags"; then
  echo "check-function-length: needs universal-ctags (apt-get install universal-ctags)" >&2
  exit 1
fi
cd "$root"
over=$("$ctags_program" --languages=C++ --kinds-C++=f --fields=+ne --extras=-F -R -f - lib apps |
  awk -F'\t' -v limit="$limit" '{
    line = ""; end = "";
    for (i = 4; i <= NF; i++) {
      if ($i ~ /^line:/) line = substr($i, 6);
      if ($i ~ /^end:/) end = substr($i, 5);
    }
    if (line != "" && end != "" && end - line + 1 > limit)
      printf "%d\t%s:%s\t%s\n", end - line + 1, $2, line, $1;
  }' | sort -rn)
if [[ -n $over ]]; then
  echo "functions longer than $limit lines (split them into named steps):"
  awk -F'\t' '{ printf "  %5d lines  %s  %s\n", $1, $2, $3 }' <<<"$over"
  exit 1
fi
echo "function length: every function in lib/ and apps/ has at most $limit lines"
