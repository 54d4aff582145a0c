/**
 * Type-checked by `tsc --noEmit` in `npm run lint`, never run: the client generated from
 * /openapi.json (openapi-typescript + openapi-fetch) must accept list calls without page
 * parameters (they have defaults), and must still reject a call that misses a required one.
 */
import createClient from 'openapi-fetch';
import type { components, paths } from '../src/schema.js';

export async function listWithoutPageParameters(baseUrl: string, apiKey: string) {
  const api = createClient<paths>({ baseUrl, headers: { authorization: `Bearer ${apiKey}` } });
  const projects = await api.GET('/api/v1/projects');
  const chats = await api.GET('/api/v2/chats');
  const users = await api.GET('/api/v1/users', {});
  const usage = await api.GET('/api/v1/usage');
  const skills = await api.GET('/api/v1/artifact_types/{artifact_type_slug}/skills', {
    params: { path: { artifact_type_slug: 'memo' } },
  });
  const page: components['schemas']['Pagination'] | undefined = projects.data?.pagination;
  const firstChat: components['schemas']['Chat'] | undefined = chats.data?.response.chats[0];
  await api.POST('/api/v1/artifact_types/{artifact_type_slug}/artifacts', {
    // @ts-expect-error project_id is required to generate an artifact
    params: { path: { artifact_type_slug: 'memo' } },
    body: { skill_id: 1, inputs: [] },
  });
  return { page, firstChat, users: users.data?.users, usage: usage.data, skills: skills.data?.skills };
}
