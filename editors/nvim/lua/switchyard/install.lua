-- Installs the release binary for this platform: downloads the archive into
-- a temporary folder beside the destination, refuses it unless its SHA-256
-- is the pinned one, unpacks it there and renames the binary into place, so
-- the destination never holds a partial or unchecked file.
--
--   require('switchyard.install').install()          -- the pinned release
--   require('switchyard.install').install({ url = ..., sha256 = ... })
--
-- The binary lands in stdpath('data')/switchyard/bin; point setup()'s `cmd`
-- at it (M.path()).

local M = {}

--- The release this plugin version pins, per target: { url = ..., sha256 = ... }.
--- scripts/pin-release writes it (release.lua) from a published release's
--- SHA256SUMS; a checkout without that file pins none.
local ok, release = pcall(require, 'switchyard.release')
M.pinned = ok and release.targets or {}

local function target()
  local uname = vim.uv.os_uname()
  local arch = ({ x86_64 = 'x86_64', aarch64 = 'aarch64', arm64 = 'aarch64' })[uname.machine] or uname.machine
  local os = ({ Linux = 'unknown-linux-gnu', Darwin = 'apple-darwin', Windows_NT = 'pc-windows-msvc' })[uname.sysname]
  return arch .. '-' .. (os or uname.sysname:lower())
end

--- Where the installed binary lives.
function M.path()
  local name = vim.fn.has('win32') == 1 and 'switchyard.exe' or 'switchyard'
  return vim.fs.joinpath(vim.fn.stdpath('data'), 'switchyard', 'bin', name)
end

local function sha256(path)
  local tools = { { 'sha256sum', path }, { 'shasum', '-a', '256', path } }
  for _, tool in ipairs(tools) do
    if vim.fn.executable(tool[1]) == 1 then
      local done = vim.system(tool, { text = true }):wait()
      if done.code == 0 then
        return done.stdout:match('^(%x+)')
      end
    end
  end
  error('neither sha256sum nor shasum is installed: cannot check the download')
end

local function run(args, what)
  local done = vim.system(args, { text = true }):wait()
  if done.code ~= 0 then
    error(('%s failed: %s'):format(what, vim.trim(done.stderr or '')))
  end
end

--- Downloads, checks and installs; returns the binary's path, or raises
--- with what went wrong (nothing is left at the destination then).
function M.install(release)
  release = release or M.pinned[target()]
  if not release then
    error(('no pinned release for %s in this plugin version: build from source or pass { url, sha256 }'):format(target()))
  end
  local dest = release.dest or M.path()
  local dir = vim.fs.dirname(dest)
  vim.fn.mkdir(dir, 'p')
  local work = vim.fs.joinpath(dir, ('.install-%d'):format(vim.uv.os_getpid()))
  vim.fn.delete(work, 'rf')
  vim.fn.mkdir(work, 'p')
  local ok, result = pcall(function()
    local archive = vim.fs.joinpath(work, 'release.tar.gz')
    run({ 'curl', '-fsSL', '-o', archive, release.url }, 'downloading ' .. release.url)
    local got = sha256(archive)
    if got ~= release.sha256:lower() then
      error(('refused %s: its SHA-256 is %s, not the pinned %s'):format(release.url, got, release.sha256))
    end
    run({ 'tar', '-xzf', archive, '-C', work }, 'unpacking')
    local binary = vim.fs.find(vim.fs.basename(dest), { path = work, type = 'file' })[1]
    if not binary then
      error('the archive holds no ' .. vim.fs.basename(dest))
    end
    vim.uv.fs_chmod(binary, 493) -- 0755
    assert(vim.uv.fs_rename(binary, dest))
    return dest
  end)
  vim.fn.delete(work, 'rf')
  if not ok then
    error(result, 0)
  end
  return result
end

return M
