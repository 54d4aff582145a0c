/**
 * The closed-loop bench's marker scan (bench/load-loop.ts, `Carry`): the generator reads the
 * service's SSE in whatever pieces TCP hands over, so a marker split between reads, even across
 * three of them, must still be found once, and bytes that only look alike must not match.
 */
import { describe, expect, it } from 'vitest';
import { Carry } from '../bench/load-loop.js';

const MARKER = Buffer.from('event: done\n');
const BODY = 'event: content\ndata: {"text":"done"}\n\nevent: done\ndata: {}\n\n';

function found(pieces: string[], marker = MARKER): boolean {
  const carry = new Carry(marker.length - 1);
  let seen = false;
  for (const piece of pieces) {
    const bytes = Buffer.from(piece);
    if (carry.contains(bytes, marker)) seen = true;
    carry.keep(bytes);
  }
  return seen;
}

describe('Carry (bench marker scan)', () => {
  it('finds a marker whatever two or three pieces the body arrives in', () => {
    for (let a = 1; a < BODY.length; a++)
      for (let b = a; b < BODY.length; b++)
        expect(found([BODY.slice(0, a), BODY.slice(a, b), BODY.slice(b)].filter(Boolean)), `${a} ${b}`).toBe(
          true,
        );
  });

  it("does not match bytes that only share the marker's ends", () => {
    expect(found(['event: do', 'x', 'ne\n'])).toBe(false);
    expect(found(['event: content\n', 'data: done\n'])).toBe(false);
    expect(found([BODY.replace('event: done', 'event: dome')])).toBe(false);
  });
});
