#!/usr/bin/env bash
# The map of the code (docs/development.md, "Layout of the code") against the tree: every folder
# of src/ has its paragraph (`src/<name>/` at the start of a line of the map), every folder the map
# names exists (`src/<name>/`, the subfolders indented under one, `tests/`, `configs/` ...), and
# every file it names (`gemm_plan.h`, `rewrite_launch.py`) is somewhere in the repository. The
# README's short tour ("A tour of the code") names every folder of src/ too (`src/<name>/`), and
# only folders that exist. A map that is wrong is worse than none: a folder added, moved or renamed
# without its paragraph fails here.
# Usage: test_readme_map.sh SOURCE_DIR
set -uo pipefail
cd "$1" || exit 1
failures=0
page=docs/development.md

# The map: the first ``` block after the heading.
map=$(awk '/^## Layout of the code/ { found = 1; next }
           found && /^```/ { if (inside) exit; inside = 1; next }
           inside { print }' "$page")
if [[ -z $map ]]; then
  echo "FAIL: $page has no \"## Layout of the code\" section with a map in a \`\`\` block"
  exit 1
fi

# Every folder of src/ has its paragraph.
for dir in src/*/; do
  if ! grep -qE "^${dir}( |$)" <<<"$map"; then
    echo "FAIL: ${dir} is not in the map of the code ($page, Layout of the code)"
    failures=1
  fi
done

# The README's tour: the section up to the next heading.
tour=$(awk '/^## A tour of the code/ { found = 1; next } found && /^## / { exit } found { print }' README.md)
if [[ -z $tour ]]; then
  echo "FAIL: README.md has no \"## A tour of the code\" section"
  failures=1
fi
for dir in src/*/; do
  grep -qF "\`${dir}\`" <<<"$tour" || { echo "FAIL: ${dir} is not in the README's tour of the code"; failures=1; }
done
for named in $(grep -oE '`src/[a-z_]+/`' <<<"$tour" | tr -d '`' | sort -u); do
  [[ -d $named ]] || { echo "FAIL: the README's tour names ${named}, which does not exist"; failures=1; }
done

# Every folder the map names exists: a top-level entry (`src/x/`, `tests/`) at the start of a
# line, and an indented one (`  cpu/`) under the last top-level entry above it. `<layout>/`
# stands for a family of folders: at least one folder must be there.
parent=""
while IFS= read -r line; do
  if [[ $line =~ ^([a-z_]+/)+\  || $line =~ ^([a-z_]+/)+$ ]]; then
    parent=${line%% *}
    [[ -d $parent ]] || { echo "FAIL: the map names ${parent}, which does not exist"; failures=1; }
  elif [[ $line =~ ^\ \ ([a-z_<>]+/)\  || $line =~ ^\ \ ([a-z_<>]+/)$ ]]; then
    child=${BASH_REMATCH[1]}
    if [[ $child == \<* ]]; then
      compgen -G "${parent}*/" >/dev/null ||
        { echo "FAIL: the map names ${parent}${child}, but ${parent} has no folder"; failures=1; }
    elif [[ ! -d ${parent}${child} ]]; then
      echo "FAIL: the map names ${parent}${child}, which does not exist"
      failures=1
    fi
  fi
done <<<"$map"

# Every file the map names is in the repository (by name: the map says which folder it is in).
# llama.cpp is the program GGUF files are for, not a file.
for file in $(grep -oE '[A-Za-z0-9_]+\.(h|cuh|cpp|cu|py|sh|cmake)\b' <<<"$map" | grep -vx 'llama\.cpp' | sort -u); do
  if [[ -z $(find src tests scripts tools -name "$file" -print -quit 2>/dev/null) ]]; then
    echo "FAIL: the map names ${file}, which is not in the repository"
    failures=1
  fi
done

((failures)) && exit 1
echo "the map of the code ($page) and the README's tour name every folder of src/, and only what exists"
