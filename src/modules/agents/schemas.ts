import { type Static, Type } from '@sinclair/typebox';
import type { AgentTool } from '../../db/schema/index.js';
import { Pagination } from '../../http/pagination.js';
import { Id, NameText, Nullable, Timestamp } from '../../http/schemas.js';

export const AGENT_TOOLS: readonly AgentTool[] = ['knowledge', 'artifacts', 'skills', 'integrations'];

const APPROVAL_NOTE =
  'Tool names (as the model calls them, e.g. `knowledge_search`, `desk__echo`) whose calls wait for POST /api/v2/chats/:id/approvals/:tool_call_id before they run; `["*"]` for every tool; `[]` (the default) for none';

export const Agent = Type.Object(
  {
    id: Type.Integer(),
    name: Type.String(),
    instructions: Type.String(),
    model_configuration_id: Nullable(
      Type.Integer({ description: 'Pinned model; null uses the chat or default model' }),
    ),
    skill_ids: Type.Array(Type.Integer()),
    group_ids: Type.Array(Type.Integer(), { description: 'Empty: every user may use the agent' }),
    tools: Type.Array(Type.String(), { description: `Enabled tool families: ${AGENT_TOOLS.join(', ')}` }),
    tools_requiring_approval: Type.Array(Type.String(), {
      description: APPROVAL_NOTE,
    }),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { title: 'Agent' },
);
export type Agent = Static<typeof Agent>;

const fields = {
  name: NameText(200),
  instructions: Type.String({ maxLength: 50_000, description: 'Shapes every turn of chats using the agent' }),
  model_configuration_id: Nullable(Id({ description: 'A chat model configuration of the organization' })),
  skill_ids: Type.Array(Id(), { description: 'Skills offered as slash commands' }),
  group_ids: Type.Array(Id(), {
    description: 'Only members of these groups may use the agent; [] for everyone',
  }),
  tools: Type.Array(Type.String(), {
    description: `Any of: ${AGENT_TOOLS.join(', ')}. Default: all of them`,
  }),
  tools_requiring_approval: Type.Array(Type.String({ minLength: 1, maxLength: 128 }), {
    maxItems: 100,
    description: APPROVAL_NOTE,
  }),
};

export const CreateAgentBody = Type.Object(
  {
    name: fields.name,
    instructions: fields.instructions,
    model_configuration_id: Type.Optional(fields.model_configuration_id),
    skill_ids: Type.Optional(fields.skill_ids),
    group_ids: Type.Optional(fields.group_ids),
    tools: Type.Optional(fields.tools),
    tools_requiring_approval: Type.Optional(fields.tools_requiring_approval),
  },
  { title: 'CreateAgentBody' },
);
export type CreateAgentBody = Static<typeof CreateAgentBody>;

export const UpdateAgentBody = Type.Partial(CreateAgentBody, { title: 'UpdateAgentBody' });
export type UpdateAgentBody = Static<typeof UpdateAgentBody>;

export const AgentResponse = Type.Object({ agent: Agent }, { title: 'AgentResponse' });
export const AgentListResponse = Type.Object(
  { agents: Type.Array(Agent), pagination: Pagination },
  { title: 'AgentListResponse' },
);
