import { type Static, Type } from '@sinclair/typebox';
import { Nullable, Timestamp } from '../../http/schemas.js';

// Not `format: 'uuid'`: an id of any other form names no request, which is a 404, not a 400.
export const AsyncRequestParams = Type.Object({
  id: Type.String({
    description: 'The api_async_create_event_id (a UUID) of a fire-and-forget request',
  }),
});
export type AsyncRequestParams = Static<typeof AsyncRequestParams>;

export const AsyncRequest = Type.Object(
  {
    id: Type.String({ format: 'uuid', description: 'The api_async_create_event_id' }),
    status: Type.Union(
      [Type.Literal('accepted'), Type.Literal('generated'), Type.Literal('refined'), Type.Literal('failed')],
      { description: 'accepted until the background work ends; then generated, refined or failed' },
    ),
    artifact_id: Nullable(
      Type.Integer({ description: 'Set once generated; the refined artifact for refinements' }),
    ),
    artifact_type_slug: Type.String(),
    project_id: Type.Integer(),
    error: Nullable(Type.String({ description: 'Why it failed' })),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { title: 'AsyncRequest' },
);
export type AsyncRequest = Static<typeof AsyncRequest>;

export const AsyncRequestResponse = Type.Object(
  { async_request: AsyncRequest },
  { title: 'AsyncRequestResponse' },
);

/** The immediate answer of `fire_and_forget: true` (spec 4.2). */
export const AsyncAcceptedResponse = Type.Object(
  {
    message: Type.String(),
    api_async_create_event_id: Type.String({
      format: 'uuid',
      description:
        'Carried by the webhook that reports the result; GET /api/v1/async_requests/:id shows the status',
    }),
  },
  { title: 'AsyncAcceptedResponse' },
);
export type AsyncAcceptedResponse = Static<typeof AsyncAcceptedResponse>;
