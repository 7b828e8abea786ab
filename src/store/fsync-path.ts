import { closeSync, fsyncSync, openSync } from "node:fs";

/**
 * fsync by path: a file's contents, or a folder's entries (a new file's name is durable only once
 * its folder is synced, which the file's own fsync does not do).
 */
export function fsyncPath(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
