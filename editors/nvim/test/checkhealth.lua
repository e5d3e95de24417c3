-- :checkhealth switchyard reports OK with the test model, and an ERROR naming
-- `switchyard models pull` without it; the install helper refuses an archive
-- whose SHA-256 is not the pinned one (leaving nothing in place) and installs
-- the right one. SWITCHYARD_RELEASE_URL serves the archive on loopback and
-- SWITCHYARD_RELEASE_SHA256 is its digest (tests/editor_nvim.rs).

local H = dofile(vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h') .. '/harness.lua')

H.start()
H.lua('require("switchyard").setup(...)', H.options())
H.edit('lib.rs', 'pub fn one() -> u32 {\n    1\n}\n')

--- The text :checkhealth switchyard shows.
local function health()
  return H.lua([[
    vim.cmd('checkhealth switchyard')
    local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
    vim.cmd('bwipeout!')
    return text
  ]])
end

local ready = health()
H.assert_match(ready, 'OK switchyard %d+%.%d+%.%d+', 'the version')
H.assert_match(ready, 'OK model: qwen2%.5%-coder%-0%.5b%-instruct at .-SHA%-256 checked', 'the model and its digest')
H.assert_match(ready, 'OK log: ', 'the log file')
H.assert_match(ready, 'OK vim%.lsp%.inline_completion is available', 'inline completion')
if ready:find('ERROR', 1, true) then
  H.fail('an error on a ready machine:\n' .. ready)
end

H.lua('vim.env.SWITCHYARD_MODEL_DIR = ...', H.work .. '/no-models')
local missing = health()
H.assert_match(missing, 'ERROR model: .-not downloaded', 'the missing model')
H.assert_match(missing, 'switchyard models pull qwen2%.5%-coder%-0%.5b%-instruct', 'the fix')

local url, sha256 = os.getenv('SWITCHYARD_RELEASE_URL'), os.getenv('SWITCHYARD_RELEASE_SHA256')
local dest = H.work .. '/bin/switchyard'
local refused = H.lua([[
  local ok, message = pcall(require('switchyard.install').install, ...)
  return { ok = ok, message = message }
]], { url = url, sha256 = string.rep('0', 64), dest = dest })
H.assert_eq(refused.ok, false, 'a wrong digest is refused')
H.assert_match(refused.message, 'SHA%-256 is ' .. sha256, 'the refusal names the digest')
H.assert_eq(vim.uv.fs_stat(dest), nil, 'nothing is installed')

local installed = H.lua('return require("switchyard.install").install(...)', { url = url, sha256 = sha256, dest = dest })
H.assert_eq(installed, dest, 'the installed path')
local run = vim.system({ dest, '--version' }, { text = true }):wait()
H.assert_match(run.stdout, 'switchyard 9%.9%.9', 'the installed binary runs')
H.finish()
