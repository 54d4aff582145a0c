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
 * turn (the chat's lease) and the chat's `updated_at`/title. The lease is taken first, with `on
 * conflict do nothing` on the one-running-turn index (message ids drawn beforehand), and the
 * messages and the chat are written only once it is taken: when a turn holds the chat's lease, live
 * or dead, the statement writes nothing (and PostgreSQL logs no error, which a violated index did),
 * and `busy` sends the caller the long way (insertTurnRows in a transaction: a dead turn is retired,
 * a live one is a 409). A statement is atomic by itself: nothing stays if any part fails.
 */
export async function startTurnAtOnce(
  database: Database,
  input: TurnRowsInput,
): Promise<TurnRows | 'unfunded' | 'busy'> {
  const { rows } = await database.query<{
    funded: boolean;
    user_message_id: number | null;
    assistant_message_id: number | null;
    turn_id: number | null;
  }>(START_TURN_SQL, [
    input.organizationId,
    input.chatId,
    input.content,
    input.prompt,
    input.model,
    input.modelConfigurationId,
    input.leaseMs / 1000,
    input.title,
  ]);
  const row = rows[0]!;
  if (!row.funded) return 'unfunded';
  if (row.turn_id === null) return 'busy';
  return {
    turnId: Number(row.turn_id),
    userMessageId: Number(row.user_message_id),
    assistantMessageId: Number(row.assistant_message_id),
  };
}

/** SQL expressions (parameters, columns of earlier CTEs) for the parts of TURN_WRITES. */
export interface TurnWriteValues {
  /** A FROM list and condition giving one row when the turn may start (e.g. `gate where usable`). */
  when: string;
  organizationId: string;
  chatId: string;
  leaseSeconds: string;
  content: string;
  prompt: string;
  model: string;
  modelConfigurationId: string;
  title: string;
  /** CTEs the assistant message's `model` and `modelConfigurationId` read, if any (`, plan`). */
  modelFrom?: string;
}

/**
 * A turn's writes as CTEs after those deciding whether it starts, shared by the one-statement
 * starts (turn-open.ts, startTurnAtOnce): `ids` draws both message ids (the user's first) only when
 * `when` gives a row; `turn` takes the chat's lease with `on conflict do nothing` on the
 * one-running-turn index; only once it is taken, `msgs` writes both messages with those ids and
 * `touched` the chat's `updated_at` and title. A taken lease writes nothing and logs no error.
 */
export function turnWrites(v: TurnWriteValues): string {
  return `ids as (
  select least(x, y) as u, greatest(x, y) as a
  from (select nextval('chat_messages_id_seq') as x, nextval('chat_messages_id_seq') as y
        from ${v.when}) s
), turn as (
  insert into chat_turns (organization_id, chat_id, status, user_message_id, assistant_message_id, lease_expires_at)
  select ${v.organizationId}, ${v.chatId}, 'running', u, a, now() + make_interval(secs => ${v.leaseSeconds}) from ids
  on conflict do nothing
  returning id
), msgs as (
  insert into chat_messages
    (id, organization_id, chat_id, role, content, prompt, status, completed_at, model, model_configuration_id)
  overriding system value
  select ids.u, ${v.organizationId}, ${v.chatId}, 'user', ${v.content}, ${v.prompt}, 'completed', now(), null, null
  from ids where exists (select 1 from turn)
  union all
  select ids.a, ${v.organizationId}, ${v.chatId}, 'assistant', '', null, 'generating', null, ${v.model}, ${v.modelConfigurationId}
  from ids${v.modelFrom ?? ''} where exists (select 1 from turn)
), touched as (
  update chats set updated_at = now(), title = coalesce(title, ${v.title})
  where id = ${v.chatId} and exists (select 1 from turn)
)`;
}

const START_TURN_SQL = `
with funded as (
  select exists (select 1 from organizations where id = $1 and credit_balance > 0) as ok
), ${turnWrites({
  when: 'funded where ok',
  organizationId: '$1',
  chatId: '$2',
  leaseSeconds: '$7::float8',
  content: '$3::text',
  prompt: '$4::text',
  model: '$5::text',
  modelConfigurationId: '$6::int',
  title: '$8::text',
})}
select (select ok from funded) as funded,
       (select u from ids) as user_message_id,
       (select a from ids) as assistant_message_id,
       (select id from turn) as turn_id`;
