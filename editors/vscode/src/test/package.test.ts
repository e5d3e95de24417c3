// `vsce package` (3.x) builds an installable .vsix: the compiled extension and
// its runtime dependencies, without sources, tests or dev tools.

import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";

const root = path.join(__dirname, "..", "..");

/** File names from a zip's central directory, found through the end-of-directory record. */
function zipEntries(zip: Buffer): string[] {
  const end = zip.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
  assert.ok(end >= 0, "a zip file");
  const count = zip.readUInt16LE(end + 10);
  let at = zip.readUInt32LE(end + 16);
  const names: string[] = [];
  for (let n = 0; n < count; n++) {
    assert.equal(zip.readUInt32LE(at), 0x02014b50, "central directory entry");
    const [name, extra, comment] = [zip.readUInt16LE(at + 28), zip.readUInt16LE(at + 30), zip.readUInt16LE(at + 32)];
    names.push(zip.subarray(at + 46, at + 46 + name).toString("utf8"));
    at += 46 + name + extra + comment;
  }
  return names;
}

test("vsce packages the extension with its runtime dependencies only", { timeout: 120_000 }, () => {
  const vsce = JSON.parse(fs.readFileSync(path.join(root, "node_modules", "@vscode", "vsce", "package.json"), "utf8"));
  assert.match(vsce.version, /^3\./, "vsce 3.x runs on Node 20; 4.x needs Node 22");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-vsix-"));
  try {
    const vsix = path.join(dir, "switchyard.vsix");
    try {
      execFileSync(path.join(root, "node_modules", ".bin", "vsce"), ["package", "--out", vsix], {
        cwd: root,
        stdio: ["ignore", "pipe", "pipe"],
      });
    } catch (e) {
      const { stdout, stderr } = e as { stdout?: Buffer; stderr?: Buffer };
      assert.fail(`vsce package failed:\n${stdout ?? ""}\n${stderr ?? ""}`);
    }
    const entries = zipEntries(fs.readFileSync(vsix));
    for (const needed of [
      "extension/package.json",
      "extension/out/extension.js",
      "extension/readme.md",
      "extension/LICENSE.txt",
      "extension/node_modules/vscode-languageclient/lib/node/main.js",
      "extension/node_modules/vscode-languageserver-protocol/package.json",
    ]) {
      assert.ok(entries.includes(needed), `${needed} in the package`);
    }
    const unwanted = entries.filter((e) => /^extension\/(src\/|out\/test\/|node_modules\/(typescript|@types|@vscode\/vsce)\/)/.test(e));
    assert.deepEqual(unwanted, []);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
