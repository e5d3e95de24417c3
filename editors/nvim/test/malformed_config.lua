-- Broken configuration never stops the server: a malformed config file is
-- reported on the server's stderr (Neovim's LSP log), an invalid setting is
-- shown as an error naming its key, and commands keep working. A file that
-- cannot be read fails closed: only the local model serves, and the status
-- says why.

local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/harness.lua')

local config = H.work .. '/config.toml'
vim.fn.writefile({ '[autocomplete', 'budget_ms = 500' }, config)

H.start()
H.lua('require("switchyard").setup(...)', H.options({
  config_file = config,
  settings = { autocomplete = { budget_ms = 'fast' } },
}))
H.edit('lib.rs', 'pub fn one() -> u32 {\n    1\n}\n')

local note = H.note_containing('invalid configuration in initializationOptions')
H.assert_match(note.message, 'autocomplete%.budget_ms', 'the error names the key')
H.assert_eq(note.level, vim.log.levels.ERROR, 'shown as an error')

H.wait_for('the config file error in the LSP log', [[
  local log = table.concat(vim.fn.readfile(vim.lsp.log.get_filename()), '\n')
  return log:find('invalid configuration in', 1, true) and log:find(..., 1, true)
]], 30000, config)

H.lua('vim.cmd("SwitchyardStatus")')
H.note_containing('Only the local model serves until the configuration can be read: ')
H.note_containing('config.toml')
H.finish()
