import { useEffect, useState } from 'preact/hooks';
import { ApiError, get, StaleResponse, stream, streamErrorMessage } from '../api';
import { useRefs } from '../crud';
import { renderMarkdown } from '../markdown';
import { ErrorMessage, Field, Loading, PageHeader, States, useLoad } from '../ui';
import { placeholdersOf } from './artifact-types';

interface Variable {
  name: string;
  description: string;
  type: string;
}

interface Skill {
  id: number;
  name: string;
  content: string;
  description: string;
  custom_variables: Variable[];
}

interface Artifact {
  id: number;
  name: string;
  content: string;
  share_token: string;
}

/** The skill's declared variables, plus any placeholder its prompt uses without declaring it. */
function variablesOf(skill: Skill): Variable[] {
  const declared = skill.custom_variables;
  const extra = placeholdersOf(skill.content)
    .filter((name) => !declared.some((v) => v.name === name))
    .map((name) => ({ name, description: '', type: 'text' }));
  return [...declared, ...extra];
}

export function ArtifactPlayground() {
  const refs = useRefs({
    projects: ['/api/v1/projects', 'projects'],
    types: ['/api/v1/artifact_types', 'artifact_types'],
  });
  const [projectId, setProjectId] = useState('');
  const [typeSlug, setTypeSlug] = useState('');
  const [skillId, setSkillId] = useState('');
  const [inputs, setInputs] = useState<Record<string, string>>({});
  const [name, setName] = useState('');
  const [draft, setDraft] = useState('');
  const [streaming, setStreaming] = useState<'generate' | 'refine' | null>(null);
  const [artifact, setArtifact] = useState<{ artifact: Artifact; url?: string } | null>(null);
  const [refinePrompt, setRefinePrompt] = useState('');
  const [error, setError] = useState<unknown>(null);

  const projects: any[] = (refs.data?.projects ?? []).filter((p: any) => !p.archived);
  const types: any[] = refs.data?.types ?? [];
  useEffect(() => {
    if (!projectId && projects.length > 0) setProjectId(String(projects[0].id));
    if (!typeSlug && types.length > 0) setTypeSlug(types[0].slug);
  }, [projects.length, types.length]);

  const skills = useLoad(
    (signal) =>
      typeSlug
        ? get(`/api/v1/artifact_types/${typeSlug}/skills`, { page_size: 100 }, signal)
        : Promise.resolve({ skills: [] }),
    [typeSlug],
  );
  const skillList: Skill[] = skills.data?.skills ?? [];
  useEffect(() => {
    setSkillId(skillList[0] ? String(skillList[0].id) : '');
  }, [skills.data]);
  const skill = skillList.find((s) => String(s.id) === skillId);
  const variables = skill ? variablesOf(skill) : [];

  const run = async (kind: 'generate' | 'refine') => {
    setError(null);
    setStreaming(kind);
    setDraft('');
    let artifactId: number | null = null;
    try {
      const onEvent = (e: { event: string; data: any }) => {
        if (e.event === 'chunk') setDraft((d) => d + (e.data?.content ?? ''));
        else if (e.event === 'done') artifactId = Number(e.data?.artifact_id);
        else if (e.event === 'error')
          throw new ApiError(500, String(e.data?.error?.code ?? 'stream_error'), streamErrorMessage(e.data));
      };
      if (kind === 'generate') {
        await stream('POST', `/api/v1/artifact_types/${typeSlug}/artifacts/stream`, {
          query: { project_id: projectId },
          body: {
            skill_id: Number(skillId),
            inputs: variables.map((v) => ({ name: v.name, value: inputs[v.name] ?? '' })),
            ...(name.trim() ? { name: name.trim() } : {}),
          },
          onEvent,
        });
      } else if (artifact) {
        await stream(
          'POST',
          `/api/v1/artifact_types/${typeSlug}/artifacts/${artifact.artifact.id}/refine_stream`,
          { body: { refine_prompt: refinePrompt }, onEvent },
        );
      }
      if (artifactId === null || Number.isNaN(artifactId))
        throw new Error('The stream ended without the artifact.');
      const read = await get(`/api/v1/artifact_types/${typeSlug}/artifacts/${artifactId}`);
      setArtifact(read);
      if (kind === 'refine') setRefinePrompt('');
    } catch (err) {
      if (!(err instanceof StaleResponse)) setError(err);
    } finally {
      setStreaming(null);
    }
  };

  const shown = streaming ? draft : (artifact?.artifact.content ?? '');
  const shareUrl = artifact ? (artifact.url ?? `/share/artifacts/${artifact.artifact.share_token}`) : null;
  return (
    <section aria-labelledby="page-title" class="playground">
      <PageHeader title="Artifact playground" />
      {refs.loading && !refs.data ? <Loading /> : null}
      <div class="playground-grid">
        <form
          class="card settings"
          aria-label="Generate an artifact"
          onSubmit={(e) => {
            e.preventDefault();
            void run('generate');
          }}
        >
          <Field label="Project">
            {(id) => (
              <select id={id} value={projectId} onChange={(e) => setProjectId(e.currentTarget.value)}>
                {projects.length === 0 ? <option value="">No project</option> : null}
                {projects.map((p) => (
                  <option key={p.id} value={String(p.id)}>
                    {p.name}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <Field label="Artifact type">
            {(id) => (
              <select
                id={id}
                value={typeSlug}
                onChange={(e) => {
                  setTypeSlug(e.currentTarget.value);
                  setArtifact(null);
                }}
              >
                {types.length === 0 ? <option value="">No artifact type</option> : null}
                {types.map((t) => (
                  <option key={t.slug} value={t.slug}>
                    {t.name}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <States
            loaded={skills}
            empty="This artifact type has no skill yet."
            isEmpty={() => skillList.length === 0}
          >
            {() => (
              <Field label="Skill">
                {(id) => (
                  <select id={id} value={skillId} onChange={(e) => setSkillId(e.currentTarget.value)}>
                    {skillList.map((s) => (
                      <option key={s.id} value={String(s.id)}>
                        {s.name}
                      </option>
                    ))}
                  </select>
                )}
              </Field>
            )}
          </States>
          {skill?.description ? <p class="muted">{skill.description}</p> : null}
          {variables.length > 0 ? (
            <fieldset>
              <legend>Variables of the skill</legend>
              {variables.map((v) => (
                <Field key={v.name} label={v.name} hint={v.description || undefined}>
                  {(id) => (
                    <textarea
                      id={id}
                      rows={2}
                      value={inputs[v.name] ?? ''}
                      onInput={(e) => setInputs({ ...inputs, [v.name]: e.currentTarget.value })}
                    />
                  )}
                </Field>
              ))}
            </fieldset>
          ) : skill ? (
            <p class="muted">This skill takes no variables.</p>
          ) : null}
          <Field label="Name (optional)" hint="Otherwise the model names the artifact">
            {(id) => <input id={id} value={name} onInput={(e) => setName(e.currentTarget.value)} />}
          </Field>
          <button type="submit" disabled={Boolean(streaming) || !skill || !projectId}>
            {streaming === 'generate' ? 'Generating…' : 'Generate'}
          </button>
        </form>
        <div class="conversation">
          <ErrorMessage error={error} />
          {artifact || streaming ? (
            <article class="card artifact" aria-busy={Boolean(streaming)} data-testid="artifact">
              <header class="row spread">
                <h2>
                  {streaming
                    ? streaming === 'generate'
                      ? 'Writing…'
                      : 'Refining…'
                    : artifact?.artifact.name}
                </h2>
                {!streaming && shareUrl ? (
                  <a href={shareUrl} target="_blank" rel="noopener noreferrer">
                    Open share link
                  </a>
                ) : null}
              </header>
              {/* Sanitized by DOMPurify in renderMarkdown. */}
              <div class="markdown" dangerouslySetInnerHTML={{ __html: renderMarkdown(shown) }} />
            </article>
          ) : (
            <p class="empty">
              Pick a skill, fill in its variables and generate: the artifact streams in here.
            </p>
          )}
          {artifact && !streaming ? (
            <form
              class="card form"
              onSubmit={(e) => {
                e.preventDefault();
                void run('refine');
              }}
            >
              <Field label="Refine: what should change?">
                {(id) => (
                  <textarea
                    id={id}
                    rows={3}
                    required
                    value={refinePrompt}
                    onInput={(e) => setRefinePrompt(e.currentTarget.value)}
                  />
                )}
              </Field>
              <button type="submit" disabled={!refinePrompt.trim()}>
                Refine
              </button>
            </form>
          ) : null}
        </div>
      </div>
    </section>
  );
}
