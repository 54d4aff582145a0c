/**
 * A real service process for the browser tests: a fresh PGlite directory, bootstrapped through the
 * CLI (the operator contract), then `src/main.ts` on a free port with the fake model server as the
 * organization's default model. (test/helpers/server-process.ts does the same for vitest, but it
 * imports vitest, which cannot load inside Playwright.)
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const run = promisify(execFile);

export interface Keys {
  organization_id: number;
  user_id: number;
  default_group_id: number;
  project_id: number;
  model_configuration_id: number;
  super_admin_key: string;
  organization_key: string;
  personal_key: string;
}

export interface Service {
  baseUrl: string;
  keys: Keys;
  output: string[];
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export async function startService(modelBaseUrl: string): Promise<Service> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'scriptorium-e2e-'));
  const port = await freePort();
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    DATA_DIR: dataDir,
    PORT: String(port),
    HOST: '127.0.0.1',
    SECRET_KEY: 'e2e-secret-key-0123456789abcdef0123',
    OUTBOUND_ALLOW_PRIVATE: 'true',
    WEBHOOK_RETRY_BASE_MS: '200',
    RATE_LIMIT_PER_MINUTE: '100000',
    LLM_PROVIDER: 'openai-compatible',
    LLM_BASE_URL: modelBaseUrl,
    LLM_MODEL: 'fake-model',
    LOG_LEVEL: 'warn',
  };
  const { stdout } = await run(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'bootstrap', '--json'], {
    cwd: ROOT,
    env,
    timeout: 120_000,
  });
  const keys = JSON.parse(stdout.trim()) as Keys;

  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  const keep = (chunk: Buffer) => {
    output.push(...chunk.toString('utf8').split('\n').filter(Boolean));
    if (output.length > 2000) output.splice(0, output.length - 2000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const kill = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  process.once('exit', kill);

  const baseUrl = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`The service exited while starting:\n${output.join('\n')}`);
    const ready = await fetch(`${baseUrl}/ready`, { signal: AbortSignal.timeout(2000) }).catch(() => null);
    if (ready?.status === 200) break;
    if (Date.now() > deadline) {
      kill();
      throw new Error(`The service was not ready within 120 s:\n${output.join('\n')}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }

  return {
    baseUrl,
    keys,
    output,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(kill, 15_000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
