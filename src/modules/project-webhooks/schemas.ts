import { type Static, Type } from '@sinclair/typebox';
import type { WebhookEventName } from '../../db/schema/index.js';
import { Pagination } from '../../http/pagination.js';
import { Id, Nullable, Timestamp } from '../../http/schemas.js';

/** What a project webhook may select: the events of one project. */
export const WEBHOOK_EVENTS: readonly WebhookEventName[] = [
  'artifact_generated',
  'artifact_refined',
  'artifact_generation_failed',
  'chat_turn_completed',
  'chat_turn_failed',
  'chat_approval_required',
];

/** What an organization webhook may select: every event, the organization's own (documents) too. */
export const ORGANIZATION_WEBHOOK_EVENTS: readonly WebhookEventName[] = [
  ...WEBHOOK_EVENTS,
  'document_processed',
  'document_failed',
];

export const Webhook = Type.Object(
  {
    id: Type.Integer(),
    project_id: Nullable(Type.Integer({ description: 'null for an organization webhook (every project)' })),
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
      description: `Project webhooks: any of ${WEBHOOK_EVENTS.join(', ')}. Organization webhooks: any of ${ORGANIZATION_WEBHOOK_EVENTS.join(', ')}`,
    }),
  },
  { title: 'CreateWebhookBody' },
);
export type CreateWebhookBody = Static<typeof CreateWebhookBody>;

export const OrganizationWebhookParams = Type.Object({ id: Id() });

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
