/**
 * CPU per reply of the lean model client and a runner-like consumer (the turn's `for await`, the
 * coalescer, one JSON encoding per event), C streams in a closed loop against bench/fake-model.ts
 * (200 tokens, 10 ms apart), without the service, HTTP server or database. Run it pinned, e.g.
 * `taskset -c 1 npx tsx bench/lean-micro.ts [root] [C] [seconds]`; `root` is a checkout whose
 * src/ is measured (another commit exported with this node_modules), default this one.
 * Prints CPU-ms per reply (process.cpuUsage), text parts handed to the consumer and content events
 * per reply, and the share of the core used.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { Agent } from 'undici';
import { numberOption } from './options.js';

const root = path.resolve(process.argv[2] ?? '.');
const C = numberOption('C (the second argument)', process.argv[3] ?? '100', { min: 1, integer: true });
const seconds = numberOption('seconds (the third argument)', process.argv[4] ?? '6', { min: 1 });

async function main() {
  const { streamLean } = await import(path.join(root, 'src/llm/lean-client.ts'));
  const { ContentCoalescer } = await import(path.join(root, 'src/streams/coalescer.ts'));
  const fake = spawn(
    'taskset',
    [
      '-c',
      '0',
      process.execPath,
      '--import',
      'tsx',
      'bench/fake-model.ts',
      '--tokens',
      '200',
      '--ttft',
      '50',
      '--delay',
      '10',
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const port = await new Promise<number>((resolve) =>
    createInterface({ input: fake.stdout! }).once('line', (line) => resolve(JSON.parse(line).port)),
  );
  // LEAN_MICRO_CLIENT=undici measures undici's Agent in place of the service's own stream client.
  const agent =
    process.env.LEAN_MICRO_CLIENT === 'undici'
      ? new Agent({ connections: C + 10 })
      : new (await import(path.join(root, 'src/net/stream-client.ts'))).StreamClient();
  const model = {
    provider: 'openai-compatible',
    model: 'bench',
    url: `http://127.0.0.1:${port}/v1/chat/completions`,
    headers: { 'content-type': 'application/json' },
    dispatcher: () => agent,
  };
  let measuring = false;
  let stop = false;
  let replies = 0;
  let parts = 0;
  let events = 0;
  let replyMs = 0;
  const worker = async () => {
    while (!stop) {
      const started = performance.now();
      const stream = streamLean(model, {
        system: '',
        messages: [{ role: 'user', content: 'Hi' }],
        tools: {},
        maxSteps: 1,
        signal: new AbortController().signal,
        onActivity: () => performance.now(),
      });
      const content = new ContentCoalescer((text: string) => {
        JSON.stringify({ content: text });
        if (measuring) events++;
      });
      for await (const part of stream.fullStream) {
        performance.now();
        if (part.type !== 'text-delta') continue;
        if (measuring) parts++;
        content.push(part.text);
      }
      content.flush();
      if (measuring) {
        replies++;
        replyMs += performance.now() - started;
      }
    }
  };
  for (let i = 0; i < C; i++) void worker();
  await new Promise((resolve) => setTimeout(resolve, 3000));
  measuring = true;
  const before = process.cpuUsage();
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const used = process.cpuUsage(before);
  measuring = false;
  stop = true;
  const ms = (used.user + used.system) / 1000;
  console.log(
    JSON.stringify({
      root,
      C,
      replies,
      cpuMsPerReply: +(ms / replies).toFixed(2),
      partsPerReply: +(parts / replies).toFixed(1),
      eventsPerReply: +(events / replies).toFixed(1),
      msPerReply: Math.round(replyMs / replies),
      cpuShare: +(ms / (seconds * 1000)).toFixed(2),
    }),
  );
  fake.kill();
  process.exit(0);
}

void main();
