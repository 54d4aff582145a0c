import { type Static, Type } from '@sinclair/typebox';
import { Pagination } from '../../http/pagination.js';
import { Id, NameText, Timestamp } from '../../http/schemas.js';

export const Category = Type.Object(
  {
    id: Type.Integer(),
    name: Type.String(),
    description: Type.String(),
    group_ids: Type.Array(Type.Integer(), { description: 'Never empty' }),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { title: 'Category' },
);
export type Category = Static<typeof Category>;

const Name = NameText(200);
const Description = Type.String({ maxLength: 2000 });
const GroupIds = (description: string) => Type.Array(Id(), { minItems: 1, description });
const UseDefaultGroup = Type.Boolean({ description: 'Assign the organization default group' });

export const CreateCategoryBody = Type.Object(
  {
    name: Name,
    description: Type.Optional(Description),
    group_ids: Type.Optional(GroupIds('At least one group, unless use_default_group is true')),
    use_default_group: Type.Optional(UseDefaultGroup),
  },
  { title: 'CreateCategoryBody' },
);
export type CreateCategoryBody = Static<typeof CreateCategoryBody>;

export const UpdateCategoryBody = Type.Object(
  {
    name: Type.Optional(Name),
    description: Type.Optional(Description),
    group_ids: Type.Optional(GroupIds('Replaces the category groups; never empty')),
    use_default_group: Type.Optional(UseDefaultGroup),
  },
  { title: 'UpdateCategoryBody' },
);
export type UpdateCategoryBody = Static<typeof UpdateCategoryBody>;

export const CategoryResponse = Type.Object({ category: Category }, { title: 'CategoryResponse' });
export const CategoryListResponse = Type.Object(
  { categories: Type.Array(Category), pagination: Pagination },
  { title: 'CategoryListResponse' },
);
