#!/usr/bin/env bash
# Build speechstream's OCI image (deploy/image/Containerfile) with podman, buildah or docker.
#
# Runs the set-up the image needs (the release binary, libtorch and the voices, through
# scripts/setup-voice.sh), stages exactly the files the image holds into a small build context
# (not the checkout: target/ alone is gigabytes), builds, and prints the image's size.
#
#   scripts/build-image.sh [options] [-- extra options for the builder's build command]
#
#   --tag TAG                the image's name [speechstream:latest; speechstream:cuda with --cuda]
#   --cuda                   libtorch with CUDA (torch 2.11.0's cu130 wheel and the nvidia wheels it
#                            pins, ~3 GB more, fetched once into <cache>/libtorch-cuda); run it with
#                            the NVIDIA container toolkit (`--device nvidia.com/gpu=all`, `--gpus all`)
#                            on a driver for CUDA 13 (580+)
#   --voices LIST            comma-separated, of hibari (always), kokoro, piper [hibari]; kokoro adds
#                            Debian's open-jtalk-mecab-naist-jdic, piper the espeak-ng helper
#                            (tools/espeak-phonemes, GPL-3.0-or-later) and piper-tts's espeak-ng build
#   --base IMAGE             the base image [debian:bookworm-slim]
#   --base-from-debootstrap  make the base here, from Debian's mirror ($DEBIAN_MIRROR, else
#                            deb.debian.org; $DEBIAN_SECURITY_MIRROR for bookworm-security) with
#                            `debootstrap --variant=minbase bookworm`, and import
#                            it as localhost/speechstream-base:bookworm (root and debootstrap needed);
#                            done anyway when the default base can be neither found nor pulled
#   --builder NAME           podman, buildah or docker [the first of them installed]
#   --no-build               use target/release/speechstream as it is (no `cargo build --release`)
#   --context DIR            stage the build context in DIR (kept) [a temporary folder, removed]
#   --list-files             print the files and folders the image's context is staged from
#                            (repository paths, after set-up) and exit; builds and fetches nothing
#
# Everything after `--` goes to the build command as it is, e.g. `-- --isolation chroot` (buildah,
# podman) where the machine has no user namespaces for RUN steps. podman and buildah also read
# $CONTAINERS_CONF and $CONTAINERS_STORAGE_CONF (e.g. a vfs storage driver) as usual.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf 'build-image: %s\n' "$*" >&2; }
die() {
  printf 'build-image: error: %s\n' "$*" >&2
  exit 1
}

CACHE="${SPEECHSTREAM_CACHE:-$ROOT/.cache}"
PYTHON="${PYTHON:-python3}"
DEFAULT_BASE=debian:bookworm-slim
LOCAL_BASE=localhost/speechstream-base:bookworm
# What the CPU binary loads from libtorch's folder (ldd target/release/speechstream):
# libtorch_cpu.so NEEDs libcudart and libcupti even for CPU work.
CPU_LIBS=(libtorch_cpu.so libc10.so libgomp.so.1 libcudart.so.13 libcupti.so.13)

tag=""
cuda=0
voices="hibari"
base=""
debootstrap_base=0
builder=""
cargo_build=1
context=""
list_only=0
builder_args=()
while (($#)); do
  case "$1" in
    --tag) tag="${2:?--tag needs a value}" && shift ;;
    --cuda) cuda=1 ;;
    --voices) voices="${2:?--voices needs a value}" && shift ;;
    --base) base="${2:?--base needs a value}" && shift ;;
    --base-from-debootstrap) debootstrap_base=1 ;;
    --builder) builder="${2:?--builder needs a value}" && shift ;;
    --no-build) cargo_build=0 ;;
    --context) context="${2:?--context needs a value}" && shift ;;
    --list-files) list_only=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    --)
      shift
      builder_args=("$@")
      break
      ;;
    *) die "unknown option '$1' (--help lists them)" ;;
  esac
  shift
done
if [[ -z "$tag" ]]; then
  if ((cuda)); then tag=speechstream:cuda; else tag=speechstream:latest; fi
fi

with_kokoro=0
with_piper=0
IFS=, read -r -a voice_list <<<"$voices"
for v in "${voice_list[@]}"; do
  case "$v" in
    hibari) ;;
    kokoro) with_kokoro=1 ;;
    piper) with_piper=1 ;;
    *) die "unknown voice family '$v' in --voices (hibari, kokoro, piper)" ;;
  esac
done

# The staged context, as "SOURCE DESTINATION" lines (DESTINATION relative to the context).
# SOURCE is a file, or a folder copied whole.
staged() {
  local lib
  echo "deploy/image/Containerfile Containerfile"
  echo "LICENSE LICENSE"
  echo "target/release/speechstream bin/speechstream"
  if ((cuda)); then
    echo "$CACHE/libtorch-cuda/torch/lib torch/lib"
    echo "$CACHE/libtorch-cuda/nvidia nvidia"
  else
    for lib in "${CPU_LIBS[@]}"; do echo "$CACHE/libtorch/lib/$lib torch/lib/$lib"; done
  fi
  echo "$CACHE/hibari voices/hibari"
  if ((with_kokoro)); then echo "$CACHE/kokoro voices/kokoro"; fi
  if ((with_piper)); then
    echo "$CACHE/piper voices/piper"
    echo "$CACHE/espeak-piper voices/espeak-piper"
    echo "tools/espeak-phonemes/target/release/espeak-phonemes bin/espeak-phonemes"
  fi
}

if ((list_only)); then
  staged | while read -r src _; do echo "${src#"$ROOT"/}"; done
  exit 0
fi

# --- set-up -------------------------------------------------------------------------------------

setup_parts=(libtorch hibari)
((with_kokoro)) && setup_parts+=(kokoro)
((with_piper)) && setup_parts+=(piper espeak-piper)
for part in "${setup_parts[@]}"; do
  say "set-up: scripts/setup-voice.sh $part"
  scripts/setup-voice.sh "$part" >&2
done
if ((cargo_build)); then
  say "cargo build --release --bin speechstream"
  cargo build --release --quiet --bin speechstream
fi
[[ -x target/release/speechstream ]] || die "target/release/speechstream is missing (run without --no-build)"
if ((with_piper)); then
  say "cargo build --release (tools/espeak-phonemes)"
  cargo build --release --quiet --manifest-path tools/espeak-phonemes/Cargo.toml
fi

# torch 2.11.0's CUDA libraries: torch/lib of the wheel whose sha256 setup-voice.sh pins, and the
# lib/ folders of the nvidia wheels it depends on, in the layout its RUNPATH expects
# ($ORIGIN/../../nvidia/<name>/lib from torch/lib).
setup_cuda_libtorch() {
  local dest="$CACHE/libtorch-cuda"
  if [[ -f "$dest/.complete" ]]; then
    say "CUDA libtorch already in $dest (skipping)"
    return
  fi
  local version wheel sha
  version="$(sed -n 's/^TORCH_VERSION=//p' scripts/setup-voice.sh)"
  wheel="$(sed -n 's/^TORCH_WHEEL=//p' scripts/setup-voice.sh)"
  sha="$(sed -n 's/^TORCH_SHA256=//p' scripts/setup-voice.sh)"
  [[ -n "$version" && -n "$wheel" && -n "$sha" ]] || die "could not read torch's pin from scripts/setup-voice.sh"
  local wheels="$CACHE/wheels-cuda"
  mkdir -p "$wheels"
  # Every manylinux tag the image's glibc (2.36) runs, for whatever Python runs pip.
  local plat=(--platform manylinux2014_x86_64) minor
  for minor in $(seq 17 36); do plat+=(--platform "manylinux_2_${minor}_x86_64"); done
  say "downloading torch $version with its CUDA wheels into $wheels (about 3 GB)"
  "$PYTHON" -m pip download --no-cache-dir --disable-pip-version-check --progress-bar off --quiet \
    --only-binary=:all: "${plat[@]}" --python-version 3.11 --implementation cp --abi cp311 --abi abi3 \
    --abi none -d "$wheels" "torch==$version" || die "pip download torch==$version failed"
  [[ -f "$wheels/$wheel" ]] || die "pip did not download $wheel"
  [[ "$(sha256sum "$wheels/$wheel" | cut -d' ' -f1)" == "$sha" ]] || die "$wheel does not match its pinned sha256"
  local tmp="$CACHE/.libtorch-cuda.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  "$PYTHON" - "$wheels" "$tmp" <<'PY' || die "extracting the CUDA libraries failed"
import os, re, shutil, sys, zipfile
wheels, dest = sys.argv[1], sys.argv[2]
wanted = re.compile(r"^(torch/lib/[^/]+\.so[^/]*|nvidia/[^/]+/lib/[^/]+\.so[^/]*)$")
unwanted = {"torch/lib/libtorch_python.so"}  # Python's bindings: nothing here loads them
count = 0
for name in sorted(os.listdir(wheels)):
    if not (name.startswith("torch-") or name.startswith("nvidia_")) or not name.endswith(".whl"):
        continue
    with zipfile.ZipFile(os.path.join(wheels, name)) as z:
        for info in z.infolist():
            if not wanted.match(info.filename) or info.filename in unwanted:
                continue
            out = os.path.join(dest, info.filename)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.chmod(out, 0o755)
            count += 1
if not os.path.exists(os.path.join(dest, "torch/lib/libtorch_cuda.so")):
    sys.exit("no torch/lib/libtorch_cuda.so in the torch wheel")
print(f"{count} libraries", file=sys.stderr)
PY
  touch "$tmp/.complete"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  say "CUDA libtorch ready: $(du -sh "$dest" | cut -f1)"
}
((cuda)) && setup_cuda_libtorch

# --- the build context --------------------------------------------------------------------------

if [[ -n "$context" ]]; then
  rm -rf "$context"
  mkdir -p "$context"
else
  context="$(mktemp -d "${TMPDIR:-/tmp}/speechstream-image.XXXXXX")"
  trap 'rm -rf "$context"' EXIT
fi
mkdir -p "$context/nvidia" "$context/bin" "$context/torch/lib" "$context/voices"
while read -r src dest; do
  [[ -e "$src" ]] || die "$src is missing after set-up"
  mkdir -p "$(dirname "$context/$dest")"
  if [[ -d "$src" ]]; then
    # A folder whole, set-up's .complete marker included (the server checks espeak-piper's).
    mkdir -p "$context/$dest"
    cp -R "$src/." "$context/$dest/"
  else
    cp "$src" "$context/$dest"
  fi
done < <(staged)
# The binary's debug info is five sixths of it (the release profile keeps it for profiling).
strip --strip-debug "$context/bin/speechstream"
chmod -R a+rX,go-w "$context"
say "context: $(du -sh "$context" | cut -f1) in $context"

# --- the builder and the base -------------------------------------------------------------------

if [[ -z "$builder" ]]; then
  for b in podman buildah docker; do
    if command -v "$b" >/dev/null; then
      builder="$b"
      break
    fi
  done
  [[ -n "$builder" ]] || die "none of podman, buildah or docker is installed (Debian: apt-get install podman)"
fi
command -v "$builder" >/dev/null || die "$builder is not installed"

have_image() {
  case "$builder" in
    podman) podman image exists "$1" ;;
    buildah) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
    docker) docker image inspect "$1" >/dev/null 2>&1 ;;
  esac
}

pull_image() {
  case "$builder" in
    podman | buildah) "$builder" pull "$1" >&2 ;;
    docker) docker pull "$1" >&2 ;;
  esac
}

# A Debian bookworm minbase root, trimmed as the slim images are, imported as $LOCAL_BASE.
debootstrap_base() {
  [[ $(id -u) -eq 0 ]] || die "--base-from-debootstrap needs root (debootstrap)"
  command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
  local mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
  local work
  work="$(mktemp -d "${TMPDIR:-/tmp}/speechstream-base.XXXXXX")"
  say "debootstrap --variant=minbase bookworm from $mirror (about 30 s)"
  debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    die "debootstrap failed; its log: $work/debootstrap.log"
  local r="$work/rootfs"
  rm -f "$r/etc/apt/sources.list"
  cat >"$r/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # Keep documentation out of later installs too, and drop what the image never reads.
  cat >"$r/etc/dpkg/dpkg.cfg.d/speechstream-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  cat >"$r/etc/apt/apt.conf.d/speechstream-slim" <<'EOF'
APT::Install-Recommends "false";
Acquire::Languages "none";
EOF
  find "$r/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
  find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
  find "$r/usr/share/locale" -mindepth 1 ! -name locale.alias -delete
  rm -rf "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/* \
    "$r"/var/cache/debconf/*-old "$r"/var/log/* "$r"/tmp/* "$r"/root/.bash_history
  say "importing the base ($(du -sh "$r" | cut -f1)) as $LOCAL_BASE"
  case "$builder" in
    podman) tar -C "$r" --numeric-owner -c . | podman import - "$LOCAL_BASE" >&2 ;;
    docker) tar -C "$r" --numeric-owner -c . | docker import - "$LOCAL_BASE" >&2 ;;
    buildah)
      local ctr
      ctr="$(buildah from scratch)"
      tar -C "$r" --numeric-owner -c . >"$work/rootfs.tar"
      buildah add "$ctr" "$work/rootfs.tar" / >&2
      buildah commit --rm "$ctr" "$LOCAL_BASE" >&2
      ;;
  esac
  rm -rf "$work"
}

if ((debootstrap_base)); then
  debootstrap_base
  base="$LOCAL_BASE"
elif [[ -z "$base" ]]; then
  base="$DEFAULT_BASE"
  if ! have_image "$base" && ! pull_image "$base"; then
    if have_image "$LOCAL_BASE"; then
      say "$base can be neither found nor pulled: using the local $LOCAL_BASE"
    else
      say "$base can be neither found nor pulled: making $LOCAL_BASE with debootstrap"
      debootstrap_base
    fi
    base="$LOCAL_BASE"
  fi
fi

# --- the build ----------------------------------------------------------------------------------

extra_packages=""
((with_kokoro)) && extra_packages="open-jtalk-mecab-naist-jdic"
variant=cpu
((cuda)) && variant=cuda
args=(--build-arg "BASE=$base" --build-arg "VARIANT=$variant" --build-arg "EXTRA_PACKAGES=$extra_packages"
  -f "$context/Containerfile" -t "$tag")
say "$builder: building $tag ($variant, voices $voices) from $base"
case "$builder" in
  # The docker format keeps HEALTHCHECK (the OCI format has no field for it).
  podman) podman build --format docker "${args[@]}" "${builder_args[@]}" "$context" ;;
  buildah) buildah bud --format docker "${args[@]}" "${builder_args[@]}" "$context" ;;
  docker) docker build "${args[@]}" "${builder_args[@]}" "$context" ;;
  *) die "unknown builder '$builder' (podman, buildah or docker)" ;;
esac

case "$builder" in
  podman | docker) size="$("$builder" image inspect --format '{{.Size}}' "$tag")" ;;
  buildah) size="$(buildah images --format '{{.Size}}' "$tag" | head -n 1)" ;;
esac
if [[ "$size" =~ ^[0-9]+$ ]]; then
  size="$((size / 1000000)) MB"
fi
say "built $tag: $size"
echo "$tag $size"
