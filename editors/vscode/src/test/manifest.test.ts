// package.json against the code: every setting read is contributed (and every
// contributed one is read), every command is contributed and registered, and no
// extension command shadows one the client registers for the server.

import { strict as assert } from "node:assert";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

import { SERVER } from "../commands";
import { readSettings } from "../settings";
import { menuItems } from "../status";

const root = path.join(__dirname, "..", "..");
const manifest = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"));
const settings: Record<string, { description?: string; default?: unknown }> = manifest.contributes.configuration.properties;
const commands: string[] = manifest.contributes.commands.map((c: { command: string }) => c.command);

test("the settings read are exactly the contributed ones, each with a description and default", () => {
  const read: string[] = [];
  readSettings((key) => {
    read.push(`switchyard.${key}`);
    return undefined;
  });
  // trace.server is read by vscode-languageclient itself.
  const contributed = Object.keys(settings).filter((k) => k !== "switchyard.trace.server");
  assert.deepEqual([...read].sort(), [...contributed].sort());
  for (const [key, spec] of Object.entries(settings)) {
    assert.ok(spec.description, `${key} has a description`);
    assert.ok("default" in spec, `${key} has a default`);
  }
});

test("extension commands are contributed, registered, and never a server command's name", () => {
  const source = fs.readFileSync(path.join(root, "src", "extension.ts"), "utf8");
  for (const command of commands) {
    assert.ok(source.includes(`registerCommand("${command}"`), `${command} is registered`);
    assert.ok(!Object.values(SERVER).includes(command as never), `${command} clashes with a server command`);
  }
  for (const item of menuItems(undefined)) {
    assert.ok(commands.includes(item.command), `${item.command} is contributed`);
  }
  const titles = manifest.contributes.commands.map((c: { title: string }) => c.title);
  for (const title of ["Toggle Local-Only Mode", "Show Status", "Refactor Selection…", "Explain Selection"]) {
    assert.ok(titles.includes(title), title);
  }
});

test("the entry point is built and the client is 10.0.1 or later (inline completion without proposed features)", () => {
  assert.ok(fs.existsSync(path.join(root, manifest.main)), `${manifest.main} exists`);
  const client = JSON.parse(
    fs.readFileSync(path.join(root, "node_modules", "vscode-languageclient", "package.json"), "utf8"),
  );
  const [major, minor, patch] = client.version.split(".").map(Number);
  assert.ok(major > 10 || (major === 10 && (minor > 0 || patch >= 1)), client.version);
});
