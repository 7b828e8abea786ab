/**
 * `npm run bench`: runs every benchmark in bench/ and writes bench/RESULTS.md.
 *
 * A benchmark is any `bench/*.ts` other than this file (helpers live in bench/support/, or start
 * with "_"). Each runs in its own process (`node --import tsx bench/<name>.ts`), one after the
 * other so they do not compete for the CPU, and reports its figures as `BENCH {json}` lines on
 * stdout (see bench/support/report.ts); everything else it prints is shown as progress.
 *
 * `npm run bench -- api webhooks` runs only those and prints their table (RESULTS.md records full
 * runs only). BENCH_DURATION=<seconds> shortens each load
 * phase (for a quick check; keep the default for figures worth quoting).
 */
import { spawn } from "node:child_process";
import { readdirSync, writeFileSync } from "node:fs";
import { cpus, totalmem, platform, arch, release } from "node:os";
import { basename, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { figurePrefix, type BenchFigure } from "./support/report.js";

const benchDir = fileURLToPath(new URL(".", import.meta.url));
const self = basename(fileURLToPath(import.meta.url));

interface BenchRun {
  bench: string;
  figures: BenchFigure[];
  /** The last line a bench printed, recorded when it reported no figure (a bench not yet using report()). */
  lastLine: string;
  exitCode: number | null;
  seconds: number;
}

function benchFiles(only: readonly string[]): string[] {
  const all = readdirSync(benchDir)
    .filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts") && f !== self && !f.startsWith("_"))
    .sort();
  if (only.length === 0) return all;
  const chosen = all.filter((f) => only.includes(f.replace(/\.ts$/, "")) || only.includes(f));
  const unknown = only.filter((o) => !all.includes(o) && !all.includes(`${o}.ts`));
  if (unknown.length > 0) throw new Error(`no benchmark named ${unknown.join(", ")}; there are ${all.join(", ")}`);
  return chosen;
}

function runOne(file: string): Promise<BenchRun> {
  const bench = file.replace(/\.ts$/, "");
  const started = performance.now();
  const child = spawn(process.execPath, ["--import", "tsx", join(benchDir, file)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const figures: BenchFigure[] = [];
  let lastLine = "";
  createInterface({ input: child.stdout }).on("line", (line) => {
    if (line.trim() !== "") lastLine = line.trim();
    if (line.startsWith(figurePrefix)) {
      const figure = JSON.parse(line.slice(figurePrefix.length)) as BenchFigure;
      figures.push(figure);
      console.log(`  ${figure.name}: ${figure.value} ${figure.unit}${figure.note ? ` (${figure.note})` : ""}`);
    } else {
      console.log(line);
    }
  });
  return new Promise((resolve) => {
    child.on("close", (code) => resolve({ bench, figures, lastLine, exitCode: code, seconds: (performance.now() - started) / 1000 }));
  });
}

function cell(text: string): string {
  return text.replace(/\|/g, "\\|").replace(/\n/g, " ");
}

function markdown(runs: readonly BenchRun[], startedAt: Date): string {
  const cpu = cpus();
  const machine = `${cpu[0]?.model.trim() ?? "unknown CPU"} × ${cpu.length} cores, ${Math.round(totalmem() / 2 ** 30)} GiB RAM, ${platform()} ${arch()} ${release()}`;
  const lines = [
    "# Benchmark results",
    "",
    "Written by `npm run bench` (bench/run.ts); each benchmark ran in its own process, one after the other,",
    "with the load generator and the server sharing the machine below.",
    "",
    `- Machine: ${machine}`,
    `- Node: ${process.version}`,
    `- Date: ${startedAt.toISOString()}`,
    `- Benchmarks: ${runs.map((r) => `${r.bench} (${Math.round(r.seconds)} s${r.exitCode === 0 ? "" : `, FAILED with exit code ${String(r.exitCode)}`})`).join(", ")}`,
    ...(process.env.BENCH_DURATION ? [`- BENCH_DURATION=${process.env.BENCH_DURATION} s per phase (shortened run)`] : []),
    "",
    "| bench | measure | value | unit | notes |",
    "|---|---|---:|---|---|",
  ];
  for (const run of runs) {
    for (const f of run.figures) {
      lines.push(`| ${run.bench} | ${cell(f.name)} | ${f.value} | ${cell(f.unit)} | ${cell(f.note ?? "")} |`);
    }
    if (run.figures.length === 0 && run.exitCode === 0) {
      lines.push(`| ${run.bench} | (no BENCH figure; its last line) | | | ${cell(run.lastLine)} |`);
    }
    if (run.exitCode !== 0) lines.push(`| ${run.bench} | FAILED (exit code ${String(run.exitCode)}) | | | see the run's output |`);
  }
  return `${lines.join("\n")}\n`;
}

async function main(): Promise<void> {
  const only = process.argv.slice(2);
  const files = benchFiles(only);
  const startedAt = new Date();
  const runs: BenchRun[] = [];
  for (const file of files) {
    console.log(`\n== ${file}`);
    runs.push(await runOne(file));
  }
  const table = markdown(runs, startedAt);
  if (only.length === 0) {
    const results = join(benchDir, "RESULTS.md");
    writeFileSync(results, table);
    console.log(`\nwrote ${results}`);
  } else {
    // A partial run prints its table and leaves RESULTS.md (the record of a full run) alone.
    console.log(`\n${table}`);
  }
  if (runs.some((r) => r.exitCode !== 0)) process.exitCode = 1;
}

await main();
