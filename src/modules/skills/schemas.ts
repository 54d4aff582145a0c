import { type Static, Type } from '@sinclair/typebox';
import { Pagination } from '../../http/pagination.js';
import { Id, NameText, Timestamp } from '../../http/schemas.js';

export const CustomVariable = Type.Object(
  {
    name: Type.String(),
    description: Type.String(),
    type: Type.String(),
  },
  { title: 'CustomVariable' },
);

/** Spec 2 "Skill (list item)" plus the management fields. */
export const Skill = Type.Object(
  {
    id: Type.Integer(),
    name: Type.String(),
    content: Type.String({ description: 'Prompt with {custom.<variable_name>} placeholders' }),
    description: Type.String(),
    custom_variables: Type.Array(CustomVariable),
    slash_command: Type.String({
      description: '`/` + the slug of the name at creation; unique per organization',
    }),
    artifact_type_ids: Type.Array(Type.Integer()),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { title: 'Skill' },
);
export type Skill = Static<typeof Skill>;

export const CustomVariableInput = Type.Object(
  {
    name: Type.String({
      minLength: 1,
      maxLength: 100,
      pattern: '^[^{}\\s]+$',
      description: 'Used in content as {custom.<name>}',
    }),
    description: Type.Optional(Type.String({ maxLength: 1000 })),
    type: Type.Optional(Type.String({ minLength: 1, maxLength: 50, description: 'Default "text"' })),
  },
  { title: 'CustomVariableInput' },
);
export type CustomVariableInput = Static<typeof CustomVariableInput>;

const Name = NameText(200);
const Content = Type.String({ minLength: 1, maxLength: 100_000 });
const Description = Type.String({ maxLength: 2000 });
const CustomVariables = Type.Array(CustomVariableInput, { maxItems: 100 });
const ArtifactTypeIds = (description: string) => Type.Array(Id(), { minItems: 1, description });

export const CreateSkillBody = Type.Object(
  {
    name: Name,
    content: Content,
    description: Type.Optional(Description),
    custom_variables: Type.Optional(CustomVariables),
    artifact_type_ids: ArtifactTypeIds('The artifact types this skill writes (at least one)'),
  },
  { title: 'CreateSkillBody' },
);
export type CreateSkillBody = Static<typeof CreateSkillBody>;

export const UpdateSkillBody = Type.Object(
  {
    name: Type.Optional(Name),
    content: Type.Optional(Content),
    description: Type.Optional(Description),
    custom_variables: Type.Optional(CustomVariables),
    artifact_type_ids: Type.Optional(ArtifactTypeIds('Replaces the artifact types (at least one)')),
  },
  { title: 'UpdateSkillBody' },
);
export type UpdateSkillBody = Static<typeof UpdateSkillBody>;

export const ArtifactTypeSlugParams = Type.Object({
  artifact_type_slug: Type.String({ minLength: 1, maxLength: 200 }),
});

export const SkillResponse = Type.Object({ skill: Skill }, { title: 'SkillResponse' });
export const SkillListResponse = Type.Object(
  { skills: Type.Array(Skill), pagination: Pagination },
  { title: 'SkillListResponse' },
);
