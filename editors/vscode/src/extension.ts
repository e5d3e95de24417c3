// The VS Code glue: starts the server through vscode-languageclient (which
// forwards inline completions, code actions, applyEdit and showDocument), keeps
// the status bar item in step with `switchyard/status`, and adds the commands.

import { execFile } from "node:child_process";
import * as fs from "node:fs";

import * as vscode from "vscode";
import {
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  State,
} from "vscode-languageclient/node";

import {
  explainCommand,
  refactorCommand,
  SNOOZE_CHOICES,
  snoozeCommand,
  statusCommand,
  toggleLocalOnlyCommand,
} from "./commands";
import { doctorReport } from "./doctor";
import { configurationResponse, initializationOptions, logFile, readSettings, serverCommand, Settings } from "./settings";
import { formatStatus, menuItems, STATUS_NOTIFICATION, StatusReport, statusLines } from "./status";

let client: LanguageClient | undefined;
let lastStatus: StatusReport | undefined;

function currentSettings(): Settings {
  const config = vscode.workspace.getConfiguration("switchyard");
  // Only values the user set: unset ones leave config.toml in charge.
  return readSettings((key) => {
    const v = config.inspect(key);
    return v?.workspaceFolderValue ?? v?.workspaceValue ?? v?.globalValue;
  });
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel("switchyard", { log: true });
  const item = vscode.window.createStatusBarItem("switchyard.status", vscode.StatusBarAlignment.Right, 100);
  item.name = "switchyard";
  item.command = "switchyard.client.statusMenu";
  context.subscriptions.push(output, item);

  // Which server runs, once it said: "switchyard 0.1.0 (bundled with the extension)".
  let serverLabel = "";
  const showStatus = (report: StatusReport | undefined) => {
    const view = formatStatus(report);
    item.text = view.text;
    item.tooltip = serverLabel ? `${view.tooltip}\n${serverLabel}` : view.tooltip;
    const plain = view.text.replace(/\$\([^)]*\)\s*/g, "");
    item.accessibilityInformation = { label: serverLabel ? `${plain}, ${serverLabel}` : plain };
    item.backgroundColor = view.warning ? new vscode.ThemeColor("statusBarItem.warningBackground") : undefined;
    item.show();
  };
  showStatus(undefined);

  // A platform VSIX carries the server in bin/; a plain one does not.
  const bundledPath = context.asAbsolutePath(process.platform === "win32" ? "bin/switchyard.exe" : "bin/switchyard");
  const bundled = fs.existsSync(bundledPath) ? bundledPath : undefined;
  const server = () => serverCommand(currentSettings(), bundled);

  const start = async () => {
    const settings = currentSettings();
    const { command, args, source } = server();
    output.info(`starting ${command} (${source})`);
    const serverOptions: ServerOptions = { command, args };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
      initializationOptions: initializationOptions(settings),
      outputChannel: output,
      middleware: {
        workspace: {
          // Answer with the same mapping the initialization options use, read fresh.
          configuration: (params) => configurationResponse(currentSettings(), params.items),
        },
      },
    };
    client = new LanguageClient("switchyard", "switchyard", serverOptions, clientOptions);
    // `switchyard/status` and the command results: see docs/lsp-extensions.md.
    client.onNotification(STATUS_NOTIFICATION, (report: StatusReport) => {
      lastStatus = report;
      showStatus(report);
    });
    client.onDidChangeState((e) => {
      if (e.newState === State.Stopped) {
        item.text = "$(error) switchyard: stopped";
        item.tooltip = `The server stopped; see the log at ${logFile(currentSettings())}`;
      }
    });
    await client.start();
    const info = client.initializeResult?.serverInfo;
    serverLabel = `${info?.name ?? "switchyard"} ${info?.version ?? "(version unknown)"} (${source})`;
    output.info(`running ${serverLabel}`);
    showStatus(lastStatus);
  };

  const executeServer = async (request: { command: string; arguments: unknown[] }) => {
    if (!client || !client.isRunning()) {
      throw new Error("switchyard is not running");
    }
    return client.sendRequest(ExecuteCommandRequest.type, request);
  };

  const selection = () => {
    const editor = vscode.window.activeTextEditor;
    if (!editor || !client) return undefined;
    return {
      uri: client.code2ProtocolConverter.asUri(editor.document.uri),
      range: client.code2ProtocolConverter.asRange(editor.selection),
    };
  };

  const report = (e: unknown) => vscode.window.showErrorMessage(`switchyard: ${e instanceof Error ? e.message : String(e)}`);

  context.subscriptions.push(
    vscode.commands.registerCommand("switchyard.client.toggleLocalOnly", async () => {
      try {
        const result = (await executeServer(toggleLocalOnlyCommand())) as { localOnly: boolean };
        vscode.window.setStatusBarMessage(`switchyard: local-only mode ${result.localOnly ? "on" : "off"}`, 3000);
      } catch (e) {
        await report(e);
      }
    }),
    vscode.commands.registerCommand("switchyard.client.snooze", async () => {
      const choices = [
        ...SNOOZE_CHOICES.map((minutes) => ({ label: `Snooze for ${minutes} minutes`, minutes })),
        { label: "Resume completions", minutes: 0 },
      ];
      const picked = await vscode.window.showQuickPick(choices, { placeHolder: "switchyard: snooze inline completions" });
      if (!picked) return;
      try {
        const result = (await executeServer(snoozeCommand(picked.minutes))) as { snoozedUntil: number | null };
        const until = result.snoozedUntil ? `snoozed until ${new Date(result.snoozedUntil).toLocaleTimeString()}` : "on";
        vscode.window.setStatusBarMessage(`switchyard: completions ${until}`, 3000);
      } catch (e) {
        await report(e);
      }
    }),
    vscode.commands.registerCommand("switchyard.client.showStatus", async () => {
      try {
        const status = (await executeServer(statusCommand())) as StatusReport;
        output.appendLine(["switchyard status:", ...statusLines(status)].join("\n  "));
        output.show(true);
      } catch (e) {
        await report(e);
      }
    }),
    vscode.commands.registerCommand("switchyard.client.explainSelection", async () => {
      const at = selection();
      if (!at) return;
      try {
        // The server opens the explanation itself (window/showDocument) and shows progress.
        await executeServer(explainCommand(at.uri, at.range));
      } catch (e) {
        await report(e);
      }
    }),
    vscode.commands.registerCommand("switchyard.client.refactorSelection", async () => {
      const at = selection();
      if (!at) return;
      const instruction = await vscode.window.showInputBox({
        title: "switchyard: Refactor Selection",
        prompt: "How should the selection (or, with no selection, the enclosing item) change?",
        placeHolder: "e.g. Replace the loop with an iterator chain",
      });
      const request = refactorCommand(at.uri, at.range, instruction);
      if (!request) return;
      try {
        // The server applies the rewrite itself (workspace/applyEdit, version-checked).
        await executeServer(request);
      } catch (e) {
        await report(e);
      }
    }),
    vscode.commands.registerCommand("switchyard.client.openLog", async () => {
      const path = logFile(currentSettings());
      try {
        await vscode.window.showTextDocument(vscode.Uri.file(path));
      } catch {
        await vscode.window.showWarningMessage(`switchyard: no log at ${path} yet`);
      }
    }),
    vscode.commands.registerCommand("switchyard.client.checkSetup", async () => {
      const { command, args, source } = server();
      output.info(`checking the setup with ${command} (${source})`);
      execFile(command, [...args, "doctor", "--json"], { timeout: 120_000 }, async (error, stdout) => {
        let view;
        try {
          view = doctorReport(JSON.parse(stdout));
        } catch {
          view = undefined;
        }
        if (!view) {
          await report(`${command} doctor gave no report: ${error?.message ?? stdout}`);
          return;
        }
        view.lines.forEach((line) => output.info(line));
        if (view.ready) {
          await vscode.window.showInformationMessage(`switchyard: ready (${command}, ${source})`);
        } else {
          const details = await vscode.window.showErrorMessage(`switchyard: not ready: ${view.firstFix ?? "see the output"}`, "Show Details");
          if (details) output.show();
        }
      });
    }),
    vscode.commands.registerCommand("switchyard.client.statusMenu", async () => {
      const picked = await vscode.window.showQuickPick(menuItems(lastStatus), { title: "switchyard" });
      if (picked) await vscode.commands.executeCommand(picked.command);
    }),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (!client) return;
      if (["switchyard.path", "switchyard.configFile", "switchyard.logFile"].some((s) => e.affectsConfiguration(s))) {
        // These change the command line: restart the server.
        await client.stop();
        await start();
      } else if (e.affectsConfiguration("switchyard")) {
        // Null settings: the server pulls them with workspace/configuration.
        await client.sendNotification("workspace/didChangeConfiguration", { settings: null });
      }
    }),
  );

  try {
    await start();
  } catch (e) {
    item.text = "$(error) switchyard";
    item.tooltip = "The server did not start";
    await report(`${e instanceof Error ? e.message : String(e)} (set switchyard.path, or put switchyard on PATH)`);
  }
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}
