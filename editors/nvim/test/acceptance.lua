-- A scripted session with the real local model: one suggestion asked for with
-- the trigger key (<M-Bslash>) and accepted with <Tab>, one accepted a word
-- with <M-Right>, one ignored by typing something else. `switchyard stats`
-- counts 1 accepted, 1 partial and 1 ignored for Neovim, and the stats file
-- holds none of the suggestions' text. Markdown is off through the plugin's
-- settings, and the statusline and :SwitchyardStatus say so there.
--
-- The automatic budget is the least the server takes (50 ms), so the
-- automatic requests Neovim sends on every cursor move come back empty (late)
-- and only the suggestions the script asks for are shown.

local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/harness.lua')
local repo = vim.fn.fnamemodify(H.plugin, ':h:h')

H.start()
H.lua('require("switchyard").setup(...)', H.options({
  settings = {
    ['local'] = { auto_pull = false },
    autocomplete = { input_tokens = 256, budget_ms = 50, languages = { markdown = false } },
  },
}))

local sample = table.concat(vim.fn.readfile(repo .. '/tests/support/sample.rs', 'b'), '\n')
H.edit('store.rs', sample)
H.wait_for('the local model to load', [[
  local log = io.open(...)
  return log and log:read('*a'):find('local model ready', 1, true)
]], 120000, H.server_log)

-- Counts the answers to inline completion requests, for `ask`.
H.lua([[
  _G.inline_answers = 0
  vim.api.nvim_create_autocmd('LspRequest', {
    callback = function(args)
      local request = args.data.request
      if request.type == 'complete' and request.method == 'textDocument/inlineCompletion' then
        _G.inline_answers = _G.inline_answers + 1
      end
    end,
  })
]])
local function answers()
  return H.lua('return _G.inline_answers')
end

local GHOST = [[
  local ns = vim.api.nvim_get_namespaces()['nvim.lsp.inline_completion']
  local mark = ns and vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })[1]
  if not mark or not mark[4].virt_text then return nil end
  local lines = { mark[4].virt_text[1][1] }
  for _, line in ipairs(mark[4].virt_lines or {}) do table.insert(lines, line[1][1]) end
  if vim.trim(table.concat(lines, '\n')) == '' then return nil end
  return lines
]]

--- Asks for a suggestion at the cursor until one shows (the first ask at a
--- place can be empty on a loaded machine); its lines. `answered` is
--- `answers()` from before the cursor moved here.
local function ask(where, answered)
  -- The automatic request the move sends (after Neovim's debounce) would
  -- supersede the ask: it goes once that request is answered.
  H.wait_for('the automatic request at ' .. where, 'return _G.inline_answers > ...', nil, answered)
  for _ = 1, 20 do
    H.input('<M-Bslash>')
    local lines
    if vim.wait(H.scaled(8000), function() lines = H.lua(GHOST); return lines ~= vim.NIL end, 50) then
      return lines
    end
  end
  H.fail('no suggestion below ' .. where .. ' after 20 asks')
end

--- Opens a new line below the one that reads `anchor` and asks for a
--- suggestion there until one shows (the first ask at a place can be empty
--- on a loaded machine); returns its lines.
local function suggestion_below(anchor)
  H.input('<Esc>')
  local row = H.wait_for('the line ' .. anchor, [[
    for i, line in ipairs(vim.api.nvim_buf_get_lines(0, 0, -1, false)) do
      if line == ... then return i end
    end
  ]], nil, anchor)
  H.lua('vim.api.nvim_win_set_cursor(0, { ..., 0 })', row)
  local answered = answers()
  H.input('o')
  return ask(anchor, answered), row + 1
end

local function line(row)
  return H.lua('return vim.api.nvim_buf_get_lines(0, ... - 1, ..., false)[1]', row)
end

local shown = {}

-- 1. Accepted with <Tab> (Neovim runs the item's command).
local ghost, row = suggestion_below('        let before = self.entries.len();')
table.insert(shown, ghost)
H.input('<Tab>')
H.wait_for('the suggestion in the buffer', [[
  local row, want = ...
  return vim.api.nvim_buf_get_lines(0, row - 1, row, false)[1]:find(want, 1, true)
]], nil, row, vim.trim(ghost[1]))

-- 2. One word taken with <M-Right>: the server sees it typed at the cursor.
-- A suggestion of one word has no part to take: it is ignored (something
-- else typed) and the next line tried.
local function first_word(lines)
  return lines[1]:match('^%s*[%w_]+') or lines[1]:match('^%s*[^%w_%s]+')
end
local one_word = 0
ghost, row = suggestion_below('        let now = Instant::now();')
while #ghost == 1 and first_word(ghost) == ghost[1] and one_word < 3 do
  one_word = one_word + 1
  local answered = answers()
  H.input('#<CR>')
  ghost, row = ask('a one-word suggestion', answered), row + 1
end
table.insert(shown, ghost)
local word = first_word(ghost)
if not word then
  H.fail('the suggestion starts with a line break: ' .. vim.inspect(ghost))
end
local before = line(row)
H.input('<M-Right>')
H.wait_for('the word ' .. word, [[
  local row, want = ...
  return vim.api.nvim_buf_get_lines(0, row - 1, row, false)[1] == want
]], nil, row, before .. word)

-- 3. Ignored: something else typed where it shows. Asking elsewhere settles 2.
ghost, row = suggestion_below('        let total = self.hits + self.misses;')
table.insert(shown, ghost)
H.input(vim.trim(ghost[1]):sub(1, 1) == '#' and '@' or '#')
H.input('<Esc>')

H.wait_for('1 accepted, 1 partial, 1 ignored in switchyard stats', [[
  local bin, one_word = ...
  local out = vim.fn.system({ bin, 'stats', '--json' })
  local ok, stats = pcall(vim.json.decode, out)
  local sum = { accepted = 0, partial = 0, ignored = 0 }
  for _, g in ipairs(ok and stats.groups or {}) do
    if g.editor == 'Neovim' then
      for k in pairs(sum) do sum[k] = sum[k] + g[k] end
    end
  end
  _G.last_stats = out
  return sum.accepted == 1 and sum.partial == 1 and sum.ignored == 1 + one_word
]], nil, os.getenv('SWITCHYARD_BIN'), one_word)

-- Counts and lengths only: no suggestion's text is in the file.
local files = vim.fs.find('completions.jsonl', { path = H.work, limit = 1 })
if #files ~= 1 then
  H.fail('no completions.jsonl under ' .. H.work)
end
local record = table.concat(vim.fn.readfile(files[1]), '\n')
local checked = 0
for _, lines in ipairs(shown) do
  for _, text in ipairs(lines) do
    text = vim.trim(text)
    -- Short lines ("}", "None") could be JSON's own text.
    if #text >= 6 then
      checked = checked + 1
      if record:find(text, 1, true) then
        H.fail('the stats file holds the suggestion line ' .. text)
      end
    end
  end
end
if checked == 0 then
  H.fail('no suggestion line long enough to look for: ' .. vim.inspect(shown))
end

-- Markdown is off by the plugin's settings: the status says so there.
H.edit('notes.md', '# Notes\n\nSome text.\n')
H.lua('vim.api.nvim_win_set_cursor(0, { 3, 0 })')
H.input('A')
H.input('<M-Bslash>')
H.wait_for('the statusline to say completions are off', [[
  return vim.api.nvim_eval_statusline("%{v:lua.require'switchyard'.statusline()}", {}).str:find('completions off here', 1, true)
]])
H.input('<Esc>')
H.lua('vim.cmd("SwitchyardStatus")')
H.note_containing('Completions: off here')
H.finish()
