/**
 * The checks the bench's entry points (bench/closed-loop.ts, bench/rates.ts, bench/burst.ts,
 * bench/lean-micro.ts) make of their options: a typo stops the run at once with what was wrong,
 * rather than running a whole bench on NaN or the wrong database.
 */

/** `--backend`: the database the service runs on. */
export function backendOption(value: string | undefined): 'postgres' | 'pglite' {
  if (value === 'postgres' || value === 'pglite') return value;
  console.error(`--backend must be postgres or pglite, got "${value}"`);
  process.exit(2);
}

/**
 * A numeric option's value. `name`: how the message names it (`--repeat`); `min`: the least value
 * allowed; `integer`: whole numbers only.
 */
export function numberOption(name: string, value: string, { min = 0, integer = false } = {}): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < min || (integer && !Number.isInteger(n))) {
    console.error(
      `${name} must be ${integer ? 'a whole number' : 'a number'}, ${min} or more, got "${value}"`,
    );
    process.exit(2);
  }
  return n;
}
