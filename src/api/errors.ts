import { invalidArgument } from "../connect-errors.js";

export { invalidArgument, notFound } from "../connect-errors.js";

/**
 * The most characters a name, an id, an email, a username or a slug may hold, and a description.
 * Only the 1 MiB request body bounded them: a 900 KB display name or description was stored, and
 * every page of its listing carried it.
 */
export const maxTextFieldLength = 1000;
export const maxDescriptionLength = 10_000;

/** Refuses an absent or blank required string field, or one over `maxLength`, naming it by its JSON name. */
export function requireField(value: string | undefined, jsonName: string, maxLength = maxTextFieldLength): string {
  if (value === undefined || value.trim() === "") throw invalidArgument(`${jsonName} is required`);
  return limitText(value, jsonName, maxLength);
}

/**
 * An optional text field as given ("" when absent); refused when over `maxLength` characters
 * (code points: 500 emoji are 1,000 UTF-16 units, and were refused as over 1,000), naming it by its
 * JSON name.
 */
export function limitText(value: string | undefined, jsonName: string, maxLength = maxTextFieldLength): string {
  if (value !== undefined && value.length > maxLength && codePoints(value) > maxLength) {
    throw invalidArgument(`${jsonName} is longer than ${maxLength} characters`);
  }
  return value ?? "";
}

/** How many code points `text` holds (a pair of surrogates is one). */
function codePoints(text: string): number {
  let count = 0;
  for (const _ of text) count++;
  return count;
}
