import { validate as isUuid } from "uuid";

/**
 * A set of (listener id, event id) pairs held in typed arrays: the in-memory unique index of the
 * event records (WebhookEventsRepository). Event ids are UUIDs (stage 4 accepts UUID v4 only),
 * kept as their 128 bits; listener ids are numbered as they are first seen.
 *
 * Why not SQLite's own unique index (what migration 005 had): the sender's random ids put every
 * new key on a page of its own, so each accepted webhook wrote one more WAL frame, read a leaf
 * the page cache seldom held once the table had grown, and gave the checkpoint one more page to
 * copy: with a million records stored, 13-27% of the webhooks a second (bench/README.md).
 * Why not a `Set` of strings: 160 MiB for 1,300,000 pairs, each an object the garbage collector
 * marks, and a rehash that stops the thread as it grows (half-load p99 of 110-208 ms); and not an
 * in-memory SQLite table either: every COMMIT of an in-memory database walks all its pages.
 *
 * 64 shards (by the top bits of the hash), each an open-addressing table with linear probing at
 * most 70% full (20 bytes a slot: about 40 MiB for 1,300,000 pairs); a deletion shifts the entries
 * after it back (no tombstones), so lookups stay short however many pairs come and go. A shard
 * grows by doubling, at once; as the shards fill alike, the set grows in 64 steps of about 1 ms
 * each (one table of all 1,468,006 pairs took 77 ms of the thread to rehash). A shard that falls
 * under a quarter of that (17.5% full) as records expire halves, so the memory of a burst is given
 * back (35% full after either step: a pair added or deleted at the edge does not resize again).
 */
export class EventKeyIndex {
  private readonly listenerNumbers = new Map<string, number>();
  private readonly shards = Array.from({ length: shardCount }, () => new Shard());
  /** The event id being looked up, parsed (reused: no allocation per call). */
  private readonly words = new Uint32Array(4);

  get size(): number {
    return this.shards.reduce((sum, shard) => sum + shard.size, 0);
  }

  /** The bytes its slots take. */
  get bytes(): number {
    return this.shards.reduce((sum, shard) => sum + shard.bytes, 0);
  }

  /** Whether the pair is in the set (an event id that is not a UUID never is). */
  has(listenerId: string, eventId: string): boolean {
    const listener = this.listenerNumbers.get(listenerId);
    if (listener === undefined || !parseUuid(eventId, this.words)) return false;
    const hash = hashOf(listener, this.words, 0);
    return shardOf(this.shards, hash).find(listener, this.words, hash) >= 0;
  }

  /** Adds the pair; false if it was there already. Throws for an event id that is not a UUID. */
  add(listenerId: string, eventId: string): boolean {
    const added = this.addIfUuid(listenerId, eventId);
    if (added === undefined) throw new TypeError(`event ids are UUIDs: ${JSON.stringify(eventId)}`);
    return added;
  }

  /**
   * Adds the pair; false if it was there already, undefined (nothing added) for an event id that
   * is not a UUID: no pair with it can be looked up, so there is nothing to hold.
   */
  addIfUuid(listenerId: string, eventId: string): boolean | undefined {
    if (!parseUuid(eventId, this.words)) return undefined;
    const listener = this.numberOf(listenerId);
    const hash = hashOf(listener, this.words, 0);
    return shardOf(this.shards, hash).add(listener, this.words, hash);
  }

  /** Removes the pair; false if it was not there. */
  delete(listenerId: string, eventId: string): boolean {
    const listener = this.listenerNumbers.get(listenerId);
    if (listener === undefined || !parseUuid(eventId, this.words)) return false;
    const hash = hashOf(listener, this.words, 0);
    return shardOf(this.shards, hash).delete(listener, this.words, hash);
  }

  private numberOf(listenerId: string): number {
    let listener = this.listenerNumbers.get(listenerId);
    if (listener === undefined) {
      listener = this.listenerNumbers.size + 1;
      this.listenerNumbers.set(listenerId, listener);
    }
    return listener;
  }
}

const shardBits = 6;
const shardCount = 1 << shardBits;

/** The shard of an entry: its hash's top bits (the slot within the shard is its low bits). */
function shardOf(shards: readonly Shard[], hash: number): Shard {
  return shards[hash >>> (32 - shardBits)]!;
}

/** One open-addressing table; its slot is the hash's low bits (the shard was chosen by its top bits). */
class Shard {
  /** 5 words a slot: the listener's number (0: the slot is free), then the event id's 4 words. */
  private slots = new Uint32Array(minCapacity * 5);
  private mask = minCapacity - 1;
  private count = 0;

  get size(): number {
    return this.count;
  }

  get bytes(): number {
    return this.slots.byteLength;
  }

  /** The slot holding the entry (`hash` is hashOf it), or -1. */
  find(listener: number, words: Uint32Array, hash: number): number {
    const { slots, mask } = this;
    for (let slot = hash & mask; ; slot = (slot + 1) & mask) {
      const at = slot * 5;
      const occupant = slots[at];
      if (occupant === 0) return -1;
      if (occupant === listener && slots[at + 1] === words[0] && slots[at + 2] === words[1] && slots[at + 3] === words[2] && slots[at + 4] === words[3]) {
        return slot;
      }
    }
  }

  add(listener: number, words: Uint32Array, hash: number): boolean {
    if (this.find(listener, words, hash) >= 0) return false;
    if ((this.count + 1) * 10 > (this.mask + 1) * 7) this.resize((this.mask + 1) * 2);
    this.put(listener, words, 0, hash);
    this.count++;
    return true;
  }

  delete(listener: number, words: Uint32Array, hash: number): boolean {
    let free = this.find(listener, words, hash);
    if (free < 0) return false;
    // Backward-shift deletion: walk the run after the freed slot and move back every entry whose
    // home slot is not between the freed slot and its own (it would be unreachable past a hole).
    const { slots, mask } = this;
    for (let next = (free + 1) & mask; slots[next * 5] !== 0; next = (next + 1) & mask) {
      const home = hashOf(slots[next * 5]!, slots, next * 5 + 1) & mask;
      const stays = free <= next ? free < home && home <= next : free < home || home <= next;
      if (stays) continue;
      slots.copyWithin(free * 5, next * 5, next * 5 + 5);
      free = next;
    }
    slots[free * 5] = 0;
    this.count--;
    const capacity = mask + 1;
    if (capacity > minCapacity && this.count * 40 < capacity * 7) this.resize(capacity / 2);
    return true;
  }

  /** Writes the entry (its words at `offset` of `words`, its hash `hash`) into the first free slot from its home. */
  private put(listener: number, words: Uint32Array, offset: number, hash: number): void {
    const { slots, mask } = this;
    let slot = hash & mask;
    while (slots[slot * 5] !== 0) slot = (slot + 1) & mask;
    const at = slot * 5;
    slots[at] = listener;
    slots[at + 1] = words[offset]!;
    slots[at + 2] = words[offset + 1]!;
    slots[at + 3] = words[offset + 2]!;
    slots[at + 4] = words[offset + 3]!;
  }

  /** Moves every entry into a table of `capacity` slots (a power of two). */
  private resize(capacity: number): void {
    const old = this.slots;
    this.slots = new Uint32Array(capacity * 5);
    this.mask = capacity - 1;
    for (let at = 0; at < old.length; at += 5) {
      if (old[at] !== 0) this.put(old[at]!, old, at + 1, hashOf(old[at]!, old, at + 1));
    }
  }
}

/** Slots a shard starts with (64 shards: 80 KiB in all). */
const minCapacity = 64;

/**
 * Mixes all 128 bits with the listener (murmur3's finaliser): a v4 id is random throughout, but
 * the hash does not rely on it (a time-ordered id would cluster on its first word).
 */
function hashOf(listener: number, words: Uint32Array, offset: number): number {
  let h = words[offset]! ^ words[offset + 1]! ^ words[offset + 2]! ^ words[offset + 3]! ^ Math.imul(listener, 0x9e3779b1);
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/**
 * A UUID's 128 bits into `words` (any case: the same UUID); false for anything else (RFC 9562,
 * any version: what the index can hold).
 */
function parseUuid(text: string, words: Uint32Array): boolean {
  if (!isUuid(text)) return false;
  words[0] = parseInt(text.slice(0, 8), 16);
  words[1] = parseInt(text.slice(9, 13) + text.slice(14, 18), 16);
  words[2] = parseInt(text.slice(19, 23) + text.slice(24, 28), 16);
  words[3] = parseInt(text.slice(28, 36), 16);
  return true;
}
