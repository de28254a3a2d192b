#!/usr/bin/env bash
# Build and install Horovod 0.28.1 (the last release) into a Python environment with torch >= 2.1.
#
#   launch/install/horovod.sh [PYTHON]        (default: .venv/bin/python)
#
# As published it does not build against torch 2: its CMake forces C++14 while torch's headers
# need C++17, and its bundled gloo asks for a CMake policy version CMake 4 no longer accepts.
# Nothing in Horovod's source is changed; instead
#   * CXX is a wrapper that appends -std=c++17 to every compile (the last -std wins),
#   * CMAKE_POLICY_VERSION_MINIMUM=3.5 lets CMake 4 configure gloo,
#   * Gloo and PyTorch are on, TensorFlow and MXNet off, MPI on when an mpicxx is on PATH
#     (the mpich wheel of `pip install mpich` puts one in the environment's bin/).
# About 3 to 6 minutes on 2 cores.
set -euo pipefail
PY=${1:-.venv/bin/python}
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
BIN=$(dirname "$PY")
export PATH="$BIN:$PATH"

"$PY" -c "import torch" 2>/dev/null || { echo "horovod.sh: torch is not installed in $PY; install torch first" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cxx=$(command -v g++ || command -v c++) || { echo "horovod.sh: no C++ compiler (g++) found" >&2; exit 2; }
cat > "$work/cxx17" <<WRAP
#!/bin/sh
exec "$cxx" "\$@" -std=c++17
WRAP
chmod +x "$work/cxx17"

export CXX="$work/cxx17"
export CMAKE_POLICY_VERSION_MINIMUM=3.5
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1
export HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
if command -v mpicxx >/dev/null; then
    export HOROVOD_WITH_MPI=1
    echo "horovod.sh: building with Gloo and MPI ($(command -v mpicxx))"
else
    export HOROVOD_WITHOUT_MPI=1
    echo "horovod.sh: building with Gloo only (no mpicxx on PATH)"
fi
"$PY" -m pip install -q setuptools wheel cloudpickle psutil pyyaml packaging cffi
# torch must stay the installed one: no build isolation, and no dependency resolution that
# could replace it.
"$PY" -m pip install --no-build-isolation --no-cache-dir "horovod==0.28.1"
"$PY" -c "import horovod.torch as hvd; print('horovod', __import__('horovod').__version__, 'gloo' if hvd.gloo_built() else '', 'mpi' if hvd.mpi_built() else '')"
