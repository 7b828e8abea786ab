"""A gRPC client on gRPC's C core (Debian's python3-grpcio), for accessd's tests.

It knows accessd only from a FileDescriptorSet built from proto/ (`buf build proto -o ...`), as a
client generated from the published protos would, and speaks HTTP/2 through the C core's own
stack (not Node's, not grpc-js's). It reads one JSON document on stdin:

    {"target": "127.0.0.1:1234", "descriptors": "/tmp/x.binpb", "options": {...},
     "compression": "gzip" | null, "calls": [ {"method": "/pkg.Service/Method", "request": {...},
     "metadata": {"authorization": "Bearer ..."}, "timeout": 5, "stream": false,
     "repeat": 1, "concurrent": false, "take": 1, "pause": 0} ]}

and writes one JSON document on stdout: for each call, a list of `repeat` results
`{"code": "OK" | "NOT_FOUND" | ..., "details": "...", "response": {...} | [...]}` (a server stream's
first `take` messages as a list). `concurrent` starts all `repeat` calls before waiting for any;
`pause` waits that many seconds before the call (the channel stays open); `types` names another
method whose request and response types the call uses (to call a method the protos lack).
"""

import json
import sys
import time

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory


def message_classes(descriptor_set_path):
    with open(descriptor_set_path, "rb") as f:
        files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    factory = message_factory.MessageFactory(pool)

    def method_types(method_path):
        service_name, method_name = method_path.lstrip("/").split("/")
        method = pool.FindServiceByName(service_name).FindMethodByName(method_name)
        return (
            factory.GetPrototype(method.input_type),
            factory.GetPrototype(method.output_type),
            method.server_streaming,
        )

    return method_types


def outcome(error):
    return {"code": error.code().name, "details": error.details()}


def main():
    spec = json.load(sys.stdin)
    method_types = message_classes(spec["descriptors"])
    compression = grpc.Compression.Gzip if spec.get("compression") == "gzip" else None
    options = list(spec.get("options", {}).items())
    results = []
    with grpc.insecure_channel(spec["target"], options=options, compression=compression) as channel:
        for call in spec["calls"]:
            time.sleep(call.get("pause", 0))
            request_type, response_type, server_streaming = method_types(call.get("types", call["method"]))
            request = json_format.ParseDict(call.get("request", {}), request_type())
            metadata = list(call.get("metadata", {}).items())
            timeout = call.get("timeout", 10)
            repeat = call.get("repeat", 1)
            as_dict = lambda message: json_format.MessageToDict(message)
            if server_streaming:
                stream = channel.unary_stream(
                    call["method"],
                    request_serializer=request_type.SerializeToString,
                    response_deserializer=response_type.FromString,
                )
                answers = []
                for _ in range(repeat):
                    responses = stream(request, metadata=metadata, timeout=timeout)
                    taken = []
                    try:
                        for message in responses:
                            taken.append(as_dict(message))
                            if len(taken) >= call.get("take", 1):
                                break
                        responses.cancel()
                        answers.append({"code": "OK", "details": "", "response": taken})
                    except grpc.RpcError as error:
                        answers.append({**outcome(error), "response": taken})
                results.append(answers)
                continue
            unary = channel.unary_unary(
                call["method"],
                request_serializer=request_type.SerializeToString,
                response_deserializer=response_type.FromString,
            )
            if call.get("concurrent"):
                futures = [unary.future(request, metadata=metadata, timeout=timeout) for _ in range(repeat)]
                pending = [(f, None) for f in futures]
            else:
                pending = []
                for _ in range(repeat):
                    try:
                        pending.append((None, unary(request, metadata=metadata, timeout=timeout)))
                    except grpc.RpcError as error:
                        pending.append((None, error))
            answers = []
            for future, value in pending:
                if future is not None:
                    try:
                        value = future.result()
                    except grpc.RpcError as error:
                        value = error
                if isinstance(value, grpc.RpcError):
                    answers.append(outcome(value))
                else:
                    answers.append({"code": "OK", "details": "", "response": as_dict(value)})
            results.append(answers)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
