-- The `switchyard/status` notification: the latest report, the statusline
-- component built from it, and the lines `:SwitchyardStatus` shows.
-- Field names and shapes: docs/lsp-extensions.md (`switchyard/status`); read no other.

local M = {}

M.METHOD = 'switchyard/status'

--- The latest report from any switchyard client (nil until the first arrives).
M.report = nil

local function route(provider, model)
  if model and model ~= vim.NIL then
    return provider .. '/' .. model
  end
  return tostring(provider)
end

local function present(v)
  return v ~= nil and v ~= vim.NIL
end

--- The completion state as a statusline note ('' when ready or unknown).
local function completion_note(report)
  local c = report.completion
  if type(c) ~= 'table' then
    return ''
  end
  local notes = {
    snoozed = ' · completions snoozed',
    off = ' · completions off here',
    late = ' · completions late',
    loading = ' · loading model',
    failed = ' · no completions',
  }
  return notes[c.state] or ''
end

--- The completion state as one line of :SwitchyardStatus.
function M.completion_line(c)
  local why = present(c.reason) and (': ' .. c.reason) or ''
  if c.state == 'snoozed' then
    local until_ = present(c.untilMs) and (' until ' .. os.date('%H:%M', math.floor(c.untilMs / 1000))) or ''
    return 'Completions: snoozed' .. until_
  elseif c.state == 'off' then
    return 'Completions: off here' .. why
  elseif c.state == 'failed' then
    return 'Completions: unavailable' .. why
  end
  return 'Completions: ' .. c.state .. why
end

local function parked_count(report)
  return type(report.parked) == 'table' and #report.parked or 0
end

--- Handler for `switchyard/status` (registered in the client config).
function M.handler(_, result)
  M.report = result
  vim.cmd.redrawstatus({ bang = true })
  -- Statusline plugins (lualine, heirline) can refresh on this event.
  vim.api.nvim_exec_autocmds('User', { pattern = 'SwitchyardStatus', modeline = false, data = result })
end

--- A short component for 'statusline': the active provider and tier, a downshift,
--- local-only mode (or a local-only workspace) and parked tasks. Empty when no switchyard client is running.
function M.statusline()
  if #vim.lsp.get_clients({ name = 'switchyard' }) == 0 then
    return ''
  end
  local r = M.report
  if not r then
    return 'switchyard: starting'
  end
  local parked = parked_count(r)
  local suffix = (parked > 0 and (' · %d parked'):format(parked) or '') .. completion_note(r)
  if present(r.localOnlyReason) then
    return 'switchyard: local-only (configuration unreadable)' .. suffix
  end
  if r.localOnly then
    return 'switchyard: local-only' .. suffix
  end
  if present(r.localOnlyRule) then
    return 'switchyard: local-only workspace' .. suffix
  end
  if present(r.provider) then
    local down = present(r.downshiftedFrom) and (' ↓ from %s'):format(r.downshiftedFrom) or ''
    return ('switchyard: %s (%s%s)%s'):format(route(r.provider, r.model), r.tier, down, suffix)
  end
  return 'switchyard' .. suffix
end

-- As `switchyard audit` and the VS Code tooltip write sizes.
local function size(bytes)
  if bytes < 10000 then
    return ('%d B'):format(bytes)
  end
  return ('%.1f kB'):format(bytes / 1000)
end

--- The whole report as lines (mode, latest route and downshift, task routes,
--- parked work, health, what was sent in the last hour).
function M.lines(r)
  local lines = {}
  if type(r.completion) == 'table' then
    table.insert(lines, M.completion_line(r.completion))
  end
  if present(r.localOnlyReason) then
    table.insert(lines, 'Only the local model serves until the configuration can be read: ' .. r.localOnlyReason)
  else
    table.insert(lines, r.localOnly and 'Local-only mode: on (only the local model serves)' or 'Local-only mode: off')
  end
  if present(r.localOnlyRule) then
    table.insert(lines, 'Local-only workspace: ' .. r.localOnlyRule)
  end
  if present(r.provider) then
    table.insert(lines, ('Latest task served by %s (%s tier)'):format(route(r.provider, r.model), r.tier))
  else
    table.insert(lines, 'No explain or refactor has run yet')
  end
  if present(r.downshiftedFrom) then
    local reason = present(r.reason) and r.reason or 'no healthy entry'
    table.insert(lines, ('Downshifted from %s to %s: %s'):format(r.downshiftedFrom, r.tier, reason))
  end
  for _, task in ipairs(r.tasks or {}) do
    if present(task.provider) then
      table.insert(lines, ('%s: %s (%s)'):format(task.kind, route(task.provider, task.model), task.tier))
    end
  end
  for _, task in ipairs(type(r.parked) == 'table' and r.parked or {}) do
    table.insert(lines, ('Parked %s: %s'):format(task.kind, task.note))
  end
  for _, h in ipairs(r.health or {}) do
    local why = present(h.reason) and (': ' .. h.reason) or ''
    table.insert(lines, ('%s [%s] %s%s'):format(route(h.provider, h.model), h.tier, h.state, why))
  end
  for _, o in ipairs(type(r.outbound) == 'table' and r.outbound or {}) do
    local requests = o.requests == 1 and '1 request' or ('%d requests'):format(o.requests)
    table.insert(lines, ('Sent to %s in the last hour: %s in %s'):format(o.provider, size(o.bytes), requests))
  end
  return lines
end

return M
