#!/usr/bin/env bash
# `make wheelhouse`: every wheel the images install, downloaded once, so that the builds run
# offline (pip --no-index). Versions are requirements.lock's, the lock `make setup` installs.
#   wheelhouse/common      the lock without torch, plus docker/requirements-robot.txt
#   wheelhouse/torch-cpu   the lock's torch as pip finds it here: the 2.13.0+cpu wheel on disk
#   wheelhouse/torch-cuda  TORCH=cuda: the lock's torch from PyPI (a CUDA build) and its nvidia-*
#                          wheels, for a GPU box's policy-server image; never fetched by docker-check
# A wheel already there is not downloaded again.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=${TORCH:-cpu}
PY=${PY:-.venv/bin/python}
LOW=(nice -n 19 ionice -c 3)
PIP=("${LOW[@]}" "$PY" -m pip --disable-pip-version-check)
torch_version=$(sed -n 's/^torch==//p' requirements.lock)
mkdir -p wheelhouse/common "wheelhouse/torch-$TORCH"

lock=$(mktemp)
trap 'rm -f "$lock"' EXIT
grep -v '^torch==' requirements.lock >"$lock"
# `pip wheel` takes a published wheel as it is and builds one where only an sdist exists. With
# dependencies: the lock is not a closed set (mypy's ast-serialize is not in it), and `make setup`
# resolves what it leaves open from the index, so this does the same.
"${PIP[@]}" wheel --quiet --wheel-dir wheelhouse/common -r "$lock" -r docker/requirements-robot.txt

case "$TORCH" in
  cpu)
    "${PIP[@]}" download --quiet --no-deps --dest wheelhouse/torch-cpu "torch==$torch_version"
    if ! ls wheelhouse/torch-cpu/torch-"$torch_version"+cpu-*.whl >/dev/null 2>&1; then
      echo "wheelhouse: pip did not find the CPU build of torch $torch_version (a +cpu wheel); refusing the other" >&2
      rm -f wheelhouse/torch-cpu/torch-*.whl
      exit 1
    fi
    ;;
  cuda)
    # PyPI's default Linux torch is the CUDA build; no local wheel (a +cpu one) may win, so no
    # pip configuration of this machine is read.
    PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS='' "${PIP[@]}" download --quiet --dest wheelhouse/torch-cuda \
      --only-binary=:all: --index-url https://pypi.org/simple -c "$lock" "torch==$torch_version"
    ;;
  *)
    echo "wheelhouse: TORCH=$TORCH (cpu or cuda)" >&2
    exit 2
    ;;
esac
echo "wheelhouse: $(find wheelhouse -name '*.whl' | wc -l) wheels, $(du -sh wheelhouse | cut -f1) (TORCH=$TORCH)"
