import { type Static, Type } from '@sinclair/typebox';
import { Pagination } from '../../http/pagination.js';
import { Id, NameText, Nullable, Timestamp } from '../../http/schemas.js';

export const Integration = Type.Object(
  {
    id: Type.Integer(),
    name: Type.String(),
    slug: Type.String({ description: 'Prefix of the tool names the model sees: `<slug>__<tool>`' }),
    url: Type.String(),
    header_names: Type.Array(Type.String(), {
      description: 'Names of the stored headers; their values are write-only',
    }),
    all_projects: Type.Boolean({ description: 'True when the integration applies to every project' }),
    project_ids: Type.Array(Type.Integer(), {
      description: 'The projects it applies to, unless all_projects',
    }),
    enabled: Type.Boolean(),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { title: 'Integration' },
);
export type Integration = Static<typeof Integration>;

// Names and values are checked by the service, so a bad one is a 422 naming the header.
const Headers = Type.Record(Type.String(), Type.String(), {
  description:
    'Request headers sent to the tool server, e.g. {"Authorization": "Bearer ..."}. Write-only: stored encrypted, never returned. Replaces every stored header when given; null or {} removes them.',
});

const IntegrationFields = {
  name: NameText(100),
  url: Type.String({
    minLength: 1,
    maxLength: 2048,
    description:
      'The MCP endpoint (Streamable HTTP, or HTTP+SSE for older servers); https and public unless OUTBOUND_ALLOW_PRIVATE',
  }),
  headers: Type.Optional(Nullable(Headers)),
  project_ids: Type.Optional(
    Nullable(
      Type.Array(Id(), {
        maxItems: 1000,
        description: 'Projects it applies to; null or [] means every project',
      }),
    ),
  ),
  enabled: Type.Optional(Type.Boolean()),
};

export const CreateIntegrationBody = Type.Object(IntegrationFields, { title: 'CreateIntegrationBody' });
export type CreateIntegrationBody = Static<typeof CreateIntegrationBody>;

export const UpdateIntegrationBody = Type.Partial(Type.Object(IntegrationFields), {
  title: 'UpdateIntegrationBody',
});
export type UpdateIntegrationBody = Static<typeof UpdateIntegrationBody>;

export const IntegrationResponse = Type.Object(
  { integration: Integration },
  { title: 'IntegrationResponse' },
);
export const IntegrationListResponse = Type.Object(
  {
    integrations: Type.Array(Integration),
    pagination: Pagination,
  },
  { title: 'IntegrationListResponse' },
);

export const IntegrationTool = Type.Object(
  {
    name: Type.String({ description: "The server's name for the tool" }),
    model_name: Type.String({ description: 'The name the model sees: `<integration slug>__<name>`' }),
    description: Type.String(),
    input_schema: Type.Record(Type.String(), Type.Unknown(), { description: 'JSON Schema of the arguments' }),
  },
  { title: 'IntegrationTool' },
);
export const IntegrationToolsResponse = Type.Object(
  { tools: Type.Array(IntegrationTool) },
  { title: 'IntegrationToolsResponse' },
);
