import { type Static, Type } from '@sinclair/typebox';
import { Pagination } from '../../http/pagination.js';
import { Nullable, OneOf, Timestamp } from '../../http/schemas.js';

export const ApiKey = Type.Object(
  {
    id: Type.Integer(),
    kind: Type.Union([Type.Literal('organization'), Type.Literal('personal'), Type.Literal('super_admin')]),
    name: Type.String(),
    prefix: Type.String({ description: 'The first characters of the key, to recognise it' }),
    user_id: Nullable(Type.Integer()),
    created_at: Timestamp,
    last_used_at: Nullable(Timestamp),
    revoked_at: Nullable(Timestamp),
  },
  { title: 'ApiKey' },
);
export type ApiKey = Static<typeof ApiKey>;

export const CreateApiKeyBody = Type.Object(
  {
    kind: OneOf(['organization', 'personal'] as const),
    user_id: Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 2147483647 }))),
    name: Type.Optional(Type.String({ maxLength: 200 })),
  },
  { title: 'CreateApiKeyBody' },
);
export type CreateApiKeyBody = Static<typeof CreateApiKeyBody>;

export const CreatedApiKeyResponse = Type.Object(
  {
    api_key: ApiKey,
    key: Type.String({ description: 'The secret, shown only in this response' }),
  },
  { title: 'CreatedApiKeyResponse' },
);
export const ApiKeyListResponse = Type.Object(
  { api_keys: Type.Array(ApiKey), pagination: Pagination },
  { title: 'ApiKeyListResponse' },
);
