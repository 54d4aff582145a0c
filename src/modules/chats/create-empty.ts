import type { ServiceContext } from '../../core/context.js';
import { batchedRow, batchInputs, forEachInput } from './prepared.js';
import { NEW_CHAT_TITLE, presentChat } from './presenter.js';
import type { ChatView, CreateChatBody } from './schemas.js';
import { createChat } from './service.js';

/*
 * POST /api/v2/chats without content and without an agent, in one statement (issue 14: it was
 * four sequential Drizzle statements, about 1.8 CPU-ms per request). The insert happens only when
 * every check of `createChat` passes, written out in SQL:
 *
 * - the project is the organization's, not deleted, not archived, and usable by the key
 *   (`findProjectFor`: admins every project, members those sharing a group with them);
 * - the model is the one asked for, else the organization's default, live and with purpose `chat`
 *   (`chooseChatModel` without fallbacks).
 *
 * When nothing is inserted, `createChat` runs the checks again one by one and throws the refusal
 * they give (404, 401, 404 project_archived, 400, 500), in their order; so every error keeps its
 * status and text, and the statement only has to be right about when all checks pass.
 */
const PROJECT = `select pr.id from projects pr
  where pr.id = $1 and pr.organization_id = $2 and pr.deleted_at is null and pr.archived_at is null
    and ($5::boolean or exists (
      select 1 from project_groups pg join group_members gm on gm.group_id = pg.group_id
      where pg.project_id = pr.id and gm.user_id = $6))`;

const MODEL = `select mc.id from model_configurations mc
  where mc.id = coalesce($7::int, (select o.default_model_configuration_id from organizations o where o.id = $2))
    and mc.organization_id = $2 and mc.deleted_at is null and mc.purpose = 'chat'`;

const CREATED_AT = `to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as created_at`;

const CREATE_EMPTY_CHAT = `with p as (${PROJECT}), m as (${MODEL})
insert into chats (organization_id, api_key_id, user_id, project_id, model_configuration_id)
select $2, $3, $4, p.id, m.id from p, m
returning id, project_id, model_configuration_id, ${CREATED_AT}`;

const TYPES = ['int', 'int', 'int', 'int', 'boolean', 'int', 'int'];

/*
 * The same for concurrent requests in one statement (prepared.ts, `batchedRow`): one commit for
 * all. Each request's id is drawn first, so its row is found again whatever was refused; each
 * chat gets its own creation time (`now()` would give the whole batch the transaction's).
 */
const CREATE_EMPTY_CHATS = `with i as (
  select i.*, nextval(pg_get_serial_sequence('chats', 'id')) as new_id, clock_timestamp() as at
  from ${batchInputs(TYPES)}
), ins as (
  insert into chats (id, organization_id, api_key_id, user_id, project_id, model_configuration_id, created_at, updated_at)
  overriding system value
  select i.new_id, i.p2, i.p3, i.p4, p.id, m.id, i.at, i.at from i
  cross join lateral (${forEachInput(PROJECT)}) p
  cross join lateral (${forEachInput(MODEL)}) m
  returning id, project_id, model_configuration_id, created_at
)
select i.n, ins.id, ins.project_id, ins.model_configuration_id, ${CREATED_AT.replace('(created_at', '(ins.created_at')}
from i join ins on ins.id = i.new_id`;

interface CreatedRow {
  id: number;
  project_id: number;
  model_configuration_id: number;
  created_at: string;
}

const CREATE_STATEMENT = {
  name: 'create_empty_chat',
  types: TYPES,
  text: CREATE_EMPTY_CHAT,
  batch: CREATE_EMPTY_CHATS,
};

/** A chat without a first message and without an agent (`createChat` otherwise). */
export async function createEmptyChat(ctx: ServiceContext, body: CreateChatBody): Promise<ChatView> {
  const { principal } = ctx;
  const row = await batchedRow<CreatedRow>(ctx.database, CREATE_STATEMENT, [
    body.project_id,
    principal.organizationId,
    principal.keyId,
    principal.kind === 'personal' ? principal.userId : null,
    principal.role === 'admin',
    principal.userId ?? 0,
    body.model_configuration_id ?? null,
  ]);
  if (!row) return presentChat((await createChat(ctx, body)).chat);
  // presentChat's view of the new row: no title yet, no agent.
  return {
    id: row.id,
    title: NEW_CHAT_TITLE,
    project_id: row.project_id,
    model_configuration_id: row.model_configuration_id,
    agent_id: null,
    created_at: row.created_at,
  };
}
