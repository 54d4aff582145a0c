/**
 * CPU-time microbenchmark of the zod work of a chat turn's tools (Session 4, per-token parsing):
 * building the tools of a chat without an agent (knowledge_search; integrations add none when no
 * tool server is connected) and converting their
 * input schemas to JSON Schema, as the lean client does per turn (wireTools caches by schema
 * object, so a schema built per turn is converted per turn). `process.cpuUsage`, median of 3.
 *
 *   npx tsx bench/zod-micro.ts [turns=3000]
 */
import { asSchema, type Tool } from 'ai';
import { knowledgeTools } from '../src/llm/tools/knowledge.js';
import type { ToolScope } from '../src/llm/tools/registry.js';

const scope = { ctx: {}, projectId: 1, chatId: 1, agentId: null } as unknown as ToolScope;
const cache = new WeakMap<object, unknown>();

async function turn(): Promise<number> {
  const tools: Record<string, Tool> = (await knowledgeTools(scope, {})).tools;
  let n = 0;
  for (const tool of Object.values(tools)) {
    const source = tool.inputSchema as object;
    let schema = cache.get(source);
    if (schema === undefined) {
      schema = await asSchema(tool.inputSchema).jsonSchema;
      cache.set(source, schema);
    }
    n += Object.keys(schema as object).length;
  }
  return n;
}

async function run(turns: number): Promise<number> {
  const before = process.cpuUsage();
  for (let i = 0; i < turns; i++) await turn();
  const used = process.cpuUsage(before);
  return (used.user + used.system) / 1000 / turns;
}

const turns = Number(process.argv[2] ?? 3000);
await run(200);
const samples = [await run(turns), await run(turns), await run(turns)].sort((a, b) => a - b);
console.log(
  `tools + JSON Schema: ${(samples[1]! * 1000).toFixed(1)} µs CPU per turn (median of 3 x ${turns})`,
);
