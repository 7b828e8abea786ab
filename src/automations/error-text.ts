import { cutText } from "../cut-text.js";

/**
 * The longest step or execution error kept (characters). An error may quote a value the step
 * computed (`app "<the value>" not found`), and a value may be as long as the trigger (1 MiB):
 * unbounded, a page of ten executions of such a step was a 20 MB answer and a gRPC List went
 * past a client's 4 MiB limit. The listing promises small pages; an error names, it does not carry.
 */
export const maxErrorLength = 1_000;

/** `text` cut to `maxErrorLength` characters, saying how much was left out. */
export function boundedErrorText(text: string): string {
  return cutText(text, maxErrorLength);
}
