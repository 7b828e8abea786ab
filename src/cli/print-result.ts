/**
 * Writes a command's result line(s) to stdout. A stdout that cannot take them (a pipe closed by
 * its reader, a full disk) is one line on stderr that says so and what was done all the same
 * (`done`: the command's work happened before its output), and exit code 1; it was Node's stack
 * trace of an unhandled 'error' event. `afterWritten` runs once the text is written (a note on
 * stderr that would otherwise come before the word that the output was lost).
 */
export function printResult(text: string, done: string, afterWritten?: () => void): void {
  if (!watching) {
    watching = true;
    process.stdout.on("error", (e: NodeJS.ErrnoException) => {
      if (reported) return;
      reported = true;
      process.stderr.write(`accessd: the output could not be written to stdout (${e.code ?? e.message}); ${lastDone}\n`);
      process.exitCode = 1;
    });
  }
  lastDone = done;
  process.stdout.write(`${text}\n`, (error) => {
    if (error === null || error === undefined) afterWritten?.();
  });
}

let watching = false;
let reported = false;
let lastDone = "";
