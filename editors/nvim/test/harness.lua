-- Test harness for `nvim --headless -l test/<name>.lua`. The script itself only
-- drives: it starts a second Neovim (`--embed --headless --clean`) over RPC, so
-- typed keys, autocommands, timers and the LSP client run in that editor's own
-- main loop exactly as for a user (an `-l` script has no main loop of its own).
--
-- Environment (set by tests/editor_nvim.rs):
--   SWITCHYARD_BIN       the server binary
--   SWITCHYARD_WORK      an empty directory for files, logs and config
--   SWITCHYARD_PROVIDER  (some tests) base URL of a fake Anthropic-API provider

local H = {}

local function env(name)
  local value = os.getenv(name)
  assert(value and value ~= '', name .. ' must be set (run these through `cargo test --test editor_nvim`)')
  return value
end

H.bin = env('SWITCHYARD_BIN')
H.work = env('SWITCHYARD_WORK')
H.plugin = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h:h')
H.server_log = H.work .. '/switchyard.log'
-- How much slower this machine is than the one the waits were written for,
-- as tests/support/timing.rs measured it: every wait is scaled by it.
H.slowdown = math.max(tonumber(os.getenv('SWITCHYARD_TEST_SLOWDOWN') or '') or 1, 1)

--- `ms` as this machine needs it.
function H.scaled(ms)
  return math.floor(ms * H.slowdown)
end

local chan

--- Runs Lua in the editor under test and returns its result.
function H.lua(code, ...)
  return vim.rpcrequest(chan, 'nvim_exec_lua', code, { ... })
end

--- Types keys as a user would (`<Esc>`, `<Tab>` notation).
function H.input(keys)
  vim.rpcrequest(chan, 'nvim_input', keys)
end

--- Waits until `code` (Lua run in the editor) returns a truthy value, for up
--- to `timeout_ms` (60 s if nil), scaled; returns it. Generous: a wait ends
--- as soon as its effect shows.
function H.wait_for(what, code, timeout_ms, ...)
  local args = { ... }
  local value
  local ok = vim.wait(H.scaled(timeout_ms or 60000), function()
    value = H.lua(code, unpack(args))
    return value ~= nil and value ~= false and value ~= vim.NIL
  end, 50)
  if not ok then
    H.fail('timed out waiting for ' .. what)
  end
  return value
end

--- Fails the test with the editor's messages and both logs, for diagnosis.
function H.fail(message)
  local details = { 'FAILED: ' .. message }
  pcall(function()
    table.insert(details, '--- current buffer\n' .. H.lua('return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\\n")'))
    table.insert(details, '--- notifications\n' .. vim.inspect(H.lua('return _G.notes')))
    table.insert(details, '--- :messages\n' .. H.lua('return vim.api.nvim_exec2("messages", { output = true }).output'))
    table.insert(details, '--- nvim lsp.log\n' .. H.lua('return table.concat(vim.fn.readfile(vim.lsp.log.get_filename()), "\\n")'))
  end)
  local log = io.open(H.server_log)
  if log then
    table.insert(details, '--- switchyard.log (last 40 lines)\n' .. table.concat(vim.list_slice(vim.split(log:read('*a'), '\n'), -40), '\n'))
    log:close()
  end
  error(table.concat(details, '\n'), 0)
end

function H.assert_eq(actual, expected, what)
  if not vim.deep_equal(actual, expected) then
    H.fail(('%s: expected %s, got %s'):format(what, vim.inspect(expected), vim.inspect(actual)))
  end
end

function H.assert_match(text, pattern, what)
  if type(text) ~= 'string' or not text:find(pattern) then
    H.fail(('%s: %s does not match %q'):format(what, vim.inspect(text), pattern))
  end
end

--- Starts the editor with the plugin on its runtimepath; `vim.notify` calls are
--- recorded in `_G.notes` so tests can read what the user was told.
function H.start()
  chan = vim.fn.jobstart({ vim.v.progpath, '--embed', '--headless', '--clean' }, { rpc = true })
  assert(chan > 0, 'could not start the editor under test')
  H.lua([[
    vim.opt.runtimepath:prepend(...)
    vim.o.swapfile = false
    _G.notes = {}
    vim.notify = function(message, level) table.insert(_G.notes, { message = message, level = level }) end
  ]], H.plugin)
end

--- A `setup()` table for the plugin: the binary under test and its log in the work directory.
function H.options(extra)
  return vim.tbl_deep_extend('force', { cmd = { H.bin }, log_file = H.server_log }, extra or {})
end

--- Writes `text` to `name` in the work directory and opens it in the editor.
function H.edit(name, text)
  local path = H.work .. '/' .. name
  vim.fn.writefile(vim.split(text, '\n', { plain = true }), path, 'b')
  H.lua('vim.cmd.edit(...)', path)
  H.wait_for('the switchyard client to attach', 'return #vim.lsp.get_clients({ name = "switchyard", bufnr = 0 }) > 0')
  return path
end

--- The first recorded notification whose text contains `needle` (plain), waited for.
function H.note_containing(needle, timeout_ms)
  return H.wait_for('a notification containing ' .. needle, [[
    for _, note in ipairs(_G.notes) do
      if note.message:find(..., 1, true) then return note end
    end
  ]], timeout_ms, needle)
end

--- Quits the editor (which shuts the server down) and checks the server was alive until then.
function H.finish()
  H.lua('assert(#vim.lsp.get_clients({ name = "switchyard" }) > 0, "the server is still running")')
  vim.fn.jobstop(chan)
  io.stdout:write('ok\n')
end

return H
