import { type Static, Type } from '@sinclair/typebox';
import { Pagination } from '../../http/pagination.js';
import { OneOf, Timestamp } from '../../http/schemas.js';

const ROLES = ['admin', 'member'] as const;
export const Role = Type.Union(
  ROLES.map((role) => Type.Literal(role)),
  { title: 'Role' },
);

export const User = Type.Object(
  {
    id: Type.Integer(),
    email: Type.String(),
    name: Type.String(),
    role: Role,
    group_ids: Type.Array(Type.Integer()),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { title: 'User' },
);
export type User = Static<typeof User>;

const Email = Type.String({ format: 'email', maxLength: 320 });

export const CreateUserBody = Type.Object(
  {
    email: Email,
    name: Type.Optional(Type.String({ maxLength: 200 })),
    role: Type.Optional(OneOf(ROLES)),
  },
  { title: 'CreateUserBody' },
);
export type CreateUserBody = Static<typeof CreateUserBody>;

export const UpdateUserBody = Type.Partial(CreateUserBody, { title: 'UpdateUserBody' });
export type UpdateUserBody = Static<typeof UpdateUserBody>;

export const UserResponse = Type.Object({ user: User }, { title: 'UserResponse' });
export const UserListResponse = Type.Object(
  { users: Type.Array(User), pagination: Pagination },
  { title: 'UserListResponse' },
);
