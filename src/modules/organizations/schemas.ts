import { type Static, Type } from '@sinclair/typebox';
import { Pagination } from '../../http/pagination.js';
import { Nullable, Timestamp } from '../../http/schemas.js';
import { User } from '../users/schemas.js';

export const Organization = Type.Object(
  {
    id: Type.Integer(),
    name: Type.String(),
    active: Type.Boolean(),
    credit_balance: Type.Number(),
    default_model_configuration_id: Nullable(Type.Integer()),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { title: 'Organization' },
);
export type Organization = Static<typeof Organization>;

export const OrganizationName = Type.String({ minLength: 1, maxLength: 200 });

export const CreateOrganizationBody = Type.Object(
  {
    organization: Type.Object({ name: OrganizationName }),
    user: Type.Object({
      email: Type.String({ format: 'email', maxLength: 320 }),
      name: Type.Optional(Type.String()),
    }),
  },
  { title: 'CreateOrganizationBody' },
);
export type CreateOrganizationBody = Static<typeof CreateOrganizationBody>;

// `{name}` as in spec 4.3; `{organization: {name}}` mirrors the create body.
export const UpdateOrganizationBody = Type.Object(
  {
    name: Type.Optional(OrganizationName),
    organization: Type.Optional(Type.Object({ name: Type.Optional(OrganizationName) })),
  },
  { title: 'UpdateOrganizationBody' },
);
export type UpdateOrganizationBody = Static<typeof UpdateOrganizationBody>;

export const CreditsBody = Type.Object(
  {
    amount: Type.Number({ description: 'Credits to add (negative to remove)' }),
  },
  { title: 'CreditsBody' },
);

export const OrganizationResponse = Type.Object(
  { organization: Organization },
  { title: 'OrganizationResponse' },
);
export const OrganizationListResponse = Type.Object(
  {
    organizations: Type.Array(Organization),
    pagination: Pagination,
  },
  { title: 'OrganizationListResponse' },
);
export const CreatedOrganizationResponse = Type.Object(
  {
    organization: Organization,
    user: User,
    key: Type.String({ description: 'The organization key, shown once' }),
  },
  { title: 'CreatedOrganizationResponse' },
);
