import { cutText } from "../cut-text.js";
import { maxStepNameLength } from "./validate-steps.js";

/**
 * The longest step or execution error kept (characters). An error may quote a value the step
 * computed (`app "<the value>" not found`), and a value may be as long as the trigger (1 MiB):
 * unbounded, a page of ten executions of such a step was a 20 MB answer and a gRPC List went
 * past a client's 4 MiB limit. The listing promises small pages; an error names, it does not carry.
 */
export const maxErrorLength = 1_000;

/** Room for cutText's "… (N more characters)" within the length allowed, whatever N. */
const cutNoteRoom = 40;

/** The longest `step "<name>" failed: ` an execution's error puts before its failed step's. */
const longestStepErrorPrefix = 'step "" failed: '.length + maxStepNameLength;

/** `text` cut to at most `maxChars` characters in all, saying how much was left out (that said within them). */
export function boundedErrorText(text: string, maxChars = maxErrorLength): string {
  return text.length <= maxChars ? text : cutText(text, maxChars - cutNoteRoom);
}

/**
 * A step's error, cut so that its execution's, which names the step before it, is within
 * maxErrorLength too (they were 1,024 and 1,041 characters: cutText's note came on top).
 */
export function boundedStepErrorText(text: string): string {
  return boundedErrorText(text, maxErrorLength - longestStepErrorPrefix);
}
