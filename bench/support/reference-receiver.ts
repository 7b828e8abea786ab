/**
 * Reference webhook receivers for bench/webhooks.ts: the least a server can do for a signed
 * webhook, written in as few lines as possible, so that the bench can show in the same run where
 * this machine puts a ceiling on accessd (issue 7). Run as its own process:
 *
 *   node --import tsx bench/support/reference-receiver.ts <secret> [durable-database-path]
 *
 * It prints its port on stdout. Every request is read whole, its Webhook-Timestamp,
 * Webhook-Event-Id and Webhook-Signature checked (HMAC-SHA256 over `<timestamp>.<event id>.<body>`,
 * compared in constant time), and answered 200 with a small JSON body, 401 when the signature does
 * not match. With a database path it is also durable: each event id is inserted into one SQLite
 * table (WAL, synchronous=NORMAL, as accessd) before the answer, the inserts of one event-loop turn
 * in one transaction (group commit), and a repeated event id is answered 409. Nothing else: no
 * routing, listener lookup, timestamp window, delivery log, execution or logging, which is what
 * accessd adds on top.
 */
import { createHmac, createSecretKey, timingSafeEqual } from "node:crypto";
import { createServer, type ServerResponse } from "node:http";
import { openReferenceStore } from "./reference-store.js";

const [secret, databasePath] = process.argv.slice(2);
if (secret === undefined) throw new Error("usage: reference-receiver.ts <secret> [database]");
const key = createSecretKey(Buffer.from(secret, "utf8"));

interface Pending {
  eventId: string;
  res: ServerResponse;
}

let accept: (eventId: string, res: ServerResponse) => void = (_eventId, res) => answer(res, 200);

if (databasePath !== undefined) {
  const { insert, begin, commit } = openReferenceStore(databasePath);
  let group: Pending[] = [];
  const commitGroup = () => {
    const committing = group;
    group = [];
    begin.run();
    const inserted = committing.map(({ eventId }) => insert.run(eventId, Date.now()).changes === 1);
    commit.run();
    committing.forEach(({ res }, i) => answer(res, inserted[i] ? 200 : 409));
  };
  accept = (eventId, res) => {
    if (group.push({ eventId, res }) === 1) setImmediate(commitGroup);
  };
}

function answer(res: ServerResponse, status: number): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(status === 200 ? '{"ok":true}' : '{"error":"refused"}');
}

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    const timestamp = req.headers["webhook-timestamp"];
    const eventId = req.headers["webhook-event-id"];
    const signature = req.headers["webhook-signature"];
    if (typeof timestamp !== "string" || typeof eventId !== "string" || typeof signature !== "string") return answer(res, 401);
    const expected = createHmac("sha256", key).update(`${timestamp}.${eventId}.`).update(Buffer.concat(chunks)).digest();
    const given = Buffer.from(signature, "base64url");
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return answer(res, 401);
    accept(eventId, res);
  });
});
server.listen(0, "127.0.0.1", () => {
  const address = server.address();
  process.stdout.write(`${typeof address === "object" && address !== null ? address.port : ""}\n`);
});
