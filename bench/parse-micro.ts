/**
 * CPU-time microbenchmark of the lean client's chunk parsing (Session 4, per-token parsing):
 * replies of 200 content chunks shaped like bench/fake-model.ts (and like OpenAI's), fed to
 * `ChunkReader` one SSE event per read (what a loaded service mostly sees), measured with
 * `process.cpuUsage` (user + system), so other load on the machine changes little.
 *
 *   npx tsx bench/parse-micro.ts [replies=3000]
 */
import { ChunkReader, type StepResult } from '../src/llm/lean-client.js';

const TOKENS = 200;
const base = {
  id: 'chatcmpl-9xKq2Lr3bWmTn4Zp',
  object: 'chat.completion.chunk',
  created: 1764115200,
  model: 'gpt-4o-mini-2024-07-18',
  system_fingerprint: 'fp_0ba0d124f1',
};
const event = (delta: unknown, finish: string | null = null) =>
  `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;

/** Plain words; `escapes`: every tenth token has a newline or a quote (JSON escapes). */
function reply(escapes: boolean): string[] {
  const events = [event({ role: 'assistant', content: '' })];
  for (let i = 0; i < TOKENS; i++)
    events.push(event({ content: escapes && i % 10 === 9 ? (i % 20 === 9 ? '.\n\n' : ' "x"') : ' word' }));
  events.push(event({}, 'stop'));
  events.push(
    `data: ${JSON.stringify({ ...base, choices: [], usage: { prompt_tokens: 10, completion_tokens: TOKENS, total_tokens: 10 + TOKENS } })}\n\ndata: [DONE]\n\n`,
  );
  return events;
}

const span = { fail: () => {}, responseModel: () => {} };
let sink = 0;

function run(events: string[], replies: number): number {
  const before = process.cpuUsage();
  for (let r = 0; r < replies; r++) {
    const result: StepResult = { text: '', toolCalls: [], finishReason: 'other', usage: null };
    const reader = new ChunkReader(result, span);
    for (const piece of events) sink += reader.read(piece).text.length;
    if (result.finishReason !== 'stop' || result.usage?.outputTokens !== TOKENS) throw new Error('misparsed');
  }
  const used = process.cpuUsage(before);
  return (used.user + used.system) / 1000 / replies;
}

const replies = Number(process.argv[2] ?? 3000);
for (const [name, events] of [
  ['plain', reply(false)],
  ['escapes', reply(true)],
] as const) {
  run(events, 300); // warm-up
  const samples = [run(events, replies), run(events, replies), run(events, replies)].sort((a, b) => a - b);
  console.log(
    `${name}: ${(samples[1]! * 1000).toFixed(1)} µs CPU per 200-token reply (median of 3 x ${replies})`,
  );
}
if (sink < 0) console.log(sink);
