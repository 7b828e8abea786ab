import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { fileURLToPath, pathToFileURL } from "node:url";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
/** The tsx loader, for child processes that run TypeScript (`node --import <tsxLoader> file.ts`). */
export const tsxLoader = pathToFileURL(`${repoRoot}node_modules/tsx/dist/loader.mjs`).href;

let built = false;

/**
 * `npm run build` (src/ to dist/, about a second with TypeScript 7), once per bench process, so
 * that the server measured is the code `npm start` runs, built from the working tree.
 */
function buildDist(): void {
  if (built) return;
  execFileSync("npm", ["run", "--silent", "build"], { cwd: repoRoot, stdio: ["ignore", "ignore", "inherit"] });
  built = true;
}

/** Bootstrap credentials the benchmark server is started with (used once auth exists). */
const bootstrap = { clientId: "bench", clientSecret: "bench-secret-0123456789abcdef" };

export interface AccessdProcess {
  url: string;
  host: string;
  port: number;
  pid: number;
  /** Headers every API call carries: a bearer token once auth exists, none before. */
  headers: Record<string, string>;
  /** The server's peak resident set size so far (VmHWM), in MiB; undefined off Linux. */
  peakRssMiB(): number | undefined;
  /** The server's resident set size now (VmRSS), in MiB; undefined off Linux. */
  rssMiB(): number | undefined;
  /** CPU seconds (user + system) the server process has used so far; undefined off Linux. */
  cpuSeconds(): number | undefined;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  const probe = createServer();
  probe.listen(0, "127.0.0.1");
  await once(probe, "listening");
  const address = probe.address();
  probe.close();
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

/**
 * Runs `accessd serve` as a separate process over `database`, as an operator would (`npm start`:
 * the compiled dist/, rebuilt from src/ first), so that the load generator in this process does
 * not share its event loop. Logs go to /dev/null at the level given (info by default, as shipped).
 */
export async function startAccessdProcess(database: string, logLevel = "info"): Promise<AccessdProcess> {
  const port = await freePort();
  // BENCH_CPU_PROF=<dir>: the server writes a V8 CPU profile there when it stops (summarise it
  // with `npx tsx bench/support/profile-summary.ts <file>`).
  const profileDir = process.env.BENCH_CPU_PROF;
  const profiling = profileDir === undefined || profileDir === "" ? [] : ["--cpu-prof", `--cpu-prof-dir=${profileDir}`];
  buildDist();
  const child: ChildProcess = spawn(process.execPath, [...profiling, `${repoRoot}dist/src/cli/main.js`, "serve"], {
    cwd: repoRoot,
    env: {
      ...process.env,
      ACCESSD_PORT: String(port),
      ACCESSD_DATABASE: database,
      ACCESSD_LOG_LEVEL: logLevel,
      ACCESSD_BOOTSTRAP_CLIENT_ID: bootstrap.clientId,
      ACCESSD_BOOTSTRAP_CLIENT_SECRET: bootstrap.clientSecret,
    },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`accessd exited with ${child.exitCode}`);
    const up = await fetch(`${url}/readyz`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (up) break;
    if (Date.now() > deadline) throw new Error("accessd did not become ready");
    await new Promise((r) => setTimeout(r, 100));
  }
  const pid = child.pid ?? 0;
  return {
    url,
    host: "127.0.0.1",
    port,
    pid,
    headers: await authHeaders(url),
    peakRssMiB: () => procStatusMiB(pid, "VmHWM"),
    rssMiB: () => procStatusMiB(pid, "VmRSS"),
    cpuSeconds: () => procCpuSeconds(pid),
    async stop() {
      if (child.exitCode !== null) return;
      child.kill("SIGTERM");
      await once(child, "exit");
    },
  };
}

/** utime + stime from /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s). */
export function procCpuSeconds(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return undefined;
  }
}

function procStatusMiB(pid: number, field: "VmHWM" | "VmRSS"): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1];
    return kb === undefined ? undefined : Number(kb) / 1024;
  } catch {
    return undefined;
  }
}

async function authHeaders(url: string): Promise<Record<string, string>> {
  const res = await fetch(`${url}/auth/v1/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "client_credentials",
      client_id: bootstrap.clientId,
      client_secret: bootstrap.clientSecret,
    }).toString(),
  });
  if (res.status === 404) return {}; // no auth in this build
  if (res.status !== 200) throw new Error(`token request answered ${res.status}: ${await res.text()}`);
  const token = (await res.json()) as { access_token: string };
  return { authorization: `Bearer ${token.access_token}` };
}
