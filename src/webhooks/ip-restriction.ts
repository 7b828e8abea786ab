import type { WebhookTriggerConfig } from "../automations/trigger-config.js";
import { cidrsContain, compileCidrs, type CidrSet } from "../server/cidr.js";
import { Rejection } from "./rejection.js";

interface Compiled {
  cidrs: readonly string[];
  list: CidrSet;
}

/** Stage 2: the allowed-CIDR check, with each listener's list compiled once and kept. */
export class IpRestrictions {
  private readonly compiled = new Map<string, Compiled>();

  constructor(private readonly maxListeners = 10_000) {}

  check(trigger: WebhookTriggerConfig, sourceIp: string): Rejection | undefined {
    if (!trigger.ipRestrictionEnabled) return undefined;
    if (cidrsContain(this.listFor(trigger), sourceIp)) return undefined;
    return new Rejection(403, "source_ip_not_allowed", `source address ${sourceIp} is not in the listener's allowed CIDRs`);
  }

  private listFor(trigger: WebhookTriggerConfig): CidrSet {
    const cached = this.compiled.get(trigger.listenerId);
    if (cached !== undefined && sameList(cached.cidrs, trigger.allowedCidrs)) return cached.list;
    if (this.compiled.size >= this.maxListeners) this.compiled.clear();
    const list = compileCidrs(trigger.allowedCidrs);
    this.compiled.set(trigger.listenerId, { cidrs: [...trigger.allowedCidrs], list });
    return list;
  }
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((value, i) => value === b[i]);
}
