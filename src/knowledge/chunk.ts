import type { Block } from './blocks.js';

export interface Chunk {
  /** 0-based order within the document. */
  position: number;
  /** Headings above the chunk's first text, outermost first. */
  headingPath: string[];
  text: string;
  tokenCount: number;
}

export interface ChunkOptions {
  /** A heading starts a new chunk once the current one holds this many tokens. */
  minTokens: number;
  /** No chunk grows past this (a single sentence longer than it is cut by words). */
  maxTokens: number;
  /** Tokens of the previous chunk's end repeated at the start of the next, within one section. */
  overlapTokens: number;
}

export const DEFAULT_CHUNKING: ChunkOptions = { minTokens: 400, maxTokens: 800, overlapTokens: 80 };

/**
 * Approximate model tokens without a tokenizer: about 1.3 per English word, and never fewer than
 * one per four characters (text without spaces, such as CJK or long identifiers).
 */
export function estimateTokens(text: string): number {
  const words = text.match(/\S+/g)?.length ?? 0;
  return Math.max(Math.ceil(words * 1.3), Math.ceil(text.length / 4));
}

interface Part {
  text: string;
  tokens: number;
  heading: boolean;
}

/**
 * Groups blocks into passages of about `minTokens`..`maxTokens`: a heading closes a chunk that is
 * already big enough, a block that would overflow one closes it too (carrying an overlap when the
 * section continues), and blocks larger than a chunk are cut at lines, sentences, then words.
 */
export function chunkBlocks(blocks: Block[], options: ChunkOptions = DEFAULT_CHUNKING): Chunk[] {
  const chunks: Chunk[] = [];
  const stack: { level: number; text: string }[] = [];
  let parts: Part[] = [];
  let tokens = 0;
  let path: string[] | null = null;

  const emit = () => {
    if (parts.some((part) => !part.heading)) {
      const text = parts.map((part) => part.text).join('\n\n');
      chunks.push({
        position: chunks.length,
        headingPath: path ?? [],
        text,
        tokenCount: estimateTokens(text),
      });
    }
  };
  const restart = (carry: Part[]) => {
    parts = carry;
    tokens = carry.reduce((sum, part) => sum + part.tokens, 0);
    // Carried text belongs to the section being read, so the new chunk takes its path.
    path = carry.length > 0 ? stack.map((heading) => heading.text) : null;
  };
  const add = (part: Part) => {
    if (path === null) path = stack.map((heading) => heading.text);
    parts.push(part);
    tokens += part.tokens;
  };

  for (const block of blocks) {
    if (block.kind === 'heading') {
      if (tokens >= options.minTokens) {
        emit();
        restart([]);
      }
      while (stack.length > 0 && stack[stack.length - 1].level >= block.level) stack.pop();
      stack.push({ level: block.level, text: block.text });
      if (block.synthetic) {
        if (parts.length === 0) path = null;
      } else {
        if (tokens > 0 && tokens + estimateTokens(block.text) > options.maxTokens) {
          emit();
          restart([]);
        }
        if (parts.every((part) => part.heading)) path = null;
        add({ text: block.text, tokens: estimateTokens(block.text), heading: true });
      }
      continue;
    }
    for (const piece of splitToFit(block.text, options.maxTokens - options.overlapTokens)) {
      const pieceTokens = estimateTokens(piece);
      if (tokens > 0 && tokens + pieceTokens > options.maxTokens) {
        emit();
        restart(overlapOf(parts, options.overlapTokens));
      }
      add({ text: piece, tokens: pieceTokens, heading: false });
    }
  }
  emit();
  return chunks;
}

/** The end of a chunk to repeat at the start of the next: whole trailing blocks, else trailing sentences. */
function overlapOf(parts: Part[], budget: number): Part[] {
  if (budget <= 0) return [];
  const carry: Part[] = [];
  let used = 0;
  for (let i = parts.length - 1; i >= 0; i--) {
    const part = parts[i];
    if (part.heading) break;
    if (used + part.tokens <= budget) {
      carry.unshift(part);
      used += part.tokens;
      continue;
    }
    if (carry.length === 0) {
      const tail = tailSentences(part.text, budget);
      if (tail) carry.unshift({ text: tail, tokens: estimateTokens(tail), heading: false });
    }
    break;
  }
  return carry;
}

/** The last sentences of `text` within `budget`; when even the last sentence is too long, its last words. */
function tailSentences(text: string, budget: number): string {
  const sentences = tailWithin(splitSentences(text), budget);
  return sentences || tailWithin(text.split(/\s+/).filter(Boolean), budget);
}

function tailWithin(units: string[], budget: number): string {
  const kept: string[] = [];
  for (let i = units.length - 1; i >= 0; i--) {
    const candidate = [units[i], ...kept].join(' ');
    if (estimateTokens(candidate) > budget) break;
    kept.unshift(units[i]);
  }
  return kept.join(' ');
}

function splitSentences(text: string): string[] {
  return text
    .split(/(?<=[.!?。！？])\s+/u)
    .map((sentence) => sentence.trim())
    .filter(Boolean);
}

/** Cuts an oversized block at line breaks, then sentences, then words (or characters), packing pieces up to `limit`. */
export function splitToFit(text: string, limit: number): string[] {
  if (estimateTokens(text) <= limit) return [text];
  const levels: ((t: string) => string[])[] = [
    (t) => t.split('\n').filter((line) => line.trim() !== ''),
    splitSentences,
    (t) => t.split(/\s+/).filter(Boolean),
  ];
  for (const split of levels) {
    const units = split(text);
    if (units.length > 1) {
      const separator = split === levels[0] ? '\n' : ' ';
      return pack(
        units.flatMap((unit) => splitToFit(unit, limit)),
        limit,
        separator,
      );
    }
  }
  // One unbroken run (no spaces): cut by characters.
  const size = Math.max(1, limit * 4);
  const pieces: string[] = [];
  for (let i = 0; i < text.length; i += size) pieces.push(text.slice(i, i + size));
  return pieces;
}

function pack(units: string[], limit: number, separator: string): string[] {
  const pieces: string[] = [];
  let current = '';
  for (const unit of units) {
    const candidate = current ? `${current}${separator}${unit}` : unit;
    if (current && estimateTokens(candidate) > limit) {
      pieces.push(current);
      current = unit;
    } else {
      current = candidate;
    }
  }
  if (current) pieces.push(current);
  return pieces;
}
