import { type Static, Type } from '@sinclair/typebox';
import type { WebhookEventName } from '../../db/schema/index.js';
import { Pagination } from '../../http/pagination.js';
import { Id, Timestamp } from '../../http/schemas.js';

export const WEBHOOK_EVENTS: readonly WebhookEventName[] = [
  'artifact_generated',
  'artifact_refined',
  'artifact_generation_failed',
];

export const Webhook = Type.Object(
  {
    id: Type.Integer(),
    project_id: Type.Integer(),
    url: Type.String(),
    events: Type.Array(Type.String()),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { title: 'Webhook' },
);
export type Webhook = Static<typeof Webhook>;

export const CreatedWebhook = Type.Object(
  {
    ...Webhook.properties,
    secret: Type.String({
      description: 'Standard Webhooks signing secret (whsec_ + base64). Shown in this response only.',
    }),
  },
  { title: 'CreatedWebhook' },
);
export type CreatedWebhook = Static<typeof CreatedWebhook>;

export const CreateWebhookBody = Type.Object(
  {
    url: Type.String({
      minLength: 1,
      maxLength: 2048,
      description:
        'https URL on a public address (http and private addresses only with OUTBOUND_ALLOW_PRIVATE)',
    }),
    events: Type.Array(Type.String(), {
      minItems: 1,
      maxItems: 10,
      description: `Any of: ${WEBHOOK_EVENTS.join(', ')}`,
    }),
  },
  { title: 'CreateWebhookBody' },
);
export type CreateWebhookBody = Static<typeof CreateWebhookBody>;

export const WebhookParams = Type.Object({ id: Id(), webhook_id: Id() });

export const WebhookResponse = Type.Object({ webhook: Webhook }, { title: 'WebhookResponse' });
export const CreatedWebhookResponse = Type.Object(
  { webhook: CreatedWebhook },
  { title: 'CreatedWebhookResponse' },
);
export const WebhookListResponse = Type.Object(
  { webhooks: Type.Array(Webhook), pagination: Pagination },
  { title: 'WebhookListResponse' },
);
