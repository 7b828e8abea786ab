import type { ServiceImpl } from "@connectrpc/connect";
import { AutomationExecution_State, AutomationExecutions } from "../../gen/svc/api/automations/v1/execution_pb.js";
import { listingFingerprint, paginate } from "../pagination/index.js";
import type { ExecutionSummary } from "../store/executions-repository.js";
import type { Store } from "../store/store.js";
import { executionMessage, executionStateFromMessage } from "./automation-messages.js";
import { invalidArgument, notFound, requireField } from "./errors.js";
import type { ServiceContext } from "./service-context.js";

export function automationExecutionsService({
  store,
  pageTokens,
}: ServiceContext): ServiceImpl<typeof AutomationExecutions> {
  return {
    list(req) {
      const state = executionStateFromMessage(req.state);
      if (state === undefined && req.state !== AutomationExecution_State.STATE_UNSPECIFIED) {
        throw invalidArgument(`state ${req.state} is not an execution state`);
      }
      const filter = { automationId: req.automationId, state };
      const page = paginate(
        pageTokens,
        listingFingerprint("automation_executions", filter.automationId, filter.state ?? ""),
        req,
        (after, limit) => store.executions.listAfter(filter, after, limit),
      );
      const records = store.executions.stepSummariesOf(page.items.map((e) => e.id));
      const stepNames = versionStepNames(store);
      return {
        list: page.items.map((e) => executionMessage(e, stepNames(e), records.get(e.id) ?? [])),
        nextPageToken: page.nextPageToken,
      };
    },

    get(req) {
      const id = requireField(req.id, "id");
      const execution = store.executions.get(id);
      if (execution === undefined) throw notFound("automation execution", id);
      const stepNames = versionStepNames(store);
      return { execution: executionMessage(execution, stepNames(execution), store.executions.steps(id)) };
    },
  };
}

/** The step names of the version an execution runs; each version is read once per call. */
function versionStepNames(store: Store): (e: ExecutionSummary) => string[] {
  const byVersion = new Map<string, string[]>();
  return (e) => {
    const key = `${e.automationId}@${e.automationVersion}`;
    let names = byVersion.get(key);
    if (names === undefined) {
      names = (store.automations.versionSteps(e.automationId, e.automationVersion) ?? []).map((s) => s.name);
      byVersion.set(key, names);
    }
    return names;
  };
}
