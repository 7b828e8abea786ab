import { celFunc, celMethod, CelScalar, objectType } from "@bufbuild/cel";
import { fromJson } from "@bufbuild/protobuf";
import { TimestampSchema, type Timestamp } from "@bufbuild/protobuf/wkt";

/**
 * cel-es (0.6.1) timestamp functions that answer what the CEL spec and cel-go do not, replaced as
 * the casts are (conforming-casts.ts):
 *
 * - The accessors (`getHours`, `getDayOfYear`, ...) built a local `Date` from the wall clock, so
 *   their answers followed the server's time zone: with `TZ=America/New_York`,
 *   `timestamp('2024-03-10T02:30:00Z').getHours()` was 3 (an hour in New York's DST gap) and
 *   `getDayOfYear()` one day short after a DST change; and years 1 to 99 read as 1901 to 1999.
 *   Here the wall clock is computed from the instant alone: in UTC, at a fixed offset, or in an
 *   IANA zone through Intl, whatever the server's zone.
 * - `timestamp(string)` took a date that does not exist and rolled it over (`2024-02-30` was
 *   March 1st, hour 24 the next day): an error here, as Go's time.Parse gives cel-go.
 */
export const conformingTime = [
  ...accessor("getFullYear", (wall) => wall.getUTCFullYear()),
  ...accessor("getMonth", (wall) => wall.getUTCMonth()),
  ...accessor("getDate", (wall) => wall.getUTCDate()),
  ...accessor("getDayOfMonth", (wall) => wall.getUTCDate() - 1),
  ...accessor("getDayOfWeek", (wall) => wall.getUTCDay()),
  ...accessor("getDayOfYear", (wall) => Math.floor((wall.getTime() - utcDate(wall.getUTCFullYear(), 0, 1).getTime()) / dayMs)),
  ...accessor("getHours", (wall) => wall.getUTCHours()),
  ...accessor("getMinutes", (wall) => wall.getUTCMinutes()),
  ...accessor("getSeconds", (wall) => wall.getUTCSeconds()),
  ...accessor("getMilliseconds", (wall) => wall.getUTCMilliseconds()),
  celFunc("timestamp", [CelScalar.STRING], objectType(TimestampSchema), (text) => {
    const fields = rfc3339.exec(text);
    if (fields !== null) {
      const [year, month, day, hour] = fields.slice(1, 5).map(Number) as [number, number, number, number];
      if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month)) throw new Error(`Failed to parse timestamp: day out of range in ${JSON.stringify(text)}`);
      if (hour > 23) throw new Error(`Failed to parse timestamp: hour out of range in ${JSON.stringify(text)}`);
    }
    try {
      return fromJson(TimestampSchema, text);
    } catch (e) {
      throw new Error(`Failed to parse timestamp: ${e instanceof Error ? e.message : String(e)}`);
    }
  }),
];

const dayMs = 86_400_000;
/** RFC 3339 as protobuf's JSON takes it; its date and hour are checked here, the rest by fromJson. */
const rfc3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;

/** The method with and without a time zone argument, returning an int. */
function accessor(name: string, read: (wall: Date) => number) {
  return [
    celMethod(name, objectType(TimestampSchema), [], CelScalar.INT, function (this: { message: Timestamp }) {
      return BigInt(read(wallClock(this.message, undefined)));
    }),
    celMethod(name, objectType(TimestampSchema), [CelScalar.STRING], CelScalar.INT, function (this: { message: Timestamp }, zone) {
      return BigInt(read(wallClock(this.message, zone)));
    }),
  ];
}

/**
 * A Date whose UTC fields are the wall clock of `timestamp` in `zone`: UTC when absent or empty (as
 * cel-go's time.LoadLocation("")), a fixed offset such as `+05:30` or `-00:30`, or an IANA name.
 */
function wallClock(timestamp: Timestamp, zone: string | undefined): Date {
  const ms = Number(timestamp.seconds) * 1000 + Math.floor(timestamp.nanos / 1_000_000);
  if (zone === undefined || zone === "" || zone === "UTC") return new Date(ms);
  const offset = /^([+-]?)(\d\d):(\d\d)$/.exec(zone);
  if (offset !== null) {
    const minutes = Number(offset[2]) * 60 + Number(offset[3]);
    return new Date(ms + (offset[1] === "-" ? -1 : 1) * minutes * 60_000);
  }
  let parts: Intl.DateTimeFormatPart[];
  try {
    parts = formatter(zone).formatToParts(new Date(ms));
  } catch {
    throw new Error(`unknown time zone ${JSON.stringify(zone)}`);
  }
  const field = (type: Intl.DateTimeFormatPartTypes) => Number(parts.find((p) => p.type === type)?.value);
  // Intl counts years before 1 AD by era (1 BC is year 1 of BC); cel-go's, as ISO's, is year 0.
  const era = parts.find((p) => p.type === "era")?.value;
  const year = era === "BC" || era === "B" ? 1 - field("year") : field("year");
  const wall = utcDate(year, field("month") - 1, field("day"));
  wall.setUTCHours(field("hour"), field("minute"), field("second"), ((ms % 1000) + 1000) % 1000);
  return wall;
}

/** Midnight UTC of a date, years 1 to 99 too (Date.UTC reads them as 1901 to 1999). */
function utcDate(year: number, monthIndex: number, day: number): Date {
  const date = new Date(0);
  date.setUTCFullYear(year, monthIndex, day);
  return date;
}

function daysIn(year: number, month: number): number {
  return utcDate(year, month, 0).getUTCDate();
}

/** One formatter a zone (building one costs some 50 us), at most a few hundred zones exist. */
const formatters = new Map<string, Intl.DateTimeFormat>();
function formatter(zone: string): Intl.DateTimeFormat {
  let format = formatters.get(zone);
  if (format === undefined) {
    format = new Intl.DateTimeFormat("en-US", {
      timeZone: zone,
      hourCycle: "h23",
      era: "short",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric",
    });
    if (formatters.size < 1_000) formatters.set(zone, format);
  }
  return format;
}
