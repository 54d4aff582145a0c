/**
 * CPU time and resident memory of a process tree, and per-core busy time, read from /proc (Linux).
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

/** Clock ticks per second of /proc's time fields (`getconf CLK_TCK`, almost always 100). */
export const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

interface Stat {
  ppid: number;
  /** utime + stime + cutime + cstime, in ticks: the process, and its children it has reaped. */
  ticks: number;
}

function readStat(pid: number): Stat | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null; // exited meanwhile
  }
  // The command name (field 2) may hold spaces and parentheses: fields are counted after its last ')'.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  // After the name: state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17), so index n-3.
  return {
    ppid: Number(fields[1]),
    ticks: Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]),
  };
}

/** `root` and every living descendant of it (from the parent pids of /proc). */
export function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    const stat = readStat(pid);
    if (!stat) continue;
    const list = children.get(stat.ppid);
    if (list) list.push(pid);
    else children.set(stat.ppid, [pid]);
  }
  const tree: number[] = [];
  const queue = [root];
  while (queue.length > 0) {
    const pid = queue.pop()!;
    tree.push(pid);
    queue.push(...(children.get(pid) ?? []));
  }
  return tree;
}

/**
 * User plus system CPU of the tree in ms. Reaped children count through their parent's
 * cutime/cstime, so a helper process that exits mid-phase is not lost.
 */
export function treeCpuMs(pids: number[]): number {
  let ticks = 0;
  for (const pid of pids) ticks += readStat(pid)?.ticks ?? 0;
  return (ticks * 1000) / CLK_TCK;
}

/** Sum of VmRSS over the tree, in MB. */
export function treeRssMb(pids: number[]): number {
  let kb = 0;
  for (const pid of pids) {
    try {
      const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (match) kb += Number(match[1]);
    } catch {
      // exited meanwhile
    }
  }
  return kb / 1024;
}

/** Busy and total ticks of each core (`cpuN` lines of /proc/stat). */
export function coreTicks(): { busy: number; total: number }[] {
  const cores: { busy: number; total: number }[] = [];
  for (const line of readFileSync('/proc/stat', 'utf8').split('\n')) {
    const match = /^cpu(\d+) (.*)$/.exec(line);
    if (!match) continue;
    const values = match[2].trim().split(/\s+/).map(Number);
    const total = values.reduce((a, b) => a + b, 0);
    // idle (4th) and iowait (5th) are the not-busy columns.
    cores[Number(match[1])] = { busy: total - values[3] - (values[4] ?? 0), total };
  }
  return cores;
}

/** Busy percentage of each core between two `coreTicks()` readings. */
export function coreBusyPercent(
  before: { busy: number; total: number }[],
  after: { busy: number; total: number }[],
): number[] {
  return after.map((core, i) => {
    const total = core.total - (before[i]?.total ?? 0);
    return total > 0 ? Math.round(((core.busy - (before[i]?.busy ?? 0)) / total) * 1000) / 10 : 0;
  });
}
