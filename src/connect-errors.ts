import { Code, ConnectError } from "@connectrpc/connect";

/**
 * The typed errors every layer throws for a missing resource or bad input; the RPC layer answers
 * them with their code, and the worker records their message as a step's error.
 */
export function notFound(what: string, id: string): ConnectError {
  return new ConnectError(`${what} ${JSON.stringify(id)} not found`, Code.NotFound);
}

export function invalidArgument(message: string): ConnectError {
  return new ConnectError(message, Code.InvalidArgument);
}
