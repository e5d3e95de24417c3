// The server's `workspace/executeCommand` commands and the arguments the
// extension sends them (documented in docs/lsp-extensions.md). Pure, so the
// protocol test sends exactly these.
//
// The client registers every command the server advertises as a VS Code
// command of the same name, so the extension's own commands live under
// `switchyard.client.*` to avoid "command already exists".

export const SERVER = {
  explain: "switchyard.explain",
  refactor: "switchyard.refactor",
  toggleLocalOnly: "switchyard.toggleLocalOnly",
  setLocalOnly: "switchyard.setLocalOnly",
  status: "switchyard.status",
  snooze: "switchyard.snooze",
} as const;

/** The lengths "Snooze Completions…" offers, in minutes (0 resumes). */
export const SNOOZE_CHOICES = [5, 30, 60] as const;

/** `switchyard.snooze [minutes]`: completions pause for that long (0 resumes); the server answers `{snoozedUntil}`. */
export function snoozeCommand(minutes: number) {
  return { command: SERVER.snooze, arguments: [minutes] };
}

export interface Position {
  line: number;
  character: number;
}

export interface Range {
  start: Position;
  end: Position;
}

/** `switchyard.explain [uri, range]`; an empty range explains the enclosing item. */
export function explainCommand(uri: string, range: Range) {
  return { command: SERVER.explain, arguments: [uri, range] };
}

/** `switchyard.refactor [uri, range, instruction]`, or undefined for a blank instruction (the input box was dismissed). */
export function refactorCommand(uri: string, range: Range, instruction: string | undefined) {
  const text = instruction?.trim();
  if (!text) return undefined;
  return { command: SERVER.refactor, arguments: [uri, range, text] };
}

/** No arguments: the server flips the mode and answers `{localOnly}`. */
export function toggleLocalOnlyCommand() {
  return { command: SERVER.toggleLocalOnly, arguments: [] as unknown[] };
}

export function statusCommand() {
  return { command: SERVER.status, arguments: [] as unknown[] };
}
