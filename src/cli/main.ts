#!/usr/bin/env node
import { constants as osConstants } from "node:os";
import { Command } from "commander";
import { createSuperAdminClient } from "../auth/index.js";
import { systemClock } from "../clock.js";
import { ConfigError, loadConfig, parseDataKey, unknownConfigVariables } from "../config.js";
import { shutdownLogFlushMs } from "../log-output.js";
import { createLogger, flushLogs } from "../logger.js";
import { type Accessd, startAccessd } from "../main.js";
import { backupDatabase, type BackupResult } from "../store/backup.js";
import { rotateSigningKey } from "../auth/signing-key-rotation.js";
import { rotateDataKey } from "../store/data-key-rotation.js";
import { ServingLock } from "../store/serving-lock.js";
import { refuseNonFileDatabase, Store } from "../store/store.js";
import { accessdVersion } from "../version.js";
import { printResult } from "./print-result.js";
import { webhookCommand } from "./webhook-command.js";

const program = new Command()
  .name("accessd")
  .version(accessdVersion)
  .description("Access-management API: apps, entitlements, owners, users and webhook-triggered automations.");

program
  .command("serve", { isDefault: true })
  .description("serve gRPC, Connect and REST on one port (configured by ACCESSD_* variables)")
  // The default command: a mistyped one (`accessd bootstap`) reaches it as an argument, which
  // Commander refused as "too many arguments for 'serve'".
  .allowExcessArguments(true)
  .action(async (_flags: unknown, command: Command) => {
    if (command.args.length > 0) {
      const names = program.commands.map((c) => c.name()).join(", ");
      throw new Error(`unknown command ${JSON.stringify(command.args[0])}: the commands are ${names} (accessd --help)`);
    }
    const config = loadConfigOrExit("serve");
    const log = createLogger(config.logLevel, undefined, { bufferBytes: config.logBufferBytes });
    const unknown = unknownConfigVariables();
    if (unknown.length > 0) log.warn({ variables: unknown }, "ignoring ACCESSD_* variables accessd does not read (a typo?)");
    // The log lines written so far reach stdout before the exit, unless its reader is stuck.
    const exit = (code: number) => void flushLogs(log, shutdownLogFlushMs).then(() => process.exit(code));
    let accessd: Accessd | undefined;
    /** A signal that came while the server was starting: it stops as soon as the start is done. */
    let stopWhenStarted: string | undefined;
    const stop = (signal: string) => {
      if (accessd === undefined) {
        stopWhenStarted = signal;
        return;
      }
      log.info({ signal }, "shutting down");
      accessd.close().then(
        () => exit(0),
        (e: unknown) => {
          log.error({ err: e }, "shutdown failed");
          exit(1);
        },
      );
    };
    // Taken before the start, which listens before it returns: a signal in between (a supervisor
    // stopping a server it just saw listening) would otherwise end the process ungracefully. A
    // second signal ends it at once, with the exit code its default action gives (128 + its
    // number); left to that default (a once-only handler), it was ignored where the process is
    // PID 1 in a container, which the kernel does not end by a signal's default action.
    let signalled = false;
    const onSignal = (signal: NodeJS.Signals): void => {
      if (signalled) {
        log.warn({ signal }, "a second signal: stopping at once");
        exit(128 + (osConstants.signals[signal] ?? 0));
        return;
      }
      signalled = true;
      stop(signal);
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
    // A closed terminal: stop as gracefully as on SIGTERM (Node's default would end the process mid-request).
    process.on("SIGHUP", onSignal);
    accessd = await startAccessd(config, log).catch(exitOnConfigError);
    if (stopWhenStarted !== undefined) stop(stopWhenStarted);
  });

program
  .command("bootstrap")
  .description(
    "create a Super Admin user and API client in ACCESSD_DATABASE and print its client_id and client_secret once (JSON)",
  )
  .action(async () => {
    const config = loadConfigOrExit();
    if (config.database === ":memory:") {
      // The client would be gone with this process: its secret printed for nothing.
      throw new Error("ACCESSD_DATABASE is :memory:; a client bootstrapped there is gone when this command ends (use ACCESSD_BOOTSTRAP_CLIENT_ID/_SECRET with the server)");
    }
    refuseNonFileDatabase(config.database); // before the lock makes a file beside a folder
    const lock = ServingLock.acquire(config.database); // not while a server uses the database
    const store = Store.open(config.database);
    try {
      const created = await createSuperAdminClient(store, systemClock);
      printResult(
        JSON.stringify({ client_id: created.clientId, client_secret: created.clientSecret, user_id: created.userId }),
        `the client ${created.clientId} was created in ${config.database}, and its secret is lost: delete it (DELETE /api/v1/iam/clients/${created.clientId}) and bootstrap again`,
        () => process.stderr.write(`accessd: created in ${config.database}; store the client_secret now, it is not shown again (only its hash is kept)\n`),
      );
    } finally {
      await store.close();
      lock.release();
    }
  });

program
  .command("backup")
  .argument("<file>", "where to write the copy (must not exist); the key file goes to <file>.key")
  .description(
    "write a consistent copy of ACCESSD_DATABASE and its key file, safe while the server runs; prints what it wrote (JSON)",
  )
  .action((file: string) => {
    const config = loadConfigOrExit();
    let result: BackupResult;
    try {
      result = backupDatabase(config.database, file, { dataKey: config.dataKey });
    } catch (e) {
      exitOnConfigError(e); // a data key that does not open the database: exit 2, like the server's start
    }
    printResult(JSON.stringify(result), `the copy was written to ${file}`);
    if (result.keyFile === undefined) {
      process.stderr.write("accessd: the data key is ACCESSD_DATA_KEY: keep it with the backup, which cannot be opened without it\n");
    }
  });

program
  .command("rotate-data-key")
  .description(
    "seal every secret of ACCESSD_DATABASE under a new data key (with the server stopped): a key file is replaced by a new one; " +
      "a key given as ACCESSD_DATA_KEY needs the new one as ACCESSD_NEW_DATA_KEY. Prints what it did (JSON)",
  )
  .action(async () => {
    const config = loadConfigOrExit();
    let next: Buffer | undefined;
    try {
      next = parseDataKey(process.env, "ACCESSD_NEW_DATA_KEY");
    } catch (e) {
      exitOnConfigError(e);
    }
    const rotation = await rotateDataKey(config.database, { current: config.dataKey, next }).catch(exitOnConfigError);
    printResult(JSON.stringify(rotation), "the data key was rotated");
    const discarded = rotation.discardedNextKeyFile;
    if (discarded !== undefined) {
      process.stderr.write(
        `accessd: ${discarded.path} ${discarded.heldAKey ? "held a key that sealed nothing" : "held no key"}: ` +
          "an earlier run stopped before its commit left it; it was removed and this run rotated the key from the start\n",
      );
    }
    process.stderr.write(
      rotation.keyFile === undefined
        ? "accessd: start the server with ACCESSD_DATA_KEY set to the new key; the old one no longer opens this database\n"
        : `accessd: ${rotation.keyFile} holds the new key; backups taken before keep the old one with them\n`,
    );
  });

program
  .command("rotate-signing-key")
  .option("--end-old-tokens", "delete the old keys at once, so that every token issued before is refused (a key that leaked)")
  .description(
    "add a new access-token signing key to ACCESSD_DATABASE (with the server stopped): it signs from the next start; " +
      "tokens signed by the old keys stay good until they expire, and the old keys are deleted 24 h later. Prints what it did (JSON)",
  )
  .action(async (flags: { endOldTokens?: boolean }) => {
    const config = loadConfigOrExit();
    const endOldTokens = flags.endOldTokens === true;
    const rotation = await rotateSigningKey(config.database, { dataKey: config.dataKey, endOldTokens, clock: systemClock }).catch(exitOnConfigError);
    printResult(JSON.stringify(rotation), "the new signing key was added");
    process.stderr.write(
      endOldTokens
        ? "accessd: start the server to sign with the new key; every token issued before is refused from then on. " +
            "If the old key leaked with the data key, run `accessd rotate-data-key` too (the new key is sealed under it)\n"
        : "accessd: start the server to sign with the new key; tokens signed by the old keys stay good until they expire (ACCESSD_TOKEN_TTL)\n",
    );
  });

/**
 * The configuration, or exit 2 on a bad setting. A command other than `serve` (which logs it)
 * names on stderr the ACCESSD_* variables accessd does not read: a typo of ACCESSD_DATABASE made
 * `bootstrap` write a new ./data/accessd.db without a word.
 */
function loadConfigOrExit(command = "") {
  let config;
  try {
    config = loadConfig();
  } catch (e) {
    return exitOnConfigError(e);
  }
  const unknown = unknownConfigVariables();
  if (command !== "serve" && unknown.length > 0) {
    process.stderr.write(`accessd: ignoring ACCESSD_* variables accessd does not read (a typo?): ${unknown.join(", ")}\n`);
  }
  return config;
}

/**
 * A bad setting, found while reading the variables or while starting (a data key that does not
 * belong to the database): one line naming the variable, exit code 2. Anything else is rethrown.
 */
function exitOnConfigError(e: unknown): never {
  if (e instanceof ConfigError) {
    process.stderr.write(`accessd: invalid configuration: ${e.message}\n`);
    process.exit(2);
  }
  throw e;
}

program.addCommand(webhookCommand());

program.parseAsync().catch((e: unknown) => {
  process.stderr.write(`accessd: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
