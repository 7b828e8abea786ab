import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { outcomeCodeName } from "../src/server/outcome-codes.js";
import { protocolOfContentType } from "../src/server/request-context.js";

describe("the protocol of a request, read from its Content-Type", () => {
  it("reads media types without regard to case (RFC 9110 8.3.1), as connect-es accepts them", () => {
    expect(protocolOfContentType("Application/GRPC-Web+proto")).toBe("grpc-web");
    expect(protocolOfContentType("APPLICATION/GRPC")).toBe("grpc");
    expect(protocolOfContentType("Application/Connect+JSON")).toBe("connect");
    expect(protocolOfContentType(undefined)).toBe("connect");
  });
});

describe("an RPC's outcome code", () => {
  const live = new AbortController().signal;

  it("is canceled for a response stream the client closed before its end, however it reached the handler", () => {
    const premature = Object.assign(new Error("Premature close"), { code: "ERR_STREAM_PREMATURE_CLOSE" });
    expect(outcomeCodeName(premature, live)).toBe("canceled");
    expect(outcomeCodeName(new ConnectError("Premature close", Code.Internal, undefined, undefined, premature), live)).toBe("canceled");
  });

  it("is the error's own code otherwise, or the aborted signal's reason", () => {
    expect(outcomeCodeName(new ConnectError("no such app", Code.NotFound), live)).toBe("not_found");
    // connect-es answers an error that is no ConnectError (a bug) as internal: counted as answered.
    expect(outcomeCodeName(new Error("a bug"), live)).toBe("internal");
    const aborted = new AbortController();
    aborted.abort(new ConnectError("gone", Code.Canceled));
    expect(outcomeCodeName(new Error("a bug"), aborted.signal)).toBe("canceled");
    // A client that reset its stream with another code (connect-node does, INTERNAL_ERROR, when its own deadline passes): canceled, not internal.
    const reset = new AbortController();
    reset.abort(new ConnectError("http/2 stream closed with error code INTERNAL_ERROR (0x2)", Code.Internal));
    expect(outcomeCodeName(new ConnectError("the operation timed out", Code.DeadlineExceeded), reset.signal)).toBe("canceled");
    // A deadline that passed: the client is answered the error the call ended with (it was counted deadline_exceeded).
    const late = new AbortController();
    late.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded));
    expect(outcomeCodeName(new ConnectError("missing bearer token", Code.Unauthenticated), late.signal)).toBe("unauthenticated");
    expect(outcomeCodeName(new ConnectError("the operation timed out", Code.DeadlineExceeded), late.signal)).toBe("deadline_exceeded");
  });
});
