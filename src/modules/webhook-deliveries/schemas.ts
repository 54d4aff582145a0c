import { type Static, Type } from '@sinclair/typebox';
import { Pagination } from '../../http/pagination.js';
import { Id, Nullable, Timestamp } from '../../http/schemas.js';

export const WebhookParams = Type.Object({ id: Id(), webhook_id: Id() });
export type WebhookParams = Static<typeof WebhookParams>;

export const DeliveryParams = Type.Object({ id: Id(), webhook_id: Id(), delivery_id: Id() });
export const OrganizationWebhookParams = Type.Object({ id: Id() });
export const OrganizationDeliveryParams = Type.Object({ id: Id(), delivery_id: Id() });
export type DeliveryParams = Static<typeof DeliveryParams>;

export const WebhookDelivery = Type.Object(
  {
    id: Type.Integer(),
    webhook_id: Type.Integer(),
    project_id: Nullable(
      Type.Integer({ description: "The event's project; null for an organization event" }),
    ),
    event_name: Type.String({
      description: 'artifact_generated, artifact_refined, artifact_generation_failed, or webhook_test',
    }),
    event_data: Type.Record(Type.String(), Type.Unknown()),
    message_id: Type.String({
      description: 'The webhook-id header: the same on every attempt and redelivery',
    }),
    status: Type.Union([Type.Literal('pending'), Type.Literal('delivered'), Type.Literal('failed')], {
      description: 'pending (an attempt is scheduled), delivered (a 2xx answer), failed (retries exhausted)',
    }),
    attempt_count: Type.Integer(),
    last_status_code: Nullable(
      Type.Integer({ description: 'HTTP status of the last attempt; null when none arrived' }),
    ),
    last_error: Nullable(Type.String()),
    last_attempt_at: Nullable(Timestamp),
    next_attempt_at: Nullable(Timestamp),
    delivered_at: Nullable(Timestamp),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { title: 'WebhookDelivery' },
);
export type WebhookDelivery = Static<typeof WebhookDelivery>;

export const DeliveryListResponse = Type.Object(
  {
    deliveries: Type.Array(WebhookDelivery),
    pagination: Pagination,
  },
  { title: 'DeliveryListResponse' },
);
export const DeliveryResponse = Type.Object({ delivery: WebhookDelivery }, { title: 'DeliveryResponse' });
