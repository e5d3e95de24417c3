// Reads `switchyard doctor --json` (the server's own checks: configuration,
// model and digest, disk, state directory, log, local-only, provider keys,
// engine) for "switchyard: Check Setup". Pure, so the unit tests read it too.

interface Check {
  name: string;
  level: "ok" | "warn" | "error";
  detail: string;
  fix?: string | null;
}

export interface DoctorView {
  ready: boolean;
  /** One line per check, for the output channel. */
  lines: string[];
  /** What fixes the first error, for the message the user sees. */
  firstFix?: string;
}

const MARK = { ok: "ok    ", warn: "WARN  ", error: "ERROR " } as const;

/** The report as lines; `undefined` when it is not a doctor report. */
export function doctorReport(report: unknown): DoctorView | undefined {
  const r = report as { ready?: unknown; checks?: unknown };
  if (typeof r?.ready !== "boolean" || !Array.isArray(r.checks)) return undefined;
  const checks = r.checks as Check[];
  const lines = checks.map((c) => {
    const fix = c.level !== "ok" && c.fix ? ` (fix: ${c.fix})` : "";
    return `${MARK[c.level] ?? "ERROR "} ${c.name}: ${c.detail}${fix}`;
  });
  const firstFix = checks.find((c) => c.level === "error")?.fix ?? undefined;
  return firstFix === undefined ? { ready: r.ready, lines } : { ready: r.ready, lines, firstFix };
}
