// From VS Code settings to the server's command line, initializationOptions
// and workspace/configuration answer.

import { strict as assert } from "node:assert";
import { test } from "node:test";

import {
  configurationResponse,
  defaultLogFile,
  initializationOptions,
  readSettings,
  serverCommand,
  serverConfig,
} from "../settings";
import { doctorReport } from "../doctor";

const from = (values: Record<string, unknown>) => readSettings((key) => values[key]);

test("nothing set: PATH's switchyard, no arguments, an empty config, status notifications on", () => {
  const s = from({});
  assert.deepEqual(serverCommand(s), { command: "switchyard", args: [], source: "PATH" });
  assert.deepEqual(serverConfig(s), {});
  assert.deepEqual(initializationOptions(s), { statusNotifications: true });
});

test("dedicated settings map to config.toml's snake_case keys", () => {
  const s = from({ "autocomplete.enabled": false, "autocomplete.budgetMs": 800, "local.model": "qwen2.5-coder-1.5b", "local.threads": 4 });
  assert.deepEqual(serverConfig(s), {
    local: { model: "qwen2.5-coder-1.5b", threads: 4 },
    autocomplete: { enabled: false, budget_ms: 800 },
  });
});

test("the free-form server object merges under the dedicated settings", () => {
  const s = from({
    "autocomplete.budgetMs": 700,
    server: { autocomplete: { budget_ms: 300, chain: ["ollama/qwen", "local"] }, tiers: { large: ["anthropic/claude-sonnet-4-5"] } },
  });
  assert.deepEqual(serverConfig(s), {
    autocomplete: { budget_ms: 700, chain: ["ollama/qwen", "local"] },
    tiers: { large: ["anthropic/claude-sonnet-4-5"] },
  });
});

test("blank strings and values of the wrong type count as unset", () => {
  const s = from({ path: "  ", "local.model": "", "local.threads": "4", "autocomplete.enabled": "yes", server: [] });
  assert.deepEqual(serverConfig(s), {});
  assert.equal(serverCommand(s).command, "switchyard");
});

test("path, config file and log file go on the command line", () => {
  const s = from({ path: "/opt/switchyard/bin/switchyard", configFile: "/etc/sy.toml", logFile: "/tmp/sy.log" });
  assert.deepEqual(serverCommand(s), {
    command: "/opt/switchyard/bin/switchyard",
    args: ["--config", "/etc/sy.toml", "--log-file", "/tmp/sy.log"],
    source: "switchyard.path",
  });
});

test("the server: switchyard.path, else the bundled binary, else PATH", () => {
  const bundled = "/ext/bin/switchyard";
  assert.equal(serverCommand(from({ path: "/opt/sy" }), bundled).source, "switchyard.path");
  assert.deepEqual(serverCommand(from({}), bundled), { command: bundled, args: [], source: "bundled with the extension" });
  assert.equal(serverCommand(from({}), undefined).command, "switchyard");
});

test("a doctor report reads as lines, ready or not with the first fix", () => {
  const report = {
    ready: false,
    checks: [
      { name: "config", level: "ok", detail: "defaults" },
      { name: "model", level: "error", detail: "not downloaded", fix: "switchyard models pull m" },
      { name: "providers", level: "warn", detail: "no key", fix: "export K=..." },
    ],
  };
  assert.deepEqual(doctorReport(report), {
    ready: false,
    lines: ["ok     config: defaults", "ERROR  model: not downloaded (fix: switchyard models pull m)", "WARN   providers: no key (fix: export K=...)"],
    firstFix: "switchyard models pull m",
  });
  assert.equal(doctorReport({ nonsense: true }), undefined);
});

test("workspace/configuration answers the switchyard section and null for others", () => {
  const s = from({ "local.threads": 2 });
  assert.deepEqual(configurationResponse(s, [{ section: "switchyard" }, { section: "editor" }, {}]), [
    { local: { threads: 2 } },
    null,
    null,
  ]);
});

test("the default log file follows the server's platform directories", () => {
  assert.equal(defaultLogFile("linux", {}, "/home/ada"), "/home/ada/.local/state/switchyard/switchyard.log");
  assert.equal(defaultLogFile("linux", { XDG_STATE_HOME: "/xdg/state" }, "/home/ada"), "/xdg/state/switchyard/switchyard.log");
  assert.equal(defaultLogFile("linux", { XDG_STATE_HOME: "relative" }, "/home/ada"), "/home/ada/.local/state/switchyard/switchyard.log");
  assert.equal(defaultLogFile("linux", { SWITCHYARD_STATE_DIR: "/srv/sy", XDG_STATE_HOME: "/xdg/state" }, "/home/ada"), "/srv/sy/switchyard.log");
  assert.equal(defaultLogFile("darwin", {}, "/Users/ada"), "/Users/ada/Library/Caches/dev.switchyard.switchyard/switchyard.log");
  assert.equal(
    defaultLogFile("win32", { LOCALAPPDATA: "C:\\Users\\ada\\AppData\\Local" }, "C:\\Users\\ada"),
    "C:\\Users\\ada\\AppData\\Local\\switchyard\\switchyard\\cache\\switchyard.log",
  );
});

test("language rules map to autocomplete.languages; a rule that is not a boolean drops the setting", () => {
  const s = from({ "autocomplete.languages": { markdown: false, "*": true } });
  assert.deepEqual(serverConfig(s), { autocomplete: { languages: { markdown: false, "*": true } } });
  assert.deepEqual(serverConfig(from({ "autocomplete.languages": { markdown: "off" } })), {});
  assert.deepEqual(serverConfig(from({ "autocomplete.languages": {} })), {});
});
