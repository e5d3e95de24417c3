// Maps the extension's settings to what the server reads: the command line that
// starts it, `initializationOptions`, and the answer to `workspace/configuration`.
// Pure (no `vscode` import) so the unit and protocol tests use the same code.

import * as os from "node:os";
import * as path from "node:path";

/** Settings the user set explicitly; `undefined` leaves the server's own default (or config.toml) in force. */
export interface Settings {
  path?: string;
  configFile?: string;
  logFile?: string;
  autocompleteEnabled?: boolean;
  budgetMs?: number;
  /** Language id -> completions on or off (`"*"` for the rest). */
  languages?: Record<string, boolean>;
  model?: string;
  threads?: number;
  /** Free-form server config in config.toml's shape (providers, tiers, tasks). */
  server?: Record<string, unknown>;
}

type Json = Record<string, unknown>;

/**
 * Reads settings through `explicit(key)`, which returns the value the user set
 * for `switchyard.<key>` (or undefined). Values of the wrong type and empty
 * strings count as unset, so a typo never reaches the server as `""`.
 */
export function readSettings(explicit: (key: string) => unknown): Settings {
  const text = (key: string) => {
    const v = explicit(key);
    return typeof v === "string" && v.trim() !== "" ? v.trim() : undefined;
  };
  const num = (key: string) => {
    const v = explicit(key);
    return typeof v === "number" && Number.isFinite(v) ? v : undefined;
  };
  const bool = (key: string) => {
    const v = explicit(key);
    return typeof v === "boolean" ? v : undefined;
  };
  const server = explicit("server");
  const languages = explicit("autocomplete.languages");
  const rules =
    isObject(languages) && Object.values(languages).every((on) => typeof on === "boolean")
      ? (languages as Record<string, boolean>)
      : undefined;
  return {
    path: text("path"),
    configFile: text("configFile"),
    logFile: text("logFile"),
    autocompleteEnabled: bool("autocomplete.enabled"),
    budgetMs: num("autocomplete.budgetMs"),
    languages: rules && Object.keys(rules).length > 0 ? rules : undefined,
    model: text("local.model"),
    threads: num("local.threads"),
    server:
      server && typeof server === "object" && !Array.isArray(server) && Object.keys(server).length > 0
        ? (server as Json)
        : undefined,
  };
}

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function deepMerge(base: Json, overlay: Json): Json {
  const out: Json = { ...base };
  for (const [key, value] of Object.entries(overlay)) {
    out[key] = isObject(out[key]) && isObject(value) ? deepMerge(out[key] as Json, value) : value;
  }
  return out;
}

/** The server configuration these settings carry (config.toml's shape, snake_case keys). */
export function serverConfig(s: Settings): Json {
  const named: Json = {};
  const local: Json = {};
  const autocomplete: Json = {};
  if (s.model !== undefined) local.model = s.model;
  if (s.threads !== undefined) local.threads = s.threads;
  if (s.autocompleteEnabled !== undefined) autocomplete.enabled = s.autocompleteEnabled;
  if (s.budgetMs !== undefined) autocomplete.budget_ms = s.budgetMs;
  if (s.languages !== undefined) autocomplete.languages = s.languages;
  if (Object.keys(local).length > 0) named.local = local;
  if (Object.keys(autocomplete).length > 0) named.autocomplete = autocomplete;
  // The dedicated settings are more specific than the free-form object, so they win.
  return deepMerge(s.server ?? {}, named);
}

/** `initializationOptions`: the config, plus the opt-in to `switchyard/status` notifications. */
export function initializationOptions(s: Settings): Json {
  return { ...serverConfig(s), statusNotifications: true };
}

/** The answer to `workspace/configuration`: the config for section "switchyard", null for others. */
export function configurationResponse(s: Settings, items: { section?: string }[]): unknown[] {
  return items.map((item) => (item.section === "switchyard" ? serverConfig(s) : null));
}

/** How to start the server: `switchyard` from PATH unless a path is set; no arguments serve LSP on stdio. */
/**
 * The server's command line: `switchyard.path` when set, else the binary this
 * platform's VSIX bundles (`bundled`, when there is one), else `switchyard`
 * from PATH; `source` says which, for the output channel.
 */
export function serverCommand(s: Settings, bundled?: string): { command: string; args: string[]; source: string } {
  const args: string[] = [];
  if (s.configFile) args.push("--config", s.configFile);
  if (s.logFile) args.push("--log-file", s.logFile);
  if (s.path) return { command: s.path, args, source: "switchyard.path" };
  if (bundled) return { command: bundled, args, source: "bundled with the extension" };
  return { command: "switchyard", args, source: "PATH" };
}

/**
 * Where the server logs when no `--log-file` is given: `$SWITCHYARD_STATE_DIR`,
 * else the platform state directory (the `directories` crate's rules), else its
 * cache directory.
 */
export function defaultLogFile(
  platform: NodeJS.Platform = process.platform,
  env: NodeJS.ProcessEnv = process.env,
  home: string = os.homedir(),
): string {
  if (env.SWITCHYARD_STATE_DIR) {
    return (platform === "win32" ? path.win32 : path.posix).join(env.SWITCHYARD_STATE_DIR, "switchyard.log");
  }
  if (platform === "darwin") {
    return path.posix.join(home, "Library", "Caches", "dev.switchyard.switchyard", "switchyard.log");
  }
  if (platform === "win32") {
    const local = env.LOCALAPPDATA ?? path.win32.join(home, "AppData", "Local");
    return path.win32.join(local, "switchyard", "switchyard", "cache", "switchyard.log");
  }
  // The directories crate ignores a relative XDG_STATE_HOME.
  const state = env.XDG_STATE_HOME && path.isAbsolute(env.XDG_STATE_HOME)
    ? env.XDG_STATE_HOME
    : path.join(home, ".local", "state");
  return path.join(state, "switchyard", "switchyard.log");
}

/** The log the "Open Server Log" command opens. */
export function logFile(s: Settings): string {
  return s.logFile ?? defaultLogFile();
}
