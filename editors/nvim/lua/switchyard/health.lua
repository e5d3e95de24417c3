-- :checkhealth switchyard: the binary and its version, then what the binary's
-- own `switchyard doctor --json` finds (configuration and the key that is
-- wrong, the model and its digest, disk, state directory, log file,
-- local-only mode, provider keys), then Neovim's side (inline completion).
-- The doctor is the one place the checks live, so the editors and the
-- command line say the same thing.

local M = {}

--- The command line the plugin runs the server with (as setup() made it,
--- or the defaults where it has not run), and setup()'s options.
local function command()
  local switchyard = require('switchyard')
  local opts = switchyard.options or switchyard.defaults
  return switchyard.command_line(opts), switchyard.options
end

local report = {
  ok = function(check) vim.health.ok(('%s: %s'):format(check.name, check.detail)) end,
  warn = function(check) vim.health.warn(('%s: %s'):format(check.name, check.detail), { check.fix }) end,
  error = function(check) vim.health.error(('%s: %s'):format(check.name, check.detail), { check.fix }) end,
}

local function doctor(cmd)
  local args = vim.deepcopy(cmd)
  vim.list_extend(args, { 'doctor', '--json', '--no-engine' })
  local done = vim.system(args, { text = true }):wait()
  local ok, result = pcall(vim.json.decode, done.stdout or '')
  if not ok or type(result) ~= 'table' or type(result.checks) ~= 'table' then
    vim.health.error('`switchyard doctor` gave no report: ' .. (done.stderr or ''), {
      'run `' .. table.concat(args, ' ') .. '` in a terminal to see why',
    })
    return
  end
  for _, check in ipairs(result.checks) do
    (report[check.level] or report.error)(check)
  end
end

function M.check()
  vim.health.start('switchyard: the server')
  local cmd, opts = command()
  local binary = vim.fn.exepath(cmd[1])
  if binary == '' then
    vim.health.error(('`%s` is not an executable on PATH'):format(cmd[1]), {
      "install it: require('switchyard.install').install() fetches the release for this platform",
      'or build it (cargo install --path . in the repository) and put it on PATH, or set `cmd` in setup()',
    })
    return
  end
  local version = vim.system({ binary, '--version' }, { text = true }):wait()
  if version.code ~= 0 then
    vim.health.error(('%s does not run: %s'):format(binary, version.stderr or ''), { 'install it again' })
    return
  end
  vim.health.ok(('%s (%s)'):format(vim.trim(version.stdout), binary))
  doctor(cmd)

  vim.health.start('switchyard: Neovim')
  if vim.lsp.inline_completion then
    vim.health.ok('vim.lsp.inline_completion is available: ghost text is on')
  else
    vim.health.warn('vim.lsp.inline_completion is missing: no ghost text', { 'Neovim 0.12 or later has it' })
  end
  if opts == nil then
    vim.health.warn("require('switchyard').setup() has not run", { 'call it from your init.lua' })
  end
end

return M
