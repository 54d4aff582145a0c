import { type Static, Type } from '@sinclair/typebox';
import { Pagination } from '../../http/pagination.js';
import { Id, NameText, Nullable, Timestamp } from '../../http/schemas.js';

export const ArtifactType = Type.Object(
  {
    id: Type.Integer(),
    slug: Type.String({ description: 'Generated from the name on creation; never changes' }),
    name: Type.String(),
    description: Type.String(),
    category_id: Nullable(Type.Integer({ description: 'Kept for backwards compatibility' })),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { title: 'ArtifactType' },
);
export type ArtifactType = Static<typeof ArtifactType>;

const Name = NameText(100, 'At most 100 characters');
const Description = Type.String({ maxLength: 2000 });
const CategoryId = Nullable(Id({ description: 'Deprecated; accepted for backwards compatibility' }));

export const CreateArtifactTypeBody = Type.Object(
  {
    name: Name,
    description: Type.Optional(Description),
    category_id: Type.Optional(CategoryId),
  },
  { title: 'CreateArtifactTypeBody' },
);
export type CreateArtifactTypeBody = Static<typeof CreateArtifactTypeBody>;

export const UpdateArtifactTypeBody = Type.Partial(CreateArtifactTypeBody, {
  title: 'UpdateArtifactTypeBody',
});
export type UpdateArtifactTypeBody = Static<typeof UpdateArtifactTypeBody>;

export const ArtifactTypeResponse = Type.Object(
  { artifact_type: ArtifactType },
  { title: 'ArtifactTypeResponse' },
);
export const ArtifactTypeListResponse = Type.Object(
  {
    artifact_types: Type.Array(ArtifactType),
    pagination: Pagination,
  },
  { title: 'ArtifactTypeListResponse' },
);
