import { BlockList, isIP } from "node:net";

export type IpFamily = "ipv4" | "ipv6";

export interface Cidr {
  address: string;
  prefix: number;
  family: IpFamily;
}

/** Parses `203.0.113.0/24`, `2001:db8::/32`, or a bare address (a single host); undefined when malformed. */
export function parseCidr(text: string): Cidr | undefined {
  const slash = text.indexOf("/");
  const address = slash === -1 ? text : text.slice(0, slash);
  const version = isIP(address);
  if (version === 0) return undefined;
  const family: IpFamily = version === 4 ? "ipv4" : "ipv6";
  const max = version === 4 ? 32 : 128;
  if (slash === -1) return { address, prefix: max, family };
  const prefixText = text.slice(slash + 1);
  if (!/^\d{1,3}$/.test(prefixText)) return undefined;
  const prefix = Number(prefixText);
  if (prefix > max) return undefined;
  return { address, prefix, family };
}

/** A matcher for a list of already validated CIDRs (see parseCidr). */
export function compileCidrs(cidrs: readonly string[]): BlockList {
  const list = new BlockList();
  for (const text of cidrs) {
    const cidr = parseCidr(text);
    if (cidr === undefined) throw new Error(`invalid CIDR ${JSON.stringify(text)}`);
    list.addSubnet(cidr.address, cidr.prefix, cidr.family);
  }
  return list;
}

/** `::ffff:10.1.2.3` (an IPv4 peer on a dual-stack socket) is the IPv4 address it wraps. */
export function normalizeIp(address: string): string {
  const lower = address.toLowerCase();
  if (lower.startsWith("::ffff:") && isIP(lower.slice(7)) === 4) return lower.slice(7);
  return address;
}

/** True when the address is in the list; false for anything that is not an IP address. */
export function cidrsContain(list: BlockList, address: string): boolean {
  const version = isIP(address);
  if (version === 0) return false;
  return list.check(address, version === 4 ? "ipv4" : "ipv6");
}
