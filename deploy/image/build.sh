#!/usr/bin/env bash
# `make image`: the router image without an image registry.
#   1. base root file systems from Debian packages (debootstrap), imported as
#      localhost/router-base-build:SUITE and localhost/router-base:SUITE (kept when present);
#   2. the dependency wheels downloaded on this host into build/image/wheels (the image build
#      itself has no network);
#   3. deploy/Containerfile built on them: localhost/amqp-mesh-router:VERSION.
# Needs root (debootstrap), podman (or docker with a working engine) and a Debian mirror.
# ENGINE=podman|docker, ISOLATION (podman build --isolation), SUITE (bookworm: Python 3.11), DEBIAN_MIRROR, PYTHON (pip for step 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
SUITE=${SUITE:-bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PYTHON=${PYTHON:-python3}
VERSION=$("$PYTHON" -c 'import tomllib; print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])')
IMAGE=${IMAGE:-localhost/amqp-mesh-router:$VERSION}
WORK=build/image

engine() {
  if [ -n "${ENGINE:-}" ]; then echo "$ENGINE"; return; fi
  if command -v podman >/dev/null 2>&1; then echo podman; return; fi
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then echo docker; return; fi
  echo "no container engine: install podman (apt-get install podman)" >&2; exit 1
}
ENGINE=$(engine)

base_image() {  # NAME PACKAGES
  local name=$1 packages=$2
  if "$ENGINE" image exists "$name" 2>/dev/null || "$ENGINE" image inspect "$name" >/dev/null 2>&1; then
    echo "$name: present"; return
  fi
  command -v debootstrap >/dev/null || { echo "debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
  local root="$WORK/rootfs-${name##*/}"
  root=${root%%:*}
  rm -rf "$root"
  debootstrap --variant=minbase --include="$packages" "$SUITE" "$root" "$DEBIAN_MIRROR"
  # Smaller: no package lists, caches, docs or man pages (the image never runs apt).
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
         "$root"/usr/share/locale/*
  tar --numeric-owner -C "$root" -c . | "$ENGINE" import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$name"
  rm -rf "$root"
}

mkdir -p "$WORK/wheels"
base_image "localhost/router-base-build:$SUITE" python3,python3-venv,python3-dev,gcc,libc6-dev
base_image "localhost/router-base:$SUITE" python3,python3-venv,passwd
# The dependencies (and the build tools for the compile stage) as wheels for the image's Python.
"$PYTHON" -m pip download --quiet --dest "$WORK/wheels" --only-binary=:all: \
    --python-version 3.11 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any \
    $("$PYTHON" -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml","rb"))["project"]["dependencies"]))') \
    "setuptools>=77" wheel "mypy>=1.10" types-PyYAML types-networkx
# ISOLATION=chroot (podman) runs the build steps without an OCI runtime, for hosts where
# containers cannot start (e.g. nested in a container without cgroup controllers).
isolation=()
if [ -n "${ISOLATION:-}" ]; then isolation=(--isolation "$ISOLATION"); fi
"$ENGINE" build "${isolation[@]}" --file deploy/Containerfile --tag "$IMAGE" \
    --build-arg "BUILD_BASE=localhost/router-base-build:$SUITE" --build-arg "RUN_BASE=localhost/router-base:$SUITE" .
echo "$IMAGE"
