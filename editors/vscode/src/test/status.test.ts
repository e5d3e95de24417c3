// The status bar text, look and tooltip for each kind of report.

import { strict as assert } from "node:assert";
import { test } from "node:test";

import { completionLine, formatStatus, menuItems, StatusReport } from "../status";

const idle: StatusReport = {
  localOnly: false,
  tasks: [{ kind: "explain" }, { kind: "refactor" }],
  health: [
    { provider: "anthropic", model: "claude-haiku-4-5", tier: "medium", state: "no-key", reason: "no API key in $ANTHROPIC_API_KEY", samples: 0, errorRate: 0 },
    { provider: "local", model: "qwen2.5-coder-0.5b-instruct", tier: "small", state: "healthy", samples: 0, errorRate: 0 },
  ],
};

const served: StatusReport = {
  ...idle,
  provider: "anthropic",
  model: "claude-sonnet-4-5",
  tier: "large",
  tasks: [{ kind: "explain", provider: "anthropic", model: "claude-sonnet-4-5", tier: "large" }, { kind: "refactor" }],
};

const downshifted: StatusReport = {
  ...idle,
  provider: "openai",
  model: "gpt-5-mini",
  tier: "medium",
  downshiftedFrom: "large",
  reason: "large tier unavailable: anthropic/claude-sonnet-4-5: HTTP 529 overloaded",
  tasks: [{ kind: "refactor", provider: "openai", model: "gpt-5-mini", tier: "medium", downshiftedFrom: "large" }],
};

test("before the first report the item says it is starting", () => {
  const view = formatStatus(undefined);
  assert.match(view.text, /switchyard/);
  assert.equal(view.warning, false);
  assert.match(view.tooltip, /starting/);
});

test("with nothing served yet the tooltip still lists each entry's health and why", () => {
  const view = formatStatus(idle);
  assert.equal(view.text, "$(server-process) switchyard");
  assert.match(view.tooltip, /anthropic\/claude-haiku-4-5 \[medium\] no-key: no API key in \$ANTHROPIC_API_KEY/);
  assert.match(view.tooltip, /No explain or refactor has run yet/);
});

test("a local-only workspace says so and names its rule", () => {
  const rule = "workspace /home/me/bank is local-only (privacy.local_only_workspaces)";
  const view = formatStatus({ ...served, localOnlyRule: rule });
  assert.equal(view.text, "$(lock) switchyard: local-only workspace");
  assert.match(view.tooltip, /This workspace stays local: workspace \/home\/me\/bank is local-only/);
});

test("the tooltip says what was sent to each provider in the last hour", () => {
  const view = formatStatus({ ...served, outbound: [{ provider: "anthropic", bytes: 20480, requests: 3 }] });
  assert.match(view.tooltip, /Sent in the last hour: anthropic 20\.5 kB in 3 requests/);
  assert.match(formatStatus(served).tooltip, /Sent in the last hour: nothing/);
});

test("a served task shows its provider, model and tier", () => {
  const view = formatStatus(served);
  assert.equal(view.text, "$(server-process) switchyard: anthropic/claude-sonnet-4-5 (large)");
  assert.equal(view.warning, false);
  assert.match(view.tooltip, /explain: anthropic\/claude-sonnet-4-5 \(large\)/);
});

test("a downshift looks different and the tooltip says from which tier and why", () => {
  const view = formatStatus(downshifted);
  assert.equal(view.warning, true);
  assert.equal(
    view.text,
    "$(warning) switchyard: openai/gpt-5-mini (medium ↓ from large: anthropic/claude-sonnet-4-5: HTTP 529 o…)",
  );
  assert.match(view.tooltip, /Downshifted from large to medium: large tier unavailable: anthropic\/claude-sonnet-4-5: HTTP 529 overloaded/);
  assert.match(view.tooltip, /refactor: openai\/gpt-5-mini \(medium, downshifted from large\)/);
});

test("local-only wins over the last route, and the menu offers to turn it off", () => {
  const view = formatStatus({ ...downshifted, localOnly: true });
  assert.equal(view.text, "$(lock) switchyard: local-only");
  assert.equal(view.warning, false);
  assert.match(view.tooltip, /Local-only mode: on/);
  assert.match(menuItems({ ...idle, localOnly: true })[0].label, /off/);
  assert.match(menuItems(idle)[0].label, /on/);
});

test("parked tasks are counted in the text and explained in the tooltip", () => {
  const parked = [
    { id: "p1", kind: "refactor", note: "every route is out of quota", parkedAtMs: 1 },
    { id: "p2", kind: "refactor", note: "anthropic breaker open", parkedAtMs: 2 },
  ];
  const view = formatStatus({ ...served, parked });
  assert.equal(view.text, "$(server-process) switchyard: anthropic/claude-sonnet-4-5 (large) · 2 parked");
  assert.match(view.tooltip, /Parked refactor: every route is out of quota/);
  assert.match(view.tooltip, /Parked refactor: anthropic breaker open/);
  assert.doesNotMatch(formatStatus({ ...idle, parked: [] }).text, /parked/);
});

test("completions snoozed, off here or late show on the item; the menu offers to resume a snooze", () => {
  const clock = () => "14:05";
  const snoozed: StatusReport = { ...idle, completion: { state: "snoozed", reason: null, untilMs: 1 } };
  assert.match(formatStatus(snoozed).text, /completions snoozed/);
  assert.equal(completionLine(snoozed.completion!, clock), "Completions: snoozed until 14:05");
  assert.ok(menuItems(snoozed).some((i) => i.label.includes("Resume completions") && i.command === "switchyard.client.snooze"));
  assert.ok(menuItems(idle).some((i) => i.label.includes("Snooze completions")));
  const off: StatusReport = { ...idle, completion: { state: "off", reason: "completions are off for markdown (autocomplete.languages)" } };
  assert.match(formatStatus(off).text, /completions off here/);
  assert.match(formatStatus(off).tooltip, /off here: completions are off for markdown/);
  const late: StatusReport = { ...idle, completion: { state: "late", reason: "5 of the last 8 suggestions missed the budget" } };
  assert.match(formatStatus(late).tooltip, /Completions: late: 5 of the last 8/);
  const ready: StatusReport = { ...idle, completion: { state: "ready" } };
  assert.doesNotMatch(formatStatus(ready).text, /completions/);
});
