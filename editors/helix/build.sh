#!/usr/bin/env bash
# Builds Helix's `hx` from the source tarball the real-editor tests use, once per
# machine: the binary is cached outside the repository under a directory named
# by the tarball's SHA-256, so a second call only prints its path.
#   editors/helix/build.sh            # prints the path of hx
# HELIX_SRC_TARBALL overrides the tarball (default ../shared/tools/helix-src.tar.gz);
# SWITCHYARD_TOOL_CACHE the cache (default ~/.cache/switchyard/tools).
# Exits 2 when the source tarball is missing.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
tarball="${HELIX_SRC_TARBALL:-$repo/../shared/tools/helix-src.tar.gz}"
cache="${SWITCHYARD_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/tools}"
if [ ! -f "$tarball" ]; then
  # Exit status 2: nothing to build from (the Helix tests say so and stop).
  echo "no Helix source at $tarball (set HELIX_SRC_TARBALL)" >&2
  exit 2
fi
digest=$(sha256sum "$tarball" | cut -c1-16)
home="$cache/helix-$digest"
if [ -x "$home/hx" ]; then
  echo "$home/hx"
  exit 0
fi
echo "building Helix from $tarball into $home (once per machine, several minutes)" >&2
mkdir -p "$home"
rm -rf "$home/src" "$home/target"
mkdir "$home/src"
tar -xzf "$tarball" -C "$home/src"
# Helix pins a toolchain that cannot be downloaded here; the stable one builds it.
rm -f "$home/src/helix/rust-toolchain.toml"
# No git integration (gix is most of the build) and no debug info: the tests
# need only the editor and its language client. No grammars: LSP needs none.
(cd "$home/src/helix" &&
  HELIX_DISABLE_AUTO_GRAMMAR_BUILD=1 CARGO_PROFILE_DEV_DEBUG=0 CARGO_TARGET_DIR="$home/target" \
    nice cargo build --locked --quiet -p helix-term --no-default-features --bin hx)
cp "$home/target/debug/hx" "$home/hx.partial"
mv "$home/hx.partial" "$home/hx"
rm -rf "$home/target"
echo "$home/hx"
