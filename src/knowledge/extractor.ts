import { type ChildProcess, spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { setPriority } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { DocumentLimits } from '../config.js';
import { ExtractionError } from './blocks.js';
import type { ExtractionReply, ExtractionRequest } from './extraction-protocol.js';

/** The extractor stopped without an answer (killed, crashed): the document may be tried once more. */
export class ExtractorStopped extends Error {
  override readonly name = 'ExtractorStopped';
}

export type ExtractedDocument = Extract<ExtractionReply, { ok: true }>;

export interface ExtractorOptions {
  /** An idle extractor process exits after this long; the next document starts a new one. */
  idleMs: number;
  /** Documents one extractor process serves before it is replaced (bounds what one can leave behind). */
  maxDocuments: number;
}

export const DEFAULT_EXTRACTOR_OPTIONS: ExtractorOptions = { idleMs: 5_000, maxDocuments: 50 };

/** How often the extractor's resident memory is read (Linux: /proc; elsewhere only the heap cap holds). */
const MEMORY_POLL_MS = 200;
/** Scheduling priority of the extractor (Unix nice value; higher yields more). */
const EXTRACTOR_NICENESS = 10;
/** stderr kept to recognise a heap exhaustion and to log a crash. */
const STDERR_TAIL = 4096;

const timedOut = (limits: DocumentLimits) =>
  new ExtractionError(`Extracting the document's text took too long: more than ${limits.timeoutMs / 1000} s`);
const outOfMemory = (limits: DocumentLimits) =>
  new ExtractionError(
    `Extracting the document's text needs too much memory: more than ${limits.memoryMb} MB`,
  );

interface Worker {
  child: ChildProcess;
  memoryMb: number;
  served: number;
  stderr: string;
}

/**
 * Extracts and chunks documents in a child process with a capped heap, a wall-time limit and a
 * resident-memory watch, so no document can block or exhaust the server. A bound exceeded is an
 * `ExtractionError` (final); a child that stops without answering is `ExtractorStopped`. One
 * document at a time; the child is kept for the next document while it is healthy and busy, and
 * replaced after any kill, crash or timeout.
 */
export class DocumentExtractor {
  private worker: Worker | null = null;
  private queue: Promise<unknown> = Promise.resolve();
  private idleTimer: NodeJS.Timeout | null = null;

  constructor(private readonly options: ExtractorOptions = DEFAULT_EXTRACTOR_OPTIONS) {}

  /** The running extractor process, if any (diagnostics and tests). */
  get pid(): number | null {
    return this.worker?.child.pid ?? null;
  }

  extract(bytes: Uint8Array, mediaType: string, limits: DocumentLimits): Promise<ExtractedDocument> {
    const run = this.queue.then(() => this.run({ bytes, mediaType, limits }));
    this.queue = run.catch(() => {});
    return run;
  }

  /** Stops the extractor process (a later `extract` starts a new one). */
  close(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    if (this.worker) stop(this.worker.child);
    this.worker = null;
  }

  private async run(request: ExtractionRequest): Promise<ExtractedDocument> {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    const { limits } = request;
    if (this.worker && (!alive(this.worker.child) || this.worker.memoryMb !== limits.memoryMb)) this.close();
    const worker = this.worker ?? start(limits.memoryMb);
    this.worker = worker;
    setRef(worker.child, true);
    let healthy = false;
    try {
      const reply = await exchange(worker, request);
      // The child answered: it is still in a known state, whatever the answer was.
      healthy = true;
      if (!reply.ok) throw new ExtractionError(reply.message, reply.ocrError);
      return reply;
    } finally {
      worker.served++;
      if (!healthy || worker.served >= this.options.maxDocuments) this.close();
      else {
        setRef(worker.child, false);
        this.idleTimer = setTimeout(() => this.close(), this.options.idleMs).unref();
      }
    }
  }
}

/**
 * Runs from dist/ (`npm start`, `npm run worker`: scripts/build-dist.mjs) and from source under tsx
 * (tests, `npm run dev`): the child is the sibling entry of this very file, and a TypeScript entry
 * gets tsx's loader.
 */
function childCommand(): { entry: string; execArgv: string[] } {
  const here = import.meta.url;
  if (here.endsWith('.ts')) {
    const tsx = pathToFileURL(createRequire(here).resolve('tsx')).href;
    return { entry: fileURLToPath(new URL('./extract-child.ts', here)), execArgv: ['--import', tsx] };
  }
  return { entry: fileURLToPath(new URL('./extract-child.js', here)), execArgv: [] };
}

function start(memoryMb: number): Worker {
  const { entry, execArgv } = childCommand();
  const child = spawn(process.execPath, [...execArgv, `--max-old-space-size=${memoryMb}`, entry], {
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    serialization: 'advanced',
    // Only what Node and tsx need: the parser of a hostile file gets no secrets or database URL.
    env: pick(process.env, ['PATH', 'HOME', 'TMPDIR', 'TMP', 'TEMP', 'LANG', 'SYSTEMROOT']),
  });
  // Extraction is background work: requests of the server come first when the CPU is short.
  if (child.pid !== undefined) {
    try {
      setPriority(child.pid, EXTRACTOR_NICENESS);
    } catch {
      // Not permitted on this platform: the child runs at the server's priority.
    }
  }
  const worker: Worker = { child, memoryMb, served: 0, stderr: '' };
  child.stderr?.setEncoding('utf8').on('data', (text: string) => {
    worker.stderr = (worker.stderr + text).slice(-STDERR_TAIL);
  });
  // An idle child may be stopped at any time (idle timeout, a kill); only a running exchange cares.
  child.on('error', () => {});
  return worker;
}

/** Sends one document and waits for the answer, the wall time, the memory cap or the child's end. */
function exchange(worker: Worker, request: ExtractionRequest): Promise<ExtractionReply> {
  const { child } = worker;
  const { limits } = request;
  return new Promise<ExtractionReply>((resolve, reject) => {
    let settled = false;
    const finish = (outcome: { reply: ExtractionReply } | { error: Error }) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearInterval(memoryWatch);
      child.off('message', onMessage);
      child.off('close', onClose);
      child.off('error', onError);
      if ('reply' in outcome) resolve(outcome.reply);
      else reject(outcome.error);
    };
    const timer = setTimeout(() => finish({ error: timedOut(limits) }), limits.timeoutMs);
    const memoryWatch = setInterval(async () => {
      const rssMb = await residentMb(child.pid);
      if (rssMb !== null && rssMb > 2 * limits.memoryMb) finish({ error: outOfMemory(limits) });
    }, MEMORY_POLL_MS);
    const onMessage = (reply: ExtractionReply) => finish({ reply });
    const onError = (err: Error) =>
      finish({ error: new ExtractorStopped(`The extractor could not run: ${err.message}`) });
    // 'close' comes after stderr and the IPC channel are drained: an answer sent just before exit is not missed.
    const onClose = (code: number | null, signal: NodeJS.Signals | null) => {
      if (/heap out of memory|Reached heap limit|Allocation failed/i.test(worker.stderr)) {
        finish({ error: outOfMemory(limits) });
        return;
      }
      const how = signal ? `was stopped by ${signal}` : `exited with code ${code}`;
      const detail = worker.stderr.trim().split('\n').slice(-3).join(' | ');
      finish({ error: new ExtractorStopped(`The extractor ${how}${detail ? `: ${detail}` : ''}`) });
    };
    child.on('message', onMessage);
    child.on('close', onClose);
    child.on('error', onError);
    if (!alive(child)) {
      finish({ error: new ExtractorStopped('The extractor stopped before it was given the document') });
      return;
    }
    child.send(request, (err) => {
      if (err) finish({ error: new ExtractorStopped(`The extractor could not be reached: ${err.message}`) });
    });
  });
}

const alive = (child: ChildProcess) =>
  child.exitCode === null && child.signalCode === null && child.connected;

function stop(child: ChildProcess) {
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
}

/** A busy child keeps this process running (a CLI awaiting a document); an idle one does not. */
function setRef(child: ChildProcess, ref: boolean) {
  const handles = [child, child.channel, child.stderr] as Array<{ ref?(): void; unref?(): void } | null>;
  for (const handle of handles) {
    if (ref) handle?.ref?.();
    else handle?.unref?.();
  }
}

async function residentMb(pid: number | undefined): Promise<number | null> {
  if (pid === undefined) return null;
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    const kb = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
    return kb ? Number(kb[1]) / 1024 : null;
  } catch {
    return null;
  }
}

function pick(env: NodeJS.ProcessEnv, names: string[]): NodeJS.ProcessEnv {
  const picked: NodeJS.ProcessEnv = {};
  for (const name of names) if (env[name] !== undefined) picked[name] = env[name];
  return picked;
}
