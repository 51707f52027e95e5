#!/usr/bin/env bash
# The code's shape, checked: a layout is asked for its properties and its cost model (the registry,
# parallel/registry.cpp; LayoutCost in parallel/<layout>/cost.cpp), never compared or switched on
# by kind outside the registry and the layouts' own folders, so a new layout cannot inherit
# another's traffic or memory figures by falling through a comparison or a switch. plan/paper.cpp
# is exempt: it restates the paper's three named configurations (its naive baseline ran ungrouped).
# Usage: test_structure.sh SOURCE_DIR
set -uo pipefail
cd "$1"
failures=0
# The registry and the per-layout folders (src/parallel/<name>/) may name kinds; paper.cpp too.
outside_layouts() {
  grep -v '^src/parallel/registry.cpp:' | grep -vE '^src/parallel/[a-z_]+/' |
    grep -v '^src/plan/paper.cpp:'
}
kind_tests=$(grep -rnE '[!=]= *LayoutKind::|LayoutKind::[a-z_]+ *[!=]=' src --include='*.cpp' --include='*.h' |
  outside_layouts)
if [[ -n $kind_tests ]]; then
  echo "FAIL: LayoutKind compared outside the registry (ask layout_traits() for the property):"
  echo "$kind_tests"
  failures=1
fi
kind_switches=$(grep -rnE 'switch *\([^)]*[Ll]ayout[^)]*\)|case +LayoutKind::' src --include='*.cpp' \
  --include='*.h' | outside_layouts)
if [[ -n $kind_switches ]]; then
  echo "FAIL: a switch on the layout outside the registry and the layouts' folders (state the"
  echo "figure in the layout's cost model, parallel/layout_cost.h, and ask layout_cost()):"
  echo "$kind_switches"
  failures=1
fi
literal_lists=$(grep -rn '"dense-tp", *"naive-tp"' src --include='*.cpp' | grep -v '^src/parallel/registry.cpp:')
if [[ -n $literal_lists ]]; then
  echo "FAIL: a literal list of layout names (use layout_names()):"
  echo "$literal_lists"
  failures=1
fi
# Compute lives in kernels (a backend's one place to go): no OpenMP loop elsewhere, but for the
# initialisation RNG (core/rng.cpp) and corpus preparation (data/prepare.cpp), which are not
# training compute.
loops=$(grep -rn '#pragma omp' src --include='*.cpp' --include='*.h' | grep -v '^src/kernels/' |
  grep -v '^src/core/rng.cpp:' | grep -v '^src/data/prepare.cpp:')
if [[ -n $loops ]]; then
  echo "FAIL: an OpenMP loop outside src/kernels/ (make it a named kernel):"
  echo "$loops"
  failures=1
fi
# Floors only point down: the model description knows no processes or layouts, kernels and
# communication know no model, and the layouts know nothing of the runtime or the planner above
# them (engine/, plan/: the planner implements the layouts' WorkSink, not the reverse). Other
# programs' file formats (formats/) stand on the model and the data alone: the trainer uses them,
# never the reverse, and they know no processes, layouts or runtime. Sharded checkpoints
# (checkpoint/) stand on the formats and the communicators: the trainer uses them, never the reverse.
upward=$(grep -rn '#include "parallel/\|#include "engine/\|#include "train/\|#include "plan/\|#include "formats/' \
  src/model src/kernels src/comm src/core src/data; grep -rn '#include "engine/\|#include "train/\|#include "plan/\|#include "formats/' src/parallel
  grep -rn '#include "comm/\|#include "parallel/\|#include "engine/\|#include "train/\|#include "plan/\|#include "bench/\|#include "cli/' src/formats
  grep -rn '#include "train/\|#include "plan/\|#include "bench/\|#include "cli/\|#include "engine/\|#include "parallel/' src/checkpoint)
if [[ -n $upward ]]; then
  echo "FAIL: an include that points up a floor:"
  echo "$upward"
  failures=1
fi
((failures)) && exit 1
echo "structure checks passed"
