import { createHmac, timingSafeEqual } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";

/**
 * Opaque cursor tokens: `<base64url last key>.<base64url MAC>`. The MAC covers the key and the
 * listing's fingerprint (which listing, with which filters), so a token that was altered, or that
 * came from another listing (another app's entitlements, another search), is refused with 400.
 */
export class PageTokenCodec {
  constructor(private readonly key: Buffer) {}

  encode(listing: string, lastKey: string): string {
    const payload = Buffer.from(lastKey, "utf8").toString("base64url");
    return `${payload}.${this.mac(listing, payload).toString("base64url")}`;
  }

  /** The last key of the previous page, or undefined for a first request (empty token). */
  decode(listing: string, token: string): string | undefined {
    if (token === "") return undefined;
    const dot = token.indexOf(".");
    const payload = token.slice(0, dot);
    const given = Buffer.from(token.slice(dot + 1), "base64url");
    const expected = this.mac(listing, payload);
    if (dot <= 0 || given.length !== expected.length || !timingSafeEqual(given, expected)) {
      throw new ConnectError(
        "page_token is not valid for this listing: pass the nextPageToken of the previous page unchanged, with the same filters",
        Code.InvalidArgument,
      );
    }
    return Buffer.from(payload, "base64url").toString("utf8");
  }

  private mac(listing: string, payload: string): Buffer {
    return createHmac("sha256", this.key).update(listing).update("\0").update(payload).digest().subarray(0, 16);
  }
}
