import { type Static, Type } from '@sinclair/typebox';
import { Pagination } from '../../http/pagination.js';
import { Id, NameText, Timestamp } from '../../http/schemas.js';

export const Group = Type.Object(
  {
    id: Type.Integer(),
    name: Type.String(),
    description: Type.String(),
    is_default: Type.Boolean({ description: 'The group every new user joins; it cannot be deleted' }),
    user_ids: Type.Array(Type.Integer(), { description: 'Members of the group' }),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { title: 'Group' },
);
export type Group = Static<typeof Group>;

const Name = NameText(200);
const Description = Type.String({ maxLength: 2000 });

export const CreateGroupBody = Type.Object(
  { name: Name, description: Type.Optional(Description) },
  { title: 'CreateGroupBody' },
);
export type CreateGroupBody = Static<typeof CreateGroupBody>;

export const UpdateGroupBody = Type.Partial(CreateGroupBody, { title: 'UpdateGroupBody' });
export type UpdateGroupBody = Static<typeof UpdateGroupBody>;

export const AddMemberBody = Type.Object(
  { user_id: Id({ description: 'A user of the organization' }) },
  { title: 'AddMemberBody' },
);
export type AddMemberBody = Static<typeof AddMemberBody>;

export const MemberParams = Type.Object({ id: Id(), user_id: Id() });

export const GroupResponse = Type.Object({ group: Group }, { title: 'GroupResponse' });
export const GroupListResponse = Type.Object(
  { groups: Type.Array(Group), pagination: Pagination },
  { title: 'GroupListResponse' },
);
