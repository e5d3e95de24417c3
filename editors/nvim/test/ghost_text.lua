-- Ghost text from the real local model appears while typing in insert mode
-- (vim.lsp.inline_completion, Neovim 0.12) and the documented accept key,
-- <Tab>, puts it into the buffer; `switchyard stats` counts it accepted.

local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/harness.lua')
local repo = vim.fn.fnamemodify(H.plugin, ':h:h')

H.start()
-- The same prompt on every machine (the smallest input budget the engine sizes
-- to, one inference thread) and the longest budget there is: what is checked
-- is the ghost text and its accept, not how fast it comes (the budget is
-- tested on a paused clock in the server's unit tests).
local BUDGET_MS = 10000
H.lua('require("switchyard").setup(...)', H.options({
  settings = {
    ['local'] = { auto_pull = false, threads = 1 },
    autocomplete = { input_tokens = 256, budget_ms = BUDGET_MS },
  },
}))

-- tests/support/sample.rs with an empty line opened inside a function body.
local sample = table.concat(vim.fn.readfile(repo .. '/tests/support/sample.rs', 'b'), '\n')
local anchor = '        let before = self.entries.len();\n'
local at = assert(sample:find(anchor, 1, true), 'anchor line in sample.rs')
local text = sample:sub(1, at - 1) .. anchor .. '        \n' .. sample:sub(at + #anchor)
local row = #vim.split(sample:sub(1, at - 1) .. anchor, '\n') -- 1-based row of the empty line
H.edit('store.rs', text)
H.wait_for('the local model to load', [[
  local log = io.open(...)
  return log and log:read('*a'):find('local model ready', 1, true)
]], 120000, H.server_log)

-- Type: A appends at the end of the indented empty line. The answer comes
-- within the budget; should it come empty (a prompt that did not fit, which
-- the cache keeps filling; a request Neovim superseded), leave insert mode and
-- come back, as a user would.
local function ghost_text()
  return H.lua([[
    local ns = vim.api.nvim_get_namespaces()['nvim.lsp.inline_completion']
    local mark = ns and vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })[1]
    if not mark or not mark[4].virt_text then return nil end
    local lines = { mark[4].virt_text[1][1] }
    for _, line in ipairs(mark[4].virt_lines or {}) do table.insert(lines, line[1][1]) end
    return { row = mark[2], col = mark[3], lines = lines }
  ]])
end
local ghost
H.lua('vim.api.nvim_win_set_cursor(0, { ..., 0 })', row)
for _ = 1, 5 do
  H.input('A')
  if vim.wait(BUDGET_MS + H.scaled(5000), function() ghost = ghost_text(); return ghost ~= vim.NIL end, 50) then
    break
  end
  ghost = nil
  H.input('<Esc>')
  H.wait_for('normal mode', 'return vim.api.nvim_get_mode().mode == "n"')
end
if not ghost then
  H.fail('no ghost text after 5 tries')
end
H.assert_eq(H.lua('return vim.api.nvim_get_mode().mode'), 'i', 'still in insert mode')
H.assert_eq({ ghost.row, ghost.col }, { row - 1, 8 }, 'ghost text at the cursor')
if vim.trim(table.concat(ghost.lines, '\n')) == '' then
  H.fail('blank ghost text')
end

H.input('<Tab>')
local expected = vim.deepcopy(ghost.lines)
expected[1] = '        ' .. expected[1]
H.wait_for('the ghost text in the buffer', [[
  local want, first = ...
  return vim.deep_equal(vim.api.nvim_buf_get_lines(0, first - 1, first - 1 + #want, false), want)
]], nil, expected, row)
H.assert_eq(H.lua('return vim.api.nvim_get_mode().mode'), 'i', 'accepting keeps insert mode')

-- The accept (the item's command, run by Neovim's accept) is counted on this
-- machine, for this editor, without the suggestion's text.
H.wait_for('the accept in switchyard stats', [[
  local out = vim.fn.system({ ..., 'stats', '--json' })
  local ok, stats = pcall(vim.json.decode, out)
  for _, g in ipairs(ok and stats.groups or {}) do
    if g.editor == 'Neovim' and g.accepted == 1 and g.shown >= 1 then
      return true
    end
  end
]], nil, os.getenv('SWITCHYARD_BIN'))
H.finish()
