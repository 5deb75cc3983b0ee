#!/bin/sh
# The structure that docs/DESIGN.md states, checked on the source tree:
# 1. every file under src/ and tools/attn/ has its own line in the layout
#    ("path   what it is");
# 2. src/internal.h includes only attn.h (and system headers): it is what
#    every layer needs, so it may not pull in a higher layer's headers;
# 3. the lowest layers (base, rng, io, kernels) include nothing from core,
#    ref, modules, optim or mpi (the flow is one-way, bottom up).
# usage: structure_check.sh SRCDIR
set -u
top=$1
fail=0
for f in $(cd "$top" && find src tools/attn -type f | sort); do
    if ! grep -qE "^$f[[:space:]]" "$top/docs/DESIGN.md"; then
        echo "docs/DESIGN.md has no line for $f"
        fail=1
    fi
done
bad=$(grep -E '^#include "' "$top/src/internal.h" | grep -v '^#include "attn.h"')
if [ -n "$bad" ]; then
    echo "src/internal.h includes more than attn.h: $bad"
    fail=1
fi
for d in base rng io kernels; do
    up=$(grep -rnE '#include "(\.\./)*(core|ref|modules|optim|mpi)/' "$top/src/$d" || true)
    if [ -n "$up" ]; then
        echo "src/$d includes a higher layer's header:"
        echo "$up"
        fail=1
    fi
done
[ $fail -eq 0 ] && echo "structure: the layout lists every file; internal.h and the lowest layers include nothing above them"
exit $fail
