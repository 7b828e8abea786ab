import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { searchRangeRows } from "../src/api/users-service.js";
import { newId } from "../src/store/ids.js";
import { answer, createApp, createEntitlement, createUser, ownersPath } from "./support/api-fixtures.js";
import { startTestServer, type TestServer } from "./support/test-server.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(() => server.close());

/** Inserts entitlements straight into the store (fast), returning their ids in creation order. */
function seedEntitlements(appId: string, count: number, prefix = "E"): string[] {
  const ids: string[] = [];
  server.store.transaction(() => {
    for (let i = 0; i < count; i++) {
      const id = newId();
      const now = Date.now();
      server.store.appEntitlements.insert({
        id,
        appId,
        displayName: `${prefix} ${i}`,
        description: "",
        slug: `${prefix.toLowerCase()}-${i}`,
        createdAt: now,
        updatedAt: now,
      });
      ids.push(id);
    }
  });
  return ids;
}

function seedUsers(count: number, displayName: (i: number) => string): string[] {
  const ids: string[] = [];
  server.store.transaction(() => {
    for (let i = 0; i < count; i++) {
      const id = newId();
      const now = Date.now();
      server.store.users.insert({ id, displayName: displayName(i), email: "", username: "", createdAt: now, updatedAt: now });
      ids.push(id);
    }
  });
  return ids;
}

interface RawPage {
  status: number;
  text: string;
  ids: string[];
  nextPageToken: string | undefined;
}

async function rawPage(res: Response, idOf: (item: Record<string, unknown>) => string): Promise<RawPage> {
  const text = await res.text();
  const body = JSON.parse(text) as { list?: Record<string, unknown>[]; nextPageToken?: string };
  return { status: res.status, text, ids: (body.list ?? []).map(idOf), nextPageToken: body.nextPageToken };
}

const entitlementIdOf = (item: Record<string, unknown>) => (item.appEntitlement as { id: string }).id;
const userIdOf = (item: Record<string, unknown>) => item.id as string;

async function entitlementsPage(appId: string, query: string): Promise<RawPage> {
  return rawPage(await server.call("GET", `/api/v1/apps/${appId}/entitlements${query}`), entitlementIdOf);
}

/** Walks every page, checking each non-last page carries a token and the last one `"nextPageToken":""`. */
async function walkEntitlements(
  appId: string,
  pageSize: number,
  afterEachPage: (pageNumber: number) => void = () => {},
): Promise<{ ids: string[]; pages: number }> {
  const ids: string[] = [];
  let token = "";
  let pages = 0;
  for (;;) {
    const page = await entitlementsPage(appId, `?page_size=${pageSize}&page_token=${encodeURIComponent(token)}`);
    expect(page.status).toBe(200);
    pages++;
    ids.push(...page.ids);
    afterEachPage(pages);
    if (page.nextPageToken === "") {
      expect(page.text).toContain('"nextPageToken":""');
      return { ids, pages };
    }
    expect(page.nextPageToken).toMatch(/.+/);
    expect(page.ids).toHaveLength(Math.min(100, Math.max(10, pageSize)));
    token = page.nextPageToken ?? "";
    if (pages > 2000) throw new Error("the walk does not end");
  }
}

describe("page_size on GET listings", () => {
  let appId: string;
  beforeAll(async () => {
    appId = await createApp(server, "Sizes");
    seedEntitlements(appId, 150);
  });

  it.each([
    ["no page_size", "", 25],
    ["page_size=0", "?page_size=0", 25],
    ["page_size=3", "?page_size=3", 10],
    ["page_size=-5", "?page_size=-5", 10],
    ["page_size=10", "?page_size=10", 10],
    ["page_size=42", "?page_size=42", 42],
    ["page_size=100", "?page_size=100", 100],
    ["page_size=250", "?page_size=250", 100],
    ["the JSON name pageSize=3", "?pageSize=3", 10],
    ["the JSON name pageSize=250", "?pageSize=250", 100],
    ["page_size beyond int32", "?page_size=99999999999", 100],
    ["page_size below int32", "?page_size=-99999999999", 10],
    ["page_size of 400 digits", `?page_size=${"9".repeat(400)}`, 100],
    ["page_size=1e999", "?page_size=1e999", 100],
    ["an empty page_size (the default)", "?page_size=", 25],
    ["an empty page_size and page_token", "?page_size=&page_token=", 25],
  ])("returns the clamped number of items for %s", async (_, query, expected) => {
    const page = await entitlementsPage(appId, query);
    expect(page.status).toBe(200);
    expect(page.ids).toHaveLength(expected);
    expect(page.nextPageToken).not.toBe("");
  });

  it.each([["abc"], ["1.5"], ["Infinity"], ["NaN"], [" 12"]])("answers 400 invalid_argument to page_size=%s", async (value) => {
    const res = await server.call("GET", `/api/v1/apps/${appId}/entitlements?page_size=${value}`);
    expect(res.status).toBe(400);
    const body = (await res.json()) as { code: string; message: string };
    expect(body.code).toBe("invalid_argument");
    expect(body.message).toContain("page_size");
  });

  it("answers 400 to page_size given twice", async () => {
    const res = await server.call("GET", `/api/v1/apps/${appId}/entitlements?page_size=10&page_size=20`);
    expect(res.status).toBe(400);
  });

  it("answers 400 to page_size given under both its names", async () => {
    const res = await server.call("GET", `/api/v1/apps/${appId}/entitlements?page_size=10&pageSize=20`);
    expect(await res.json()).toEqual({ code: "invalid_argument", message: "query parameters page_size and pageSize name the same field; give it once" });
    expect(res.status).toBe(400);
  });

  it("accepts the JSON name pageToken in the query", async () => {
    const first = await entitlementsPage(appId, "?pageSize=10");
    const second = await entitlementsPage(appId, `?pageSize=10&pageToken=${encodeURIComponent(first.nextPageToken ?? "")}`);
    expect(second.status).toBe(200);
    expect(second.ids).toHaveLength(10);
    expect(second.ids).not.toContain(first.ids[0]);
  });

  it("applies the same clamping to other listings (users, apps, owners)", async () => {
    seedUsers(30, (i) => `Clamp ${i}`);
    const users = await rawPage(await server.call("GET", "/api/v1/users?page_size=3"), userIdOf);
    expect(users.ids).toHaveLength(10);
    const apps = await server.call("GET", "/api/v1/apps?page_size=abc");
    expect(apps.status).toBe(400);
    const entitlementId = await createEntitlement(server, appId);
    const owners = await server.call("GET", `${ownersPath(appId, entitlementId)}?page_size=abc`);
    expect(owners.status).toBe(400);
  });
});

describe("walking every page", () => {
  it("yields each of 1,000 entitlements exactly once in creation order, the last page saying nextPageToken \"\"", async () => {
    const appId = await createApp(server, "Thousand");
    const created = seedEntitlements(appId, 1000);
    // 1,000 is an exact multiple of 100, 25 (the default) and 40; 37 leaves a partial last page.
    for (const size of [100, 25, 40, 37]) {
      const walk = await walkEntitlements(appId, size);
      expect(walk.ids).toEqual(created);
      expect(walk.pages).toBe(Math.ceil(1000 / size));
    }
  });

  it("says nextPageToken \"\" already on a page that ends exactly at the last item", async () => {
    const appId = await createApp(server, "Exact");
    seedEntitlements(appId, 20);
    const first = await entitlementsPage(appId, "?page_size=10");
    expect(first.nextPageToken).not.toBe("");
    const last = await entitlementsPage(appId, `?page_size=10&page_token=${encodeURIComponent(first.nextPageToken ?? "")}`);
    expect(last.ids).toHaveLength(10);
    expect(last.text).toContain('"nextPageToken":""');
  });

  it("answers an empty listing with an empty list and nextPageToken \"\"", async () => {
    const appId = await createApp(server, "Empty");
    const page = await entitlementsPage(appId, "");
    expect(page.status).toBe(200);
    expect(JSON.parse(page.text)).toEqual({ list: [], nextPageToken: "" });
  });

  it("neither skips nor repeats pre-existing items when items are created during the walk", async () => {
    const appId = await createApp(server, "Moving");
    const before = seedEntitlements(appId, 95);
    const during: string[] = [];
    const walk = await walkEntitlements(appId, 10, (n) => {
      during.push(...seedEntitlements(appId, n % 2 === 0 ? 3 : 1, `New${n}`));
    });
    expect(new Set(walk.ids).size).toBe(walk.ids.length);
    expect(walk.ids.slice(0, before.length)).toEqual(before);
    for (const id of walk.ids.slice(before.length)) expect(during).toContain(id);
  });
});

describe("page_token", () => {
  let appId: string;
  let token: string;
  beforeAll(async () => {
    appId = await createApp(server, "Tokens");
    seedEntitlements(appId, 30);
    token = (await entitlementsPage(appId, "?page_size=10")).nextPageToken ?? "";
  });

  it("answers 400 to a tampered token", async () => {
    const [payload = "", mac = ""] = token.split(".");
    const flipped = (s: string) => (s[0] === "A" ? "B" : "A") + s.slice(1);
    for (const bad of [`${flipped(payload)}.${mac}`, `${payload}.${flipped(mac)}`, payload, "garbage", `.${mac}`]) {
      const res = await server.call("GET", `/api/v1/apps/${appId}/entitlements?page_token=${encodeURIComponent(bad)}`);
      expect(await answer(res)).toMatchObject({ status: 400, body: { code: "invalid_argument" } });
    }
  });

  it("answers 400 to a token made by re-encoding another key with the original MAC", async () => {
    const [, mac = ""] = token.split(".");
    const forged = `${Buffer.from("00000000-0000-7000-8000-000000000000").toString("base64url")}.${mac}`;
    const res = await server.call("GET", `/api/v1/apps/${appId}/entitlements?page_token=${encodeURIComponent(forged)}`);
    expect(res.status).toBe(400);
  });

  it("answers 400 to a token from another app's listing", async () => {
    const otherAppId = await createApp(server, "Other tokens");
    seedEntitlements(otherAppId, 30);
    const res = await server.call(
      "GET",
      `/api/v1/apps/${otherAppId}/entitlements?page_token=${encodeURIComponent(token)}`,
    );
    expect(await answer(res)).toMatchObject({ status: 400, body: { code: "invalid_argument" } });
  });

  it("answers 400 to a token from another kind of listing", async () => {
    seedUsers(30, (i) => `Token user ${i}`);
    const usersToken = (await rawPage(await server.call("GET", "/api/v1/users?page_size=10"), userIdOf)).nextPageToken;
    const res = await server.call("GET", `/api/v1/apps/${appId}/entitlements?page_token=${encodeURIComponent(usersToken ?? "")}`);
    expect(res.status).toBe(400);
    const back = await server.call("GET", `/api/v1/users?page_token=${encodeURIComponent(token)}`);
    expect(back.status).toBe(400);
  });

  it("accepts the token with another page_size (the token holds the position, not the size)", async () => {
    const res = await entitlementsPage(appId, `?page_size=20&page_token=${encodeURIComponent(token)}`);
    expect(res.status).toBe(200);
    expect(res.ids).toHaveLength(20);
    expect(res.nextPageToken).toBe("");
  });
});

describe("POST /api/v1/search/users (page fields in the body)", () => {
  const prefix = `Searchable-${Date.now()}`;
  let matching: string[];
  beforeAll(() => {
    // Interleave matching and non-matching users so the filter and the keyset both matter.
    matching = [];
    for (let i = 0; i < 100; i++) {
      matching.push(...seedUsers(1, () => `${prefix} ${i}`));
      seedUsers(1, () => `Someone else ${i}`);
    }
  });

  const search = async (body: unknown) =>
    rawPage(await server.call("POST", "/api/v1/search/users", body), userIdOf);

  it.each([
    ["no page size", {}, 25],
    ["pageSize 3", { pageSize: 3 }, 10],
    ["page_size 3", { page_size: 3 }, 10],
    ["pageSize 250", { pageSize: 250 }, 100],
    ["page_size 250", { page_size: 250 }, 100],
    ["pageSize beyond int32", { pageSize: 99999999999 }, 100],
    ["page_size beyond int32, as a string", { page_size: "99999999999" }, 100],
    ["pageSize below int32", { pageSize: -1e12 }, 10],
  ])("returns the clamped number of items for %s", async (_, paging, expected) => {
    const page = await search({ query: prefix, ...paging });
    expect(page.status).toBe(200);
    expect(page.ids).toHaveLength(expected);
  });

  it.each([[{ pageSize: "abc" }], [{ page_size: "abc" }], [{ pageSize: 1.5 }]])(
    "answers 400 to a non-integer page size %j",
    async (paging) => {
      const res = await server.call("POST", "/api/v1/search/users", { query: prefix, ...paging });
      expect(res.status).toBe(400);
    },
  );

  for (const [names, sizeKey, tokenKey] of [
    ["JSON names", "pageSize", "pageToken"],
    ["proto names", "page_size", "page_token"],
  ] as const) {
    it(`walks every matching user exactly once in creation order (${names}), the last page saying nextPageToken ""`, async () => {
      for (const size of [10, 25, 30]) {
        const ids: string[] = [];
        let token = "";
        let pages = 0;
        for (;;) {
          const page = await search({ query: prefix, [sizeKey]: size, [tokenKey]: token });
          expect(page.status).toBe(200);
          pages++;
          ids.push(...page.ids);
          if (page.nextPageToken === "") {
            expect(page.text).toContain('"nextPageToken":""');
            break;
          }
          token = page.nextPageToken ?? "";
          if (pages > 200) throw new Error("the walk does not end");
        }
        expect(ids).toEqual(matching);
        expect(pages).toBe(Math.ceil(100 / size));
      }
    });
  }

  it("neither skips nor repeats pre-existing matches when users are created during the walk", async () => {
    const ids: string[] = [];
    let token = "";
    do {
      const page = await search({ query: prefix, pageSize: 10, pageToken: token });
      ids.push(...page.ids);
      seedUsers(2, (i) => `${prefix} late ${i}`);
      token = page.nextPageToken ?? "";
    } while (token !== "");
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.slice(0, matching.length)).toEqual(matching);
  });

  it("answers 400 to a tampered token and to a token from another search", async () => {
    const first = await search({ query: prefix, pageSize: 10 });
    const token = first.nextPageToken ?? "";
    const tampered = `A${token.slice(1)}` === token ? `B${token.slice(1)}` : `A${token.slice(1)}`;
    expect((await server.call("POST", "/api/v1/search/users", { query: prefix, pageToken: tampered })).status).toBe(400);
    const other = await server.call("POST", "/api/v1/search/users", { query: "Someone else", pageToken: token });
    expect(await answer(other)).toMatchObject({ status: 400, body: { code: "invalid_argument" } });
    const listing = await server.call("GET", `/api/v1/users?page_token=${encodeURIComponent(token)}`);
    expect(listing.status).toBe(400);
  });

  it("takes a search's token for the same search in other ASCII case (which finds the same users)", async () => {
    const first = await search({ query: prefix, pageSize: 10 });
    const next = await search({ query: prefix.toUpperCase(), pageSize: 10, pageToken: first.nextPageToken });
    expect(next.status).toBe(200);
    expect(next.ids).toEqual(matching.slice(10, 20));
  });

  it("answers 400 to page fields in the query of the POST", async () => {
    const res = await server.call("POST", "/api/v1/search/users?page_size=10", { query: prefix });
    expect(res.status).toBe(400);
  });

  it("refuses a query over 4,000 characters as given, or an email over 1,000, as longer than any field they could match (a 100,000-character non-ASCII query held the thread 6 s)", async () => {
    // As given, before NFC, which is quadratic over combining marks (a 320 KB query took 4.6 s to refuse).
    const marks = `a${"\u0301\u0316".repeat(80_000)}`;
    for (const [field, value, limit] of [["query", `é${"x".repeat(4_000)}`, 4_000], ["query", marks, 4_000], ["email", `${"x".repeat(1_000)}@example.com`, 1_000]] as const) {
      const res = await server.call("POST", "/api/v1/search/users", { [field]: value });
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({ code: "invalid_argument", message: `${field} is longer than ${limit} characters` });
    }
    // A name of 600 "é"s (NFC) is found by the NFD query of 1,200 characters (it was refused over 1,000).
    const user = await server.call("POST", "/api/v1/users", { displayName: "é".repeat(600) });
    const { user: created } = (await user.json()) as { user: { id: string } };
    const found = await server.call("POST", "/api/v1/search/users", { query: "e\u0301".repeat(600) });
    expect(found.status).toBe(200);
    expect(((await found.json()) as { list: { id: string }[] }).list.map((u) => u.id)).toEqual([created.id]);
    // A name of 1,000 U+FB2C (three characters each in NFC) is found by itself (a limit of 2,000 in NFC refused it).
    const wide = await server.call("POST", "/api/v1/users", { displayName: "\uFB2C".repeat(1_000) });
    const { user: wideUser } = (await wide.json()) as { user: { id: string } };
    const foundWide = await server.call("POST", "/api/v1/search/users", { query: "\uFB2C".repeat(1_000) });
    expect(((await foundWide.json()) as { list: { id: string }[] }).list.map((u) => u.id)).toEqual([wideUser.id]);
  });

  it("answers an empty search with an empty list and nextPageToken \"\"", async () => {
    const page = await search({ query: "nobody-has-this-name" });
    expect(JSON.parse(page.text)).toEqual({ list: [], nextPageToken: "" });
  });
});

describe("a search over more users than one range", () => {
  it(`reads ${searchRangeRows} users at a time, gives the thread back between ranges, and finds matches across them`, async () => {
    const marker = `Rare-${Date.now()}`;
    const matches: string[] = [];
    for (let part = 0; part < 5; part++) {
      seedUsers(10_000, (i) => `Plain ${part}-${i}`);
      matches.push(...seedUsers(3, (i) => `${marker} ${part}-${i}`));
    }
    const order: string[] = [];
    const original = server.store.users.searchBetween.bind(server.store.users);
    const spy = vi.spyOn(server.store.users, "searchBetween").mockImplementation((...args) => {
      order.push("range");
      if (order.length === 1) setImmediate(() => order.push("other work"));
      return original(...args);
    });
    try {
      const found: string[] = [];
      let token = "";
      do {
        const page = await rawPage(await server.call("POST", "/api/v1/search/users", { query: marker, pageSize: 10, pageToken: token }), userIdOf);
        expect(page.status).toBe(200);
        found.push(...page.ids);
        token = page.nextPageToken ?? "";
      } while (token !== "");
      expect(found).toEqual(matches);
      // The first page (10 of 15 matches) read ranges until it had 11; another turn ran after the first range.
      expect(order.slice(0, 3)).toEqual(["range", "other work", "range"]);
    } finally {
      spy.mockRestore();
    }
  });
});

describe("searches at once", () => {
  it("take turns range by range: no turn of the event loop reads two ranges (each search yielding alone, eight read eight ranges a turn, and webhooks waited behind them all)", async () => {
    seedUsers(2 * searchRangeRows, (i) => `Turns ${i}`);
    let turn = 0;
    let ticking = true;
    const tick = () => {
      turn++;
      if (ticking) setImmediate(tick);
    };
    setImmediate(tick);
    const rangeTurns: number[] = [];
    const original = server.store.users.searchBetween.bind(server.store.users);
    const spy = vi.spyOn(server.store.users, "searchBetween").mockImplementation((...args) => {
      rangeTurns.push(turn);
      return original(...args);
    });
    try {
      const searches = Array.from({ length: 4 }, () => server.call("POST", "/api/v1/search/users", { query: "nobody-matches-this" }));
      for (const res of await Promise.all(searches)) expect(res.status).toBe(200);
    } finally {
      ticking = false;
      spy.mockRestore();
    }
    expect(rangeTurns.length).toBeGreaterThanOrEqual(4 * 2);
    expect(new Set(rangeTurns).size).toBe(rangeTurns.length);
  });
});

describe("a search its client left", () => {
  it("reads no further range (it read to the end of the table for nobody, ahead of the searches waiting their turn)", async () => {
    seedUsers(4 * searchRangeRows, (i) => `Left ${i}`);
    let ranges = 0;
    let rangesWhenLeft = 0;
    const client = new AbortController();
    const original = server.store.users.searchBetween.bind(server.store.users);
    const spy = vi.spyOn(server.store.users, "searchBetween").mockImplementation((...args) => {
      ranges++;
      if (ranges === 1) {
        rangesWhenLeft = ranges;
        client.abort();
      }
      return original(...args);
    });
    try {
      const search = fetch(`${server.url}/api/v1/search/users`, {
        method: "POST",
        headers: { ...server.headers, "content-type": "application/json" },
        body: JSON.stringify({ query: "nobody-matches-this" }),
        signal: client.signal,
      });
      await expect(search).rejects.toThrow();
      // A search after it runs once the one left has given up its turns.
      expect((await server.call("POST", "/api/v1/search/users", { query: "nobody-matches-this-either" })).status).toBe(200);
    } finally {
      spy.mockRestore();
    }
    const usersNow = Number(server.store.db.prepare("SELECT count(*) FROM users").pluck().get());
    const rangesOfOneSearch = Math.ceil(usersNow / searchRangeRows);
    // The one left read at most a range or two more (while its leaving reached the server); the second read them all.
    expect(ranges - rangesWhenLeft).toBeLessThanOrEqual(2 + rangesOfOneSearch);
    expect(rangesOfOneSearch).toBeGreaterThanOrEqual(4);
  });
});

describe("a search's query", () => {
  const searchIds = async (body: unknown) => (await rawPage(await server.call("POST", "/api/v1/search/users", body), userIdOf)).ids;

  it("is a substring of one field, in any case of any letter, NFC or NFD alike (it matched across fields, and only ASCII case)", async () => {
    const create = async (user: object) =>
      ((await (await server.call("POST", "/api/v1/users", user)).json()) as { user: { id: string } }).user.id;
    const ada = await create({ displayName: "Ada Quelace", email: "ada.q@example.net", username: "adaq" });
    const orjan = await create({ displayName: "Ørjan Ångström", email: "orjan@example.se", username: "" });
    const ecole = await create({ displayName: "\u00c9cole Quelace".normalize("NFD"), email: "", username: "" });
    expect(await searchIds({ query: "Quelace ada" })).toEqual([]); // name's end, email's start
    expect(await searchIds({ query: "net adaq" })).toEqual([]); // email's end, username's start
    expect(await searchIds({ query: "QUELACE" })).toEqual([ada, ecole]);
    expect(await searchIds({ query: "ørjan ång" })).toEqual([orjan]);
    expect(await searchIds({ query: "ÅNGSTRÖM" })).toEqual([orjan]);
    expect(await searchIds({ query: "\u00e9cole" })).toEqual([ecole]); // NFC query, NFD name
    expect(await searchIds({ query: "\u00c9cole".normalize("NFD") })).toEqual([ecole]);
    const odysseus = await create({ displayName: "ΟΔΥΣΣΕΥΣ", email: "", username: "" });
    expect(await searchIds({ query: "ΔΥΣ" })).toEqual([odysseus]); // a final sigma in the query, a medial one in the name
    expect(await searchIds({ query: "οδυσσευς" })).toEqual([odysseus]);
  });

  it("takes a search's token for the same query in another case of any letter (which finds the same users)", async () => {
    for (let i = 0; i < 12; i++) await server.call("POST", "/api/v1/users", { displayName: `Ærøskøbing ${i}` });
    const first = await rawPage(await server.call("POST", "/api/v1/search/users", { query: "ærøskøbing", pageSize: 10 }), userIdOf);
    expect(first.ids).toHaveLength(10);
    const next = await rawPage(
      await server.call("POST", "/api/v1/search/users", { query: "ÆRØSKØBING", pageSize: 10, pageToken: first.nextPageToken }),
      userIdOf,
    );
    expect(next.status).toBe(200);
    expect(next.ids).toHaveLength(2);
    expect(next.nextPageToken).toBe("");
  });
});

describe("a search by an exact email", () => {
  it("is an index lookup, whatever the case of the address, not a read of every user in ranges", async () => {
    const now = Date.now();
    const ids = [newId(), newId()];
    server.store.transaction(() => {
      server.store.users.insert({ id: ids[0] ?? "", displayName: "Grace", email: "Grace.Hopper@Example.com", username: "", createdAt: now, updatedAt: now });
      server.store.users.insert({ id: ids[1] ?? "", displayName: "Grace H", email: "grace.hopper@example.COM", username: "", createdAt: now, updatedAt: now });
    });
    const ranges = vi.spyOn(server.store.users, "searchBetween");
    const lookups = vi.spyOn(server.store.users, "searchByEmail");
    try {
      const page = await rawPage(await server.call("POST", "/api/v1/search/users", { email: "GRACE.HOPPER@example.com" }), userIdOf);
      expect(page.ids).toEqual(ids);
      const narrowed = await rawPage(await server.call("POST", "/api/v1/search/users", { email: "grace.hopper@example.com", query: "grace h" }), userIdOf);
      expect(narrowed.ids).toEqual([ids[1]]);
      expect(ranges).not.toHaveBeenCalled();
      expect(lookups).toHaveBeenCalledTimes(2);
    } finally {
      ranges.mockRestore();
      lookups.mockRestore();
    }
  });
});

describe("owners listing", () => {
  it("pages through owners without repeats", async () => {
    const appId = await createApp(server, "Owners paging");
    const entitlementId = await createEntitlement(server, appId);
    const users = seedUsers(23, (i) => `Owner ${i}`);
    for (const userId of users) {
      expect((await server.call("POST", ownersPath(appId, entitlementId), { userId })).status).toBe(200);
    }
    const ids: string[] = [];
    let token = "";
    do {
      const page = await rawPage(
        await server.call("GET", `${ownersPath(appId, entitlementId)}?page_size=10&page_token=${encodeURIComponent(token)}`),
        userIdOf,
      );
      ids.push(...page.ids);
      token = page.nextPageToken ?? "";
    } while (token !== "");
    expect(ids).toEqual(users);
    await createUser(server);
  });
});
