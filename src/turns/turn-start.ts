import { sql } from 'drizzle-orm';
import type { Database, Queryable } from '../db/client.js';
import { acquireTurnLease } from './lease.js';

export interface TurnRowsInput {
  organizationId: number;
  /** The chat's project, for `chat_turn_failed` events of turns retired on the way (lease.ts). */
  projectId: number;
  chatId: number;
  leaseMs: number;
  content: string;
  /** What the model sees instead of `content` (a slash command's skill prompt). */
  prompt: string | null;
  model: string;
  modelConfigurationId: number;
  /** The chat's title when it has none yet. */
  title: string | null;
}

export interface TurnRows {
  turnId: number;
  userMessageId: number;
  assistantMessageId: number;
}

/**
 * A turn's rows, inside the caller's transaction: the user message, the assistant message in
 * `generating` state, the running turn pointing at both (the chat's lease) and the chat's
 * `updated_at`/title, in one statement (one round trip; issue 14). When the chat's lease is taken,
 * by a live turn or one whose process died, the turn is not inserted and the lease is taken the
 * long way (lease.ts: a dead turn is retired first; a live one is a 409, which rolls the messages
 * back with the transaction).
 */
export async function insertTurnRows(tx: Queryable, input: TurnRowsInput): Promise<TurnRows> {
  const result = await tx.execute(sql`
    with msgs as (
      insert into chat_messages
        (organization_id, chat_id, role, content, prompt, status, completed_at, model, model_configuration_id)
      values
        (${input.organizationId}, ${input.chatId}, 'user', ${input.content}, ${input.prompt}, 'completed', now(), null, null),
        (${input.organizationId}, ${input.chatId}, 'assistant', '', null, 'generating', null, ${input.model}, ${input.modelConfigurationId})
      returning id, role
    ), turn as (
      insert into chat_turns (organization_id, chat_id, status, user_message_id, assistant_message_id, lease_expires_at)
      select ${input.organizationId}, ${input.chatId}, 'running',
        (select id from msgs where role = 'user'), (select id from msgs where role = 'assistant'),
        now() + make_interval(secs => ${input.leaseMs / 1000})
      on conflict do nothing
      returning id
    ), touched as (
      update chats set updated_at = now(), title = coalesce(title, ${input.title}::text)
      where id = ${input.chatId}
    )
    select (select id from msgs where role = 'user') as user_message_id,
           (select id from msgs where role = 'assistant') as assistant_message_id,
           (select id from turn) as turn_id`);
  const rows = ((result as { rows?: unknown[] }).rows ?? (result as unknown as unknown[])) as {
    user_message_id: number | string;
    assistant_message_id: number | string;
    turn_id: number | string | null;
  }[];
  const row = rows[0]!;
  const userMessageId = Number(row.user_message_id);
  const assistantMessageId = Number(row.assistant_message_id);
  if (row.turn_id !== null) return { turnId: Number(row.turn_id), userMessageId, assistantMessageId };
  const turnId = await acquireTurnLease(tx, {
    organizationId: input.organizationId,
    projectId: input.projectId,
    chatId: input.chatId,
    leaseMs: input.leaseMs,
    userMessageId,
    assistantMessageId,
  });
  return { turnId, userMessageId, assistantMessageId };
}

/**
 * The common turn start (no attachments, no regeneration, no queued message to mark) as one
 * statement outside any transaction, so one round trip where a transaction takes four (issue 14):
 * the credits check (DESIGN.md 4: only while the balance is above zero), both messages, the running
 * turn (the chat's lease) and the chat's `updated_at`/title. A statement is atomic by itself: when
 * the chat's lease is taken, by a live turn or a dead one, the turn's insert violates the
 * one-running-turn index and nothing of the statement stays; `busy` then sends the caller the long
 * way (insertTurnRows in a transaction: a dead turn is retired, a live one is a 409).
 */
export async function startTurnAtOnce(
  database: Database,
  input: TurnRowsInput,
): Promise<TurnRows | 'unfunded' | 'busy'> {
  let rows: {
    funded: boolean;
    user_message_id: number | null;
    assistant_message_id: number | null;
    turn_id: number | null;
  }[];
  try {
    ({ rows } = await database.query(START_TURN_SQL, [
      input.organizationId,
      input.chatId,
      input.content,
      input.prompt,
      input.model,
      input.modelConfigurationId,
      input.leaseMs / 1000,
      input.title,
    ]));
  } catch (err) {
    if (isLeaseTaken(err)) return 'busy';
    throw err;
  }
  const row = rows[0]!;
  if (!row.funded) return 'unfunded';
  return {
    turnId: Number(row.turn_id),
    userMessageId: Number(row.user_message_id),
    assistantMessageId: Number(row.assistant_message_id),
  };
}

/** The chat already has a `running` turn (the partial unique index of `chat_turns`). */
const isLeaseTaken = (err: unknown) =>
  (err as { code?: string }).code === '23505' &&
  (err as { constraint?: string }).constraint === 'chat_turns_one_running_per_chat';

const START_TURN_SQL = `
with funded as (
  select exists (select 1 from organizations where id = $1 and credit_balance > 0) as ok
), msgs as (
  insert into chat_messages
    (organization_id, chat_id, role, content, prompt, status, completed_at, model, model_configuration_id)
  select v.* from (values
    ($1::int, $2::int, 'user', $3::text, $4::text, 'completed', now(), null::text, null::int),
    ($1::int, $2::int, 'assistant', '', null, 'generating', null, $5::text, $6::int)
  ) as v where (select ok from funded)
  returning id, role
), turn as (
  insert into chat_turns (organization_id, chat_id, status, user_message_id, assistant_message_id, lease_expires_at)
  select $1, $2, 'running', u.id, a.id, now() + make_interval(secs => $7::float8)
  from msgs u join msgs a on u.role = 'user' and a.role = 'assistant'
  returning id
), touched as (
  update chats set updated_at = now(), title = coalesce(title, $8::text)
  where id = $2 and (select ok from funded)
)
select (select ok from funded) as funded,
       (select id from msgs where role = 'user') as user_message_id,
       (select id from msgs where role = 'assistant') as assistant_message_id,
       (select id from turn) as turn_id`;
