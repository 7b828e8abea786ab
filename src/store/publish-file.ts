import { existsSync, linkSync, renameSync } from "node:fs";

/**
 * Gives a finished, flushed file (`file`, written under a temporary name) its real name `path`,
 * never replacing a file there: a hard link, which fails with EEXIST when the name is taken, so the
 * file appears under its name whole or not at all. A file system without hard links (FAT, exFAT,
 * some FUSE mounts: a backup to a USB disk) gets a rename instead, as atomic, after a check that
 * the name is free (the check and the rename are not one step there).
 */
export function publishNewFile(file: string, path: string): void {
  try {
    linkSync(file, path);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== "EPERM" && code !== "ENOTSUP" && code !== "EOPNOTSUPP" && code !== "ENOSYS") throw e;
    if (existsSync(path)) throw Object.assign(new Error(`EEXIST: file already exists, link '${file}' -> '${path}'`), { code: "EEXIST" });
    renameSync(file, path);
  }
}
