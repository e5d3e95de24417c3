-- User commands, each one `workspace/executeCommand` to the server (arguments
-- and results: docs/lsp-extensions.md):
-- :SwitchyardLocalOnly [on|off], :SwitchyardStatus, :SwitchyardSnooze [minutes|off],
-- :[range]SwitchyardRefactor {instruction},
-- :[range]SwitchyardExplain. Without a range, explain and refactor work on the
-- item around the cursor (the server finds it from an empty range).

local status = require('switchyard.status')

local M = {}

local function client_for(bufnr)
  return vim.lsp.get_clients({ name = 'switchyard', bufnr = bufnr })[1]
    or vim.lsp.get_clients({ name = 'switchyard' })[1]
end

local function notify(message, level)
  vim.notify('switchyard: ' .. message, level or vim.log.levels.INFO)
end

--- Sends `command` with `arguments`; `on_result(result)` runs on success, errors are notified.
function M.execute(command, arguments, on_result, bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local client = client_for(bufnr)
  if not client then
    notify('not running (see :checkhealth vim.lsp and the log in :SwitchyardStatus)', vim.log.levels.ERROR)
    return
  end
  -- `arguments` is omitted, not `{}`: an empty Lua table would encode as a JSON object.
  local params = { command = command, arguments = arguments }
  client:request('workspace/executeCommand', params, function(err, result)
    if err then
      notify(err.message, vim.log.levels.ERROR)
    elseif on_result then
      on_result(result)
    end
  end, bufnr)
end

--- The range a command works on: whole lines for a range, else empty at the cursor.
local function range_of(opts)
  if opts.range > 0 then
    return { start = { line = opts.line1 - 1, character = 0 }, ['end'] = { line = opts.line2, character = 0 } }
  end
  local row = vim.api.nvim_win_get_cursor(0)[1] - 1
  return { start = { line = row, character = 0 }, ['end'] = { line = row, character = 0 } }
end

function M.create()
  vim.api.nvim_create_user_command('SwitchyardLocalOnly', function(opts)
    local arg = opts.args
    local command, arguments = 'switchyard.toggleLocalOnly', nil
    if arg == 'on' or arg == 'off' then
      command, arguments = 'switchyard.setLocalOnly', { arg == 'on' }
    end
    M.execute(command, arguments, function(result)
      notify('local-only mode ' .. (result.localOnly and 'on' or 'off'))
    end)
  end, {
    nargs = '?',
    complete = function()
      return { 'on', 'off' }
    end,
    desc = 'switchyard: toggle (or set) local-only mode',
  })

  vim.api.nvim_create_user_command('SwitchyardSnooze', function(opts)
    local minutes = 30
    if opts.args == 'off' then
      minutes = 0
    elseif opts.args ~= '' then
      minutes = tonumber(opts.args)
      if not minutes or minutes < 0 or minutes % 1 ~= 0 then
        notify('SwitchyardSnooze takes whole minutes, or off', vim.log.levels.ERROR)
        return
      end
    end
    M.execute('switchyard.snooze', { minutes }, function(result)
      if result.snoozedUntil and result.snoozedUntil ~= vim.NIL then
        notify('completions snoozed until ' .. os.date('%H:%M', math.floor(result.snoozedUntil / 1000)))
      else
        notify('completions on')
      end
    end)
  end, {
    nargs = '?',
    complete = function()
      return { '5', '30', '60', 'off' }
    end,
    desc = 'switchyard: snooze inline completions (default 30 minutes; off resumes)',
  })

  vim.api.nvim_create_user_command('SwitchyardStatus', function()
    M.execute('switchyard.status', nil, function(report)
      status.report = report
      notify(table.concat(status.lines(report), '\n'))
    end)
  end, { desc = 'switchyard: show provider, tier, downshift and health' })

  vim.api.nvim_create_user_command('SwitchyardRefactor', function(opts)
    local uri = vim.uri_from_bufnr(0)
    -- The server applies the rewrite with workspace/applyEdit.
    -- Results as documented in docs/lsp-extensions.md (`switchyard.refactor`).
    M.execute('switchyard.refactor', { uri, range_of(opts), opts.args }, function(result)
      if result.parked then
        return -- Parked: the server's window/showMessage already says why and that it resumes by itself.
      end
      notify(('refactored by %s/%s (%s tier)'):format(result.provider, result.model, result.tier))
    end)
  end, { nargs = '+', range = true, desc = 'switchyard: rewrite the selection as instructed' })

  vim.api.nvim_create_user_command('SwitchyardExplain', function(opts)
    local uri = vim.uri_from_bufnr(0)
    -- The server opens the explanation with window/showDocument.
    M.execute('switchyard.explain', { uri, range_of(opts) })
  end, { range = true, desc = 'switchyard: explain the selection' })
end

return M
