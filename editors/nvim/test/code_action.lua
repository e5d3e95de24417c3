-- A switchyard code action, picked through vim.lsp.buf.code_action, runs the
-- refactor on a fake remote provider and its edit lands in the buffer; then
-- :SwitchyardRefactor on a range.
-- The fake's answer is set in tests/editor_nvim.rs.

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
H.edit('add.rs', '// Arithmetic.\nfn add(a: i32, b: i32) -> i32 {\n    let sum = a + b;\n    return sum;\n}\n')

-- The cursor inside the function, no selection: the server takes the enclosing item.
H.lua([[
  vim.api.nvim_win_set_cursor(0, { 3, 4 })
  vim.lsp.buf.code_action({
    apply = true,
    filter = function(action) return action.title == 'switchyard: Simplify' end,
  })
]])

H.wait_for('the refactor to apply', [[
  return vim.deep_equal(vim.api.nvim_buf_get_lines(0, 0, -1, false), ...)
]], 30000, { '// Arithmetic.', 'fn add(a: i32, b: i32) -> i32 {', '    a + b', '}' })
H.assert_eq(H.lua('return vim.bo.modified'), true, 'the edit is unsaved in the buffer')

-- The same through the user command on a line range; the fake answers the
-- function as it now is, so nothing changes and the user is told who served it.
H.lua('vim.cmd("2,4SwitchyardRefactor Keep it as it is")')
H.note_containing('refactored by fake/big-model (large tier)')
H.assert_eq(H.lua('return vim.api.nvim_buf_get_lines(0, 0, -1, false)'),
  { '// Arithmetic.', 'fn add(a: i32, b: i32) -> i32 {', '    a + b', '}' }, 'an unchanged answer edits nothing')
H.finish()
