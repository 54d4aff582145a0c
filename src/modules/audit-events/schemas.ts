import { type Static, Type } from '@sinclair/typebox';
import { AUDIT_RESOURCE_TYPES } from '../../audit/record.js';
import { PageQuery, Pagination } from '../../http/pagination.js';
import { Id, Nullable, Timestamp } from '../../http/schemas.js';

const ResourceType = Type.Union(
  AUDIT_RESOURCE_TYPES.map((t) => Type.Literal(t)),
  { description: 'The kind of resource changed' },
);

export const AuditEvent = Type.Object({
  id: Type.Integer(),
  organization_id: Type.Integer(),
  occurred_at: Timestamp,
  actor: Type.Object({
    api_key_id: Type.Integer(),
    kind: Type.Union([Type.Literal('organization'), Type.Literal('personal'), Type.Literal('super_admin')]),
    user_id: Nullable(Type.Integer()),
  }),
  action: Type.String({ description: '`<resource type>.<verb>`, e.g. `project.updated`' }),
  resource: Type.Object({ type: ResourceType, id: Type.Integer() }),
  changed_fields: Type.Array(Type.String(), {
    description: 'Names of the fields the write set (never their values)',
  }),
  request_id: Nullable(Type.String({ description: 'The x-request-id of the request that made the change' })),
});
export type AuditEvent = Static<typeof AuditEvent>;

const filters = {
  from: Type.Optional(Type.String({ format: 'date-time', description: 'Inclusive start (occurred_at)' })),
  to: Type.Optional(Type.String({ format: 'date-time', description: 'Exclusive end (occurred_at)' })),
  action: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: 'Exact action' })),
  resource_type: Type.Optional(ResourceType),
  actor_api_key_id: Type.Optional(Id({ description: 'Only changes made with this key' })),
};

export const AuditEventQuery = Type.Composite([PageQuery, Type.Object(filters)]);
export type AuditEventQuery = Static<typeof AuditEventQuery>;

export const AdminAuditEventQuery = Type.Composite([
  AuditEventQuery,
  Type.Object({ organization_id: Type.Optional(Id({ description: 'Only this organization' })) }),
]);
export type AdminAuditEventQuery = Static<typeof AdminAuditEventQuery>;

export const AuditEventListResponse = Type.Object({
  audit_events: Type.Array(AuditEvent),
  pagination: Pagination,
});
