import type { CustomVariable } from '../../db/schema/index.js';
import { type Details, unprocessable } from '../../http/errors.js';

export interface SkillInput {
  name: string;
  value: string;
}

const PLACEHOLDER = /\{custom\.([^{}\s]+)\}/g;

/** Names of the `{custom.<name>}` placeholders in a skill's content, in order of first use. */
export function placeholdersIn(content: string): string[] {
  return [...new Set([...content.matchAll(PLACEHOLDER)].map((m) => m[1]))];
}

/**
 * The variables a request must supply: the skill's declared variables plus any placeholder its
 * content uses, so that every placeholder is replaced even if the skill forgot to declare it.
 */
export function requiredVariables(content: string, declared: CustomVariable[]): string[] {
  return [...new Set([...declared.map((v) => v.name), ...placeholdersIn(content)])];
}

/**
 * Checks `inputs` against the skill: 422 with a `details` entry `inputs.<name>` for every missing,
 * unknown or repeated variable. Returns the values by name.
 */
export function checkInputs(
  content: string,
  declared: CustomVariable[],
  inputs: SkillInput[],
): Map<string, string> {
  const required = requiredVariables(content, declared);
  const known = new Set(required);
  const values = new Map<string, string>();
  const details: Details = {};
  const add = (name: string, message: string) => {
    const field = `inputs.${name}`;
    details[field] = [...(details[field] ?? []), message];
  };
  for (const input of inputs) {
    if (!known.has(input.name)) add(input.name, 'is not a variable of this skill');
    else if (values.has(input.name)) add(input.name, 'is given more than once');
    else values.set(input.name, input.value);
  }
  for (const name of required) if (!values.has(name)) add(name, 'is required');
  if (Object.keys(details).length > 0) {
    const names = Object.keys(details)
      .map((f) => f.slice('inputs.'.length))
      .join(', ');
    throw unprocessable(`The inputs do not match the skill's variables: ${names}`, details);
  }
  return values;
}

/** Replaces every placeholder in one pass, so a value containing `{custom.x}` is left as written. */
export function fillPlaceholders(content: string, values: Map<string, string>): string {
  return content.replace(PLACEHOLDER, (whole, name: string) => values.get(name) ?? whole);
}

export interface GenerationContext {
  artifactType: { name: string; description: string };
  project: { name: string; overview: string };
  toolNotes: string[];
}

/** The system prompt of a generation or refinement: what to write, for which project, in what form. */
export function systemPrompt(context: GenerationContext): string {
  const { artifactType, project } = context;
  const lines = [
    `You write artifacts: complete, self-contained documents of the type "${artifactType.name}".`,
  ];
  if (artifactType.description.trim()) lines.push(`About this type: ${artifactType.description.trim()}`);
  lines.push(`The artifact is for the project "${project.name}".`);
  if (project.overview.trim()) lines.push(`Project overview:\n${project.overview.trim()}`);
  lines.push(
    'Answer with the whole document in Markdown and nothing else: no preamble, no closing remarks.',
    'Begin with a level-1 heading (`# ...`) that is the title of the document.',
  );
  if (context.toolNotes.length > 0) lines.push(...context.toolNotes);
  return lines.join('\n\n');
}

/** The user message of a refinement: the instruction, plus the current text if a person changed it. */
export function refineInstruction(refinePrompt: string, currentContent: string, modelLastSaw: string | null) {
  const parts = [
    'Revise the document according to this instruction, and answer with the complete revised document in Markdown (nothing else):',
    refinePrompt,
  ];
  if (modelLastSaw !== currentContent) {
    parts.push(
      `The document was changed since you last wrote it. Its current version is:\n\n${currentContent}`,
    );
  }
  return parts.join('\n\n');
}

const MAX_NAME = 200;

/**
 * A name for an artifact the request did not name: its first heading, else its first line, in
 * plain text. The system prompt asks every model for a title heading; the fallback covers models
 * (and the built-in offline one) that answer otherwise.
 */
export function nameFromContent(content: string, fallback: string): string {
  const lines = content.split(/\r?\n/).map((l) => l.trim());
  const heading = lines.find((l) => /^#{1,6}\s+\S/.test(l));
  const first = heading ?? lines.find((l) => l.length > 0) ?? '';
  const plain = first
    .replace(/^#{1,6}\s+/, '')
    .replace(/^[-*+>]\s+/, '')
    .replace(/[*_`~]+/g, '')
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/\s+#+\s*$/, '')
    .trim();
  const name = plain || fallback;
  if (name.length <= MAX_NAME) return name;
  const cut = name.slice(0, MAX_NAME - 1);
  const space = cut.lastIndexOf(' ');
  return `${(space > MAX_NAME / 2 ? cut.slice(0, space) : cut).trimEnd()}…`;
}
