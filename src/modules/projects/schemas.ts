import { type Static, Type } from '@sinclair/typebox';
import { PageQuery, Pagination } from '../../http/pagination.js';
import { Defaulted, Id, NameText, Nullable, Timestamp } from '../../http/schemas.js';

export const Project = Type.Object(
  {
    id: Type.Integer(),
    name: Type.String(),
    overview: Type.String(),
    group_ids: Type.Array(Type.Integer()),
    category_ids: Type.Array(Type.Integer()),
    archived: Type.Boolean({
      description: 'Archived projects are readable but take no new generations or chats',
    }),
    archived_at: Nullable(Timestamp),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { title: 'Project' },
);
export type Project = Static<typeof Project>;

const Name = NameText(200);
const Overview = Type.String({ maxLength: 20000 });
const GroupIds = (description: string) => Type.Array(Id(), { minItems: 1, description });
const UseDefaultGroup = Type.Boolean({ description: 'Assign the organization default group' });
const CategoryIds = (description: string) => Type.Array(Id(), { description });

export const CreateProjectBody = Type.Object(
  {
    name: Name,
    overview: Type.Optional(Overview),
    group_ids: Type.Optional(GroupIds('At least one group of the organization')),
    use_default_group: Type.Optional(UseDefaultGroup),
    category_ids: Type.Optional(CategoryIds('Categories of the organization')),
  },
  { title: 'CreateProjectBody' },
);
export type CreateProjectBody = Static<typeof CreateProjectBody>;

export const UpdateProjectBody = Type.Object(
  {
    name: Type.Optional(Name),
    overview: Type.Optional(Overview),
    group_ids: Type.Optional(GroupIds('Replaces the project groups')),
    use_default_group: Type.Optional(UseDefaultGroup),
    category_ids: Type.Optional(CategoryIds('Replaces the project categories')),
  },
  { title: 'UpdateProjectBody' },
);
export type UpdateProjectBody = Static<typeof UpdateProjectBody>;

export const ProjectListQuery = Type.Object({
  ...PageQuery.properties,
  include_archived: Defaulted(Type.Boolean({ default: false, description: 'Also list archived projects' })),
});
export type ProjectListQuery = Static<typeof ProjectListQuery>;

export const ProjectResponse = Type.Object({ project: Project }, { title: 'ProjectResponse' });
export const ProjectListResponse = Type.Object(
  { projects: Type.Array(Project), pagination: Pagination },
  { title: 'ProjectListResponse' },
);
