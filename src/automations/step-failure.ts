/** Why a step failed; the message is stored as the step's error and shown to the user. */
export class StepFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = "StepFailure";
  }
}
