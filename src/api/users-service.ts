import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { Users } from "../../gen/svc/api/user/v1/user_pb.js";
import { principalKey } from "../auth/principal.js";
import { checkRoleChange, checkUserInReach, normalizeRoles } from "../auth/role-grants.js";
import { TakeTurns } from "../event-loop.js";
import { listingFingerprint, paginate, paginateAsync } from "../pagination/index.js";
import { newId } from "../store/ids.js";
import type { Store } from "../store/store.js";
import { searchFolded, type User, type UserSearch } from "../store/users-repository.js";
import { invalidArgument, limitText, maxTextFieldLength, notFound, requireField } from "./errors.js";
import { userMessage } from "./resource-messages.js";
import type { ServiceContext } from "./service-context.js";
import { fieldsToWrite } from "./update-mask.js";

function checkEmail(email: string): string {
  if (email !== "" && !/^[^\s@]+@[^\s@]+$/.test(email)) {
    throw invalidArgument(`email ${JSON.stringify(email)} is not an email address`);
  }
  return email;
}

export function usersService({ store, clock, pageTokens }: ServiceContext): ServiceImpl<typeof Users> {
  const searchTurns = new TakeTurns();
  const getOrThrow = (id: string) => {
    const user = store.users.get(id);
    if (user === undefined) throw notFound("user", id);
    return user;
  };

  return {
    create(req, context) {
      const displayName = requireField(req.displayName, "displayName");
      const roles = normalizeRoles(req.roles, "roles");
      checkRoleChange(context.values.get(principalKey), [], roles);
      const now = clock.now();
      const user = {
        id: newId(),
        displayName,
        email: checkEmail(limitText(req.email, "email")),
        username: limitText(req.username, "username"),
        createdAt: now,
        updatedAt: now,
        roles,
      };
      store.transaction(() => store.users.insert(user));
      return { user: userMessage(user) };
    },

    get(req) {
      return { user: userMessage(getOrThrow(requireField(req.id, "id"))) };
    },

    list(req) {
      const page = paginate(pageTokens, listingFingerprint("users"), req, (after, limit) =>
        store.users.listAfter(after, limit),
      );
      return { list: page.items.map(userMessage), nextPageToken: page.nextPageToken };
    },

    update(req, context) {
      const given = req.user;
      const id = requireField(given?.id, "user.id");
      return store.transaction(() => {
        const user = getOrThrow(id);
        checkUserInReach(context.values.get(principalKey), user.roles);
        const write = fieldsToWrite(
          req.updateMask,
          { displayName: "display_name", email: "email", username: "username", roles: "roles" },
          {
            displayName: given?.displayName ?? "",
            email: given?.email ?? "",
            username: given?.username ?? "",
            // Without a mask, an empty list leaves the roles alone; name "roles" in the mask to clear them.
            roles: (given?.roles.length ?? 0) > 0 ? "given" : "",
          },
        );
        if (write.has("displayName")) user.displayName = requireField(given?.displayName, "user.displayName");
        if (write.has("email")) user.email = checkEmail(limitText(given?.email, "user.email"));
        if (write.has("username")) user.username = limitText(given?.username, "user.username");
        if (write.has("roles")) {
          const roles = normalizeRoles(given?.roles ?? [], "user.roles");
          checkRoleChange(context.values.get(principalKey), user.roles, roles);
          user.roles = roles;
        }
        user.updatedAt = clock.now();
        store.users.update(user);
        return { user: userMessage(user) };
      });
    },

    async search(req, context) {
      // Longer than any field could match, refused as the fields' limits are. A field holds at
      // most 1,000 characters, and the query is compared in NFC and lower case, which can make
      // either longer or shorter (an NFD query of 600 "é"s, 1,200 characters, finds a name of 600;
      // U+FB2C is three in NFC): four times that leaves room. Checked as given, before the query
      // is put in NFC, which takes quadratic time over a run of combining marks (320 KB: 4.6 s).
      const search = { query: limitText(req.query, "query", maxQueryLength), email: limitText(req.email, "email") };
      const page = await paginateAsync(
        pageTokens,
        // The query is compared folded and the email in any ASCII case, so the token is too.
        listingFingerprint("users_search", searchFolded(search.query), lowerAscii(search.email)),
        req,
        (after, limit) => searchInRanges(store, searchTurns, search, after, limit, context.signal),
      );
      return { list: page.items.map(userMessage), nextPageToken: page.nextPageToken };
    },
  };
}

/** The longest users search `query`: four times a field's most (see search). */
const maxQueryLength = 4 * maxTextFieldLength;

const lowerAscii = (text: string) => text.replace(/[A-Z]+/g, (upper) => upper.toLowerCase());

/**
 * Rows a search reads before it gives the thread back: a substring filter reads every row until
 * the page is full, and a rare one read all 1,000,000 users of a large tenant at once (0.3-0.5 s
 * with every other request waiting; 20 such searches 6 s). About 8 ms a range on the development VM.
 */
export const searchRangeRows = 20_000;

/**
 * Up to `limit` users matching `search` after `after`, read a range of searchRangeRows at a time,
 * each in its turn among every search's ranges (`turns`), with a turn of the event loop before it.
 * A call its client left (or whose deadline passed) reads no further range: it went on to the end
 * of the table for nobody, ahead of the searches waiting their turn.
 */
async function searchInRanges(
  store: Store,
  turns: TakeTurns,
  search: UserSearch,
  after: string | undefined,
  limit: number,
  signal: AbortSignal,
): Promise<User[]> {
  if (search.email !== "") return store.users.searchByEmail(search, after, limit); // an index lookup
  const found: User[] = [];
  let from = after;
  for (;;) {
    const through = await turns.take(() => {
      if (signal.aborted) throw ConnectError.from(signal.reason, Code.Canceled);
      const end = store.users.idAfter(from, searchRangeRows);
      found.push(...store.users.searchBetween(search, from, end, limit - found.length));
      return end;
    });
    if (found.length >= limit || through === undefined) return found;
    from = through;
  }
}
