import type {
  LanguageModelV3,
  LanguageModelV3CallOptions,
  LanguageModelV3Content,
  LanguageModelV3FinishReason,
  LanguageModelV3GenerateResult,
  LanguageModelV3Message,
  LanguageModelV3Prompt,
  LanguageModelV3StreamPart,
  LanguageModelV3StreamResult,
  LanguageModelV3ToolResultOutput,
  LanguageModelV3ToolResultPart,
  LanguageModelV3Usage,
} from '@ai-sdk/provider';

import { exampleOf } from './builtin-json.js';
import { IMAGE_FORMAT_NAMES, imageInfo } from './image-info.js';

export const BUILTIN_PROVIDER = 'builtin';
export const BUILTIN_MODEL_ID = 'scriptorium-offline';
export const KNOWLEDGE_SEARCH_TOOL = 'knowledge_search';
/** The longest `query` knowledge_search takes (llm/tools/knowledge.ts); the built-in model cuts to it. */
export const MAX_SEARCH_QUERY_CHARS = 2000;

const MAX_QUOTED_PASSAGES = 3;
const MAX_PASSAGE_CHARS = 400;
const MAX_ECHO_CHARS = 80;

export interface BuiltinModelOptions {
  /** Pause between streamed words; 0 (the default): the next turn of the event loop. */
  wordDelayMs?: number;
}

export interface KnowledgePassage {
  document_id: number;
  document_name: string;
  position: number;
  score: number;
  text: string;
  heading_path?: string[];
  /** The passage's number in the turn, cited as `[n]` (src/turns/citations.ts). */
  marker?: number;
}

/** What the built-in model decided to do for one call; exported so callers can test the decision alone. */
export type BuiltinReply =
  | { kind: 'text'; text: string }
  | { kind: 'tool-call'; toolCallId: string; toolName: string; input: Record<string, unknown> };

/**
 * The offline model used when no provider is configured. It exists so a fresh install runs through
 * exactly the same AI SDK code path (streaming, tool calls, usage accounting) as a real provider,
 * while being honest that it does not understand anything.
 */
export class BuiltinLanguageModel implements LanguageModelV3 {
  readonly specificationVersion = 'v3' as const;
  readonly provider = BUILTIN_PROVIDER;
  readonly modelId = BUILTIN_MODEL_ID;
  readonly supportedUrls: Record<string, RegExp[]> = {};
  private readonly wordDelayMs: number;

  constructor(options: BuiltinModelOptions = {}) {
    this.wordDelayMs = Math.max(0, options.wordDelayMs ?? 0);
  }

  async doGenerate(options: LanguageModelV3CallOptions): Promise<LanguageModelV3GenerateResult> {
    options.abortSignal?.throwIfAborted();
    const reply = planBuiltinReply(options);
    const content: LanguageModelV3Content[] =
      reply.kind === 'text'
        ? [{ type: 'text', text: reply.text }]
        : [
            {
              type: 'tool-call',
              toolCallId: reply.toolCallId,
              toolName: reply.toolName,
              input: JSON.stringify(reply.input),
            },
          ];
    return {
      content,
      finishReason: finishReasonFor(reply),
      usage: usageFor(options.prompt, reply),
      response: { modelId: BUILTIN_MODEL_ID },
      warnings: [],
    };
  }

  async doStream(options: LanguageModelV3CallOptions): Promise<LanguageModelV3StreamResult> {
    options.abortSignal?.throwIfAborted();
    const reply = planBuiltinReply(options);
    const parts = streamPartsFor(options.prompt, reply);
    const delayMs = this.wordDelayMs;
    const signal = options.abortSignal;
    let index = 0;

    const stream = new ReadableStream<LanguageModelV3StreamPart>({
      async pull(controller) {
        if (signal?.aborted) {
          controller.error(signal.reason);
          return;
        }
        const part = parts[index++];
        if (part === undefined) {
          controller.close();
          return;
        }
        if (part.type === 'text-delta' && index > 1) {
          try {
            // Each word in a turn of the event loop of its own (setImmediate without a delay): words
            // made in one turn would be merged into one `content` event by the stream's coalescer.
            if (delayMs > 0) await sleep(delayMs, signal);
            else await new Promise<void>((resolve) => setImmediate(resolve));
          } catch (error) {
            controller.error(error);
            return;
          }
        }
        controller.enqueue(part);
      },
    });
    return { stream };
  }
}

/** Decides the reply from the prompt and the offered tools; pure and deterministic. */
export function planBuiltinReply(
  options: Pick<LanguageModelV3CallOptions, 'prompt' | 'tools' | 'toolChoice' | 'responseFormat'>,
): BuiltinReply {
  const reply = planPlainReply(options);
  if (reply.kind !== 'text') return reply;
  // Asked for JSON (response_format): the final answer is a value of the schema's shape.
  const format = options.responseFormat;
  if (format?.type === 'json')
    return {
      kind: 'text',
      text: JSON.stringify(format.schema ? exampleOf(format.schema) : { answer: reply.text }),
    };
  // What came with the question (attachments): said first, as far as an offline model can tell.
  const lastUser = options.prompt.findLast((message) => message.role === 'user');
  const seen = lastUser ? describeAttachments(lastUser) : [];
  if (seen.length === 0) return reply;
  return { kind: 'text', text: ['You attached:', ...seen.map((s) => `- ${s}`), '', reply.text].join('\n') };
}

/** Each attachment of a user message in a line: an image's type and pixel size, a document's name and length. */
export function describeAttachments(message: LanguageModelV3Message): string[] {
  if (message.role !== 'user') return [];
  const lines: string[] = [];
  for (const part of message.content) {
    if (part.type === 'file' && part.mediaType.startsWith('image/')) {
      const bytes =
        part.data instanceof Uint8Array
          ? part.data
          : typeof part.data === 'string'
            ? Buffer.from(part.data, 'base64')
            : null;
      const info = bytes ? imageInfo(bytes) : null;
      lines.push(
        info && bytes
          ? `an image: ${IMAGE_FORMAT_NAMES[info.mediaType]}, ${info.width}×${info.height} pixels (${bytes.byteLength} bytes)`
          : `an image (${part.mediaType}) I cannot read`,
      );
    } else if (part.type === 'text' && isAttachmentPart(part)) {
      const name = /name="([^"]*)"/.exec(part.text)?.[1] ?? 'a document';
      const words = countWords(part.text.replace(/^<[^>]*>|<\/[^>]*>$/g, ''));
      lines.push(`the document "${name}" (${words} words of its text reached me)`);
    }
  }
  return lines;
}

function isAttachmentPart(part: { providerOptions?: Record<string, unknown> }): boolean {
  const scriptorium = part.providerOptions?.scriptorium as { attachment?: unknown } | undefined;
  return scriptorium?.attachment === true;
}

function planPlainReply(
  options: Pick<LanguageModelV3CallOptions, 'prompt' | 'tools' | 'toolChoice'>,
): BuiltinReply {
  const { prompt } = options;
  const lastUserIndex = prompt.findLastIndex((message) => message.role === 'user');
  const userText = lastUserIndex >= 0 ? messageText(prompt[lastUserIndex]) : '';

  // Only results produced after the latest user turn count: an older search answered an older question.
  const searchResult = latestToolResult(prompt.slice(lastUserIndex + 1), KNOWLEDGE_SEARCH_TOOL);
  const lastMessage = prompt[prompt.length - 1];
  if (searchResult && lastMessage?.role === 'tool') {
    const query = searchQueryFor(prompt, searchResult.toolCallId) ?? userText;
    return { kind: 'text', text: knowledgeAnswer(searchResult.output, query) };
  }

  if (!searchResult && userText.length > 0 && offersTool(options, KNOWLEDGE_SEARCH_TOOL)) {
    const previousCalls = prompt.reduce(
      (count, message) =>
        message.role === 'assistant'
          ? count + message.content.filter((part) => part.type === 'tool-call').length
          : count,
      0,
    );
    return {
      kind: 'tool-call',
      toolCallId: `builtin-call-${previousCalls + 1}`,
      toolName: KNOWLEDGE_SEARCH_TOOL,
      // A long message is searched by its beginning: the tool refuses a longer query.
      input: { query: userText.slice(0, MAX_SEARCH_QUERY_CHARS) },
    };
  }

  return { kind: 'text', text: noProviderText(userText, wantsDocument(prompt, userText)) };
}

function offersTool(
  options: Pick<LanguageModelV3CallOptions, 'tools' | 'toolChoice'>,
  name: string,
): boolean {
  const choice = options.toolChoice;
  if (choice?.type === 'none') return false;
  if (choice?.type === 'tool' && choice.toolName !== name) return false;
  return (options.tools ?? []).some((tool) => tool.type === 'function' && tool.name === name);
}

function latestToolResult(
  messages: LanguageModelV3Prompt,
  toolName: string,
): LanguageModelV3ToolResultPart | null {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i];
    if (message.role !== 'tool' && message.role !== 'assistant') continue;
    for (let j = message.content.length - 1; j >= 0; j--) {
      const part = message.content[j];
      if (part.type === 'tool-result' && part.toolName === toolName) return part;
    }
  }
  return null;
}

function searchQueryFor(prompt: LanguageModelV3Prompt, toolCallId: string): string | null {
  for (const message of prompt) {
    if (message.role !== 'assistant') continue;
    for (const part of message.content) {
      if (part.type !== 'tool-call' || part.toolCallId !== toolCallId) continue;
      const input = typeof part.input === 'string' ? safeJsonParse(part.input) : part.input;
      const query = (input as { query?: unknown } | null)?.query;
      return typeof query === 'string' ? query : null;
    }
  }
  return null;
}

function knowledgeAnswer(output: LanguageModelV3ToolResultOutput | unknown, query: string): string {
  const failure = toolFailure(output);
  if (failure !== null) {
    return `I tried to search the knowledge base, but the search failed: ${failure}`;
  }
  const passages = extractPassages(output);
  if (passages.length === 0) {
    const about = query ? ` for "${shorten(singleLine(query), MAX_ECHO_CHARS)}"` : '';
    // A fresh install has an empty knowledge base: still say how to get real answers.
    return `I searched the knowledge base${about} but found nothing relevant.\n\n${noProviderText(query, false)}`;
  }
  // Stable sort keeps the search's own order among equal scores.
  const best = passages
    .map((passage, order) => ({ passage, order }))
    .sort((a, b) => b.passage.score - a.passage.score || a.order - b.order)
    .slice(0, MAX_QUOTED_PASSAGES)
    .map(
      ({ passage }) =>
        `From "${passage.document_name}"${passage.marker ? ` [${passage.marker}]` : ''}: "${shorten(singleLine(passage.text), MAX_PASSAGE_CHARS)}"`,
    );
  return [
    'These are the most relevant passages I found in the knowledge base:',
    ...best,
    "(Quoted verbatim by Scriptorium's built-in offline model; configure a model provider for real answers.)",
  ].join('\n\n');
}

function toolFailure(output: unknown): string | null {
  if (!isRecord(output)) return null;
  switch (output.type) {
    case 'error-text':
      return String(output.value);
    case 'error-json':
      return JSON.stringify(output.value);
    case 'execution-denied':
      return typeof output.reason === 'string' ? output.reason : 'the tool call was denied';
    default:
      return null;
  }
}

/**
 * The SDK wraps tool output as {type:'json'|'text'|'content', value}, but callers may hand the raw value
 * or a JSON string through other paths (stored history, MCP-style content), so accept all of them.
 */
export function extractPassages(output: unknown, depth = 0): KnowledgePassage[] {
  if (depth > 4 || output == null) return [];
  if (typeof output === 'string') return extractPassages(safeJsonParse(output), depth + 1);
  if (Array.isArray(output)) {
    if (output.every((item) => isRecord(item) && item.type === 'text' && typeof item.text === 'string')) {
      return extractPassages(output.map((item) => item.text).join(''), depth + 1);
    }
    return output.flatMap((item) => toPassage(item) ?? []);
  }
  if (!isRecord(output)) return [];
  if (Array.isArray(output.passages)) return output.passages.flatMap((item) => toPassage(item) ?? []);
  if (output.type === 'json' || output.type === 'text' || output.type === 'content') {
    return extractPassages(output.value, depth + 1);
  }
  if (Array.isArray(output.content)) return extractPassages(output.content, depth + 1);
  return [];
}

function toPassage(item: unknown): KnowledgePassage | null {
  if (!isRecord(item) || typeof item.text !== 'string') return null;
  const documentId = typeof item.document_id === 'number' ? item.document_id : 0;
  const passage: KnowledgePassage = {
    document_id: documentId,
    document_name: typeof item.document_name === 'string' ? item.document_name : `document ${documentId}`,
    position: typeof item.position === 'number' ? item.position : 0,
    score: typeof item.score === 'number' && Number.isFinite(item.score) ? item.score : 0,
    text: item.text,
  };
  if (Array.isArray(item.heading_path)) passage.heading_path = item.heading_path.map(String);
  if (typeof item.marker === 'number') passage.marker = item.marker;
  return passage;
}

function wantsDocument(prompt: LanguageModelV3Prompt, userText: string): boolean {
  const system = prompt
    .filter((message) => message.role === 'system')
    .map((message) => message.content)
    .join('\n');
  return (
    /\bartifacts?\b/i.test(system) ||
    /\b(write|draft|generate|create|produce)\b[\s\S]*\b(document|report|article|artifact|memo|summary)\b/i.test(
      userText,
    )
  );
}

function noProviderText(userText: string, asDocument: boolean): string {
  const subject = userText ? `your request ("${shorten(singleLine(userText), MAX_ECHO_CHARS)}")` : 'requests';
  const lines = [
    `I am Scriptorium's built-in offline model, not a real language model. No model provider is configured, so I cannot understand or answer ${subject}.`,
    'To get real answers, configure a model provider:',
    '- set `LLM_PROVIDER`, `LLM_BASE_URL`, `LLM_API_KEY` and `LLM_MODEL` before bootstrapping, or\n' +
      '- create a model configuration with `POST /api/v1/model_configurations` and make it the default.',
  ];
  if (asDocument) lines.unshift('# No model provider configured');
  return lines.join('\n\n');
}

function streamPartsFor(prompt: LanguageModelV3Prompt, reply: BuiltinReply): LanguageModelV3StreamPart[] {
  const parts: LanguageModelV3StreamPart[] = [
    { type: 'stream-start', warnings: [] },
    { type: 'response-metadata', modelId: BUILTIN_MODEL_ID },
  ];
  if (reply.kind === 'text') {
    parts.push({ type: 'text-start', id: 'text-0' });
    for (const word of splitWords(reply.text)) parts.push({ type: 'text-delta', id: 'text-0', delta: word });
    parts.push({ type: 'text-end', id: 'text-0' });
  } else {
    const input = JSON.stringify(reply.input);
    parts.push(
      { type: 'tool-input-start', id: reply.toolCallId, toolName: reply.toolName },
      { type: 'tool-input-delta', id: reply.toolCallId, delta: input },
      { type: 'tool-input-end', id: reply.toolCallId },
      { type: 'tool-call', toolCallId: reply.toolCallId, toolName: reply.toolName, input },
    );
  }
  parts.push({ type: 'finish', finishReason: finishReasonFor(reply), usage: usageFor(prompt, reply) });
  return parts;
}

function finishReasonFor(reply: BuiltinReply): LanguageModelV3FinishReason {
  return reply.kind === 'text'
    ? { unified: 'stop', raw: 'stop' }
    : { unified: 'tool-calls', raw: 'tool_calls' };
}

function usageFor(prompt: LanguageModelV3Prompt, reply: BuiltinReply): LanguageModelV3Usage {
  const input = prompt.reduce((total, message) => total + countWords(messageText(message, true)), 0);
  const output = countWords(reply.kind === 'text' ? reply.text : JSON.stringify(reply.input));
  return {
    inputTokens: { total: input, noCache: input, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: output, text: output, reasoning: 0 },
  };
}

/** Splits into word-sized deltas that concatenate back to exactly the original text. */
export function splitWords(text: string): string[] {
  const words: string[] = text.match(/\s*\S+/g) ?? [];
  const trailing = text.slice(words.join('').length);
  if (trailing) {
    if (words.length > 0) words[words.length - 1] += trailing;
    else words.push(trailing);
  }
  return words;
}

export function countWords(text: string): number {
  return text.split(/\s+/).filter(Boolean).length;
}

function messageText(message: LanguageModelV3Message, includeToolTraffic = false): string {
  if (message.role === 'system') return message.content;
  const pieces: string[] = [];
  for (const part of message.content) {
    if (part.type === 'text' && !isAttachmentPart(part)) pieces.push(part.text);
    else if (includeToolTraffic && part.type === 'tool-call') pieces.push(JSON.stringify(part.input));
    else if (includeToolTraffic && part.type === 'tool-result') pieces.push(JSON.stringify(part.output));
  }
  return pieces.join('\n').trim();
}

function shorten(text: string, max: number): string {
  if (text.length <= max) return text;
  const cut = text.slice(0, max);
  const lastSpace = cut.lastIndexOf(' ');
  return `${(lastSpace > max / 2 ? cut.slice(0, lastSpace) : cut).trimEnd()}…`;
}

function singleLine(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

function safeJsonParse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

function isRecord(value: unknown): value is Record<string, any> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
