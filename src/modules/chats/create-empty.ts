import type { ServiceContext } from '../../core/context.js';
import { preparedRow } from './prepared.js';
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
const CREATE_EMPTY_CHAT = `with p as (
  select pr.id from projects pr
  where pr.id = $1 and pr.organization_id = $2 and pr.deleted_at is null and pr.archived_at is null
    and ($5::boolean or exists (
      select 1 from project_groups pg join group_members gm on gm.group_id = pg.group_id
      where pg.project_id = pr.id and gm.user_id = $6))
), m as (
  select mc.id from model_configurations mc
  where mc.id = coalesce($7::int, (select o.default_model_configuration_id from organizations o where o.id = $2))
    and mc.organization_id = $2 and mc.deleted_at is null and mc.purpose = 'chat'
)
insert into chats (organization_id, api_key_id, user_id, project_id, model_configuration_id)
select $2, $3, $4, p.id, m.id from p, m
returning id, project_id, model_configuration_id,
  to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as created_at`;

interface CreatedRow {
  id: number;
  project_id: number;
  model_configuration_id: number;
  created_at: string;
}

const CREATE_STATEMENT = {
  name: 'create_empty_chat',
  types: ['int', 'int', 'int', 'int', 'boolean', 'int', 'int'],
  text: CREATE_EMPTY_CHAT,
};

/** A chat without a first message and without an agent (`createChat` otherwise). */
export async function createEmptyChat(ctx: ServiceContext, body: CreateChatBody): Promise<ChatView> {
  const { principal } = ctx;
  const row = await preparedRow<CreatedRow>(ctx.database, CREATE_STATEMENT, [
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
