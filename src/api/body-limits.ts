import { Automations } from "../../gen/svc/api/automations/v1/automation_pb.js";
import { maxWebhookBodyBytes } from "../webhooks/body-reader.js";

/**
 * The most bytes of an Execute request (decompressed too): a context as large as a webhook body
 * (it is an execution's trigger as well) and 1 KiB for the automation's id and the field names.
 * At the API's 1 MiB, a context of small values held the thread 260-760 ms to decode, and a few
 * callers in a loop stalled every other request for seconds.
 */
export const maxExecuteRequestBytes = maxWebhookBodyBytes + 1024;

export const executePath = `/${Automations.typeName}/${Automations.method.execute.name}`;

/**
 * The RPCs whose request bodies are held below the API's limit, by request path: registered so
 * with connect-es (`readMaxBytes`, which also holds a compressed body once decompressed), given to
 * the REST transcoder, which reads bodies itself, and named in the OpenAPI document.
 */
export const apiBodyLimits: ReadonlyMap<string, number> = new Map([[executePath, maxExecuteRequestBytes]]);
