import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { setPriority } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { DocumentLimits } from '../config.js';
import { ExtractionError, type ExtractionReply, type ExtractionRequest } from './blocks.js';

/** The extractor stopped without an answer (killed, crashed): the document may be tried once more. */
export class ExtractorStopped extends Error {
  override readonly name = 'ExtractorStopped';
}

export type ExtractedDocument = Extract<ExtractionReply, { ok: true }>;

/**
 * Runs from source under tsx (npm start, tests) and from dist/ after `npm run build`: the child
 * is the sibling entry of this very file, and a TypeScript entry gets tsx's loader.
 */
function childCommand(): { entry: string; execArgv: string[] } {
  const here = import.meta.url;
  if (here.endsWith('.ts')) {
    const tsx = pathToFileURL(createRequire(here).resolve('tsx')).href;
    return { entry: fileURLToPath(new URL('./extract-child.ts', here)), execArgv: ['--import', tsx] };
  }
  return { entry: fileURLToPath(new URL('./extract-child.js', here)), execArgv: [] };
}

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

/**
 * Extracts and chunks one document in a child process with a capped heap, a wall-time limit and
 * a resident-memory watch, so no document can block or exhaust the server. A bound exceeded is
 * an `ExtractionError` (final); a child that stops without answering is `ExtractorStopped`.
 */
export function extractIsolated(
  bytes: Uint8Array,
  mediaType: string,
  limits: DocumentLimits,
): Promise<ExtractedDocument> {
  const { entry, execArgv } = childCommand();
  const child = spawn(process.execPath, [...execArgv, `--max-old-space-size=${limits.memoryMb}`, entry], {
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
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (text: string) => {
    stderr = (stderr + text).slice(-STDERR_TAIL);
  });

  return new Promise<ExtractedDocument>((resolve, reject) => {
    let settled = false;
    const finish = (outcome: { reply: ExtractedDocument } | { error: Error }) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearInterval(memoryWatch);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      if ('reply' in outcome) resolve(outcome.reply);
      else reject(outcome.error);
    };
    const timer = setTimeout(() => finish({ error: timedOut(limits) }), limits.timeoutMs);
    const memoryWatch = setInterval(async () => {
      const rssMb = await residentMb(child.pid);
      if (rssMb === null) clearInterval(memoryWatch);
      else if (rssMb > 2 * limits.memoryMb) finish({ error: outOfMemory(limits) });
    }, MEMORY_POLL_MS);

    child.on('message', (reply: ExtractionReply) => {
      if (reply.ok) finish({ reply });
      else finish({ error: new ExtractionError(reply.message, reply.ocrError) });
    });
    child.on('error', (err) =>
      finish({ error: new ExtractorStopped(`The extractor could not run: ${err.message}`) }),
    );
    // 'close' comes after stderr and the IPC channel are drained: an answer sent just before exit is not missed.
    child.on('close', (code, signal) => {
      if (/heap out of memory|Reached heap limit|Allocation failed/i.test(stderr)) {
        finish({ error: outOfMemory(limits) });
        return;
      }
      const how = signal ? `was stopped by ${signal}` : `exited with code ${code}`;
      const detail = stderr.trim().split('\n').slice(-3).join(' | ');
      finish({ error: new ExtractorStopped(`The extractor ${how}${detail ? `: ${detail}` : ''}`) });
    });

    const request: ExtractionRequest = { bytes, mediaType, limits };
    child.send(request, (err) => {
      if (err) finish({ error: new ExtractorStopped(`The extractor could not be reached: ${err.message}`) });
    });
  });
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
