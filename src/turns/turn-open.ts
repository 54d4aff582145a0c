import { getTableColumns } from 'drizzle-orm';
import type { OrgPrincipal } from '../core/principal.js';
import { type Database, rowOf } from '../db/client.js';
import type { PipelinedPool } from '../db/pipelined-pool.js';
import { type IntegrationRow, integrations, type SkillRow } from '../db/schema/index.js';
import { integrationsOfProject } from '../modules/integrations/service.js';
import type { HistoryMessage, TurnHistory } from './model-input.js';
import { PLAN_SELECT, type PlanRows, planParams, planRowsOf } from './plan.js';
import { type TurnRows, turnWrites } from './turn-start.js';

export interface OpenTurnInput {
  content: string;
  /** The chat's title when it has none yet. */
  title: string | null;
  leaseMs: number;
  /** Messages of the conversation sent to the model, the new user message included. */
  historyLimit: number;
}

export interface OpenedTurn {
  /** The plan's rows, for its checks (chats/service.ts checkPlan: the refusals, in their order). */
  plan: PlanRows;
  /** Whether the plan passes those checks (computed by the statement, which writes only then). */
  usable: boolean;
  /** Whether the organization's balance is above zero (DESIGN.md 4); false is the 402. */
  funded: boolean;
  /**
   * The turn, when the statement started it. Null when it did not: refused (`usable`, `funded`),
   * or the chat's lease was taken (busy: the caller takes the long way, 409 or a dead turn's takeover).
   */
  started: {
    ids: TurnRows;
    /** Null when the history must be read again (see OPEN_TURN_SQL's `was_busy`). */
    history: TurnHistory | null;
    /** The project's tool servers (integrationsForProject's rows). */
    integrations: IntegrationRow[];
    /** The agent's skills as the system prompt lists them (skillsOfAgent's order); none without an agent. */
    skills: AgentSkill[];
  } | null;
}

export type AgentSkill = Pick<SkillRow, 'name' | 'slug' | 'description'>;

/** An integrations row as a JSON object that `rowOf` maps as it maps the driver's row. */
const integrationJson = (() => {
  const columns = Object.values(getTableColumns(integrations));
  // Timestamps as the driver receives them (text in the session's format), not JSON's ISO form: the
  // tool server pool compares `updated_at` as a version string.
  const pairs = columns.map((c) => {
    const timestamp = c.getSQLType().startsWith('timestamp');
    return `'${c.name}', i."${c.name}"${timestamp ? '::text' : ''}`;
  });
  return `json_build_object(${pairs.join(', ')})`;
})();

/**
 * A plain message's turn up to the model request in one statement (issue 14: every round trip
 * before the model request costs milliseconds of wall time on a busy host):
 *
 * - `plan`: the chat, project, agent and model configuration (plan.ts), `gate`: whether they pass
 *   the checks of chats/service.ts (checkPlan) and the credits check, and whether the chat had a
 *   running turn in this statement's snapshot;
 * - only when both pass: two message ids, the running turn (the chat's lease) taken with `on
 *   conflict do nothing` (a taken lease writes nothing and logs no error), and only once it is
 *   taken, both messages with those ids and the chat's `updated_at`/title; a statement is atomic by
 *   itself, so nothing stays when any part fails;
 * - the conversation before the new message (the turn's history, model-input.ts), the project's
 *   tool servers (integrations/service.ts) and the agent's skills (system-prompt.ts), as JSON.
 *
 * All parts read one snapshot, taken before the turn's insert. When a running turn was in it and
 * the insert still succeeded, that turn ended while this statement waited for its lease, and its
 * reply is missing from the snapshot: `was_busy` tells the caller to read the history again.
 */
export const OPEN_TURN_SQL = `
with plan as (${PLAN_SELECT}
), gate as (
  select p_id is not null and p_archived_at is null and ($5::boolean or project_shared)
      and (c_agent_id is null or (a_id is not null and ($5::boolean or agent_shared)))
      and m_id is not null and m_purpose = 'chat' as usable,
    exists (select 1 from organizations o where o.id = $2 and o.credit_balance > 0) as funded,
    exists (select 1 from chat_turns t where t.chat_id = $1 and t.status = 'running') as was_busy
  from plan
), ${turnWrites({
  when: 'gate where usable and funded',
  organizationId: '$2',
  chatId: '$1',
  leaseSeconds: '$8::float8',
  content: '$6::text',
  prompt: 'null',
  model: 'plan.m_model',
  modelConfigurationId: 'plan.m_id',
  title: '$7::text',
  modelFrom: ', plan',
})}, history as (
  select json_agg(json_build_array(h.id, h.role, h.content, h.prompt, h.attached) order by h.id) as rows
  from (
    select m.id, m.role, m.content, m.prompt,
      exists (select 1 from chat_attachments ca where ca.message_id = m.id) as attached
    from chat_messages m
    where m.chat_id = $1 and exists (select 1 from turn)
      and (m.status = 'completed' or (m.role = 'assistant' and m.status = 'cancelled' and m.error is null))
      and m.replaced_by_id is null
    order by m.id desc
    limit $9::int) h
), tools as (
  select json_agg(${integrationJson} order by i.id) as rows
  from integrations i, plan
  where exists (select 1 from turn) and ${integrationsOfProject('$2', 'plan.p_id')}
), skill_list as (
  select json_agg(json_build_array(s.name, s.slug, s.description) order by s.name) as rows
  from agent_skills k join skills s on s.id = k.skill_id, plan
  where exists (select 1 from turn) and k.agent_id = plan.a_id and s.deleted_at is null
)
select plan.*, gate.usable, gate.funded, gate.was_busy, (select id from turn) as turn_id,
  (select u from ids) as user_message_id, (select a from ids) as assistant_message_id,
  history.rows as history, tools.rows as integrations, skill_list.rows as skills
from plan, gate, history, tools, skill_list`;

/** The statement's name on PostgreSQL: parsed and planned once per connection of `Database.pipelined`. */
const STATEMENT_NAME = 'turn_open';

const parsedJson = <T>(value: unknown): T | null =>
  value === null || value === undefined
    ? null
    : ((typeof value === 'string' ? JSON.parse(value) : value) as T);

const warmed = new WeakSet<PipelinedPool>();

/**
 * Once per pool, after its first turn: the statement on every connection of the pool with a
 * chat that does not exist (it reads nothing and writes nothing), so no later turn pays a
 * connection's first execution (parsing, planning, PostgreSQL's catalog caches: 10 to 18 ms).
 */
function warmConnections(pool: PipelinedPool): void {
  if (warmed.has(pool)) return;
  warmed.add(pool);
  const values = [0, 0, 0, 0, false, '', null, 1, 0];
  // As many at once as the pool has connections: each goes to the one with the fewest in flight,
  // so (the pool being idle after its first turn) one each.
  for (let i = 0; i < pool.size; i++)
    void pool.query({ name: STATEMENT_NAME, text: OPEN_TURN_SQL, values }).catch(() => {});
}

/** Runs OPEN_TURN_SQL; null when the key has no such chat (the caller's 404). */
export async function openTurn(
  database: Database,
  principal: OrgPrincipal,
  chatId: number,
  input: OpenTurnInput,
): Promise<OpenedTurn | null> {
  const values = [
    ...planParams(principal, chatId),
    principal.role === 'admin',
    input.content,
    input.title,
    input.leaseMs / 1000,
    Math.max(0, input.historyLimit - 1),
  ];
  const { rows } = await database.pipelinedQuery<Record<string, unknown>>(
    STATEMENT_NAME,
    OPEN_TURN_SQL,
    values,
  );
  if (database.pipelined) warmConnections(database.pipelined);
  const raw = rows[0];
  if (!raw) return null;
  const plan = planRowsOf(principal, raw);
  const opened: OpenedTurn = {
    plan,
    usable: raw.usable === true,
    funded: raw.funded === true,
    started: null,
  };
  if (raw.turn_id === null || raw.turn_id === undefined) return opened;
  const ids: TurnRows = {
    turnId: Number(raw.turn_id),
    userMessageId: Number(raw.user_message_id),
    assistantMessageId: Number(raw.assistant_message_id),
  };
  let history: TurnHistory | null = null;
  if (raw.was_busy !== true) {
    const rows: HistoryMessage[] = [];
    const attached = new Set<number>();
    for (const [id, role, content, prompt, has] of parsedJson<
      [number, HistoryMessage['role'], string, string | null, boolean][]
    >(raw.history) ?? []) {
      rows.push({ id, role, content, prompt });
      if (has) attached.add(id);
    }
    if (input.historyLimit > 0)
      rows.push({ id: ids.userMessageId, role: 'user', content: input.content, prompt: null });
    history = { rows, attached };
  }
  const found = parsedJson<Record<string, unknown>[]>(raw.integrations) ?? [];
  return {
    ...opened,
    started: {
      ids,
      history,
      integrations: found.map((row) => rowOf(integrations, row)),
      skills: (parsedJson<[string, string, string][]>(raw.skills) ?? []).map(([name, slug, description]) => ({
        name,
        slug,
        description,
      })),
    },
  };
}
