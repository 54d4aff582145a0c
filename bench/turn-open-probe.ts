/**
 * How long `turn_open` (src/turns/turn-open.ts) takes on a connection, execution by execution
 * (issue 14, Session 6): a fresh database, one chat, and on each new connection N turns opened
 * and released in turn. `--mode` sets plan_cache_mode for the probe's connections.
 *
 *   npx tsx bench/turn-open-probe.ts [--connections 4] [--turns 10] [--mode auto|force_generic_plan|force_custom_plan] [--pause ms]
 *
 * `--pause`: idle time before each execution (a turn every 2 s per worker in the closed loop);
 * PROBE_EXPLAIN=1 prints the generic plan's EXPLAIN ANALYZE.
 */
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { OPEN_TURN_SQL } from '../src/turns/turn-open.js';
import { bootstrap, prepareDatabase, serviceEnv } from './harness.js';

const { values: args } = parseArgs({
  options: {
    connections: { type: 'string', default: '4' },
    turns: { type: 'string', default: '10' },
    mode: { type: 'string', default: 'auto' },
    pause: { type: 'string', default: '0' },
  },
});
const db = await prepareDatabase('postgres', 'scriptorium_probe');
try {
  const env = serviceEnv(db.env, 1, 1);
  bootstrap(env);
  const setup = new pg.Client({ connectionString: db.env.DATABASE_URL });
  await setup.connect();
  const { rows } = await setup.query(
    `insert into chats (organization_id, api_key_id, project_id, model_configuration_id)
     select k.organization_id, k.id, p.id, m.id from api_keys k, projects p, model_configurations m
     where k.kind = 'organization' and p.organization_id = k.organization_id and m.organization_id = k.organization_id
     limit 1 returning id, organization_id, api_key_id`,
  );
  const chat = rows[0];
  await setup.end();
  const ms: number[][] = [];
  for (let c = 0; c < Number(args.connections); c++) {
    const client = new pg.Client({
      connectionString: db.env.DATABASE_URL,
      options: `-c TimeZone=UTC${args.mode === 'auto' ? '' : ` -c plan_cache_mode=${args.mode}`}`,
    });
    await client.connect();
    const times: number[] = [];
    for (let t = 0; t < Number(args.turns); t++) {
      const values = [chat.id, chat.organization_id, chat.api_key_id, 0, true, `Hello ${t}`, 'Hello', 60, 99];
      if (Number(args.pause) > 0) await new Promise((resolve) => setTimeout(resolve, Number(args.pause)));
      const start = performance.now();
      const result = await client.query({ name: 'turn_open', text: OPEN_TURN_SQL, values });
      times.push(performance.now() - start);
      const turnId = result.rows[0].turn_id;
      if (turnId === null) throw new Error('turn not opened');
      await client.query(`update chat_turns set status = 'completed' where id = $1`, [turnId]);
    }
    const plans = await client.query(
      `select generic_plans, custom_plans from pg_prepared_statements where name = 'turn_open'`,
    );
    ms.push(times);
    if (process.env.PROBE_EXPLAIN && c === 0) {
      await client.query('begin');
      const values = [chat.id, chat.organization_id, chat.api_key_id, 0, true, 'x', 'Hello', 60, 99];
      await client.query({
        text: `prepare x(int,int,int,int,boolean,text,text,float8,int) as ${OPEN_TURN_SQL}`,
      });
      await client.query('set local plan_cache_mode = force_generic_plan');
      const plan = await client.query(
        `explain (analyze, timing, summary) execute x(${values.map((v) => (typeof v === 'string' ? `'${v}'` : v)).join(',')})`,
      );
      console.log(plan.rows.map((r) => r['QUERY PLAN']).join('\n'));
      await client.query('rollback');
    }
    console.log(
      `connection ${c + 1}: ${times.map((t) => t.toFixed(2)).join(' ')} ms (generic ${plans.rows[0].generic_plans}, custom ${plans.rows[0].custom_plans})`,
    );
    await client.end();
  }
  const col = (i: number) => ms.map((t) => t[i]!).sort((a, b) => a - b);
  const med = (v: number[]) => v[Math.floor(v.length / 2)]!;
  console.log(
    `median by execution: ${Array.from({ length: Number(args.turns) }, (_, i) => med(col(i)).toFixed(2)).join(' ')}`,
  );
} finally {
  await db.cleanup();
}
