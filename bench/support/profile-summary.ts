/**
 * Summarises a V8 `.cpuprofile` (from `node --cpu-prof`, or BENCH_CPU_PROF=<dir> in the benches):
 * the functions with the most self time, and the files (grouped by package) they live in.
 *
 *   npx tsx bench/support/profile-summary.ts <file.cpuprofile> [top=30]
 */
import { readFileSync } from "node:fs";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

const [file, topArg] = process.argv.slice(2);
if (file === undefined) throw new Error("usage: profile-summary.ts <file.cpuprofile> [top]");
process.stdout.on("error", () => process.exit(0)); // piped into head
const top = Number(topArg ?? 30);
const profile = JSON.parse(readFileSync(file, "utf8")) as Profile;

const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const selfUs = new Map<number, number>();
for (let i = 0; i < profile.samples.length; i++) {
  const id = profile.samples[i] ?? 0;
  selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
}

function where(url: string): string {
  const nm = url.lastIndexOf("node_modules/");
  if (nm !== -1) {
    const rest = url.slice(nm + "node_modules/".length).split("/");
    return rest[0]?.startsWith("@") ? `${rest[0]}/${rest[1] ?? ""}` : (rest[0] ?? url);
  }
  const src = url.indexOf("/src/");
  if (src !== -1) return url.slice(src + 1);
  return url === "" ? "(native)" : url.replace(/^node:/, "node:");
}

const parentOf = new Map<number, number>();
for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);

function keyOf(node: ProfileNode): string {
  const { functionName, url, lineNumber } = node.callFrame;
  return `${functionName || "(anonymous)"}  ${where(url)}${url === "" ? "" : `:${lineNumber + 1}`}`;
}

/** Inclusive time: each function counted once per sampled stack it appears in. */
const inclusive = new Map<string, number>();
for (const [id, us] of selfUs) {
  const seen = new Set<string>();
  for (let node = byId.get(id); node !== undefined; node = byId.get(parentOf.get(node.id) ?? -1)) {
    const key = keyOf(node);
    if (seen.has(key)) continue;
    seen.add(key);
    inclusive.set(key, (inclusive.get(key) ?? 0) + us);
  }
}

const total = [...selfUs.values()].reduce((a, b) => a + b, 0);
const fns = new Map<string, number>();
const places = new Map<string, number>();
for (const [id, us] of selfUs) {
  const node = byId.get(id);
  if (node === undefined) continue;
  const place = where(node.callFrame.url);
  const key = keyOf(node);
  fns.set(key, (fns.get(key) ?? 0) + us);
  places.set(place, (places.get(place) ?? 0) + us);
}

const pct = (us: number) => `${((100 * us) / total).toFixed(1).padStart(5)}%`;
console.log(`${file}: ${(total / 1e6).toFixed(2)} s sampled`);
console.log(`\ntop ${top} functions by self time:`);
for (const [key, us] of [...fns].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`  ${pct(us)}  ${key}`);
console.log(`\ntop ${top} functions by inclusive time (own code and node:, not (root)):`);
for (const [key, us] of [...inclusive].filter(([k]) => !k.startsWith("(root)")).sort((a, b) => b[1] - a[1]).slice(0, top)) {
  console.log(`  ${pct(us)}  ${key}`);
}
console.log("\nby package / file:");
for (const [place, us] of [...places].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`  ${pct(us)}  ${place}`);
