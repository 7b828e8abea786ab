export { enqueueExecution, type EnqueueRequest } from "./enqueue-execution.js";
export { ExecutionWorker, type ExecutionWorkerOptions } from "./execution-worker.js";
export { ProgramCache } from "./program-cache.js";
export { validateSteps } from "./validate-steps.js";
export { stepExpressions, type StepDefinition, type StepAction } from "./step-definition.js";
export {
  type ManualTriggerConfig,
  type TriggerConfig,
  type WebhookAuthMethod,
  type WebhookListenerTarget,
  type WebhookTriggerConfig,
  type WebhookTriggerHooks,
} from "./trigger-config.js";
