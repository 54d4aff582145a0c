/**
 * Renders a PostgreSQL timestamptz text value (`2026-01-02 03:04:05.12+00`) as
 * `2026-01-02T03:04:05.120000Z`. PostgreSQL trims trailing zeros; the API always shows six digits.
 */
export function formatTimestamp(value: string): string;
export function formatTimestamp(value: string | null): string | null;
export function formatTimestamp(value: string | null): string | null {
  if (value === null) return null;
  const match = /^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d{1,6}))?(Z|[+-]\d{2}(?::?\d{2})?)?$/.exec(
    value,
  );
  if (!match) throw new Error(`Unexpected timestamp from the database: ${value}`);
  const [, date, time, fraction = '', offset = 'Z'] = match;
  const micros = fraction.padEnd(6, '0');
  if (offset === 'Z' || /^[+-]00(:?00)?$/.test(offset)) return `${date}T${time}.${micros}Z`;
  // Sessions run in UTC; this path only guards against a server configured otherwise.
  const utc = new Date(`${date}T${time}${offset.length === 3 ? `${offset}:00` : offset}`).toISOString();
  return `${utc.slice(0, 19)}.${micros}Z`;
}
