import type { JsonValue } from "@bufbuild/protobuf";
import type { CelInput } from "@bufbuild/cel";
import { jsonToCel, maxExecutionOutputChars, outputChars } from "./json-cel.js";

/**
 * The `ctx` an execution's expressions see: ctx.trigger, and each earlier step's output as
 * ctx.<name> and ctx.steps.<name>. A skipped step (or one without output) is absent, so
 * `has(ctx.steps.<name>)` tells whether it produced one.
 */
export class StepContext {
  private readonly ctx = new Map<string, CelInput>();
  private readonly steps = new Map<string, CelInput>();
  private outputCharsUsed = 0;

  constructor(trigger: JsonValue) {
    this.ctx.set("trigger", jsonToCel(trigger));
    this.ctx.set("steps", this.steps);
  }

  addOutput(stepName: string, output: JsonValue): void {
    this.outputCharsUsed += outputChars(output);
    const value = jsonToCel(output);
    this.steps.set(stepName, value);
    this.ctx.set(stepName, value);
  }

  /** What the execution's next output may still hold, of maxExecutionOutputChars. */
  get outputCharsLeft(): number {
    return Math.max(0, maxExecutionOutputChars - this.outputCharsUsed);
  }

  get bindings(): ReadonlyMap<string, CelInput> {
    return this.ctx;
  }
}
