// Wall-clock time in a named time zone (Intl only, no tz database of our own): local date/time
// for message texts, and the end of a rule's quiet hours as a UTC instant.

/** @internal Part of a signature only tests use (exported with it). */
export interface ZonedParts {
  year: number;
  month: number;
  day: number;
  hour: number;
  minute: number;
  second: number;
}

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(timeZone: string): Intl.DateTimeFormat {
  let f = formatters.get(timeZone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
    });
    formatters.set(timeZone, f);
  }
  return f;
}

export function isValidTimeZone(timeZone: string): boolean {
  try {
    formatter(timeZone);
    return true;
  } catch {
    return false;
  }
}

/** @internal Exported for its tests only (test/notify-sms.redis.test.ts). */
export function zonedParts(date: Date, timeZone: string): ZonedParts {
  const parts: Record<string, number> = {};
  for (const p of formatter(timeZone).formatToParts(date)) {
    if (p.type !== 'literal') parts[p.type] = Number(p.value);
  }
  return {
    year: parts.year ?? 0,
    month: parts.month ?? 1,
    day: parts.day ?? 1,
    hour: (parts.hour ?? 0) % 24,
    minute: parts.minute ?? 0,
    second: parts.second ?? 0,
  };
}

/** Offset of the zone from UTC at instant `t` (ms; +2 h in Berlin summer time). */
function offsetMs(timeZone: string, t: number): number {
  const p = zonedParts(new Date(t), timeZone);
  const asUtc = Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second);
  return asUtc - Math.floor(t / 1000) * 1000;
}

/**
 * The instant at which the zone's clocks show this wall time (a time skipped by DST lands just after the gap).
 * @internal Exported for its tests only (test/notify-sms.redis.test.ts).
 */
export function zonedTimeToUtc(wall: Omit<ZonedParts, 'second'>, timeZone: string): Date {
  const guess = Date.UTC(wall.year, wall.month - 1, wall.day, wall.hour, wall.minute);
  const first = guess - offsetMs(timeZone, guess);
  const second = guess - offsetMs(timeZone, first);
  return new Date(second);
}

const pad = (n: number) => String(n).padStart(2, '0');

/** `2024-05-03`, `14:05` and `2024-05-03 14:05` in the zone. */
export function localDateTime(date: Date, timeZone: string): { date: string; time: string; dateTime: string } {
  const p = zonedParts(date, timeZone);
  const d = `${p.year}-${pad(p.month)}-${pad(p.day)}`;
  const t = `${pad(p.hour)}:${pad(p.minute)}`;
  return { date: d, time: t, dateTime: `${d} ${t}` };
}

export interface QuietHours {
  /** `HH:MM` local time at which quiet hours begin (inclusive). */
  start: string;
  /** `HH:MM` local time at which they end (exclusive); before `start` means across midnight. */
  end: string;
  timeZone: string;
}

function minutesOf(hhmm: string): number {
  const [h, m] = hhmm.split(':').map(Number);
  return (h ?? 0) * 60 + (m ?? 0);
}

/** When `now` falls within the quiet hours, the instant they end; otherwise null (sending is allowed now). */
export function quietHoursEnd(now: Date, quiet: QuietHours): Date | null {
  const start = minutesOf(quiet.start);
  const end = minutesOf(quiet.end);
  if (start === end) return null;
  const local = zonedParts(now, quiet.timeZone);
  const minute = local.hour * 60 + local.minute;
  const quietNow = start < end ? minute >= start && minute < end : minute >= start || minute < end;
  if (!quietNow) return null;
  // Ends today when we are before `end` on the local clock, otherwise on the next local day.
  const dayOffset = minute < end ? 0 : 1;
  const day = new Date(Date.UTC(local.year, local.month - 1, local.day + dayOffset));
  return zonedTimeToUtc(
    {
      year: day.getUTCFullYear(),
      month: day.getUTCMonth() + 1,
      day: day.getUTCDate(),
      hour: Math.floor(end / 60),
      minute: end % 60,
    },
    quiet.timeZone,
  );
}
