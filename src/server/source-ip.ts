import { isIP } from "node:net";
import { cidrsContain, compileCidrs, normalizeIp, type CidrSet } from "./cidr.js";

/**
 * The address a request comes from: the TCP peer, unless the peer is a trusted proxy; then the
 * right-most `X-Forwarded-For` entry that is not itself a trusted proxy (entries to its left are
 * written by the client and can be forged). An entry that is not an IP address is returned as is,
 * so that it matches no allowed CIDR.
 */
export class SourceIpResolver {
  private readonly trusted: CidrSet | undefined;

  constructor(trustedProxies: readonly string[]) {
    this.trusted = trustedProxies.length === 0 ? undefined : compileCidrs(trustedProxies);
  }

  resolve(peerAddress: string, forwardedFor: string | string[] | undefined): string {
    const peer = normalizeIp(peerAddress);
    const trusted = this.trusted;
    if (trusted === undefined || forwardedFor === undefined || !cidrsContain(trusted, peer)) return peer;
    const hops = (Array.isArray(forwardedFor) ? forwardedFor.join(",") : forwardedFor)
      .split(",")
      .map((hop) => parseHop(hop.trim()))
      .filter((hop) => hop !== "");
    let source = peer;
    for (let i = hops.length - 1; i >= 0; i--) {
      source = hops[i] ?? source;
      if (!cidrsContain(trusted, source)) break;
    }
    return source;
  }
}

/** `203.0.113.7`, `203.0.113.7:4711`, `[2001:db8::1]:4711` or `2001:db8::1` -> the address. */
function parseHop(hop: string): string {
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(hop);
  if (bracketed?.[1] !== undefined) return normalizeIp(bracketed[1]);
  const withPort = /^(\d{1,3}(?:\.\d{1,3}){3}):\d+$/.exec(hop);
  if (withPort?.[1] !== undefined) return withPort[1];
  return isIP(hop) === 0 ? hop : normalizeIp(hop);
}
