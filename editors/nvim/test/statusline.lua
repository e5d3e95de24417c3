-- The statusline component shows the provider that served a task (a fake
-- remote provider here) and changes when :SwitchyardLocalOnly runs; the
-- explanation opens as a markdown buffer; :SwitchyardStatus counts what was
-- sent to the provider. There is no model here, and the statusline says so
-- ("no completions") until :SwitchyardSnooze makes it "snoozed".

local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/harness.lua')
local provider = os.getenv('SWITCHYARD_PROVIDER')
assert(provider, 'SWITCHYARD_PROVIDER must name the fake provider')

H.start()
H.lua('require("switchyard").setup(...)', H.options({
  settings = {
    ['local'] = { auto_pull = false },
    providers = { fake = { kind = 'anthropic', base_url = provider, api_key_env = 'SY_FAKE_KEY' } },
    tiers = { large = { 'fake/big-model' }, medium = { 'fake/mid-model' }, small = { 'local' } },
  },
}))
-- As a user's 'statusline' would call it.
local STATUSLINE = [[return vim.api.nvim_eval_statusline("%{v:lua.require'switchyard'.statusline()}", {}).str]]
local function statusline_is(expected)
  return H.wait_for('the statusline to read ' .. expected, STATUSLINE .. ' == ...', 30000, expected)
end

H.edit('count.rs', 'fn count(words: &[&str]) -> usize {\n    words.len()\n}\n')
H.wait_for('the first switchyard/status', 'return require("switchyard.status").report ~= nil')
statusline_is('switchyard · no completions')

H.lua('vim.api.nvim_win_set_cursor(0, { 2, 4 }); vim.cmd("SwitchyardExplain")')
statusline_is('switchyard: fake/mid-model (medium) · no completions')
H.wait_for('the explanation to open', [[
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    local name = vim.api.nvim_buf_get_name(buf)
    if name:match('%.md$') and vim.api.nvim_buf_is_loaded(buf) then
      return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), '\n'):find('Hello from the fake', 1, true)
    end
  end
]])

-- :SwitchyardStatus says what left the machine for the explanation.
H.lua('vim.cmd("SwitchyardStatus")')
H.note_containing('Sent to fake in the last hour: ')

H.lua('vim.cmd("SwitchyardLocalOnly")')
statusline_is('switchyard: local-only · no completions')
H.note_containing('local-only mode on')

H.lua('vim.cmd("SwitchyardLocalOnly")')
statusline_is('switchyard: fake/mid-model (medium) · no completions')
H.note_containing('local-only mode off')

H.lua('vim.cmd("SwitchyardSnooze 5")')
statusline_is('switchyard: fake/mid-model (medium) · completions snoozed')
H.note_containing('completions snoozed until ')
H.lua('vim.cmd("SwitchyardStatus")')
H.note_containing('Completions: snoozed until ')
H.lua('vim.cmd("SwitchyardSnooze off")')
statusline_is('switchyard: fake/mid-model (medium) · no completions')
H.note_containing('completions on')
H.finish()
