import { Code, ConnectError } from "@connectrpc/connect";

export function notFound(what: string, id: string): ConnectError {
  return new ConnectError(`${what} ${JSON.stringify(id)} not found`, Code.NotFound);
}

export function invalidArgument(message: string): ConnectError {
  return new ConnectError(message, Code.InvalidArgument);
}

/** Refuses an absent or blank required string field, naming it by its JSON name. */
export function requireField(value: string | undefined, jsonName: string): string {
  if (value === undefined || value.trim() === "") throw invalidArgument(`${jsonName} is required`);
  return value;
}
