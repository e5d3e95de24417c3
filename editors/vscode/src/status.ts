// Turns the server's `switchyard/status` payload into what the status bar item
// and the status commands show. Pure (no `vscode` import) so it is unit-tested.
// The payload's field names and shapes are documented in docs/lsp-extensions.md
// (`switchyard/status`, the server's `lsp::wire::StatusParams`): keep these in step.

/** One task kind's route, as the server flattens it into the task entry. */
export interface TaskStatus {
  kind: string;
  provider?: string | null;
  model?: string | null;
  tier?: string | null;
  downshiftedFrom?: string | null;
  reason?: string | null;
}

export interface EntryHealth {
  provider: string;
  model: string;
  tier: string;
  state: "healthy" | "unknown" | "unhealthy" | "no-key" | string;
  reason?: string | null;
  samples: number;
  p95FirstTokenMs?: number | null;
  errorRate: number;
}

/** The `switchyard/status` notification (and the `switchyard.status` command's result). */
export interface StatusReport {
  provider?: string | null;
  model?: string | null;
  tier?: string | null;
  downshiftedFrom?: string | null;
  reason?: string | null;
  localOnly: boolean;
  tasks: TaskStatus[];
  health: EntryHealth[];
  /** This editor's tasks parked until a route opens. */
  parked?: ParkedStatus[];
  /** What this server sent each provider in the last hour. */
  outbound?: OutboundTotal[];
  /** A rule keeping this workspace on the local model while the global mode is off. */
  localOnlyRule?: string | null;
  /** Why only the local model serves though the mode was not asked for: the configuration could not be read. */
  localOnlyReason?: string | null;
  /** Inline completions (absent from older servers). */
  completion?: CompletionStatus | null;
}

export interface CompletionStatus {
  state: "loading" | "ready" | "off" | "snoozed" | "late" | "failed" | string;
  reason?: string | null;
  /** When a snooze ends, Unix ms. */
  untilMs?: number | null;
}

/** The completion state as one line ("Completions: snoozed until 14:05"). */
export function completionLine(c: CompletionStatus, clock: (ms: number) => string = hhmm): string {
  const why = c.reason ? `: ${c.reason}` : "";
  switch (c.state) {
    case "snoozed":
      return `Completions: snoozed${c.untilMs ? ` until ${clock(c.untilMs)}` : ""}`;
    case "off":
      return `Completions: off here${why}`;
    case "late":
      return `Completions: late${why}`;
    case "failed":
      return `Completions: unavailable${why}`;
    default:
      return `Completions: ${c.state}${why}`;
  }
}

function hhmm(ms: number): string {
  const d = new Date(ms);
  return `${String(d.getHours()).padStart(2, "0")}:${String(d.getMinutes()).padStart(2, "0")}`;
}

/** The status bar's note on completions, when they are not simply ready. */
function completionBadge(c: CompletionStatus | null | undefined): string {
  switch (c?.state) {
    case "snoozed":
      return " · completions snoozed";
    case "off":
      return " · completions off here";
    case "late":
      return " · completions late";
    case "loading":
      return " · loading model";
    case "failed":
      return " · no completions";
    default:
      return "";
  }
}

export interface OutboundTotal {
  provider: string;
  bytes: number;
  requests: number;
}

export interface ParkedStatus {
  id: string;
  kind: string;
  /** Why it is parked. */
  note: string;
  parkedAtMs: number;
}

export const STATUS_NOTIFICATION = "switchyard/status";

export interface StatusView {
  /** Status bar text, with a codicon. */
  text: string;
  /** Hover text: one fact per line. */
  tooltip: string;
  /** Downshifted: the item takes the warning colours. */
  warning: boolean;
}

function parkedCount(r: StatusReport): number {
  return r.parked?.length ?? 0;
}

function route(provider?: string | null, model?: string | null): string {
  return model ? `${provider}/${model}` : `${provider}`;
}

/** The report as lines: mode, latest route and downshift, each task's route, each entry's health. */
export function statusLines(r: StatusReport): string[] {
  const lines: string[] = [];
  if (r.completion) {
    lines.push(completionLine(r.completion));
  }
  if (r.localOnlyReason) {
    lines.push(`Only the local model serves until the configuration can be read: ${r.localOnlyReason}`);
  } else {
    lines.push(r.localOnly ? "Local-only mode: on (only the local model serves)" : "Local-only mode: off");
  }
  if (r.localOnlyRule) {
    lines.push(`This workspace stays local: ${r.localOnlyRule}`);
  }
  if (r.provider) {
    lines.push(`Latest task served by ${route(r.provider, r.model)} (${r.tier} tier)`);
  } else {
    lines.push("No explain or refactor has run yet");
  }
  if (r.downshiftedFrom) {
    lines.push(`Downshifted from ${r.downshiftedFrom} to ${r.tier}: ${r.reason ?? "no healthy entry"}`);
  }
  for (const task of r.tasks) {
    if (task.provider) {
      const down = task.downshiftedFrom ? `, downshifted from ${task.downshiftedFrom}` : "";
      lines.push(`${task.kind}: ${route(task.provider, task.model)} (${task.tier}${down})`);
    }
  }
  for (const task of r.parked ?? []) {
    lines.push(`Parked ${task.kind}: ${task.note}`);
  }
  for (const h of r.health) {
    const why = h.reason ? `: ${h.reason}` : "";
    lines.push(`${route(h.provider, h.model)} [${h.tier}] ${h.state}${why}`);
  }
  const sent = (r.outbound ?? []).map((t) => `${t.provider} ${size(t.bytes)} in ${t.requests} requests`);
  lines.push(sent.length > 0 ? `Sent in the last hour: ${sent.join(", ")}` : "Sent in the last hour: nothing");
  return lines;
}

function size(bytes: number): string {
  return bytes < 10_000 ? `${bytes} B` : `${(bytes / 1000).toFixed(1)} kB`;
}

/** How much of a downshift's reason fits in the status bar. */
const REASON_CHARS = 40;

function shorten(text: string, chars: number): string {
  return text.length <= chars ? text : `${text.slice(0, chars - 1)}…`;
}

/** What the status bar item shows for a report (`undefined`: none received yet). */
export function formatStatus(r: StatusReport | undefined): StatusView {
  if (!r) {
    return { text: "$(sync~spin) switchyard", tooltip: "switchyard: starting", warning: false };
  }
  const parked = parkedCount(r);
  const suffix = `${parked > 0 ? ` · ${parked} parked` : ""}${completionBadge(r.completion)}`;
  const tooltip = ["switchyard", ...statusLines(r), "", "Click for actions"].join("\n");
  if (r.localOnlyReason) {
    return { text: `$(warning) switchyard: local-only (configuration unreadable)${suffix}`, tooltip, warning: true };
  }
  if (r.localOnly) {
    return { text: `$(lock) switchyard: local-only${suffix}`, tooltip, warning: false };
  }
  if (r.localOnlyRule) {
    return { text: `$(lock) switchyard: local-only workspace${suffix}`, tooltip, warning: false };
  }
  if (r.provider && r.downshiftedFrom) {
    // Why is the first thing a user asks; the tooltip has it whole. The
    // server's "<tier> tier unavailable: " repeats what the arrow says.
    const cause = (r.reason ?? "no healthy entry").replace(`${r.downshiftedFrom} tier unavailable: `, "");
    const reason = shorten(cause, REASON_CHARS);
    return {
      text: `$(warning) switchyard: ${route(r.provider, r.model)} (${r.tier} ↓ from ${r.downshiftedFrom}: ${reason})${suffix}`,
      tooltip,
      warning: true,
    };
  }
  if (r.provider) {
    return { text: `$(server-process) switchyard: ${route(r.provider, r.model)} (${r.tier})${suffix}`, tooltip, warning: false };
  }
  return { text: `$(server-process) switchyard${suffix}`, tooltip, warning: false };
}

/** The quick pick opened by clicking the status bar item. */
export function menuItems(r: StatusReport | undefined): { label: string; command: string }[] {
  return [
    {
      label: r?.localOnly ? "$(unlock) Turn local-only mode off" : "$(lock) Turn local-only mode on",
      command: "switchyard.client.toggleLocalOnly",
    },
    {
      label: r?.completion?.state === "snoozed" ? "$(bell) Resume completions" : "$(bell-slash) Snooze completions…",
      command: "switchyard.client.snooze",
    },
    { label: "$(info) Show status", command: "switchyard.client.showStatus" },
    { label: "$(output) Open server log", command: "switchyard.client.openLog" },
  ];
}
