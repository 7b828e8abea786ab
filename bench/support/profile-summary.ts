/**
 * Summarises a V8 `.cpuprofile` (from `node --cpu-prof`, or BENCH_CPU_PROF=<dir> in the benches):
 * the functions with the most self time, and the files (grouped by package) they live in.
 * Percentages are of all the time sampled, idle included; the first line also gives the busy
 * time (everything but `(idle)`), the thread's share that the per-request costs are taken from.
 *
 *   npx tsx bench/support/profile-summary.ts <file.cpuprofile> [top=30]
 *   npx tsx bench/support/profile-summary.ts <file.cpuprofile> --under <function> [depth=3]
 *
 * `--under runBatch` prints instead where the time under every call of that function goes: each
 * call path below it, `depth` calls deep, with its inclusive time as a share of the busy time
 * (native work, such as a SQLite statement run through better-sqlite3, is the self time of the
 * JavaScript function that called it).
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

const usage = "usage: profile-summary.ts <file.cpuprofile> [top] | <file.cpuprofile> --under <function> [depth]";
const [file, ...rest] = process.argv.slice(2);
if (file === undefined) throw new Error(usage);
const under = rest[0] === "--under" ? rest[1] : undefined;
if (rest[0] === "--under" && under === undefined) throw new Error(usage);
process.stdout.on("error", () => process.exit(0)); // piped into head
const top = under === undefined ? Number(rest[0] ?? 30) : 0;
const depth = under === undefined ? 0 : Number(rest[2] ?? 3);
if (!Number.isInteger(top) || !Number.isInteger(depth) || top < 0 || depth < 0) throw new Error(usage);
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

const busy = total - [...selfUs].filter(([id]) => byId.get(id)?.callFrame.functionName === "(idle)").reduce((a, [, us]) => a + us, 0);
const pct = (us: number) => `${((100 * us) / total).toFixed(1).padStart(5)}%`;
console.log(`${file}: ${(total / 1e6).toFixed(2)} s sampled, ${(busy / 1e6).toFixed(2)} s busy (${((100 * busy) / total).toFixed(1)}%)`);
if (under !== undefined) {
  printCallsUnder(under, depth);
  process.exit(0);
}
console.log(`\ntop ${top} functions by self time:`);
for (const [key, us] of [...fns].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`  ${pct(us)}  ${key}`);
console.log(`\ntop ${top} functions by inclusive time (own code and node:, not (root)):`);
for (const [key, us] of [...inclusive].filter(([k]) => !k.startsWith("(root)")).sort((a, b) => b[1] - a[1]).slice(0, top)) {
  console.log(`  ${pct(us)}  ${key}`);
}
console.log("\nby package / file:");
for (const [place, us] of [...places].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`  ${pct(us)}  ${place}`);

/** Time spent in a node and everything it called. */
function inclusiveUs(node: ProfileNode, memo: Map<number, number>): number {
  const known = memo.get(node.id);
  if (known !== undefined) return known;
  let us = selfUs.get(node.id) ?? 0;
  for (const child of node.children ?? []) {
    const childNode = byId.get(child);
    if (childNode !== undefined) us += inclusiveUs(childNode, memo);
  }
  memo.set(node.id, us);
  return us;
}

/**
 * Every call path from the calls of `fn` down to `maxDepth` calls below, with its inclusive time
 * summed over the stacks it appears in, as a share of the busy time. A call of `fn` inside
 * another call of `fn` (recursion) is counted with the outer one only.
 */
function printCallsUnder(fn: string, maxDepth: number): void {
  const memo = new Map<number, number>();
  const byPath = new Map<string, number>();
  const label = (node: ProfileNode) => `${node.callFrame.functionName || "(anonymous)"}:${node.callFrame.lineNumber + 1}`;
  const walk = (node: ProfileNode, path: string, level: number): void => {
    byPath.set(path, (byPath.get(path) ?? 0) + inclusiveUs(node, memo));
    if (level === maxDepth) return;
    for (const child of node.children ?? []) {
      const childNode = byId.get(child);
      if (childNode !== undefined) walk(childNode, `${path} > ${label(childNode)}`, level + 1);
    }
  };
  const isCallOf = (node: ProfileNode | undefined) => node?.callFrame.functionName === fn;
  const hasCallerOf = (node: ProfileNode): boolean => {
    for (let up = byId.get(parentOf.get(node.id) ?? -1); up !== undefined; up = byId.get(parentOf.get(up.id) ?? -1)) {
      if (isCallOf(up)) return true;
    }
    return false;
  };
  for (const node of profile.nodes) if (isCallOf(node) && !hasCallerOf(node)) walk(node, fn, 0);
  if (byPath.size === 0) {
    console.log(`no call of ${fn} in the profile`);
    return;
  }
  console.log(`\nunder ${fn}, ${maxDepth} calls deep (inclusive time, % of the busy time):`);
  for (const [path, us] of [...byPath].sort((a, b) => b[1] - a[1])) {
    if (us < busy / 10_000) break;
    console.log(`  ${((100 * us) / busy).toFixed(2).padStart(6)}%  ${path}`);
  }
}
