// Drives the real server binary ($SWITCHYARD_BIN) over stdio with
// vscode-languageserver-protocol, the library vscode-languageclient is built on,
// sending what the extension sends: its command line, initializationOptions,
// workspace/configuration answers and command arguments come from the
// extension's own modules. VS Code itself cannot run here; this is everything
// up to it.

import { strict as assert } from "node:assert";
import { ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { pathToFileURL } from "node:url";

import {
  ApplyWorkspaceEditRequest,
  ConfigurationRequest,
  createProtocolConnection,
  ExecuteCommandRequest,
  InitializeRequest,
  InitializeResult,
  InitializedNotification,
  InlineCompletionList,
  InlineCompletionRequest,
  InlineCompletionTriggerKind,
  ProtocolConnection,
  ShowDocumentRequest,
  ShutdownRequest,
  ExitNotification,
  DidOpenTextDocumentNotification,
  StreamMessageReader,
  StreamMessageWriter,
  WorkDoneProgressCreateRequest,
} from "vscode-languageserver-protocol/node";

import { refactorCommand, SERVER, statusCommand, toggleLocalOnlyCommand } from "../commands";
import { configurationResponse, defaultLogFile, initializationOptions, readSettings, serverCommand } from "../settings";
import { formatStatus, STATUS_NOTIFICATION, StatusReport } from "../status";

const bin = process.env.SWITCHYARD_BIN;
const repo = path.join(__dirname, "..", "..", "..", "..");

/** What VS Code 1.91+ with vscode-languageclient 10 declares for the features switchyard serves. */
const capabilities = {
  general: { positionEncodings: ["utf-16"] },
  window: { workDoneProgress: true, showDocument: { support: true }, showMessage: {} },
  workspace: {
    configuration: true,
    applyEdit: true,
    workspaceEdit: { documentChanges: true },
    didChangeConfiguration: { dynamicRegistration: true },
    executeCommand: { dynamicRegistration: true },
  },
  textDocument: {
    synchronization: { dynamicRegistration: true, didSave: true },
    inlineCompletion: { dynamicRegistration: true },
    completion: { completionItem: { snippetSupport: true } },
    codeAction: { codeActionLiteralSupport: { codeActionKind: { valueSet: ["", "quickfix", "refactor", "source"] } } },
  },
};

/** Resolves with the first value `pick` returns for `events`, now or later. */
function waitFor<T, R>(events: T[], subscribe: (f: () => void) => void, pick: (e: T) => R | undefined, what: string, ms = 90_000): Promise<R> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}; saw ${JSON.stringify(events)}`)), ms);
    const check = () => {
      for (const e of events) {
        const r = pick(e);
        if (r !== undefined) {
          clearTimeout(timer);
          resolve(r);
          return true;
        }
      }
      return false;
    };
    if (!check()) subscribe(() => void check());
  });
}

describe("the extension's protocol against the real server", { timeout: 240_000 }, () => {
  assert.ok(bin, "SWITCHYARD_BIN must name the switchyard binary (cargo test sets it; or run editors/setup.sh and cargo build)");
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-vscode-"));
  const env = {
    ...process.env,
    XDG_STATE_HOME: path.join(home, "state"),
    SWITCHYARD_STATE_DIR: "", // so the state (and the log) follows XDG_STATE_HOME
    SWITCHYARD_CONFIG: path.join(home, "config.toml"),
    SWITCHYARD_LOG: "debug",
  };
  // The settings a user would set: the binary's path, and a small prompt budget
  // (the smallest the engine sizes to) so answers hold on a loaded machine.
  const settings = readSettings(
    (key) =>
      ({
        path: bin,
        "autocomplete.budgetMs": 1000,
        server: { local: { auto_pull: false }, autocomplete: { input_tokens: 256 } },
      })[key],
  );
  let server: ChildProcess;
  let connection: ProtocolConnection;
  let init: InitializeResult;
  const statuses: StatusReport[] = [];
  const statusListeners: (() => void)[] = [];
  const configurationSections: (string | undefined)[] = [];
  const configurationListeners: (() => void)[] = [];

  before(async () => {
    const { command, args } = serverCommand(settings);
    server = spawn(command, args, { env, stdio: ["pipe", "pipe", "inherit"] });
    connection = createProtocolConnection(new StreamMessageReader(server.stdout!), new StreamMessageWriter(server.stdin!));
    connection.onRequest(ConfigurationRequest.type, (params) => {
      configurationSections.push(...params.items.map((i) => i.section));
      configurationListeners.forEach((f) => f());
      return configurationResponse(settings, params.items);
    });
    connection.onRequest(WorkDoneProgressCreateRequest.type, () => {});
    connection.onRequest(ShowDocumentRequest.type, () => ({ success: true }));
    connection.onRequest(ApplyWorkspaceEditRequest.type, () => ({ applied: true }));
    connection.onNotification(STATUS_NOTIFICATION, (report: StatusReport) => {
      statuses.push(report);
      statusListeners.forEach((f) => f());
    });
    connection.listen();
    init = await connection.sendRequest(InitializeRequest.type, {
      processId: process.pid,
      rootUri: null,
      capabilities,
      initializationOptions: initializationOptions(settings),
    });
    await connection.sendNotification(InitializedNotification.type, {});
  });

  after(async () => {
    await connection.sendRequest(ShutdownRequest.type);
    await connection.sendNotification(ExitNotification.type);
    const code = await new Promise((resolve) => server.on("exit", resolve));
    connection.dispose();
    fs.rmSync(home, { recursive: true, force: true });
    assert.equal(code, 0, "the server exits cleanly after shutdown/exit");
  });

  const status = (what: string, pick: (r: StatusReport) => boolean) =>
    waitFor(statuses, (f) => statusListeners.push(f), (r) => (pick(r) ? r : undefined), what);

  test("initialize advertises inline completion and every command the extension sends", () => {
    assert.equal(init.capabilities.inlineCompletionProvider, true);
    assert.equal(init.capabilities.positionEncoding, "utf-16");
    const commands = init.capabilities.executeCommandProvider?.commands ?? [];
    for (const command of Object.values(SERVER)) {
      assert.ok(commands.includes(command), `${command} in ${commands}`);
    }
  });

  test("the server pulls the switchyard section and reports status, which the status bar formats", async () => {
    const first = await status("the first status", () => true);
    assert.equal(first.localOnly, false);
    assert.ok(first.health.some((h) => h.provider === "local"), JSON.stringify(first));
    assert.match(formatStatus(first).text, /^\$\(server-process\) switchyard/);
    // The first status may come before the server asks for its configuration.
    await waitFor(configurationSections, (f) => configurationListeners.push(f), (s) => (s === "switchyard" ? s : undefined), "a workspace/configuration request for the switchyard section");
  });

  test("the toggle flips local-only, the status follows and the mode is persisted", async () => {
    const result = await connection.sendRequest(ExecuteCommandRequest.type, toggleLocalOnlyCommand());
    assert.deepEqual(result, { localOnly: true });
    const now = await status("a local-only status", (r) => r.localOnly);
    // The model may still be loading: the item says that after the mode.
    assert.match(formatStatus(now).text, /^\$\(lock\) switchyard: local-only( · loading model)?$/);
    assert.ok(now.completion, "the status carries the completion state");
    assert.match(fs.readFileSync(env.SWITCHYARD_CONFIG, "utf8"), /local_only = true/);
    const report = (await connection.sendRequest(ExecuteCommandRequest.type, statusCommand())) as StatusReport;
    assert.equal(report.localOnly, true);
  });

  test("Refactor Selection's arguments reach the router (refused in local-only mode)", async () => {
    const uri = pathToFileURL(path.join(home, "lib.rs")).href;
    const request = refactorCommand(uri, { start: { line: 0, character: 0 }, end: { line: 1, character: 0 } }, "Simplify");
    await connection.sendNotification(DidOpenTextDocumentNotification.type, {
      textDocument: { uri, languageId: "rust", version: 1, text: "fn add(a: i32, b: i32) -> i32 { a + b }\n" },
    });
    await assert.rejects(connection.sendRequest(ExecuteCommandRequest.type, request!), /local-only mode/);
  });

  test("an inline completion comes from the local model at the cursor", async () => {
    const sample = fs.readFileSync(path.join(repo, "tests", "support", "sample.rs"), "utf8");
    // An empty line opened inside a function body, as tests/lsp_completion.rs does.
    const anchor = "        let before = self.entries.len();\n";
    assert.ok(sample.includes(anchor));
    const text = sample.replace(anchor, `${anchor}        \n`);
    const line = text.split("\n").indexOf("        ");
    const uri = pathToFileURL(path.join(home, "store.rs")).href;
    await connection.sendNotification(DidOpenTextDocumentNotification.type, {
      textDocument: { uri, languageId: "rust", version: 1, text },
    });
    const position = { line, character: 8 };
    // Empty answers are on time while the model loads or the cache is cold: ask again.
    const deadline = Date.now() + 150_000;
    let items: InlineCompletionList["items"] = [];
    while (items.length === 0 && Date.now() < deadline) {
      const result = await connection.sendRequest(InlineCompletionRequest.type, {
        textDocument: { uri },
        position,
        context: { triggerKind: InlineCompletionTriggerKind.Automatic },
      });
      items = Array.isArray(result) ? result : (result?.items ?? []);
      if (items.length === 0) await new Promise((r) => setTimeout(r, 500));
    }
    assert.ok(items.length > 0, "no inline completion within the deadline");
    const insert = typeof items[0].insertText === "string" ? items[0].insertText : items[0].insertText.value;
    assert.ok(insert.trim().length > 0);
    assert.deepEqual(items[0].range, { start: position, end: position });
  });

  test("with no --log-file the server logs where Open Server Log looks", { skip: process.platform !== "linux" }, () => {
    const log = defaultLogFile("linux", env);
    assert.ok(log.startsWith(home), log);
    assert.match(fs.readFileSync(log, "utf8"), /switchyard language server starting/);
  });
});
