import { Code, ConnectError } from "@connectrpc/connect";

export function notFound(what: string, id: string): ConnectError {
  return new ConnectError(`${what} ${JSON.stringify(id)} not found`, Code.NotFound);
}

export function invalidArgument(message: string): ConnectError {
  return new ConnectError(message, Code.InvalidArgument);
}

/** Refuses an absent or blank required string field, naming it by its JSON name. */
/**
 * The most characters a required text field (a name, an id) may hold. Only the 1 MiB request
 * body bounded them: a 900 KB display name was stored, and every page of its listing carried it.
 */
export const maxRequiredFieldLength = 1000;

export function requireField(value: string | undefined, jsonName: string): string {
  if (value === undefined || value.trim() === "") throw invalidArgument(`${jsonName} is required`);
  if (value.length > maxRequiredFieldLength) throw invalidArgument(`${jsonName} is longer than ${maxRequiredFieldLength} characters`);
  return value;
}
