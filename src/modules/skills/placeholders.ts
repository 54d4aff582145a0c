import type { CustomVariable } from '../../db/schema/index.js';
import type { Details } from '../../http/errors.js';
import type { CustomVariableInput } from './schemas.js';

// The same placeholder grammar the generation prompt fills in (src/modules/artifacts/prompt.ts).
const PLACEHOLDER = /\{custom\.([^{}\s]+)\}/g;

export function placeholdersOf(content: string): string[] {
  return [...new Set([...content.matchAll(PLACEHOLDER)].map((m) => m[1]))];
}

export const normaliseVariables = (input: CustomVariableInput[]): CustomVariable[] =>
  input.map((v) => ({ name: v.name, description: v.description ?? '', type: v.type ?? 'text' }));

/**
 * Rule violations between a skill's content and its variables: every placeholder needs a
 * variable (else generation could not fill it), and variable names are unique.
 */
export function variableProblems(content: string, variables: CustomVariable[]): Details {
  const details: Details = {};
  const names = variables.map((v) => v.name);
  const duplicates = [...new Set(names.filter((n, i) => names.indexOf(n) !== i))];
  if (duplicates.length > 0) {
    details.custom_variables = [`names must be unique; repeated: ${duplicates.join(', ')}`];
  }
  const missing = placeholdersOf(content).filter((p) => !names.includes(p));
  if (missing.length > 0) {
    details.content = missing.map((name) => `uses {custom.${name}} but custom_variables has no "${name}"`);
  }
  return details;
}
