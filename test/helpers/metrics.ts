/** One sample of a Prometheus text exposition (0 when absent), e.g. `name{a="b"}`. */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const labelText = line.slice(name.length).split(' ')[0];
    if (Object.entries(labels).every(([k, v]) => labelText.includes(`${k}="${v}"`)))
      return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return 0;
}
