-- switchyard for Neovim 0.11+: registers the server with vim.lsp.config /
-- vim.lsp.enable, turns on inline completion (0.12+) with an accept key, and
-- adds the statusline component and user commands.
--
--   require('switchyard').setup({
--     settings = { tiers = { large = { 'anthropic/claude-sonnet-4-5' } } },
--   })
--   vim.o.statusline = '%f %= %{v:lua.require("switchyard").statusline()}'

local status = require('switchyard.status')

local M = {}

M.defaults = {
  --- The server command; `switchyard` from PATH serves LSP on stdio with no arguments.
  cmd = { 'switchyard' },
  --- Passed as --config / --log-file when set (defaults: the server's platform paths).
  config_file = nil,
  log_file = nil,
  --- nil attaches to every filetype; a list restricts it.
  filetypes = nil,
  root_markers = { '.git' },
  --- Server configuration in config.toml's shape, sent as initializationOptions.
  settings = {},
  --- Ghost text through vim.lsp.inline_completion (Neovim 0.12+).
  inline_completion = true,
  --- Insert-mode key that accepts the ghost text (falls through when there is none); false maps nothing.
  accept_key = '<Tab>',
  --- Insert-mode keys that accept only the next word, or the rest of the line, of the ghost text.
  accept_word_key = '<M-Right>',
  accept_line_key = '<M-C-Right>',
  --- Insert-mode key that asks for a suggestion now (an invoked request: the
  --- server's longer budget, none of the rules that skip automatic requests).
  trigger_key = '<M-Bslash>',
}

--- Sends an invoked inline completion request for the current buffer.
--- Neovim 0.12 has no public call for it, so this reaches its inline
--- completion handler through vim.lsp._capability; false where that is gone.
local function trigger()
  local ok, capability = pcall(require, 'vim.lsp._capability')
  local completor = ok and capability.all and capability.all.inline_completion
  local active = completor and completor.active[vim.api.nvim_get_current_buf()]
  if not active then
    return false
  end
  active:request(vim.lsp.protocol.InlineCompletionTriggerKind.Invoked)
  return true
end

--- The next word of `text` (with the spaces before it), or its first run of punctuation.
local function next_word(text)
  return text:match('^%s*[%w_]+') or text:match('^%s*[^%w_%s]+') or text
end

--- `text` up to the end of its first line.
local function next_line(text)
  return text:match('^[^\n]*') or text
end

--- Inserts `part_of(text)` of the ghost text at its place; the server
--- learns from the edit that it was partly accepted.
local function accept_part(part_of)
  return vim.lsp.inline_completion.get({
    on_accept = function(item)
      local text = type(item.insert_text) == 'string' and item.insert_text or item.insert_text.value
      local lines = vim.split(part_of(text), '\n')
      local at = item.range and item.range.start:to_cursor() or vim.api.nvim_win_get_cursor(0)
      vim.api.nvim_buf_set_text(0, at[1] - 1, at[2], at[1] - 1, at[2], lines)
      vim.api.nvim_win_set_cursor(0, { at[1] + #lines - 1, (#lines == 1 and at[2] or 0) + #lines[#lines] })
    end,
  })
end

local function command_line(opts)
  local cmd = type(opts.cmd) == 'string' and { opts.cmd } or vim.deepcopy(opts.cmd)
  if opts.config_file then
    vim.list_extend(cmd, { '--config', opts.config_file })
  end
  if opts.log_file then
    vim.list_extend(cmd, { '--log-file', opts.log_file })
  end
  return cmd
end

local function enable_inline_completion(opts)
  if not opts.inline_completion or not vim.lsp.inline_completion then
    return -- Neovim 0.11: completions still arrive as completion items (vim.lsp.completion / omnifunc).
  end
  vim.api.nvim_create_autocmd('LspAttach', {
    group = vim.api.nvim_create_augroup('switchyard.inline_completion', { clear = true }),
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      if client and client.name == 'switchyard' then
        vim.lsp.inline_completion.enable(true, { bufnr = args.buf })
      end
    end,
  })
  if opts.accept_key then
    vim.keymap.set('i', opts.accept_key, function()
      if not vim.lsp.inline_completion.get() then
        return opts.accept_key
      end
    end, { expr = true, desc = 'switchyard: accept the inline completion' })
  end
  if opts.trigger_key then
    vim.keymap.set('i', opts.trigger_key, function()
      if not trigger() then
        vim.notify('switchyard: this Neovim cannot ask for an inline completion', vim.log.levels.WARN)
      end
    end, { desc = 'switchyard: ask for an inline completion now' })
  end
  for key, part in pairs({ [opts.accept_word_key or ''] = next_word, [opts.accept_line_key or ''] = next_line }) do
    if key ~= '' then
      vim.keymap.set('i', key, function()
        if not accept_part(part) then
          return key
        end
      end, { expr = true, desc = 'switchyard: accept part of the inline completion' })
    end
  end
end

function M.setup(user)
  local opts = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), user or {})
  -- Lists replace rather than merge (tbl_deep_extend would merge them by index).
  opts.cmd = (user or {}).cmd or M.defaults.cmd
  opts.settings = (user or {}).settings or {}
  M.options = opts
  vim.lsp.config('switchyard', {
    cmd = command_line(opts),
    filetypes = opts.filetypes,
    -- Only buffers backed by a file; scratch and unnamed buffers get no server.
    root_dir = function(bufnr, on_dir)
      local name = vim.api.nvim_buf_get_name(bufnr)
      if name ~= '' and vim.bo[bufnr].buftype == '' then
        on_dir(vim.fs.root(bufnr, opts.root_markers) or vim.fs.dirname(name))
      end
    end,
    -- One server per editor whatever the project: it holds the model in memory once.
    reuse_client = function(client, config)
      return client.name == config.name and not client:is_stopped()
    end,
    -- The opt-in and the custom notification are documented in docs/lsp-extensions.md.
    init_options = vim.tbl_extend('force', opts.settings, { statusNotifications = true }),
    handlers = { [status.METHOD] = status.handler },
  })
  vim.lsp.enable('switchyard')
  enable_inline_completion(opts)
  require('switchyard.commands').create()
end

M.statusline = status.statusline
--- The server's command line for `opts` (setup()'s options), as the client runs it.
M.command_line = command_line

return M
