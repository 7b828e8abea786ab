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

/**
 * The network a CIDR with host bits set names (`10.0.0.0/8` for `10.0.0.1/8`), undefined when it
 * has none set (or is no CIDR). BlockList matches such a range as its network, so a typo of an
 * address (`10.0.0.1/8` for `/32`) silently allows the whole network.
 */
export function networkOfHostBits(text: string): string | undefined {
  const cidr = parseCidr(text);
  if (cidr === undefined) return undefined;
  const bits = cidr.family === "ipv4" ? 32 : 128;
  const value = addressValue(cidr.address, cidr.family);
  const hostMask = (1n << BigInt(bits - cidr.prefix)) - 1n;
  if ((value & hostMask) === 0n) return undefined;
  return `${formatAddress(value & ~hostMask, cidr.family)}/${cidr.prefix}`;
}

/** A valid address (isIP) as its number. */
function addressValue(address: string, family: IpFamily): bigint {
  if (family === "ipv4") return address.split(".").reduce((value, part) => (value << 8n) | BigInt(part), 0n);
  let text = address.toLowerCase().replace(/%.*$/, "");
  const embedded = /(\d+\.\d+\.\d+\.\d+)$/.exec(text); // ::ffff:10.1.2.3
  if (embedded !== null) {
    const v4 = addressValue(embedded[1] ?? "", "ipv4");
    text = `${text.slice(0, embedded.index)}${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`;
  }
  const [head = "", tail] = text.split("::");
  const headGroups = head === "" ? [] : head.split(":");
  const tailGroups = tail === undefined || tail === "" ? [] : tail.split(":");
  const groups = tail === undefined ? headGroups : [...headGroups, ...Array<string>(8 - headGroups.length - tailGroups.length).fill("0"), ...tailGroups];
  return groups.reduce((value, group) => (value << 16n) | BigInt(`0x${group}`), 0n);
}

function formatAddress(value: bigint, family: IpFamily): string {
  if (family === "ipv4") return [24n, 16n, 8n, 0n].map((shift) => ((value >> shift) & 0xffn).toString()).join(".");
  const groups = [112n, 96n, 80n, 64n, 48n, 32n, 16n, 0n].map((shift) => ((value >> shift) & 0xffffn).toString(16));
  return new URL(`http://[${groups.join(":")}]`).hostname.slice(1, -1); // the WHATWG URL parser writes it compressed
}

/**
 * A matcher for a list of ranges: IPv4 addresses are matched against the IPv4 ranges (and the
 * IPv6 ranges of IPv4-mapped addresses, `::ffff:10.0.0.0/104`), IPv6 addresses against the IPv6
 * ranges. One BlockList for both matched an IPv4 address as `::ffff:a.b.c.d` against every IPv6
 * range, so `::/64` (what the host-bits refusal suggests for `::1/64`) let in every IPv4 sender.
 */
export interface CidrSet {
  v4: BlockList;
  v6: BlockList;
}

/** A matcher for a list of already validated CIDRs (see parseCidr). */
export function compileCidrs(cidrs: readonly string[]): CidrSet {
  const set = { v4: new BlockList(), v6: new BlockList() };
  for (const text of cidrs) {
    const cidr = parseCidr(text);
    if (cidr === undefined) throw new Error(`invalid CIDR ${JSON.stringify(text)}`);
    if (cidr.family === "ipv4") {
      set.v4.addSubnet(cidr.address, cidr.prefix, "ipv4");
      continue;
    }
    set.v6.addSubnet(cidr.address, cidr.prefix, "ipv6");
    const mapped = mappedIpv4Range(cidr);
    if (mapped !== undefined) set.v4.addSubnet(mapped.address, mapped.prefix, "ipv4");
  }
  return set;
}

/** The IPv4 range an IPv6 range of IPv4-mapped addresses stands for (`::ffff:10.0.0.0/104`: `10.0.0.0/8`). */
function mappedIpv4Range(cidr: Cidr): { address: string; prefix: number } | undefined {
  if (cidr.prefix < 96) return undefined;
  const value = addressValue(cidr.address, "ipv6");
  if (value >> 32n !== 0xffffn) return undefined;
  return { address: formatAddress(value & 0xffffffffn, "ipv4"), prefix: cidr.prefix - 96 };
}

/** `::ffff:10.1.2.3` (an IPv4 peer on a dual-stack socket) is the IPv4 address it wraps. */
export function normalizeIp(address: string): string {
  const lower = address.toLowerCase();
  if (lower.startsWith("::ffff:") && isIP(lower.slice(7)) === 4) return lower.slice(7);
  return address;
}

/** True when the address is in the list; false for anything that is not an IP address. */
export function cidrsContain(list: CidrSet, address: string): boolean {
  const plain = normalizeIp(address); // an IPv4-mapped address is its IPv4 address
  const version = isIP(plain);
  if (version === 0) return false;
  return version === 4 ? list.v4.check(plain, "ipv4") : list.v6.check(plain, "ipv6");
}
