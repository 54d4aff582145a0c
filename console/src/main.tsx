import './styles.css';
import type { ComponentType } from 'preact';
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { describeError } from './api';
import { discoverCapabilities } from './capabilities';
import { AgentsPage } from './pages/agents';
import { ApiKeysPage } from './pages/api-keys';
import { ArtifactPlayground } from './pages/artifact-playground';
import { ArtifactTypesPage } from './pages/artifact-types';
import { CategoriesPage } from './pages/categories';
import { ChatPlayground } from './pages/chat-playground';
import { DashboardPage } from './pages/dashboard';
import { DocumentsPage } from './pages/documents';
import { GroupsPage } from './pages/groups';
import { IntegrationsPage } from './pages/integrations';
import { ModelsPage } from './pages/models';
import { OrganizationsPage } from './pages/organizations';
import { ProjectsPage } from './pages/projects';
import { UsersPage } from './pages/users';
import { navigate, usePath } from './router';
import {
  type Capabilities,
  canRead,
  capabilities,
  currentKey,
  generation,
  notice,
  setCapabilities,
  setSignedIn,
  signOut,
  subscribe,
} from './session';
import { ErrorMessage, Loading } from './ui';

interface Route {
  path: string;
  label: string;
  component: ComponentType;
  /** Shown when this returns true for the signed-in key. */
  visible: (caps: Capabilities) => boolean;
  section: 'Overview' | 'Manage' | 'Build' | 'Knowledge' | 'Playground' | 'Service';
}

const org = (caps: Capabilities) => caps.role !== 'super_admin';
const reads = (path: string) => (caps: Capabilities) => org(caps) && canRead(path);

const ROUTES: Route[] = [
  { path: '/', label: 'Dashboard', component: DashboardPage, visible: org, section: 'Overview' },
  {
    path: '/projects',
    label: 'Projects',
    component: ProjectsPage,
    visible: reads('/api/v1/projects'),
    section: 'Manage',
  },
  {
    path: '/groups',
    label: 'Groups',
    component: GroupsPage,
    visible: reads('/api/v1/groups'),
    section: 'Manage',
  },
  {
    path: '/categories',
    label: 'Categories',
    component: CategoriesPage,
    visible: reads('/api/v1/categories'),
    section: 'Manage',
  },
  {
    path: '/users',
    label: 'Users',
    component: UsersPage,
    visible: reads('/api/v1/users'),
    section: 'Manage',
  },
  {
    path: '/api-keys',
    label: 'API keys',
    component: ApiKeysPage,
    visible: reads('/api/v1/api_keys'),
    section: 'Manage',
  },
  {
    path: '/artifact-types',
    label: 'Artifact types & skills',
    component: ArtifactTypesPage,
    visible: reads('/api/v1/artifact_types'),
    section: 'Build',
  },
  {
    path: '/agents',
    label: 'Agents',
    component: AgentsPage,
    visible: reads('/api/v1/agents'),
    section: 'Build',
  },
  {
    path: '/models',
    label: 'Model configurations',
    component: ModelsPage,
    visible: reads('/api/v1/model_configurations'),
    section: 'Build',
  },
  {
    path: '/integrations',
    label: 'Integrations',
    component: IntegrationsPage,
    visible: reads('/api/v1/integrations'),
    section: 'Build',
  },
  {
    path: '/documents',
    label: 'Documents',
    component: DocumentsPage,
    visible: reads('/api/v1/data_center/documents'),
    section: 'Knowledge',
  },
  {
    path: '/playground/chat',
    label: 'Chat',
    component: ChatPlayground,
    visible: (caps) => reads('/api/v2/chats')(caps) && canRead('/api/v1/projects'),
    section: 'Playground',
  },
  {
    path: '/playground/artifacts',
    label: 'Artifacts',
    component: ArtifactPlayground,
    visible: (caps) => reads('/api/v1/artifact_types')(caps) && canRead('/api/v1/projects'),
    section: 'Playground',
  },
  {
    path: '/organizations',
    label: 'Organizations',
    component: OrganizationsPage,
    visible: (caps) => caps.role === 'super_admin',
    section: 'Service',
  },
];

function useSession() {
  const [, setTick] = useState(0);
  useEffect(() => subscribe(() => setTick((t) => t + 1)), []);
}

function SignIn() {
  const [key, setKey] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const message = notice();
  return (
    <main id="main" class="signin">
      <form
        class="card"
        aria-labelledby="signin-title"
        onSubmit={async (e) => {
          e.preventDefault();
          const value = key.trim();
          if (!value) return;
          setBusy(true);
          setError(null);
          try {
            const caps = await discoverCapabilities(value);
            setSignedIn(value, caps);
            navigate(caps.role === 'super_admin' ? '/organizations' : '/', true);
          } catch (err) {
            setError(err);
          } finally {
            setBusy(false);
          }
        }}
      >
        <h1 id="signin-title">Scriptorium console</h1>
        <p class="muted">
          Sign in with an API key: an organization key, a personal key, or a super admin key. The key stays in
          this browser tab only and is sent to this service's API, nowhere else.
        </p>
        {message ? (
          <p class="notice" role="alert">
            {message}
          </p>
        ) : null}
        <div class="field">
          <label for="api-key">API key</label>
          <input
            id="api-key"
            type="password"
            autoComplete="off"
            spellcheck={false}
            required
            value={key}
            onInput={(e) => setKey(e.currentTarget.value)}
          />
        </div>
        <ErrorMessage error={error} />
        <button type="submit" disabled={busy}>
          {busy ? 'Checking the key…' : 'Sign in'}
        </button>
      </form>
    </main>
  );
}

/** After a reload the key is still in this tab: ask the service again what it may do. */
function Restore() {
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    const key = currentKey();
    if (!key) return;
    const gen = generation();
    discoverCapabilities(key).then(
      (caps) => {
        if (gen === generation()) setCapabilities(caps);
      },
      (err) => {
        if (gen !== generation()) return;
        if ((err as { code?: string }).code === 'invalid_api_key') signOut(describeError(err));
        else setError(err);
      },
    );
  }, []);
  return (
    <main id="main" class="signin">
      {error ? (
        <div class="card">
          <ErrorMessage error={error} />
          <button type="button" onClick={() => location.reload()}>
            Try again
          </button>{' '}
          <button type="button" class="secondary" onClick={() => signOut()}>
            Sign out
          </button>
        </div>
      ) : (
        <Loading label="Checking the key…" />
      )}
    </main>
  );
}

function roleLabel(caps: Capabilities): string {
  const kind = {
    organization: 'organization key',
    personal: 'personal key',
    super_admin: 'super admin key',
    unknown: 'key',
  }[caps.keyKind];
  return caps.role === 'super_admin'
    ? 'Super admin'
    : `${caps.role === 'admin' ? 'Admin' : 'Member'} · ${kind}`;
}

function Shell({ caps }: { caps: Capabilities }) {
  const path = usePath();
  const [menuOpen, setMenuOpen] = useState(false);
  const visible = ROUTES.filter((r) => r.visible(caps));
  const route = visible.find((r) => r.path === path);
  const fallback = visible[0];

  useEffect(() => {
    setMenuOpen(false);
    // Keyboard and screen reader users land on the new page's heading.
    requestAnimationFrame(() => document.getElementById('page-title')?.focus({ preventScroll: false }));
  }, [path]);

  const sections = [...new Set(visible.map((r) => r.section))];
  const Page = route?.component;
  return (
    <div class="shell">
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="topbar">
        <button
          type="button"
          class="menu-toggle secondary"
          aria-expanded={menuOpen}
          aria-controls="nav"
          onClick={() => setMenuOpen(!menuOpen)}
        >
          Menu
        </button>
        <span class="brand">Scriptorium</span>
        <span class="who" data-testid="who">
          {roleLabel(caps)}
        </span>
        <button type="button" class="secondary" onClick={() => signOut()}>
          Sign out
        </button>
      </header>
      <nav id="nav" class={menuOpen ? 'nav open' : 'nav'} aria-label="Console">
        {sections.map((section) => (
          <div key={section} class="nav-section">
            <h2>{section}</h2>
            <ul>
              {visible
                .filter((r) => r.section === section)
                .map((r) => (
                  <li key={r.path}>
                    <a
                      href={`/console${r.path === '/' ? '/' : r.path}`}
                      aria-current={r.path === path ? 'page' : undefined}
                      onClick={(e) => {
                        if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey) return;
                        e.preventDefault();
                        navigate(r.path);
                      }}
                    >
                      {r.label}
                    </a>
                  </li>
                ))}
            </ul>
          </div>
        ))}
      </nav>
      <main id="main" class="content">
        {Page ? (
          <Page />
        ) : (
          <section>
            <h1 id="page-title" tabIndex={-1}>
              Not available
            </h1>
            <p>This page does not exist or this key may not see it.</p>
            {fallback ? (
              <button type="button" onClick={() => navigate(fallback.path)}>
                Go to {fallback.label}
              </button>
            ) : null}
          </section>
        )}
      </main>
    </div>
  );
}

function App() {
  useSession();
  if (!currentKey()) return <SignIn key={generation()} />;
  const caps = capabilities();
  if (!caps) return <Restore key={generation()} />;
  // Rebuilt from nothing on every sign-in: no component keeps the previous key's data.
  return <Shell key={generation()} caps={caps} />;
}

render(<App />, document.getElementById('app')!);
