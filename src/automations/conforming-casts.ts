import { create } from "@bufbuild/protobuf";
import { DurationSchema, TimestampSchema } from "@bufbuild/protobuf/wkt";
import { celFunc, CelScalar, celUint, objectType } from "@bufbuild/cel";

/**
 * cel-es (0.6.1) overloads that answer what the CEL spec and cel-go do not, replaced by the
 * environment's own (a function given to `celEnv` with the same name and argument types takes
 * the standard one's place):
 *
 * - `timestamp(int)` read its argument as milliseconds: `timestamp(1700000000)` was
 *   1970-01-20T16:13:20Z. The spec's argument is Unix seconds (cel-go: 2023-11-14T22:13:20Z), in
 *   the range of a timestamp (years 1 to 9999).
 * - `int(string)` and `uint(string)` took what JavaScript's `BigInt` takes: `int('')` was 0,
 *   `int(' 12 ')` 12, `int('0x10')` 16, and `int('1.5')` failed with "Cannot convert 1.5 to a
 *   BigInt". cel-go takes base-10 digits only (Go's strconv), with a sign for int only.
 * - `double(string)` was JavaScript's `Number`: `double('abc')` was NaN and `double('')` 0. Here,
 *   as Go's strconv.ParseFloat: a decimal number within a double's range (`1e400` is an error),
 *   or inf and infinity with a sign or none and nan, in any case.
 * - `duration(string)` took `''` and a sign alone (`'-'`) as 0s and refused `'1μs'` with the
 *   Greek mu: as Go's time.ParseDuration (cel-go), a number with a unit is required but for a
 *   lone 0, and µs is written with either mu.
 */
export const conformingCasts = [
  celFunc("timestamp", [CelScalar.INT], objectType(TimestampSchema), (seconds) => {
    if (seconds < minTimestampSeconds || seconds > maxTimestampSeconds) throw new Error(`timestamp(${seconds}) is out of range (years 1 to 9999)`);
    return create(TimestampSchema, { seconds, nanos: 0 });
  }),
  celFunc("int", [CelScalar.STRING], CelScalar.INT, (text) => {
    if (!/^[+-]?\d+$/.test(text)) throw new Error(`cannot convert ${quoted(text)} to int`);
    const value = BigInt(text);
    if (value < minInt64 || value > maxInt64) throw new Error("int overflow during type conversion");
    return value;
  }),
  celFunc("uint", [CelScalar.STRING], CelScalar.UINT, (text) => {
    if (!/^\d+$/.test(text)) throw new Error(`cannot convert ${quoted(text)} to uint`); // ParseUint takes no sign
    const value = BigInt(text);
    if (value > maxUint64) throw new Error("uint overflow during type conversion");
    return celUint(value);
  }),
  celFunc("double", [CelScalar.STRING], CelScalar.DOUBLE, (text) => {
    if (/^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(text)) {
      const value = Number(text);
      // ParseFloat's ErrRange, which cel-go answers with an error, not Infinity.
      if (!Number.isFinite(value)) throw new Error(`cannot convert ${quoted(text)} to double: out of range`);
      return value;
    }
    if (/^[+-]?inf(inity)?$/i.test(text)) return text.startsWith("-") ? -Infinity : Infinity;
    if (/^nan$/i.test(text)) return NaN; // unsigned, as ParseFloat takes it
    throw new Error(`cannot convert ${quoted(text)} to double`);
  }),
  celFunc("duration", [CelScalar.STRING], objectType(DurationSchema), (text) => {
    const nanos = durationNanos(text);
    if (nanos === undefined) throw new Error(`cannot convert ${quoted(text)} to duration (numbers with units ns, us, ms, s, m, h, and a sign or none: "1h30m", "-1.5s")`);
    if (nanos < minInt64 || nanos > maxInt64) throw new Error("duration out of range"); // cel-go's: time.Duration's int64 nanoseconds
    return create(DurationSchema, { seconds: nanos / nanosPerSecond, nanos: Number(nanos % nanosPerSecond) });
  }),
];

const nanosPerSecond = 1_000_000_000n;
const nanosPerUnit: Record<string, bigint> = { ns: 1n, us: 1_000n, "µs": 1_000n, "μs": 1_000n, ms: 1_000_000n, s: nanosPerSecond, m: 60n * nanosPerSecond, h: 3_600n * nanosPerSecond };
const durationPart = String.raw`(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)`;
const durationText = new RegExp(`^[+-]?(?:${durationPart})+$`);

/** The nanoseconds Go's time.ParseDuration reads in `text` (a fraction finer than 1 ns dropped), undefined when it is none. */
function durationNanos(text: string): bigint | undefined {
  if (/^[+-]?0$/.test(text)) return 0n;
  if (!durationText.test(text)) return undefined;
  let total = 0n;
  for (const [, number = "", unit = ""] of text.matchAll(new RegExp(durationPart, "g"))) {
    const [whole = "", fraction = ""] = number.split(".");
    const perUnit = nanosPerUnit[unit] ?? 0n;
    total += BigInt(whole || "0") * perUnit + (BigInt(fraction || "0") * perUnit) / 10n ** BigInt(fraction.length);
  }
  return text.startsWith("-") ? -total : total;
}

const minTimestampSeconds = -62_135_596_800n; // 0001-01-01T00:00:00Z
const maxTimestampSeconds = 253_402_300_799n; // 9999-12-31T23:59:59Z
/** CEL's int and uint ranges (int64, uint64). */
export const minInt64 = -(2n ** 63n);
export const maxInt64 = 2n ** 63n - 1n;
export const maxUint64 = 2n ** 64n - 1n;

/** The text as the error shows it: quoted, and cut at 64 characters. */
function quoted(text: string): string {
  return JSON.stringify(text.length > 64 ? `${text.slice(0, 64)}…` : text);
}
